"""The results table: one line per measurement (`table_rows`), as Markdown, in the terminal, as CSV."""

from __future__ import annotations

import csv
from pathlib import Path

from ..formatting import fmt, fmt_ratio

COLUMNS = [  # (header, key, kind)
    ("impl", "impl", "str"), ("cell", "cell", "str"), ("workload", "workload", "str"),
    ("fwd ms", "forward_ms", "ms"), ("fwd ×native", "forward_x_native", "x"),
    ("fwd+bwd ms", "train_ms", "ms"), ("fwd+bwd ×native", "train_x_native", "x"),
    ("GFLOP/s fwd", "gflops_forward", "g"), ("GFLOP/s fwd+bwd", "gflops_train", "g"),
    ("of best GEMM fwd", "roof_fraction_forward", "%"), ("of best GEMM fwd+bwd", "roof_fraction_train", "%"),
    ("peak RSS MiB", "peak_rss_mib", "mib"), ("net MiB", "net_rss_mib", "mib"), ("1st fwd s", "first_forward_s", "s"),
    ("1st fwd+bwd s", "first_train_s", "s"), ("parity max err", "parity_max_error", "e"),
]


def formatted(row: dict) -> list[str]:
    cells = [fmt_ratio(row, key) if kind == "x" else fmt(row[key], kind) for _, key, kind in COLUMNS]
    where = {key: i for i, (_, key, _) in enumerate(COLUMNS)}
    if row["status"] in ("failed", "skipped"):
        # the first time the row lacks says why (the reason is listed under the table)
        col = "forward_ms" if row["forward_ms"] is None else "train_ms"
        cells[where[col]] = row["status"].upper()
    if row.get("parity_ok") is False:
        cells[where["parity_max_error"]] += " (over tolerance)"
    if row.get("flags"):  # not a result as it stands: marked where it is read (listed under Sanity)
        cells[where["impl"]] += " ⚠"
    return cells


def markdown_table(rows: list[dict]) -> str:
    head = [h for h, _, _ in COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if k == "str" else "---:" for _, _, k in COLUMNS) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(formatted(row)) + " |")
    return "\n".join(lines)


def rich_table(rows: list[dict], title: str = "rnnbench"):
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for header, _, kind in COLUMNS:
        table.add_column(header, justify="left" if kind == "str" else "right", no_wrap=kind == "str")
    for row in rows:
        style = "red" if row["status"] == "failed" else ("dim" if row["status"] == "skipped" else None)
        table.add_row(*formatted(row), style=style)
    return table


CSV_FIELDS = ["impl", "framework", "rung", "group", "cell", "workload", "device", "dtype", "status", "reason",
              "forward_ms", "forward_iqr_ms", "train_ms", "train_iqr_ms", "forward_x_native", "train_x_native",
              "gflops_forward", "gflops_train", "roof_gflops", "roof_fraction_forward",
              "roof_fraction_train", "peak_rss_mib", "peak_device_mib", "first_forward_s", "first_train_s",
              "parity_max_error", "parity_ok", "forward_n", "train_n", "threads",
              "parity_bound_ratio", "kernel_isa", "flags",
              "forward_ratio_lo", "forward_ratio_hi", "forward_processes", "forward_pairs_n", "forward_tight",
              "train_ratio_lo", "train_ratio_hi", "train_processes", "train_pairs_n", "train_tight",
              "net_rss_mib", "first_forward_warm_s", "first_train_warm_s",
              "forward_baseline_spread", "train_baseline_spread"]


def write_csv(rows: list[dict], path: Path, first: tuple[str, ...] = ()) -> None:
    """The table as CSV; `first`: columns before the usual ones (the machine, in a report across machines)."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*first, *CSV_FIELDS], extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow(row)

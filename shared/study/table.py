"""From the JSON-lines records to the table: ratios to torch.native, roof fractions, ladders.

Every ratio is taken between two measurements of the same results file, cell, workload,
device and dtype: measured side by side, which is what holds on a shared, noisy machine.
When a key was measured more than once (a resumed study retrying failures), the last
record wins.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..measure.roof import ROOF_LIBS, derive_roof, merge_roof, roof_framework  # noqa: F401 (ROOF_LIBS: the report)

NATIVE = "torch.native"


@dataclass
class Results:
    measurements: list[dict]  # latest record per key, in first-measured order
    roofs: dict[tuple[str, str, str], dict]  # (cell, workload, device) -> roof row
    unavailable: dict[str, str]  # impl -> reason (latest run)
    metas: list[dict]
    ends: list[dict] = field(default_factory=list)  # one per finished run: its end time and load

    def find(self, impl: str, cell: str, workload: str, device: str, dtype: str) -> dict | None:
        for m in self.measurements:
            if (m["impl"], m["cell"], m["workload_name"], m["device"], m["dtype"]) == (impl, cell, workload,
                                                                                        device, dtype):
                return m
        return None


def collect(records: list[dict]) -> Results:
    latest: dict[str, dict] = {}
    order: list[str] = []
    roofs: dict[tuple[str, str, str], dict] = {}
    unavailable: dict[str, str] = {}
    metas: list[dict] = []
    ends: list[dict] = []
    last_run = None
    for r in records:
        kind = r.get("kind")
        if kind == "meta":
            metas.append(r)
            last_run = r.get("run_id")
            unavailable = {}  # the latest run's probe is the one that holds now
        elif kind == "measurement":
            if r["key"] not in latest:
                order.append(r["key"])
            latest[r["key"]] = r
        elif kind == "roof":
            key = (r["cell"], r["workload"], r["device"])
            roofs[key] = merge_roof(roofs.get(key), r)
        elif kind == "unavailable" and r.get("run_id") in (last_run, None):
            unavailable[r["impl"]] = r["reason"]
        elif kind == "end":
            ends.append(r)
    return Results(pool_processes([latest[k] for k in order]), {k: derive_roof(r) for k, r in roofs.items()},
                   unavailable, metas, ends)


def pool_processes(records: list[dict]) -> list[dict]:
    """One record per measurement from the records of its processes (`runner.process_key`).

    Times are the median over every process's own median; each phase measured in pairs gets
    its pooled ratio to the baseline with the interval (`shared.study.stats.pooled_ratio`):
    `{phase}_ratio`, `_ratio_lo`, `_ratio_hi`, `_processes`, `_pairs_n`, `_tight`.  First-call
    times are the first process's (cold compile cache) and the median of the others' (warm).
    Memory is the largest peak of any process, and also net of the framework's baseline RSS.
    """
    import statistics

    from .records import base_key
    from .stats import TARGET_HALF_WIDTH, pooled_ratio

    groups: dict[str, list[dict]] = {}
    for r in records:
        groups.setdefault(base_key(r["key"]), []).append(r)
    out = []
    for key, recs in groups.items():
        recs = sorted(recs, key=lambda r: r.get("process", 0))
        ok = [r for r in recs if r.get("status") == "ok"]
        if not ok:
            out.append(dict(recs[-1], key=key, processes=len(recs)))
            continue
        merged = dict(ok[-1], key=key, processes=len(ok), failed_processes=len(recs) - len(ok))
        for phase in ("forward", "train"):
            times = [r[f"{phase}_s"] for r in ok if r.get(f"{phase}_s") is not None]
            if times:
                merged[f"{phase}_s"] = statistics.median(times)
                merged[f"{phase}_n"] = sum(r.get(f"{phase}_n") or 0 for r in ok)
                merged[f"{phase}_process_spread"] = max(times) / min(times) if min(times) > 0 else None
                rates = [r[f"gflops_{phase}"] for r in ok if r.get(f"gflops_{phase}")]
                merged[f"gflops_{phase}"] = statistics.median(rates) if rates else None
            pairs = [r[f"{phase}_pairs"] for r in ok if r.get(f"{phase}_pairs")]
            summary = pooled_ratio(pairs) if pairs else None
            if summary:
                merged.update({f"{phase}_ratio": summary["ratio"], f"{phase}_ratio_lo": summary["lo"],
                               f"{phase}_ratio_hi": summary["hi"], f"{phase}_processes": summary["processes"],
                               f"{phase}_pairs_n": summary["pairs"],
                               f"{phase}_tight": summary["processes"] >= 2
                               and summary["half_width"] <= TARGET_HALF_WIDTH})
            merged.pop(f"{phase}_pairs", None)
        first = recs[0]
        for phase in ("forward", "train"):
            merged[f"first_{phase}_s"] = first.get(f"first_{phase}_s")
            warm = [r[f"first_{phase}_s"] for r in ok[1:] if r.get(f"first_{phase}_s") is not None
                    and r.get("process", 0) > 0]
            merged[f"first_{phase}_warm_s"] = statistics.median(warm) if warm else None
        peaks = [r["peak_rss_bytes"] for r in ok if r.get("peak_rss_bytes")]
        merged["peak_rss_bytes"] = max(peaks) if peaks else None
        nets = [r["peak_rss_bytes"] - r["baseline_rss_bytes"] for r in ok
                if r.get("peak_rss_bytes") and r.get("baseline_rss_bytes")]
        merged["net_rss_bytes"] = max(nets) if nets else None
        for k in ("parity_max_error", "parity_worst", "parity_bound_ratio", "parity_ok", "parity_cases",
                  "parity_source", "parity_note"):
            if k in first:
                merged[k] = first[k]
        out.append(merged)
    return out


def _family(cell: str) -> str:
    """The plain cell ("lstm"/"gru") a catalogue cell is compared with."""
    from ..cells import CELL_DEFS
    return CELL_DEFS[cell].family if cell in CELL_DEFS else cell


def _ratio(a, b):
    if a is None or b is None or not b:
        return None
    return a / b


def _x_native(m: dict, native: dict | None, phase: str):
    """A row's time over torch.native's: the pooled paired ratio when the row was measured in
    pairs with float32 native (every float32 row of a study since intervals), else the ratio of
    the two medians (older records)."""
    if m.get(f"{phase}_ratio") is not None and m.get("dtype") == "float32":
        return m[f"{phase}_ratio"]
    return _ratio(m.get(f"{phase}_s"), native and native.get(f"{phase}_s"))


NOISY_IQR = 1 / 3  # an IQR wider than this fraction of the median is noise, not a result


def sanity_flags(row: dict) -> list[str]:
    """What makes a row's figures impossible or suspect (empty: it reads as a result).

    A roof fraction above 100% is impossible (the roof bounds every rung); a forward slower
    than its own forward+backward is suspect; an IQR wider than a third of the median is
    noise (the machine was busy)."""
    flags = []
    for phase in ("forward", "train"):
        frac = row.get(f"roof_fraction_{phase}")
        if frac is not None and frac > 1.0:
            flags.append(f"roof {phase} {100 * frac:.1f}% > 100%")
    if row.get("forward_ms") and row.get("train_ms") and row["forward_ms"] > row["train_ms"]:
        flags.append("forward slower than forward+backward")
    for phase in ("forward", "train"):
        median, iqr = row.get(f"{phase}_ms"), row.get(f"{phase}_iqr_ms")
        if median and iqr is not None and iqr > NOISY_IQR * median:
            flags.append(f"{phase} IQR {iqr / median:.0%} of the median")
    return flags


def table_rows(res: Results) -> list[dict]:
    """One row per measurement with the derived columns."""
    rows = []
    for m in res.measurements:
        native = res.find(NATIVE, m["cell"], m["workload_name"], m["device"], m["dtype"])
        if native is None or native.get("status") == "skipped":
            # a custom cell has no native kernel (its torch.native row, if planned, is "skipped"):
            # compare with its family's plain cell, nn.LSTM or nn.GRU
            native = res.find(NATIVE, _family(m["cell"]), m["workload_name"], m["device"], m["dtype"])
        roof = res.roofs.get((m["cell"], m["workload_name"], m["device"]))
        if roof and roof.get("dtype", "float32") != m["dtype"]:
            roof = None  # the roof's GEMMs ran in float32: it says nothing of a bf16 row
        own = roof_framework(m.get("framework"))  # its own framework's GEMM libraries
        roof_g = roof.get("roof_machine_gflops") if roof else None
        own_g = roof.get(f"roof_{own}_gflops") if roof else None
        rows.append(dict(
            impl=m["impl"], framework=m.get("framework"), rung=m.get("rung"), group=m.get("group", "main"),
            cell=m["cell"], workload=m["workload_name"], device=m["device"], dtype=m["dtype"],
            status=m.get("status"), reason=m.get("reason"),
            forward_ms=_ms(m.get("forward_s")), forward_iqr_ms=_ms(m.get("forward_iqr_s")),
            train_ms=_ms(m.get("train_s")), train_iqr_ms=_ms(m.get("train_iqr_s")),
            forward_x_native=_x_native(m, native, "forward"), train_x_native=_x_native(m, native, "train"),
            **{f"{phase}_{k}": m.get(f"{phase}_{k}") for phase in ("forward", "train")
               for k in ("ratio", "ratio_lo", "ratio_hi", "processes", "pairs_n", "tight", "process_spread")},
            net_rss_mib=_mib(m.get("net_rss_bytes")),
            first_forward_warm_s=m.get("first_forward_warm_s"), first_train_warm_s=m.get("first_train_warm_s"),
            kernel_choices=m.get("kernel_choices"),
            gflops_forward=m.get("gflops_forward"), gflops_train=m.get("gflops_train"),
            roof_gflops=roof_g,
            roof_fraction_forward=_ratio(m.get("gflops_forward"), roof_g),
            roof_fraction_train=_ratio(m.get("gflops_train"), roof_g),
            own_roof_fraction_train=_ratio(m.get("gflops_train"), own_g),
            peak_rss_mib=_mib(m.get("peak_rss_bytes")), peak_device_mib=_mib(m.get("peak_device_bytes")),
            first_forward_s=m.get("first_forward_s"), first_train_s=m.get("first_train_s"),
            parity_max_error=parity_of(res, m["impl"], m["cell"], m["dtype"]),
            parity_ok=parity_ok_of(res, m["impl"], m["cell"], m["dtype"]),
            parity_bound_ratio=parity_ratio_of(res, m["impl"], m["cell"], m["dtype"]),
            kernel_isa=m.get("kernel_isa"),
            forward_n=m.get("forward_n"), train_n=m.get("train_n"), threads=m.get("threads"),
        ))
        flags = sanity_flags(rows[-1])
        rows[-1]["flags"] = "; ".join(flags)
        # a roof above 100% impeaches the roof, not the time; the other flags impeach the time
        rows[-1]["time_suspect"] = any(not f.startswith("roof") for f in flags)
    return rows


def _parity_field(res: Results, impl: str, cell: str, dtype: str | None, key: str):
    for m in reversed(res.measurements):
        if m["impl"] == impl and m["cell"] == cell and dtype in (None, m["dtype"]) and m.get(key) is not None:
            return m[key]
    return None


def parity_of(res: Results, impl: str, cell: str, dtype: str | None = None):
    """The parity error of impl on cell (measured once per impl, cell and dtype), or None."""
    return _parity_field(res, impl, cell, dtype, "parity_max_error")


def parity_ok_of(res: Results, impl: str, cell: str, dtype: str | None = None):
    return _parity_field(res, impl, cell, dtype, "parity_ok")


def parity_ratio_of(res: Results, impl: str, cell: str, dtype: str | None = None):
    """The largest error / bound of the tolerance rule (<= 1 passes)."""
    return _parity_field(res, impl, cell, dtype, "parity_bound_ratio")


def parity_note(res: Results, impl: str, cell: str) -> str | None:
    for m in reversed(res.measurements):
        if m["impl"] == impl and m["cell"] == cell and m.get("parity_source"):
            return m["parity_source"]
    return None


def _ms(s):
    return None if s is None else 1e3 * s


def _mib(b):
    return None if b is None else b / 2**20


# ---- formatting ------------------------------------------------------------------------
def fmt(value, kind: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if kind == "ms":
        return f"{value:.3g}" if value < 100 else f"{value:.0f}"
    if kind == "x":
        return f"{value:.2f}x"
    if kind == "g":
        return f"{value:.1f}" if value < 1000 else f"{value:.0f}"
    if kind == "%":
        return f"{100 * value:.0f}%"
    if kind == "mib":
        return f"{value:.0f}"
    if kind == "s":
        return f"{value:.2f}"
    if kind == "e":
        return f"{value:.1e}"
    return str(value)


def fmt_ratio(row: dict, key: str) -> str:
    """A ratio column of a row, with the row's interval when it has one: `1.15x [1.11, 1.19]`."""
    from .formatting import format_ratio, ratio_interval

    phase = "train" if key.startswith("train") else "forward"
    if row.get(key) is None or row.get(f"{phase}_ratio") is None or row.get(key) != row.get(f"{phase}_ratio"):
        return fmt(row.get(key), "x")
    return format_ratio(row[key], *ratio_interval(phase, row))


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
              "net_rss_mib", "first_forward_warm_s", "first_train_warm_s"]


def write_csv(rows: list[dict], path: Path, first: tuple[str, ...] = ()) -> None:
    """The table as CSV; `first`: columns before the usual ones (the machine, in a report across machines)."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*first, *CSV_FIELDS], extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow(row)


# ---- custom cells ----------------------------------------------------------------------
PLAIN_NATIVE = {"lstm": "nn.LSTM", "gru": "nn.GRU"}


def is_custom_cell(cell: str) -> bool:
    """Anything but PyTorch's own two cells: the catalogue's custom cells and users' own."""
    from ..cells import STANDARD_CELLS
    return cell not in STANDARD_CELLS


def custom_cell_rows(res: Results) -> list[dict]:
    """One row per measured custom cell x implementation x workload (any group), skipped ones left out.

    Each row adds to `table_rows`' columns: `family` ("lstm"/"gru"), `native_train_ms` (torch.native on
    the family's plain cell, nn.LSTM/nn.GRU, same workload and run), `plain_train_ms` (the same
    implementation on the plain cell) and `cost_x_plain` = train_ms / plain_train_ms: what the cell
    costs over the plain cell in the same implementation.  `train_x_native` is the row's time over
    nn.LSTM/nn.GRU's.
    """
    from ..cells import CELL_DEFS

    out = []
    for r in table_rows(res):
        if not is_custom_cell(r["cell"]) or r["status"] == "skipped":
            continue
        family = _family(r["cell"])
        native = res.find(NATIVE, family, r["workload"], r["device"], r["dtype"])
        plain = res.find(r["impl"], family, r["workload"], r["device"], r["dtype"])
        native_ms, plain_ms = _ms(native and native.get("train_s")), _ms(plain and plain.get("train_s"))
        out.append(dict(r, family=family, native_train_ms=native_ms, plain_train_ms=plain_ms,
                        cost_x_plain=_ratio(r["train_ms"], plain_ms)))
    workloads = list(dict.fromkeys(r["workload"] for r in out))
    catalogue = list(CELL_DEFS)  # lstm's family first, then gru's; cells in catalogue order
    out.sort(key=lambda r: (workloads.index(r["workload"]), r["family"] != "lstm",
                            catalogue.index(r["cell"]) if r["cell"] in catalogue else len(catalogue), r["cell"],
                            r["framework"] != "torch", r["framework"] or "", r["rung"] if r["rung"] is not None else 99))
    return out


def custom_cell_skips(res: Results) -> dict[str, list[str]]:
    """impl -> the custom cells it was not measured on because it does not support them."""
    skips: dict[str, list[str]] = {}
    for m in res.measurements:
        if is_custom_cell(m["cell"]) and m.get("status") == "skipped" and m["cell"] not in skips.get(m["impl"], []):
            skips.setdefault(m["impl"], []).append(m["cell"])
    return skips


CUSTOM_COLUMNS = [  # (header, key, kind)
    ("cell", "cell", "str"), ("impl", "impl", "str"), ("workload", "workload", "str"),
    ("fwd+bwd ms", "train_ms", "ms"), ("×plain native", "train_x_native", "x"),
    ("same impl, plain cell ms", "plain_train_ms", "ms"), ("cost of the cell (×plain cell)", "cost_x_plain", "x"),
    ("parity max err", "parity_max_error", "e"),
]


def _custom_cells(r: dict) -> list[str]:
    cells = [fmt(r[key], kind) if kind != "str" else str(r[key]) for _, key, kind in CUSTOM_COLUMNS]
    cells[4] += f" {PLAIN_NATIVE.get(r['family'], r['family'])}" if r["train_x_native"] is not None else ""
    cells[5] += f" ({r['family']})" if r["plain_train_ms"] is not None else ""
    if r["train_ms"] is None:
        cells[3] = (r["status"] or "n/a").upper()
    if r.get("parity_ok") is False:
        cells[7] += " (over tolerance)"
    return cells


def _markdown(columns, cells, rows: list[dict]) -> str:
    """A Markdown table: `columns` as (header, key, kind), `cells(row)` the formatted cells."""
    lines = ["| " + " | ".join(h for h, _, _ in columns) + " |",
             "|" + "|".join("---" if k == "str" else "---:" for _, _, k in columns) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in cells(r)) + " |" for r in rows]
    return "\n".join(lines)


def _rich(columns, cells, rows: list[dict], title: str, failed):
    """The same table for the terminal (rich); rows where `failed(row)` in red."""
    from rich.table import Table

    table = Table(title=title)
    for header, _, kind in columns:
        table.add_column(header, justify="left" if kind == "str" else "right", no_wrap=kind == "str")
    for r in rows:
        table.add_row(*cells(r), style="red" if failed(r) else None)
    return table


def custom_markdown(rows: list[dict]) -> str:
    return _markdown(CUSTOM_COLUMNS, _custom_cells, rows)


def custom_rich(rows: list[dict], title: str):
    return _rich(CUSTOM_COLUMNS, _custom_cells, rows, title, lambda r: r["status"] == "failed")


# ---- the ladder ------------------------------------------------------------------------
def ladder(res: Results, cell: str, workload: str | None = None) -> tuple[str | None, list[dict]]:
    """Each framework's rungs on one workload, slowest idea first, with what each rung buys.

    "speedup" is the previous rung's fwd+bwd time over this rung's (same framework);
    "x native" is this rung's time over torch.native's.  Returns (workload, rows).
    """
    rows = [r for r in table_rows(res) if r["cell"] == cell and r["group"] == "main" and r["status"] != "skipped"]
    if workload is None:
        names = [r["workload"] for r in rows if r["train_ms"] is not None]
        workload = "S1" if "S1" in names else (names[0] if names else None)
    rows = [r for r in rows if r["workload"] == workload]
    rows.sort(key=lambda r: (r["framework"] != "torch", r["framework"] or "", r["rung"] if r["rung"] is not None else 99))
    out, prev = [], None  # prev: the last rung of the same framework that has a time
    for r in rows:
        if prev is not None and prev["framework"] != r["framework"]:
            prev = None
        measured = r["train_ms"] is not None
        out.append(dict(r, speedup_train=(prev["train_ms"] / r["train_ms"]) if prev and measured else None,
                        speedup_forward=_ratio(prev["forward_ms"], r["forward_ms"]) if prev and measured else None))
        if measured:
            prev = r
    if not any(r["train_ms"] is not None for r in out):
        return workload, []
    return workload, out


LADDER_COLUMNS = [("rung", "rung", "str"), ("impl", "impl", "str"), ("fwd ms", "forward_ms", "ms"),
                  ("fwd+bwd ms", "train_ms", "ms"), ("this rung buys (fwd+bwd)", "speedup_train", "x"),
                  ("fwd ×native", "forward_x_native", "x"), ("fwd+bwd ×native", "train_x_native", "x"),
                  ("roof fwd+bwd", "roof_fraction_train", "%")]


def _ladder_cells(r: dict) -> list[str]:
    cells = [fmt(r[key], kind) if kind != "str" else str(r[key]) for _, key, kind in LADDER_COLUMNS]
    if r["train_ms"] is None:  # a rung that failed here stays on the ladder, with why
        cells[3] = "FAILED"
        cells[4] = (r.get("reason") or "")[:80]
    return cells


def ladder_markdown(rows: list[dict]) -> str:
    return _markdown(LADDER_COLUMNS, _ladder_cells, rows)


def ladder_rich(rows: list[dict], title: str):
    return _rich(LADDER_COLUMNS, _ladder_cells, rows, title, lambda r: r["train_ms"] is None)


# ---- precision -------------------------------------------------------------------------
def precision_rows(res: Results, base_dtype: str = "float32") -> list[dict]:
    """One row per implementation x cell x dtype on the precision group's workload: the
    `base_dtype` rows of the main group and every "precision" row, each with its time over
    torch.native in `base_dtype` (float32 nn.LSTM / nn.GRU) of the same run and workload."""
    rows = table_rows(res)
    workloads = {r["workload"] for r in rows if r["group"] == "precision"}
    out = []
    for r in rows:
        if r["workload"] not in workloads or r["group"] not in ("main", "precision"):
            continue
        if r["group"] == "main" and r["dtype"] != base_dtype:
            continue
        native = res.find(NATIVE, r["cell"], r["workload"], r["device"], base_dtype)
        # paired rows were timed against float32 native in their own processes: that ratio, else the medians'
        out.append(dict(r, **{f"{p}_x_native32": r.get(f"{p}_ratio") if r.get(f"{p}_ratio") is not None
                              else _ratio(r[f"{p}_ms"], _ms(native and native.get(f"{p}_s")))
                              for p in ("forward", "train")}))
    from ..precision import ALL
    out.sort(key=lambda r: (r["cell"], r["framework"] != "torch", r["framework"] or "",
                            r["rung"] if r["rung"] is not None else 99, r["impl"],
                            ALL.index(r["dtype"]) if r["dtype"] in ALL else 99))
    return out


PRECISION_COLUMNS = [  # (header, key, kind)
    ("cell", "cell", "str"), ("impl", "impl", "str"), ("dtype", "dtype", "str"), ("fwd ms", "forward_ms", "ms"),
    ("fwd+bwd ms", "train_ms", "ms"), ("fwd ×fp32 native", "forward_x_native32", "x"),
    ("fwd+bwd ×fp32 native", "train_x_native32", "x"), ("error / bound", "parity_bound_ratio", "e"),
    ("kernels", "kernel_isa", "str")]


def _precision_cells(r: dict) -> list[str]:
    cells = [fmt(r[key], kind) if kind != "str" else str(r[key] or "") for _, key, kind in PRECISION_COLUMNS]
    if r["status"] not in ("ok", None):
        cells[2] += f" ({r['status']})"
    return cells


def precision_markdown(rows: list[dict]) -> str:
    return _markdown(PRECISION_COLUMNS, _precision_cells, [r for r in rows if r["status"] != "skipped"])


def precision_rich(rows: list[dict], title: str):
    return _rich(PRECISION_COLUMNS, _precision_cells, rows, title, lambda r: r["status"] == "failed")


# ---- what to use -----------------------------------------------------------------------
MODES = (("training", "train", "first_train_s"), ("inference", "forward", "first_forward_s"))


def native_interval(r: dict, phase: str) -> dict:
    """A row's ratio to native as an interval for `stats.compare` (native itself: exactly 1)."""
    x = r[f"{phase}_x_native"]
    lo, hi = r.get(f"{phase}_ratio_lo"), r.get(f"{phase}_ratio_hi")
    if r["impl"] == NATIVE and lo is None:
        lo = hi = x
    return {"ratio": x, "lo": lo, "hi": hi}


def what_to_use(res: Results) -> tuple[list[dict], list[str]]:
    """Computed from the main group: per cell, workload and mode, the fastest rung (lowest ratio to
    native, with its interval) and whether it beats the runner-up beyond noise (their intervals do
    not overlap; otherwise "tie": every rung whose interval overlaps the fastest one's is named);
    the best per framework, the best JAX over the best torch, the winner's first-call cost and
    memory; and the workloads that flip the answer, counted only between clear winners.

    Rows whose times `sanity_flags` impeaches (noise, a forward slower than its forward+backward)
    are left out: a suspect figure does not pick a rung.
    """
    from .stats import compare

    rows = [r for r in table_rows(res) if r["group"] == "main" and r["status"] == "ok" and not r["time_suspect"]]
    out = []
    for cell in dict.fromkeys(r["cell"] for r in rows):
        for wl in dict.fromkeys(r["workload"] for r in rows if r["cell"] == cell):
            here = [r for r in rows if r["cell"] == cell and r["workload"] == wl]
            for mode, phase, first in MODES:
                timed = sorted((r for r in here if r[f"{phase}_x_native"] is not None),
                               key=lambda r: r[f"{phase}_x_native"])
                if not timed:
                    continue
                best = timed[0]
                tied = [r for r in timed[1:]
                        if compare(native_interval(best, phase), native_interval(r, phase)) == "="]
                per_fw = {fw: next((r for r in timed if r["framework"] == fw), None) for fw in ("torch", "jax")}
                t, j = per_fw["torch"], per_fw["jax"]
                out.append(dict(cell=cell, workload=wl, mode=mode, best=best["impl"], tied=[r["impl"] for r in tied],
                                best_ratio=best[f"{phase}_x_native"], best_lo=native_interval(best, phase)["lo"],
                                best_hi=native_interval(best, phase)["hi"], best_ms=best[f"{phase}_ms"],
                                best_torch=t and t["impl"], best_jax=j and j["impl"],
                                jax_over_torch=_ratio(j and j[f"{phase}_x_native"], t and t[f"{phase}_x_native"]),
                                jax_vs_torch=compare(native_interval(j, phase), native_interval(t, phase)) if j and t else None,
                                first_call_s=best.get(first), peak_rss_mib=best.get("peak_rss_mib"),
                                net_rss_mib=best.get("net_rss_mib")))
    flips = []
    for cell in dict.fromkeys(r["cell"] for r in out):
        for mode, _, _ in MODES:
            winners = {r["workload"]: r["best"] for r in out if r["cell"] == cell and r["mode"] == mode
                       and not r["tied"]}
            if len(set(winners.values())) > 1:
                flips.append(f"{cell} {mode}: " + ", ".join(f"{impl} on {wl}" for wl, impl in winners.items()))
    return out, flips


def winner_text(r: dict) -> str:
    """`jax.bptt`, or `tie within noise: jax.bptt ≈ torch.bptt` when intervals overlap."""
    return f"tie within noise: {' ≈ '.join([r['best'], *r['tied']])}" if r["tied"] else r["best"]


def what_to_use_markdown(rows: list[dict]) -> str:
    from .formatting import format_ratio

    lines = ["| cell | workload | mode | use | ×native [95% CI] | ms | best torch | best JAX | JAX / torch | "
             "its first call s | its peak RSS MiB (net) |", "|---|---|---|---|---:|---:|---|---|---:|---:|---:|"]
    for r in rows:
        jt = fmt(r["jax_over_torch"], "x") + {"=": " (tie)"}.get(r["jax_vs_torch"], "")
        lines.append(f"| {r['cell']} | {r['workload']} | {r['mode']} | {winner_text(r)} | "
                     f"{format_ratio(r['best_ratio'], r['best_lo'], r['best_hi']) if r['best_lo'] != r['best_hi'] else fmt(r['best_ratio'], 'x')} | "
                     f"{fmt(r['best_ms'], 'ms')} | {r['best_torch'] or 'n/a'} | {r['best_jax'] or 'n/a'} | {jt} | "
                     f"{fmt(r['first_call_s'], 's')} | {fmt(r['peak_rss_mib'], 'mib')} ({fmt(r['net_rss_mib'], 'mib')}) |")
    return "\n".join(lines)

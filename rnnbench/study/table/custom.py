"""The custom cells' table: each custom cell against its family's plain cell.

A custom cell (the catalogue's ln_lstm, peephole_lstm, gru_reset_before, and users' own) has no
native kernel: its row is compared with nn.LSTM / nn.GRU of its family and with the same
implementation on the plain cell (`cost_x_plain`: what the cell's extra arithmetic costs).
"""

from __future__ import annotations

from ..formatting import fmt, markdown_rows, rich_rows
from .results import Results
from .rows import NATIVE, plain_family, ratio_or_none, table_rows, to_ms

PLAIN_NATIVE = {"lstm": "nn.LSTM", "gru": "nn.GRU"}


def is_custom_cell(cell: str) -> bool:
    """Anything but PyTorch's own two cells: the catalogue's custom cells and users' own."""
    from rnnbench.core.catalogue import STANDARD_CELLS
    return cell not in STANDARD_CELLS


def custom_cell_rows(res: Results) -> list[dict]:
    """One row per measured custom cell x implementation x workload (any group), skipped ones left out.

    Each row adds to `table_rows`' columns: `family` ("lstm"/"gru"), `native_train_ms` (torch.native on
    the family's plain cell, nn.LSTM/nn.GRU, same workload and run), `plain_train_ms` (the same
    implementation on the plain cell) and `cost_x_plain` = train_ms / plain_train_ms: what the cell
    costs over the plain cell in the same implementation.  `train_x_native` is the row's time over
    nn.LSTM/nn.GRU's.
    """
    from rnnbench.core.catalogue import CELL_DEFS

    out = []
    for r in table_rows(res):
        if not is_custom_cell(r["cell"]) or r["status"] == "skipped":
            continue
        family = plain_family(r["cell"])
        native = res.find(NATIVE, family, r["workload"], r["device"], r["dtype"])
        plain = res.find(r["impl"], family, r["workload"], r["device"], r["dtype"])
        native_ms, plain_ms = to_ms(native and native.get("train_s")), to_ms(plain and plain.get("train_s"))
        out.append(dict(r, family=family, native_train_ms=native_ms, plain_train_ms=plain_ms,
                        cost_x_plain=ratio_or_none(r["train_ms"], plain_ms)))
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


def custom_markdown(rows: list[dict]) -> str:
    return markdown_rows(CUSTOM_COLUMNS, _custom_cells, rows)


def custom_rich(rows: list[dict], title: str):
    return rich_rows(CUSTOM_COLUMNS, _custom_cells, rows, title, lambda r: r["status"] == "failed")

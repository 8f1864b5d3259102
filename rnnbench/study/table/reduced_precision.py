"""The precision table: each rung in each precision, over float32 nn.LSTM / nn.GRU of the same run."""

from __future__ import annotations

from ..formatting import fmt, markdown_rows, rich_rows
from .results import Results
from .rows import NATIVE, ratio_or_none, table_rows, to_ms


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
                              else ratio_or_none(r[f"{p}_ms"], to_ms(native and native.get(f"{p}_s")))
                              for p in ("forward", "train")}))
    from rnnbench.core.precision import ALL
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
    return markdown_rows(PRECISION_COLUMNS, _precision_cells, [r for r in rows if r["status"] != "skipped"])


def precision_rich(rows: list[dict], title: str):
    return rich_rows(PRECISION_COLUMNS, _precision_cells, rows, title, lambda r: r["status"] == "failed")

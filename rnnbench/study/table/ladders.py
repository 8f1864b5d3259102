"""The ladder: each framework's rungs on one workload, slowest idea first, with what each rung buys."""

from __future__ import annotations

from ..formatting import fmt, markdown_rows, rich_rows
from .results import Results
from .rows import ratio_or_none, table_rows


def ladder(res: Results, cell: str, workload: str | None = None) -> tuple[str | None, list[dict]]:
    """Each framework's rungs on one workload, slowest idea first, with what each rung buys.

    "speedup" is what this rung buys over the previous one of its framework: the previous rung's
    "x native" over this rung's when both have one (the paired ratios of the run, so the two columns
    never disagree), else the previous rung's median time over this rung's; "x native" is this
    rung's time over torch.native's.  Returns (workload, rows).
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
        out.append(dict(r, speedup_train=_buys(prev, r, "train") if prev and measured else None,
                        speedup_forward=_buys(prev, r, "forward") if prev and measured else None))
        if measured:
            prev = r
    if not any(r["train_ms"] is not None for r in out):
        return workload, []
    return workload, out


def _buys(prev: dict, r: dict, phase: str) -> float | None:
    """What rung `r` buys over `prev` in `phase`: from their ratios to native where both have one."""
    a, b = prev.get(f"{phase}_x_native"), r.get(f"{phase}_x_native")
    return a / b if a and b else ratio_or_none(prev[f"{phase}_ms"], r[f"{phase}_ms"])


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
    return markdown_rows(LADDER_COLUMNS, _ladder_cells, rows)


def ladder_rich(rows: list[dict], title: str):
    return rich_rows(LADDER_COLUMNS, _ladder_cells, rows, title, lambda r: r["train_ms"] is None)

"""How the study writes its figures and tables, in one place: the report, the terminal and the
documentation's figures (`tools.docs_figures`) use it.

A ratio is written `1.15x`; when its record carries an interval (`train_ratio_lo` / `train_ratio_hi`,
`forward_ratio_lo` / `forward_ratio_hi`: a confidence interval of the ratio), `1.15x [1.11, 1.19]`
(`format_ratio`, `fmt_ratio`).  Other values by kind (`fmt`: ms, x, GFLOP/s, %, MiB, s, errors);
a table of rows as Markdown (`markdown_rows`) or for the terminal (`rich_rows`).
"""

from __future__ import annotations

import math


def format_ratio(value, lo=None, hi=None) -> str:
    """`1.15x`, or `1.15x [1.11, 1.19]` when both ends of an interval are given; `n/a` without a value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    text = f"{value:.2f}x"
    if lo is not None and hi is not None:
        text += f" [{lo:.2f}, {hi:.2f}]"
    return text


def ratio_interval(phase: str, *sources: dict | None) -> tuple[float | None, float | None]:
    """(lo, hi) of the ratio of `phase` ("forward" or "train") from the first source (a table row, a
    measurement record) that has both ends, else (None, None)."""
    for src in sources:
        if src and src.get(f"{phase}_ratio_lo") is not None and src.get(f"{phase}_ratio_hi") is not None:
            return src[f"{phase}_ratio_lo"], src[f"{phase}_ratio_hi"]
    return None, None


def fmt(value, kind: str) -> str:
    """A value of a kind ("ms", "x", "g" GFLOP/s, "%", "mib", "s", "e" an error), `n/a` without one."""
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
    phase = "train" if key.startswith("train") else "forward"
    if row.get(key) is None or row.get(f"{phase}_ratio") is None or row.get(key) != row.get(f"{phase}_ratio"):
        return fmt(row.get(key), "x")
    return format_ratio(row[key], *ratio_interval(phase, row))


def markdown_rows(columns, cells, rows: list[dict]) -> str:
    """A Markdown table: `columns` as (header, key, kind), `cells(row)` the formatted cells."""
    lines = ["| " + " | ".join(h for h, _, _ in columns) + " |",
             "|" + "|".join("---" if k == "str" else "---:" for _, _, k in columns) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in cells(r)) + " |" for r in rows]
    return "\n".join(lines)


def rich_rows(columns, cells, rows: list[dict], title: str, failed):
    """The same table for the terminal (rich); rows where `failed(row)` in red."""
    from rich.table import Table

    table = Table(title=title)
    for header, _, kind in columns:
        table.add_column(header, justify="left" if kind == "str" else "right", no_wrap=kind == "str")
    for r in rows:
        table.add_row(*cells(r), style="red" if failed(r) else None)
    return table

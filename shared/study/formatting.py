"""How a ratio to native is written, in one place: the documentation's figures use it (`shared.docs_figures`)
and the study's report can.

A ratio is written `1.15x`; when its record carries an interval (`train_ratio_lo` / `train_ratio_hi`,
`forward_ratio_lo` / `forward_ratio_hi`: a confidence interval of the ratio), `1.15x [1.11, 1.19]`.
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

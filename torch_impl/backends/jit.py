"""`jit`: TorchScript, as the first seed recommends: `torch.jit.script` of the `eager`
direction functions (the same code, compiled by the TorchScript frontend and run by
its interpreter with its fusers).

TorchScript is in maintenance mode; torch 2.13 still scripts these functions (a
deprecation warning, if any, is silenced here).  If scripting fails on some build, the
backend reports itself unavailable with the scripting error as the reason.
"""

from __future__ import annotations

import warnings
from functools import lru_cache

from torch import Tensor

from . import eager
from ._common import recorded


@lru_cache(maxsize=None)
def scripted():
    """(lstm_direction, gru_direction) scripted; raises RuntimeError with the reason."""
    import torch
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", (DeprecationWarning, FutureWarning, UserWarning))
            return torch.jit.script(eager.lstm_direction), torch.jit.script(eager.gru_direction)
    except Exception as e:  # the frontend raises many types; all mean "cannot script here"
        raise RuntimeError(f"torch.jit.script failed on torch {torch.__version__}: "
                           f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e


def unavailable_reason() -> str | None:
    try:
        scripted()
    except RuntimeError as e:
        return str(e)
    return None


def run_direction(cell: str, x: Tensor, h0: Tensor, c0: Tensor | None, w_ih: Tensor, w_hh: Tensor,
                  b_ih: Tensor | None, b_hh: Tensor | None, w_hr: Tensor | None, lengths: Tensor | None):
    lstm, gru = scripted()
    # One node around the scripted graph: TorchScript's own backward supports neither batched
    # grad_outputs nor (reliably) double backward; `recorded` keeps both working.
    if cell == "lstm":
        return recorded(lstm, eager.lstm_direction, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths)
    out, h_n = recorded(gru, eager.gru_direction, x, h0, w_ih, w_hh, b_ih, b_hh, lengths)
    return out, h_n, None

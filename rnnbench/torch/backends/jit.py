"""`jit`: TorchScript, the long-standing advice for a fast custom LSTM: `torch.jit.script` of
a direction loop around `cells.lstm_update` / `cells.gru_update` (the eager rung's step
code), compiled by the TorchScript frontend and run by its interpreter with its fusers.  It
keeps its own loop because TorchScript needs typed arguments, not the cells' dict of weights.

TorchScript is in maintenance mode; torch 2.13 still scripts these functions (a
deprecation warning, if any, is silenced here).  If scripting fails on some build, the
backend reports itself unavailable with the scripting error as the reason.
"""

from __future__ import annotations

import warnings
from functools import lru_cache
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from rnnbench.core.capabilities import Capabilities

from .. import cells
from . import eager
from ._common import in_autocast_dtype, recorded


# The masking of `cells.mask_step`, written inline: TorchScript needs the state as typed tensors.
def lstm_direction(x_proj: Tensor, h: Tensor, c: Tensor, w_hh_t: Tensor, w_hr_t: Optional[Tensor],
                   masks: List[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
    outputs: List[Tensor] = []
    for t, x_t in enumerate(x_proj.unbind(0)):
        h_new, c_new = cells.lstm_update(x_t, h, c, w_hh_t, w_hr_t)
        if len(masks) == 0:
            h, c = h_new, c_new
            outputs.append(h_new)
        else:
            m = masks[t]
            h = torch.where(m, h_new, h)
            c = torch.where(m, c_new, c)
            outputs.append(h_new * m)
    return torch.stack(outputs), h, c


def gru_direction(x_proj: Tensor, h: Tensor, w_hh_t: Tensor, b_hh: Optional[Tensor],
                  masks: List[Tensor]) -> Tuple[Tensor, Tensor]:
    outputs: List[Tensor] = []
    for t, x_t in enumerate(x_proj.unbind(0)):
        h_new = cells.gru_update(x_t, h, w_hh_t, b_hh)
        if len(masks) == 0:
            h = h_new
            outputs.append(h_new)
        else:
            m = masks[t]
            h = torch.where(m, h_new, h)
            outputs.append(h_new * m)
    return torch.stack(outputs), h


def _lstm(scripted, x_proj, state, q, masks):
    out, h, c = scripted(x_proj, state[0], state[1], q["w_hh_t"], q["w_hr_t"], masks)
    return out, (h, c)


def _gru(scripted, x_proj, state, q, masks):
    out, h = scripted(x_proj, state[0], q["w_hh_t"], q["bias_hh"], masks)
    return out, (h,)


DIRECTIONS = {"lstm": (lstm_direction, _lstm), "gru": (gru_direction, _gru)}
CAPABILITIES = Capabilities(cells=tuple(DIRECTIONS), proj_size=True,
                            why_not={"cell": "the scripted loops are written for PyTorch's LSTM and GRU"})


@lru_cache(maxsize=None)
def scripted(name: str):
    """The scripted direction loop of cell `name`; raises RuntimeError with the reason."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", (DeprecationWarning, FutureWarning, UserWarning))
            return torch.jit.script(DIRECTIONS[name][0])
    except Exception as e:  # the frontend raises many types; all mean "cannot script here"
        raise RuntimeError(f"torch.jit.script failed on torch {torch.__version__}: "
                           f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e


def unavailable_reason(device: str = "cpu") -> str | None:
    try:
        for name in DIRECTIONS:
            scripted(name)
    except RuntimeError as e:
        return str(e)
    return None


def _run(cell, p, x, state, lengths):
    q = cell.prepare(p)
    call = DIRECTIONS[cell.name][1]
    return call(scripted(cell.name), cells.project_all(cell, x, q), state, q, cells.valid_steps(lengths, x.shape[0]))


def run_direction(cell, p, x, state, lengths):
    # One node around the scripted graph: TorchScript's own backward supports neither batched
    # grad_outputs nor (reliably) double backward; `recorded` keeps both working.  Under
    # autocast the script runs wholly in the autocast dtype (TorchScript casts only its GEMMs,
    # and a float32 bias would promote the gates back to float32).
    return in_autocast_dtype(lambda *args: recorded(_run, eager.run_direction, *args), cell, p, x, state, lengths)

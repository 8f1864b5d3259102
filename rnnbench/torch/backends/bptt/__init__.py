"""`bptt`: hand-written back-propagation through time, one autograd node per layer and
direction (PyTorch's `torch.autograd.Function`; JAX's counterpart is `rnnbench.jax`'s `bptt`).

`lstm_gru` holds the LSTM and GRU kernels, `cells` those of the catalogue cells with a
hand-written backward, `gemm` the GEMM wrapper (BLAS or prepacked oneDNN) their steps use.
For an empty batch and under torch.func transforms the `eager` formulation runs instead
(the same math recorded by autograd: the kernels write into preallocated buffers, which
functorch cannot batch or trace).  The registry's old name for this rung is `autograd`.
"""

from __future__ import annotations

from rnnbench.core.capabilities import Capabilities

from .. import eager
from .._common import in_autocast_dtype, under_func_transform
from . import steps as cells, lstm_gru


def _lstm(x, state, p, lengths):
    out, h_n, c_n = lstm_gru.lstm(x, *state, p.w_ih, p.w_hh, p.b_ih, p.b_hh, p.w_hr, lengths)
    return out, (h_n, c_n)


def _gru(x, state, p, lengths):
    out, h_n = lstm_gru.gru(x, *state, p.w_ih, p.w_hh, p.b_ih, p.b_hh, lengths)
    return out, (h_n,)


DIRECTIONS = {"lstm": _lstm, "gru": _gru, "peephole_lstm": cells.peephole_lstm, "ln_lstm": cells.ln_lstm}
CAPABILITIES = Capabilities(
    cells=tuple(DIRECTIONS), proj_size=True,
    why_not={"cell": "the other cells have no hand-written backward here"})


def run_direction(cell, p, x, state, lengths):
    if x.shape[1] == 0 or under_func_transform():
        return eager.run_direction(cell, p, x, state, lengths)
    # Autocast does not reach an autograd.Function's backward: under it the kernels run
    # wholly in the autocast dtype.
    return in_autocast_dtype(lambda cell, p, x, state, lengths: DIRECTIONS[cell.name](x, state, p, lengths),
                             cell, p, x, state, lengths)

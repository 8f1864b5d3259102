"""`cell_loop`: `nn.LSTMCell` / `nn.GRUCell` in a Python loop, one library cell call per step.

Each step calls the op `nn.LSTMCell.forward` itself dispatches to, `aten::lstm_cell`
(`aten::gru_cell` for the GRU), through the public `torch.ops.aten` namespace, with the
layer's own weights: the same kernels as a literal `nn.LSTMCell` loop (tested bit for
bit) without a module whose parameters would have to alias the layer's.  The cell
computes W_ih x_t + b_ih and W_hh h + b_hh as two GEMMs per step; the loop indexes
`x[t]`, as such a loop usually does (its own loop, to show that).  No projection
(nn.LSTMCell has none).
"""

from __future__ import annotations

import torch

from rnnbench.core.capabilities import Capabilities

from ..cells import advance, valid_steps
from ._common import under_vmap


def _lstm(x_t, state, p):
    return torch.ops.aten.lstm_cell(x_t, list(state), p.w_ih, p.w_hh, p.b_ih, p.b_hh)


def _gru(x_t, state, p):
    return (torch.ops.aten.gru_cell(x_t, state[0], p.w_ih, p.w_hh, p.b_ih, p.b_hh),)


STEPS = {"lstm": _lstm, "gru": _gru}
CAPABILITIES = Capabilities(cells=tuple(STEPS), proj_size=False,
                            why_not={"proj_size": "nn.LSTMCell has no output projection",
                                     "cell": "nn.LSTMCell and nn.GRUCell are PyTorch's only cells"})


def run_direction(cell, p, x, state, lengths):
    if under_vmap():
        raise RuntimeError("backend 'cell_loop' runs aten::lstm_cell / aten::gru_cell (nn.LSTMCell's and "
                           "nn.GRUCell's kernels), which torch.func.vmap cannot batch (PyTorch has no batching "
                           "rule for them); use backend='eager' or 'bptt' under vmap")
    step = STEPS[cell.name]
    masks = valid_steps(lengths, x.shape[0])
    outputs = []
    for t in range(x.shape[0]):
        state, out = advance(masks, t, step(x[t], state, p), state)
        outputs.append(out)
    return torch.stack(outputs), state

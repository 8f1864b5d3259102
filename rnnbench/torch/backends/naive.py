"""`naive`: the textbook loop -- concatenate [x_t, h] and apply one Linear per step.

Per step: concatenate [x_t, h] and apply one Linear with the concatenated weight
[W_ih | W_hh] (a single `gate_fc`), index the input as `x[t]`, chunk the gates.  This is
the slow baseline, so it keeps its own loop, the one a first custom LSTM is usually written
as: `x[t]` makes autograd write a full-size zero tensor per step in the backward pass, and
every step pays for the input projection separately.

Correctness such a loop often misses and this keeps: PyTorch's two biases are summed; the
GRU's reset gate scales only the recurrent part of n (applying it to the summed gates is
a different function), so n needs W_in x_t + b_in and W_hn h + b_hn apart.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rnnbench.core.capabilities import Capabilities

from ..cells import advance, valid_steps
from ._common import contiguous_grad


def _lstm(p, x, state, masks):
    h, c = state
    weight = torch.cat([contiguous_grad(p.w_ih), contiguous_grad(p.w_hh)], dim=1)
    bias = None if p.b_ih is None else p.b_ih + p.b_hh
    outputs = []
    for t in range(x.shape[0]):
        gates = F.linear(torch.cat([x[t], h], dim=1), weight, bias)
        i, f, g, o = gates.chunk(4, dim=1)
        c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h_new = torch.sigmoid(o) * torch.tanh(c_new)
        (h, c), out = advance(masks, t, (h_new, c_new), (h, c))
        outputs.append(out)
    return torch.stack(outputs), (h, c)


def _gru(p, x, state, masks):
    (h,) = state
    H = h.shape[1]
    w_ih, w_hh = contiguous_grad(p.w_ih), contiguous_grad(p.w_hh)
    w_rz = torch.cat([w_ih[:2 * H], w_hh[:2 * H]], dim=1)
    w_in, w_hn = w_ih[2 * H:], w_hh[2 * H:]
    if p.b_ih is None:
        b_rz = b_in = b_hn = None
    else:
        b_rz = p.b_ih[:2 * H] + p.b_hh[:2 * H]
        b_in, b_hn = p.b_ih[2 * H:], p.b_hh[2 * H:]
    outputs = []
    for t in range(x.shape[0]):
        x_t = x[t]
        r, z = torch.sigmoid(F.linear(torch.cat([x_t, h], dim=1), w_rz, b_rz)).chunk(2, dim=1)
        n = torch.tanh(F.linear(x_t, w_in, b_in) + r * F.linear(h, w_hn, b_hn))
        (h,), out = advance(masks, t, ((1 - z) * n + z * h,), (h,))
        outputs.append(out)
    return torch.stack(outputs), (h,)


DIRECTIONS = {"lstm": _lstm, "gru": _gru}
CAPABILITIES = Capabilities(cells=tuple(DIRECTIONS), proj_size=False,
                            why_not={"proj_size": "the textbook loop has no output projection",
                                     "cell": "the textbook loop is written for PyTorch's LSTM and GRU"})


def run_direction(cell, p, x, state, lengths):
    return DIRECTIONS[cell.name](p, x, state, valid_steps(lengths, x.shape[0]))

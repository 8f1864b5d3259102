"""`naive`: the seeds' cell made correct.

Per step: concatenate [x_t, h] and apply one Linear with the concatenated weight
[W_ih | W_hh] (the seeds' `gate_fc`), index the input as `x[t]`, chunk the gates.
This is the slow baseline: `x[t]` makes autograd write a full-size zero tensor per step
in the backward pass, and every step pays for the input projection separately.

LSTM (gates i, f, g, o):
    i, f, g, o = chunk(W [x_t, h] + b_ih + b_hh)
    c' = sigmoid(f) * c + sigmoid(i) * tanh(g),   h' = sigmoid(o) * tanh(c')
GRU (gates r, z, n), with the reset gate applied after the recurrent matmul, as
PyTorch/cuDNN do (the GRU seed applies it to the summed gates, which is a different
function); so n needs W_hn h + b_hn on its own:
    r, z = sigmoid(W_rz [x_t, h] + b_ih_rz + b_hh_rz)
    n = tanh(W_in x_t + b_in + r * (W_hn h + b_hn)),   h' = (1 - z) * n + z * h
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ._common import combined_bias, contiguous_grad, require_no_projection, step_masks


def run_direction(cell: str, x: Tensor, h0: Tensor, c0: Tensor | None, w_ih: Tensor, w_hh: Tensor,
                  b_ih: Tensor | None, b_hh: Tensor | None, w_hr: Tensor | None, lengths: Tensor | None):
    require_no_projection("naive", w_hr)
    masks = step_masks(lengths, x.shape[0])
    if cell == "lstm":
        return _lstm(x, h0, c0, w_ih, w_hh, b_ih, b_hh, masks)
    return _gru(x, h0, w_ih, w_hh, b_ih, b_hh, masks)


def _lstm(x, h, c, w_ih, w_hh, b_ih, b_hh, masks):
    weight = torch.cat([contiguous_grad(w_ih), contiguous_grad(w_hh)], dim=1)
    bias = combined_bias(b_ih, b_hh)
    outputs = []
    for t in range(x.shape[0]):
        gates = F.linear(torch.cat([x[t], h], dim=1), weight, bias)
        i, f, g, o = gates.chunk(4, dim=1)
        c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h_new = torch.sigmoid(o) * torch.tanh(c_new)
        if masks is None:
            h, c = h_new, c_new
            outputs.append(h_new)
        else:
            m = masks[t]
            h, c = torch.where(m, h_new, h), torch.where(m, c_new, c)
            outputs.append(h_new * m)
    return torch.stack(outputs), h, c


def _gru(x, h, w_ih, w_hh, b_ih, b_hh, masks):
    H = h.shape[1]
    w_ih, w_hh = contiguous_grad(w_ih), contiguous_grad(w_hh)
    w_rz = torch.cat([w_ih[:2 * H], w_hh[:2 * H]], dim=1)
    w_in, w_hn = w_ih[2 * H:], w_hh[2 * H:]
    if b_ih is None:
        b_rz = b_in = b_hn = None
    else:
        b_rz = b_ih[:2 * H] + b_hh[:2 * H]
        b_in, b_hn = b_ih[2 * H:], b_hh[2 * H:]
    outputs = []
    for t in range(x.shape[0]):
        x_t = x[t]
        r, z = torch.sigmoid(F.linear(torch.cat([x_t, h], dim=1), w_rz, b_rz)).chunk(2, dim=1)
        n = torch.tanh(F.linear(x_t, w_in, b_in) + r * F.linear(h, w_hn, b_hn))
        h_new = (1 - z) * n + z * h
        if masks is None:
            h = h_new
            outputs.append(h_new)
        else:
            m = masks[t]
            h = torch.where(m, h_new, h)
            outputs.append(h_new * m)
    return torch.stack(outputs), h, None

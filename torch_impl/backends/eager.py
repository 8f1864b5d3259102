"""`eager`: the custom LSTM/GRU written the way eager PyTorch runs fastest.

What it changes from `naive`:
- the input projection of all T steps is ONE GEMM, (T*B, I) @ W_ih^T + biases, so
  each step only multiplies the recurrent part, with ONE `addmm` against W_hh^T
  transposed once per call;
- the time loop walks `x_proj.unbind(0)` (autograd's backward of `unbind` stacks the
  step gradients once instead of writing a zero tensor per step as `x[t]` does);
- fused gate math: the LSTM gate rows are reordered once per call from i, f, g, o to
  i, f, o, g, so ONE sigmoid covers i, f and o and one tanh covers g; `addcmul` fuses
  f * c + i * g; gates are split with `split` / `chunk` (whose backward concatenates)
  rather than sliced;
- the outputs are stacked once at the end.

LSTM:  [i, f, o, g] = x_proj_t + h W_hh^T          (x_proj_t = W_ih x_t + b_ih + b_hh)
       c' = sigmoid(f) * c + sigmoid(i) * tanh(g),  h' = sigmoid(o) * tanh(c')
       with proj_size: h' = (sigmoid(o) * tanh(c')) W_hr^T
GRU:   [x_r, x_z, x_n] = W_ih x_t + b_ih,  [h_r, h_z, h_n] = W_hh h + b_hh
       r, z = sigmoid(x_r + h_r), sigmoid(x_z + h_z)
       n = tanh(x_n + r * h_n),   h' = n + z * (h - n)  (= (1 - z) * n + z * h)

Cells other than lstm and gru (the catalogue's ln_lstm, peephole_lstm, gru_reset_before
and users' own) run their step from `torch_impl.cells` in the same kind of loop.

The functions are written in the TorchScript subset so that `jit` scripts these very
functions and `compile` compiles these very step functions.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import Tensor


def ifog(w: Tensor, hidden_size: int) -> Tensor:
    """Reorder LSTM gate rows (dim 0) from i, f, g, o to i, f, o, g."""
    H = hidden_size
    return torch.cat([w[:2 * H], w[3 * H:], w[2 * H:3 * H]])


def lstm_step(x_proj_t: Tensor, h: Tensor, c: Tensor, w_hh_t: Tensor,
              w_hr_t: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """One LSTM step with gate columns in i, f, o, g order; returns (h', c')."""
    H = c.shape[1]
    gates = torch.addmm(x_proj_t, h, w_hh_t)
    ifo, g = torch.split(gates, [3 * H, H], 1)
    i, f, o = torch.sigmoid(ifo).chunk(3, 1)
    c_new = torch.addcmul(f * c, i, torch.tanh(g))
    h_new = o * torch.tanh(c_new)
    if w_hr_t is not None:
        h_new = torch.mm(h_new, w_hr_t)
    return h_new, c_new


def gru_step(x_proj_t: Tensor, h: Tensor, w_hh_t: Tensor, b_hh: Optional[Tensor]) -> Tensor:
    """One GRU step (reset applied after the recurrent matmul); returns h'."""
    H = h.shape[1]
    if b_hh is not None:
        h_gates = torch.addmm(b_hh, h, w_hh_t)
    else:
        h_gates = torch.mm(h, w_hh_t)
    x_rz, x_n = torch.split(x_proj_t, [2 * H, H], 1)
    h_rz, h_n = torch.split(h_gates, [2 * H, H], 1)
    r, z = torch.sigmoid(x_rz + h_rz).chunk(2, 1)
    n = torch.tanh(torch.addcmul(x_n, r, h_n))
    return n + z * (h - n)


def input_projection(x: Tensor, w_ih: Tensor, bias: Optional[Tensor]) -> Tensor:
    """x (T, B, I) -> x W_ih^T + bias as (T, B, G*H), one GEMM for all steps."""
    T, B = x.shape[0], x.shape[1]
    x2d = x.reshape(T * B, x.shape[2])
    if bias is not None:
        out = torch.addmm(bias, x2d, w_ih.t())
    else:
        out = torch.mm(x2d, w_ih.t())
    return out.view(T, B, w_ih.shape[0])


def valid_steps(lengths: Optional[Tensor], seq_len: int) -> List[Tensor]:
    """Per-step (B, 1) masks, True where t < lengths[b]; empty list without lengths."""
    if lengths is None:
        return []
    steps = torch.arange(seq_len, device=lengths.device).unsqueeze(1)
    return (steps < lengths.unsqueeze(0)).unsqueeze(-1).unbind(0)


def lstm_direction(x: Tensor, h0: Tensor, c0: Tensor, w_ih: Tensor, w_hh: Tensor,
                   b_ih: Optional[Tensor], b_hh: Optional[Tensor], w_hr: Optional[Tensor],
                   lengths: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
    H = w_hh.shape[0] // 4
    bias: Optional[Tensor] = None
    if b_ih is not None and b_hh is not None:
        bias = ifog(b_ih + b_hh, H)
    x_proj = input_projection(x, ifog(w_ih, H), bias)
    w_hh_t = ifog(w_hh, H).t()
    w_hr_t: Optional[Tensor] = None
    if w_hr is not None:
        w_hr_t = w_hr.t()
    masks = valid_steps(lengths, x.shape[0])
    h, c = h0, c0
    outputs: List[Tensor] = []
    for t, x_t in enumerate(x_proj.unbind(0)):
        h_new, c_new = lstm_step(x_t, h, c, w_hh_t, w_hr_t)
        if len(masks) == 0:
            h, c = h_new, c_new
            outputs.append(h_new)
        else:
            m = masks[t]
            h = torch.where(m, h_new, h)
            c = torch.where(m, c_new, c)
            outputs.append(h_new * m)
    return torch.stack(outputs), h, c


def gru_direction(x: Tensor, h0: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Optional[Tensor],
                  b_hh: Optional[Tensor], lengths: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    x_proj = input_projection(x, w_ih, b_ih)
    w_hh_t = w_hh.t()
    masks = valid_steps(lengths, x.shape[0])
    h = h0
    outputs: List[Tensor] = []
    for t, x_t in enumerate(x_proj.unbind(0)):
        h_new = gru_step(x_t, h, w_hh_t, b_hh)
        if len(masks) == 0:
            h = h_new
            outputs.append(h_new)
        else:
            m = masks[t]
            h = torch.where(m, h_new, h)
            outputs.append(h_new * m)
    return torch.stack(outputs), h


def run_direction(cell: str, x: Tensor, h0: Tensor, c0: Tensor | None, w_ih: Tensor, w_hh: Tensor,
                  b_ih: Tensor | None, b_hh: Tensor | None, w_hr: Tensor | None, lengths: Tensor | None,
                  extras: dict | None = None):
    if cell not in ("lstm", "gru"):  # catalogue cells: their step from torch_impl.cells, same loop shape
        from .. import cells
        return cells.run_direction(cell, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths, extras)
    if cell == "lstm":
        return lstm_direction(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths)
    out, h_n = gru_direction(x, h0, w_ih, w_hh, b_ih, b_hh, lengths)
    return out, h_n, None

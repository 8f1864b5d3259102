"""`cell_loop`: `nn.LSTMCell` / `nn.GRUCell` in a Python loop (the GRU seed's middle option).

Each step calls the op `nn.LSTMCell.forward` itself dispatches to, `aten::lstm_cell`
(`aten::gru_cell` for the GRU), through the public `torch.ops.aten` namespace, with the
layer's own weights: the same kernels as a literal `nn.LSTMCell` loop (tested bit for
bit) without a module whose parameters would have to alias the layer's.  The cell
computes W_ih x_t + b_ih and W_hh h + b_hh as two GEMMs per step; the loop indexes
`x[t]` as the seed does.  No projection (nn.LSTMCell has none).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._common import require_no_projection, step_masks, under_vmap

_lstm_cell = torch.ops.aten.lstm_cell
_gru_cell = torch.ops.aten.gru_cell


def run_direction(cell: str, x: Tensor, h0: Tensor, c0: Tensor | None, w_ih: Tensor, w_hh: Tensor,
                  b_ih: Tensor | None, b_hh: Tensor | None, w_hr: Tensor | None, lengths: Tensor | None):
    require_no_projection("cell_loop", w_hr)
    if under_vmap():
        raise RuntimeError("backend 'cell_loop' runs aten::lstm_cell / aten::gru_cell (nn.LSTMCell's and "
                           "nn.GRUCell's kernels), which torch.func.vmap cannot batch (PyTorch has no batching "
                           "rule for them); use backend='eager' or 'autograd' under vmap")
    masks = step_masks(lengths, x.shape[0])
    h, c = h0, c0
    outputs = []
    for t in range(x.shape[0]):
        if cell == "lstm":
            h_new, c_new = _lstm_cell(x[t], [h, c], w_ih, w_hh, b_ih, b_hh)
        else:
            h_new, c_new = _gru_cell(x[t], h, w_ih, w_hh, b_ih, b_hh), None
        if masks is None:
            h, c = h_new, c_new
            outputs.append(h_new)
        else:
            m = masks[t]
            h = torch.where(m, h_new, h)
            c = None if c is None else torch.where(m, c_new, c)
            outputs.append(h_new * m)
    return torch.stack(outputs), h, c

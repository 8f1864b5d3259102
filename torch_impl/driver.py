"""One driver for every direction-function backend: layers x directions x lengths.

`run(...)` takes time-major padded input (T, B, I), optional lengths (B,), initial
states (L*D, B, H_out) / (L*D, B, H) and the parameters of each (layer, direction) in
PyTorch's order, and returns what `nn.LSTM`'s functional core returns:
output (T, B, D*H_out) with zeros past each length, h_n, c_n (LSTM) or None.

The reverse direction runs over each sequence's valid part, reversed: the input is
gathered with idx[t, b] = lengths[b] - 1 - t for t < lengths[b] (else t), the forward
direction function runs on it, and its output is gathered back with the same index
(the permutation is its own inverse).  The driver knows cells only by their family (whether
they carry c): every catalogue cell runs through it unchanged.  Dropout is applied to each layer's output in
training mode, except after the last layer, as `nn.LSTM` does.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from shared.cells import get_cell

# (w_ih, w_hh, b_ih | None, b_hh | None, w_hr | None[, extras]) of one layer and direction;
# extras: {prefix: tensor} of the cell's extra parameters (shared.cells), passed on to the
# direction function as `extras=` only when the cell has some.
LayerParams = tuple


def reverse_index(lengths: Tensor, seq_len: int) -> Tensor:
    """(T, B) int64: lengths[b] - 1 - t inside each sequence, t past its end."""
    t = torch.arange(seq_len, device=lengths.device).unsqueeze(1)
    return torch.where(t < lengths.unsqueeze(0), lengths.unsqueeze(0) - 1 - t, t)


def reverse_time(x: Tensor, index: Tensor | None) -> Tensor:
    """Reverse each sequence's valid part (the whole sequence when index is None)."""
    if index is None:
        return x.flip(0)
    return x.gather(0, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def run(cell: str, direction_fn: Callable, x: Tensor, h0: Tensor, c0: Tensor | None,
        params: Sequence[LayerParams], *, num_layers: int, bidirectional: bool,
        lengths: Tensor | None = None, dropout: float = 0.0, training: bool = False):
    T = x.shape[0]
    D = 2 if bidirectional else 1
    if lengths is not None and bool((lengths == T).all()):
        lengths = None  # every sequence is full: no masks needed (same result, cheaper)
    rev_index = reverse_index(lengths, T) if (bidirectional and lengths is not None) else None
    h_n, c_n = [], []
    layer_input = x
    for layer in range(num_layers):
        outputs = []
        for direction in range(D):
            k = layer * D + direction
            w_ih, w_hh, b_ih, b_hh, w_hr, *rest = params[k]
            extras = {"extras": rest[0]} if rest and rest[0] else {}  # only cells with extra params
            inp = layer_input if direction == 0 else reverse_time(layer_input, rev_index)
            out, h, c = direction_fn(cell, inp, h0[k], None if c0 is None else c0[k],
                                     w_ih, w_hh, b_ih, b_hh, w_hr, lengths, **extras)
            outputs.append(out if direction == 0 else reverse_time(out, rev_index))
            h_n.append(h)
            c_n.append(c)
        layer_input = outputs[0] if D == 1 else torch.cat(outputs, dim=2)
        if dropout > 0 and training and layer < num_layers - 1:
            layer_input = F.dropout(layer_input, p=dropout, training=True)
    has_c = get_cell(cell).has_cell_state
    return layer_input, torch.stack(h_n), (torch.stack(c_n) if has_c else None)

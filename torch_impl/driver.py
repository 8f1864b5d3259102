"""Layers x directions, for every backend that runs one direction at a time.

Mirrors `jax_impl/driver.py`: the same `LayerParams`, the same `run_layer` contract.
A backend module's `run_direction(cell, p, x, state, lengths)` runs one layer forward in
time over time-major x (T, B, I), from `state` = (h,) or (h, c), and returns
(output (T, B, H_out) with zeros past each length, final state tuple).  `run_layer` adds
the reverse direction: each sequence's valid part reversed (the input gathered with
idx[t, b] = lengths[b] - 1 - t for t < lengths[b], else t; the permutation is its own
inverse, so the output is gathered back with it), PyTorch's packed-sequence semantics.
`run` stacks the layers, concatenates the directions and applies dropout between
layers in training mode, as `nn.LSTM` does.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .cells import TorchCell


class LayerParams(NamedTuple):
    """Canonical tensors of one layer and direction; biases/projection None when absent."""

    w_ih: Tensor  # (G*H, I)
    w_hh: Tensor  # (G*H, H_out)
    b_ih: Tensor | None  # (G*H,)
    b_hh: Tensor | None  # (G*H,)
    w_hr: Tensor | None  # (H_out, H), LSTM with proj_size only
    extras: Mapping[str, Tensor] | None = None  # a catalogue cell's extra params by prefix


def reverse_index(lengths: Tensor, seq_len: int) -> Tensor:
    """(T, B) int64: lengths[b] - 1 - t inside each sequence, t past its end."""
    t = torch.arange(seq_len, device=lengths.device).unsqueeze(1)
    return torch.where(t < lengths.unsqueeze(0), lengths.unsqueeze(0) - 1 - t, t)


def reverse_time(x: Tensor, lengths: Tensor | None) -> Tensor:
    """Reverse each sequence's valid part (the whole sequence without lengths)."""
    if lengths is None:
        return x.flip(0)
    index = reverse_index(lengths, x.shape[0])
    return x.gather(0, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def run_layer(backend, cell: TorchCell, p: LayerParams, x: Tensor, state: tuple, lengths: Tensor | None, *,
              reverse: bool, **options):
    """One layer in one direction through `backend.run_direction`; returns (output, state)."""
    if not reverse:
        return backend.run_direction(cell, p, x, state, lengths, **options)
    out, state = backend.run_direction(cell, p, reverse_time(x, lengths), state, lengths, **options)
    return reverse_time(out, lengths), state


def run(backend, cell: TorchCell, x: Tensor, state: tuple, params: Sequence[LayerParams], *, num_layers: int,
        bidirectional: bool, lengths: Tensor | None = None, dropout: float = 0.0, training: bool = False,
        options: Mapping | None = None):
    """The whole stack: x (T, B, I), state = (h0,) or (h0, c0), each (L*D, B, .), `params`
    one LayerParams per (layer, direction) in PyTorch's order; `options` go to every
    `run_direction` (a backend's `OPTIONS`).  Returns (output, state_n)."""
    options = options or {}
    T = x.shape[0]
    D = 2 if bidirectional else 1
    if lengths is not None and bool((lengths == T).all()):
        lengths = None  # every sequence is full: no masks needed (same result, cheaper)
    finals = []
    layer_input = x
    for layer in range(num_layers):
        outputs = []
        for direction in range(D):
            k = layer * D + direction
            out, final = run_layer(backend, cell, params[k], layer_input, tuple(s[k] for s in state), lengths,
                                   reverse=direction == 1, **options)
            outputs.append(out)
            finals.append(final)
        layer_input = outputs[0] if D == 1 else torch.cat(outputs, dim=2)
        if dropout > 0 and training and layer < num_layers - 1:
            layer_input = F.dropout(layer_input, p=dropout, training=True)
    return layer_input, tuple(torch.stack(parts) for parts in zip(*finals))

"""The stacker: layers x directions over a rung, PyTorch's packed-sequence semantics.

Mirrors `rnnbench/jax/stack.py`: the same `LayerParams`, `run_layer` and `run`, with the same
arguments in the same order.  `run(backend, cell, spec, params, x, state, lengths)` runs the
stack `spec` describes with the canonical `params` (a mapping of `state_dict` names to
tensors) on time-major `x`, from `state` = (h0,) or (h0, c0), each (L*D, B, .), and returns
(output, state_n tuple).  `x` is a padded (T, B, I) tensor with optional `lengths`, or a
`PackedSequence` (the two forms `nn.LSTM`'s kernel takes).

A rung (`rnnbench.torch.backends.<name>`) provides one of:

- `run_direction(cell, p, x, state, lengths)`: one layer forward in time over a padded x
  (output (T, B, H_out) with zeros past each length, final state tuple).  `run_layer` adds
  the reverse direction: each sequence's valid part reversed (the input gathered with
  idx[t, b] = lengths[b] - 1 - t for t < lengths[b], else t; the permutation is its own
  inverse, so the output is gathered back with it).  `run` stacks the layers, concatenates
  the directions and applies dropout between layers in training mode, as `nn.LSTM` does;
  a packed input is padded for it and its output packed again.
- `run_stack(cell, spec, params, x, state, lengths, *, dropout, training)`: the whole stack
  at once, on either form of x (`native`: PyTorch's fused kernels).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from rnnbench.core.params import LayerParams, layer_params
from rnnbench.core.spec import RNNSpec

from .cells import TorchCell

__all__ = ["LayerParams", "layer_params", "reverse_index", "reverse_time", "run_layer", "run"]


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
    """One layer in one direction through `backend.run_direction`; returns (output, state_n).

    torch's rungs run forward in time: the reverse direction is a forward run over each
    sequence's valid part reversed (`reverse_time`), its output reversed back."""
    if not reverse:
        return backend.run_direction(cell, p, x, state, lengths, **options)
    out, state = backend.run_direction(cell, p, reverse_time(x, lengths), state, lengths, **options)
    return reverse_time(out, lengths), state


def run(backend, cell: TorchCell, spec: RNNSpec, params: Mapping[str, Tensor], x: Tensor | PackedSequence,
        state: tuple, lengths: Tensor | None = None, *, dropout: float = 0.0, training: bool = False,
        options: Mapping | None = None):
    """The whole stack; see the module docstring.  `options` go to every `run_direction` (a
    backend's `OPTIONS`).  Returns (output in x's form, state_n tuple)."""
    options = options or {}
    if hasattr(backend, "run_stack"):
        return backend.run_stack(cell, spec, params, x, state, lengths, dropout=dropout, training=training,
                                 **options)
    if isinstance(x, PackedSequence):  # in sorted order: the caller orders the state the same way
        padded, lengths = pad_packed_sequence(PackedSequence(x.data, x.batch_sizes))
        out, final = _run_layers(backend, cell, spec, params, padded, state, lengths.to(x.data.device), dropout,
                                 training, options)
        return PackedSequence(pack_padded_sequence(out, lengths, enforce_sorted=True).data, x.batch_sizes,
                              x.sorted_indices, x.unsorted_indices), final
    return _run_layers(backend, cell, spec, params, x, state, lengths, dropout, training, options)


def _run_layers(backend, cell, spec, params, x, state, lengths, dropout, training, options):
    T = x.shape[0]
    D = spec.num_directions
    if lengths is not None and bool((lengths == T).all()):
        lengths = None  # every sequence is full: no masks needed (same result, cheaper)
    finals = []
    for layer in range(spec.num_layers):
        outputs = []
        for direction in range(D):
            k = layer * D + direction
            out, final = run_layer(backend, cell, layer_params(spec, params, layer, direction), x,
                                   tuple(s[k] for s in state), lengths, reverse=direction == 1, **options)
            outputs.append(out)
            finals.append(final)
        x = outputs[0] if D == 1 else torch.cat(outputs, dim=2)
        if dropout > 0 and training and layer < spec.num_layers - 1:
            x = F.dropout(x, p=dropout, training=True)
    return x, tuple(torch.stack(parts) for parts in zip(*finals))

"""The stacker: layers x directions over a rung, PyTorch's packed-sequence semantics.

Mirrors `rnnbench/torch/stack.py`: the same `LayerParams`, `run_layer` and `run`, with the same
arguments in the same order.  `run(backend, cell, spec, params, x, state, lengths)` runs the
stack `spec` describes with the canonical `params` (`state_dict` names -> arrays, in the
compute dtype) on time-major `x` (T, B, I), from `state` = (h0,) or (h0, c0), each
(L*D, B, .), with `lengths` int32 (B,) or None, and returns (output (T, B, D*H_out), state_n
tuple).  The front door (`rnnbench.jax.functional.run`) has checked and normalised all of it.

A rung (`rnnbench.jax.backends.<name>`) provides one of:

- `run_direction(cell, p, x, state, lengths, *, reverse, **options)` -> (output (T, B,
  H_out) with zeros past each length, state_n tuple) for one layer and direction
  (`run_layer`).  JAX's rungs take `reverse` themselves: with lengths a direction masks
  each step (`cells.time_loop`), so past its length a sequence keeps its state and outputs
  zero, and the reverse direction, walking t = T-1 .. 0, keeps its initial state until
  t = len-1 -- it runs over each sequence's valid part reversed, with no gather.
- `run_stack(cell, spec, params, x, state, lengths, **options)` -> (output, state_n) for a
  whole stack; with dropout between layers it is handed one layer at a time, as a
  one-layer stack.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp

from rnnbench.core.params import LayerParams, layer_params
from rnnbench.core.spec import RNNSpec

from .cells import JaxCell

__all__ = ["LayerParams", "layer_params", "run_layer", "run", "one_layer", "dropout_between_layers"]


def run_layer(backend, cell: JaxCell, p: LayerParams, x: jax.Array, state: tuple, lengths: jax.Array | None, *,
              reverse: bool, **options):
    """One layer in one direction through `backend.run_direction`; returns (output, state_n).

    JAX's rungs take `reverse` themselves (`lax.scan(reverse=True)` walks t = T-1 .. 0)."""
    return backend.run_direction(cell, p, x, state, lengths, reverse=reverse, **options)


def run(backend, cell: JaxCell, spec: RNNSpec, params: Mapping[str, jax.Array], x: jax.Array, state: tuple,
        lengths: jax.Array | None = None, *, between_layers: Callable | None = None, **options):
    """The whole stack; see the module docstring.  `between_layers(x)` is applied to each layer's
    output but the last (dropout: `dropout_between_layers`).  Returns (output, state_n tuple)."""
    if hasattr(backend, "run_stack"):
        if between_layers is None:
            return backend.run_stack(cell, spec, params, x, state, lengths, **options)
        return _one_layer_stacks(backend, cell, spec, params, x, state, lengths, between_layers, options)
    D = spec.num_directions
    finals = []
    for layer in range(spec.num_layers):
        if layer > 0 and between_layers is not None:
            x = between_layers(x)
        outputs = []
        for d in range(D):
            k = layer * D + d
            out, final = run_layer(backend, cell, layer_params(spec, params, layer, d), x,
                                   tuple(s[k] for s in state), lengths, reverse=d == 1, **options)
            outputs.append(out)
            finals.append(final)
        x = outputs[0] if D == 1 else jnp.concatenate(outputs, axis=-1)
    return x, tuple(jnp.stack(parts) for parts in zip(*finals))


def one_layer(spec: RNNSpec, params: Mapping, layer: int, input_size: int) -> tuple[RNNSpec, dict]:
    """Layer `layer` of a stack as a one-layer stack of its own: its spec and its params (named `_l0`)."""
    layer_spec = dataclasses.replace(spec, input_size=input_size, num_layers=1, dropout=0.0)
    renamed = {}
    for d in range(spec.num_directions):
        old, new = spec.suffix(layer, d), layer_spec.suffix(0, d)
        for name in layer_spec.param_names():
            if name.endswith("_" + new):
                renamed[name] = params[name[:-len(new)] + old]
    return layer_spec, renamed


def _one_layer_stacks(backend, cell, spec, params, x, state, lengths, between_layers, options):
    """A `run_stack` rung with dropout between layers: one one-layer stack per layer."""
    D = spec.num_directions
    finals = []
    for layer in range(spec.num_layers):
        if layer > 0:
            x = between_layers(x)
        layer_spec, layer_p = one_layer(spec, params, layer, x.shape[-1])
        rows = slice(layer * D, (layer + 1) * D)
        x, final = backend.run_stack(cell, layer_spec, layer_p, x, tuple(s[rows] for s in state), lengths,
                                     **options)
        finals.append(final)
    return x, tuple(jnp.concatenate(parts) for parts in zip(*finals))


def dropout_between_layers(rate: float, key) -> Callable:
    """Inverted dropout on each layer's output but the last (PyTorch's `dropout` argument)."""
    calls = iter(range(1 << 30))  # one fresh key per layer boundary

    def apply(x):
        if rate >= 1.0:
            return jnp.zeros_like(x)
        keep = jax.random.bernoulli(jax.random.fold_in(key, next(calls)), 1.0 - rate, x.shape)
        return jnp.where(keep, x / (1.0 - rate), 0.0).astype(x.dtype)

    return apply


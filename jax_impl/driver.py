"""Layers x directions, and the one front door `run(...)` behind `lstm` / `gru` / `rnn` and the modules.

Mirrors `torch_impl/driver.py`: the same `LayerParams`, the same `run_layer` contract.
Every backend sees the same normalised problem: time-major `x` (T, B, I) in one float
dtype, canonical parameters cast to that dtype, the state as a tuple `(h0,)` or
`(h0, c0)` (each (L*D, B, .)), `lengths` as int32 (B,) or None, and the cell as its
`jax_impl.cells.JaxCell`.  The driver owns what is the same for all of them: PyTorch's
layouts (batch_first, unbatched 2-D input), default zero states, checks that name the
problem, inter-layer dropout and stacking layers.

A backend module (`jax_impl.backends.*`) provides:

- `CAPABILITIES` (`shared.capabilities.Capabilities`) and `OPTIONS`: its keyword options
  and their defaults (unknown ones raise `TypeError`);
- `unavailable_reason() -> str | None`;
- `run_direction(cell, p, x, state, lengths, *, reverse, **options)` -> `(output
  (T, B, H_out) with zeros past each length, state_n tuple)` for one layer and direction
  (`run_layer` below calls it), or `run_stack(cell, spec, params, x, state, lengths,
  **options)` -> `(output, state_n)` for a whole stack (with dropout between layers the
  driver hands it one layer at a time, as a one-layer stack);
- optionally `validate(spec, params)` to refuse parameters it cannot hold.

With lengths a direction masks each step (`cells.time_loop`): past its length a
sequence keeps its state and outputs zero, and the reverse direction, walking
t = T-1 .. 0, keeps its initial state until t = len-1 -- so it runs over each sequence's
valid part reversed, PyTorch's packed-sequence semantics.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from shared.cells import get_cell
from shared.params import ParamError, check_params
from shared.spec import RNNSpec

from . import cells
from .cells import JaxCell


class UnknownImplError(ValueError):
    """A backend name that is not one of `BACKENDS` (also `UnknownBackendError`)."""


class ImplUnavailableError(RuntimeError):
    """The backend exists but cannot run here, e.g. cuDNN without a GPU (also `BackendUnavailableError`)."""


class UnsupportedConfigError(ValueError):
    """The backend cannot compute this configuration (e.g. proj_size with Flax cells)."""


class LayerParams(NamedTuple):
    """Canonical arrays of one layer and direction; biases/projection None when absent."""

    w_ih: jax.Array  # (G*H, I)
    w_hh: jax.Array  # (G*H, H_out)
    b_ih: jax.Array | None  # (G*H,)
    b_hh: jax.Array | None  # (G*H,)
    w_hr: jax.Array | None  # (P, H), LSTM with proj_size only
    extras: Mapping[str, jax.Array] | None = None  # a catalogue cell's extra params by prefix; None for lstm/gru


def layer_params(spec: RNNSpec, params: Mapping[str, jax.Array], layer: int, direction: int) -> LayerParams:
    s = spec.suffix(layer, direction)
    extra_params = spec.cell_def.extra_params
    return LayerParams(
        w_ih=params[f"weight_ih_{s}"], w_hh=params[f"weight_hh_{s}"],
        b_ih=params.get(f"bias_ih_{s}") if spec.bias else None,
        b_hh=params.get(f"bias_hh_{s}") if spec.bias else None,
        w_hr=params.get(f"weight_hr_{s}") if spec.proj_size else None,
        extras={e.prefix: params[f"{e.prefix}_{s}"] for e in extra_params} if extra_params else None)


def run_layer(backend, cell: JaxCell, p: LayerParams, x: jax.Array, state: tuple, lengths: jax.Array | None, *,
              reverse: bool, **options):
    """One layer in one direction through `backend.run_direction`; returns (output, state_n).

    JAX backends take `reverse` themselves (`lax.scan(reverse=True)` walks t = T-1 .. 0).
    """
    return backend.run_direction(cell, p, x, state, lengths, reverse=reverse, **options)


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


# ---------------------------------------------------------------------------------
# the front door


def spec_from_params(cell: str, params: Mapping, *, num_layers: int, bidirectional: bool, batch_first: bool,
                     proj_size: int) -> RNNSpec:
    """The spec the canonical `params` describe, checked with `shared.params.check_params`."""
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a dict of canonical arrays (PyTorch state_dict names), "
                        f"got {type(params).__name__}")
    for key in ("weight_ih_l0", "weight_hh_l0"):
        if key not in params:
            raise ParamError(f"params has no {key!r} (needed to infer the sizes); got keys: "
                             f"{', '.join(map(str, params)) or 'none'}")
    w_ih, w_hh = np.shape(params["weight_ih_l0"]), np.shape(params["weight_hh_l0"])
    G = len(get_cell(cell).gates)
    if len(w_ih) != 2 or len(w_hh) != 2 or w_hh[0] % G:
        raise ParamError(f"weight_ih_l0 {w_ih} / weight_hh_l0 {w_hh} are not {cell.upper()} weights "
                         f"(expected ({G}*hidden_size, input_size) / ({G}*hidden_size, hidden_size))")
    spec = RNNSpec(cell=cell, input_size=int(w_ih[1]), hidden_size=int(w_hh[0] // G), num_layers=num_layers,
                   bias="bias_ih_l0" in params or "bias_hh_l0" in params, batch_first=batch_first,
                   bidirectional=bidirectional, proj_size=proj_size)
    check_params(spec, params)
    return spec


def _is_traced(a) -> bool:
    return isinstance(a, jax.core.Tracer)


def _as_float_array(name: str, a, dtype=None) -> jax.Array:
    a = jnp.asarray(a) if dtype is None else jnp.asarray(a, dtype=dtype)
    if not jnp.issubdtype(a.dtype, jnp.floating):
        raise TypeError(f"{name} must be a floating-point array, got dtype {a.dtype}")
    return a


def _check_state(name: str, a, expected: tuple[int, ...], dtype) -> jax.Array:
    a = _as_float_array(name, a, dtype)
    if tuple(a.shape) != expected:
        raise ValueError(f"{name} has shape {tuple(a.shape)}, expected {expected}")
    return a


def check_lengths(lengths, batch: int, T: int) -> jax.Array:
    lengths = jnp.asarray(lengths)
    if not jnp.issubdtype(lengths.dtype, jnp.integer):
        raise TypeError(f"lengths must be an integer array, got dtype {lengths.dtype}")
    if lengths.shape != (batch,):
        raise ValueError(f"lengths has shape {tuple(lengths.shape)}, expected ({batch},) (one per sequence)")
    if not _is_traced(lengths):  # values are only known outside jit; inside, they are the caller's promise
        values = np.asarray(lengths)
        bad = values[(values < 1) | (values > T)]
        if bad.size:
            raise ValueError(f"lengths must be in [1, T={T}], got {bad.tolist()}")
    return lengths.astype(jnp.int32)


def default_device() -> str:
    """The project's name ("cpu", "cuda") of JAX's default platform."""
    return {"gpu": "cuda"}.get(jax.default_backend(), jax.default_backend())


def check_options(name: str, module, options: Mapping) -> None:
    """`TypeError` naming the options backend `name` does not have."""
    unknown = sorted(set(options) - set(module.OPTIONS))
    if unknown:
        raise TypeError(f"backend {name!r} got unknown options {unknown}; its options: "
                        f"{', '.join(module.OPTIONS) or 'none'}")


def run(cell: str, params: Mapping, x, hx=None, *, lengths=None, num_layers: int = 1, bidirectional: bool = False,
        batch_first: bool = False, proj_size: int = 0, backend: str | None = None, impl: str | None = None,
        dropout: float = 0.0, dropout_key=None, between_layers: Callable | None = None, dtype=None, **options):
    """Shared body of `lstm`, `gru`, `rnn` and the NNX modules; returns `(output, h_n, c_n or None)`.

    `cell` is a catalogue cell name; `backend` (alias `impl`) a name of `BACKENDS`.
    """
    from . import backends  # the backends import this module: looked up at call time

    name = backends.check_backend_name(backends.resolve_backend(backend, impl))
    module = backends.MODULES[name]
    jcell = cells.get_jax_cell(cell)  # unknown cell or no JAX step -> an error saying what to do
    reason = backends.unsupported_cell_reason(name, cell)
    if reason is not None:
        raise UnsupportedConfigError(reason)
    check_options(name, module, options)
    reason = backends.unavailable_reason(name)
    if reason is not None:
        raise ImplUnavailableError(f"backend {name!r} is unavailable here: {reason}; available backends: "
                                   f"{', '.join(backends.available_backends())}")
    spec = spec_from_params(cell, params, num_layers=num_layers, bidirectional=bidirectional,
                            batch_first=batch_first, proj_size=proj_size)

    x = _as_float_array("x", x)
    if dtype is not None:  # the compute dtype (Flax's `dtype`); the cast is differentiable
        dtype = jnp.dtype(dtype)
        if not jnp.issubdtype(dtype, jnp.floating):
            raise TypeError(f"dtype must be a floating-point dtype, got {dtype}")
        x = x.astype(dtype)
    dtype = x.dtype
    if x.ndim not in (2, 3):
        raise ValueError(f"x must be 3-D ({'(B, T, I)' if batch_first else '(T, B, I)'}) or unbatched 2-D (T, I), "
                         f"got shape {tuple(x.shape)}")
    batched = x.ndim == 3
    if not batched:
        if lengths is not None:
            raise ValueError("lengths needs batched 3-D x; an unbatched 2-D x is one sequence of length T")
        x = x[:, None, :]
    elif batch_first:
        x = jnp.swapaxes(x, 0, 1)
    T, B, I = x.shape
    if I != spec.input_size:
        raise ValueError(f"x has feature size {I}, expected input_size={spec.input_size} (from weight_ih_l0)")
    if T < 1:
        raise ValueError("x has no time steps (T = 0)")

    shapes = spec.state_shapes(B)
    h0 = c0 = None
    if hx is not None:
        if jcell.has_cell_state:
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise TypeError(f"hx of an LSTM ({cell}) must be a pair (h0, c0), got {type(hx).__name__}")
            h0, c0 = hx
        else:
            if isinstance(hx, (tuple, list)):
                raise TypeError(f"hx of a GRU ({cell}) is one array h0, not a tuple")
            h0 = hx
        squeeze = (lambda s: (s[0], s[2])) if not batched else (lambda s: s)
        h0 = _check_state("h0", h0, squeeze(shapes["h"]), dtype)
        if c0 is not None:
            c0 = _check_state("c0", c0, squeeze(shapes["c"]), dtype)
        if not batched:
            h0 = h0[:, None, :]
            c0 = None if c0 is None else c0[:, None, :]
    if h0 is None:
        h0 = jnp.zeros(shapes["h"], dtype)
    if jcell.has_cell_state and c0 is None:
        c0 = jnp.zeros(shapes["c"], dtype)
    state = (h0, c0) if jcell.has_cell_state else (h0,)

    if lengths is not None:
        lengths = check_lengths(lengths, B, T)
    reason = backends.unsupported_reason(name, spec, lengths=lengths is not None, dtype=jnp.dtype(dtype).name,
                                         device=default_device())
    if reason is not None:
        raise UnsupportedConfigError(f"backend {name!r} cannot run this configuration: {reason}")

    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout <= 1.0:
        raise ValueError(f"dropout must be a number in [0, 1], got {dropout!r}")
    if between_layers is None and dropout > 0 and dropout_key is not None and num_layers > 1:
        between_layers = _dropout_between_layers(dropout, dropout_key)

    cast = {k: _as_float_array(k, v, dtype) for k, v in params.items()}
    if hasattr(module, "validate"):
        module.validate(spec, cast)
    if between_layers is None:
        try:
            key = tuple(sorted(options.items()))
            hash(key)
        except TypeError:  # an unhashable option value: run uncompiled
            output, state_n = _compute(name, spec, None, options, cast, x, state, lengths)
        else:
            output, state_n = _compiled(name, spec, key)(cast, x, state, lengths)
    else:
        output, state_n = _compute(name, spec, between_layers, options, cast, x, state, lengths)

    h_n, c_n = state_n[0], (state_n[1] if jcell.has_cell_state else None)
    if not batched:
        output, h_n = output[:, 0], h_n[:, 0]
        c_n = None if c_n is None else c_n[:, 0]
    elif batch_first:
        output = jnp.swapaxes(output, 0, 1)
    return output, h_n, c_n


@functools.lru_cache(maxsize=256)
def _compiled(backend: str, spec: RNNSpec, options: tuple):
    """The whole computation as one jitted function per configuration.

    Called eagerly, `lstm`/`gru` then run one compiled executable instead of dispatching
    (and compiling) every small op; inside a user's `jit` the inner jit is inlined.
    """
    return jax.jit(functools.partial(_compute, backend, spec, None, dict(options)))


def _compute(backend: str, spec: RNNSpec, between_layers, options, params, x, state, lengths):
    from . import backends

    module = backends.MODULES[backend]
    cell = cells.get_jax_cell(spec.cell)
    if hasattr(module, "run_stack"):
        if between_layers is None:
            return module.run_stack(cell, spec, params, x, state, lengths, **options)
        return _one_layer_stacks(module, cell, spec, params, x, state, lengths, between_layers, options)
    return _run_layers(module, cell, spec, params, x, state, lengths, between_layers, options)


def _run_layers(module, cell, spec, params, x, state, lengths, between_layers, options):
    D = spec.num_directions
    finals = []
    for layer in range(spec.num_layers):
        if layer > 0 and between_layers is not None:
            x = between_layers(x)
        outputs = []
        for d in range(D):
            k = layer * D + d
            out, final = run_layer(module, cell, layer_params(spec, params, layer, d), x, tuple(s[k] for s in state),
                                   lengths, reverse=d == 1, **options)
            outputs.append(out)
            finals.append(final)
        x = outputs[0] if D == 1 else jnp.concatenate(outputs, axis=-1)
    return x, tuple(jnp.stack(parts) for parts in zip(*finals))


def _one_layer_stacks(module, cell, spec, params, x, state, lengths, between_layers, options):
    """A `run_stack` backend with dropout between layers: one one-layer stack per layer."""
    D = spec.num_directions
    finals = []
    for layer in range(spec.num_layers):
        if layer > 0:
            x = between_layers(x)
        layer_spec, layer_p = one_layer(spec, params, layer, x.shape[-1])
        rows = slice(layer * D, (layer + 1) * D)
        x, final = module.run_stack(cell, layer_spec, layer_p, x, tuple(s[rows] for s in state), lengths, **options)
        finals.append(final)
    return x, tuple(jnp.concatenate(parts) for parts in zip(*finals))


def _dropout_between_layers(rate: float, key) -> Callable:
    """Inverted dropout on each layer's output but the last (PyTorch's `dropout` argument)."""
    calls = iter(range(1 << 30))  # one fresh key per layer boundary

    def apply(x):
        if rate >= 1.0:
            return jnp.zeros_like(x)
        keep = jax.random.bernoulli(jax.random.fold_in(key, next(calls)), 1.0 - rate, x.shape)
        return jnp.where(keep, x / (1.0 - rate), 0.0).astype(x.dtype)

    return apply

"""The one front door: `lstm(...)` / `gru(...)` validate, normalise layout, stack layers.

Every impl sees the same normalised problem: time-major `x` (T, B, I) in one float
dtype, canonical parameters cast to that dtype, full-size states `h0` (L*D, B, H_out)
and `c0` (L*D, B, H), and `lengths` as int32 (B,) or None.  The driver owns what is
the same for all of them: PyTorch's layouts (batch_first, unbatched 2-D input), default
zero states, checks that name the problem, inter-layer dropout and stacking layers.

An impl module (`jax_impl.naive`, `.scan`, ...) provides:

- `OPTIONS`: its keyword options and their defaults (unknown ones raise `TypeError`);
- `unavailable_reason() -> str | None` and
  `unsupported_reason(spec, *, lengths, dtype) -> str | None`;
- `run_layer(spec, dir_params, x, h0, c0, lengths, **options)` -> `(output, h_n, c_n)`
  for one layer (both directions): `dir_params` is one `LayerParams` per direction,
  `h0`/`c0` are (D, B, ...), `output` is (T, B, D*H_out) with zeros past each length;
- optionally `run_stack(spec, params, x, h0, c0, lengths, **options)` for a whole
  stack at once (used when no dropout sits between layers), and
  `validate(spec, params)` to refuse parameters the impl cannot hold.

Impls that think in single directions (`naive`, `scan`) write `run_direction` and wrap
it with `layer_from_directions`.  With lengths they mask each step (`valid_steps`):
past its length a sequence keeps its state and outputs zero, and the reverse direction,
walking t = T-1 .. 0, keeps `h0` until t = len-1 -- so it runs over each sequence's
valid part reversed, PyTorch's packed-sequence semantics.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from shared.cells import get_cell
from shared.params import ParamError, check_params
from shared.spec import RNNSpec

from . import cells as jax_cells

IMPLS = ("naive", "scan", "bptt", "flax_linen", "flax_nnx", "cudnn")
STANDARD_CELLS = ("lstm", "gru")  # the cells every impl computes; the rest need GENERIC_CELLS


class UnknownImplError(ValueError):
    """An impl name that is not one of `IMPLS`."""


class ImplUnavailableError(RuntimeError):
    """The impl exists but cannot run here (e.g. cuDNN without a GPU)."""


class UnsupportedConfigError(ValueError):
    """The impl cannot compute this configuration (e.g. proj_size with Flax cells)."""


class LayerParams(NamedTuple):
    """Canonical arrays of one layer and direction; biases/projection None when absent."""

    w_ih: jax.Array  # (G*H, I)
    w_hh: jax.Array  # (G*H, H_out)
    b_ih: jax.Array | None  # (G*H,)
    b_hh: jax.Array | None  # (G*H,)
    w_hr: jax.Array | None  # (P, H), LSTM with proj_size only
    extras: Mapping[str, jax.Array] | None = None  # a catalogue cell's extra params by prefix; None for lstm/gru


# ---------------------------------------------------------------------------------
# impl lookup


def impl_module(name: str):
    """The module of impl `name`; raises `UnknownImplError` listing the valid names."""
    if not isinstance(name, str) or name not in IMPLS:
        raise UnknownImplError(f"unknown impl {name!r}; valid impls: {', '.join(IMPLS)}")
    return importlib.import_module(f"jax_impl.{name}")


def unavailable_reason(name: str) -> str | None:
    """None when impl `name` runs on this machine, else the reason."""
    try:
        module = impl_module(name)
    except ImportError as e:  # e.g. flax missing
        return f"jax_impl.{name} cannot be imported: {e}"
    return module.unavailable_reason()


def available_impls() -> tuple[str, ...]:
    """The impls of `IMPLS` that run on this machine."""
    return tuple(name for name in IMPLS if unavailable_reason(name) is None)


# ---------------------------------------------------------------------------------
# sequence helpers shared by the impls


def valid_steps(T: int, lengths: jax.Array) -> jax.Array:
    """Boolean (T, B, 1): True where step t is inside sequence b (t < len_b)."""
    return (jnp.arange(T, dtype=lengths.dtype)[:, None] < lengths[None, :])[:, :, None]


def layer_params(spec: RNNSpec, params: Mapping[str, jax.Array], layer: int, direction: int) -> LayerParams:
    s = spec.suffix(layer, direction)
    extra_params = spec.cell_def.extra_params
    return LayerParams(
        w_ih=params[f"weight_ih_{s}"], w_hh=params[f"weight_hh_{s}"],
        b_ih=params.get(f"bias_ih_{s}") if spec.bias else None,
        b_hh=params.get(f"bias_hh_{s}") if spec.bias else None,
        w_hr=params.get(f"weight_hr_{s}") if spec.proj_size else None,
        extras={e.prefix: params[f"{e.prefix}_{s}"] for e in extra_params} if extra_params else None)


def runs_cell(module, cell: str) -> bool:
    """Whether impl `module` computes `cell`: lstm/gru everywhere, catalogue cells only in
    impls that run the JAX cell table (`GENERIC_CELLS = True`, e.g. `scan`)."""
    return cell in STANDARD_CELLS or getattr(module, "GENERIC_CELLS", False)


def generic_cells_reason(impl: str, cell: str) -> str | None:
    """None when impl `impl` runs catalogue cell `cell`, else why not."""
    if runs_cell(impl_module(impl), cell):
        return None
    generic = [n for n in IMPLS if runs_cell(impl_module(n), cell)]
    why = {"flax_linen": " (Flax's built-in OptimizedLSTMCell/LSTMCell/GRUCell have no layer norm, peepholes "
                         "or reset-before form)",
           "flax_nnx": " (Flax NNX's built-in LSTMCell/GRUCell have no layer norm, peepholes or reset-before form)",
           "cudnn": " (cuDNN's fused kernels compute only its fixed LSTM)"}.get(impl, "")
    return (f"impl {impl!r} implements only lstm and gru, not {cell!r}{why}; impls that run any catalogue "
            f"cell: {', '.join(generic) or 'none'}")


def layer_from_directions(run_direction: Callable) -> Callable:
    """Build `run_layer` from `run_direction(cell, p, x, h0, c0, lengths, reverse, **options)`.

    `run_direction` returns `(output (T, B, H_out), h_n (B, H_out), c_n (B, H) or None)`.
    """

    def run_layer(spec, dir_params, x, h0, c0, lengths, **options):
        outs, hs, cs = [], [], []
        for d, p in enumerate(dir_params):
            out, h, c = run_direction(spec.cell, p, x, h0[d], None if c0 is None else c0[d], lengths,
                                      reverse=d == 1, **options)
            outs.append(out)
            hs.append(h)
            cs.append(c)
        output = outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=-1)
        return output, jnp.stack(hs), (None if c0 is None else jnp.stack(cs))

    return run_layer


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


def run(cell: str, params: Mapping, x, hx=None, *, lengths=None, num_layers: int = 1, bidirectional: bool = False,
        batch_first: bool = False, proj_size: int = 0, impl: str = "scan", dropout: float = 0.0,
        dropout_key=None, between_layers: Callable | None = None, **options):
    """Shared body of `lstm`, `gru` and `rnn`; returns `(output, h_n, c_n or None)`."""
    module = impl_module(impl)
    family = get_cell(cell).family  # unknown cell -> error naming the catalogue's cells
    if cell not in STANDARD_CELLS:
        jax_cells.get_jax_cell(cell)  # no JAX step -> error saying how to register one
        reason = generic_cells_reason(impl, cell)
        if reason is not None:
            raise UnsupportedConfigError(reason)
    unknown = sorted(set(options) - set(module.OPTIONS))
    if unknown:
        raise TypeError(f"impl {impl!r} got unknown options {unknown}; its options: "
                        f"{', '.join(module.OPTIONS) or 'none'}")
    reason = module.unavailable_reason()
    if reason is not None:
        raise ImplUnavailableError(f"impl {impl!r} is unavailable here: {reason}; available impls: "
                                   f"{', '.join(available_impls())}")
    spec = spec_from_params(cell, params, num_layers=num_layers, bidirectional=bidirectional,
                            batch_first=batch_first, proj_size=proj_size)

    x = _as_float_array("x", x)
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
        if family == "lstm":
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
    if family == "lstm" and c0 is None:
        c0 = jnp.zeros(shapes["c"], dtype)

    if lengths is not None:
        lengths = check_lengths(lengths, B, T)
    reason = module.unsupported_reason(spec, lengths=lengths is not None, dtype=jnp.dtype(dtype).name)
    if reason is not None:
        raise UnsupportedConfigError(f"impl {impl!r} cannot run this configuration: {reason}")

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
            output, h_n, c_n = _compute(impl, spec, None, options, cast, x, h0, c0, lengths)
        else:
            output, h_n, c_n = _compiled(impl, spec, key)(cast, x, h0, c0, lengths)
    else:
        output, h_n, c_n = _compute(impl, spec, between_layers, options, cast, x, h0, c0, lengths)

    if not batched:
        output, h_n = output[:, 0], h_n[:, 0]
        c_n = None if c_n is None else c_n[:, 0]
    elif batch_first:
        output = jnp.swapaxes(output, 0, 1)
    return output, h_n, c_n


@functools.lru_cache(maxsize=256)
def _compiled(impl: str, spec: RNNSpec, options: tuple):
    """The whole computation as one jitted function per configuration.

    Called eagerly, `lstm`/`gru` then run one compiled executable instead of dispatching
    (and compiling) every small op; inside a user's `jit` the inner jit is inlined.
    """
    return jax.jit(functools.partial(_compute, impl, spec, None, dict(options)))


def _compute(impl, spec, between_layers, options, params, x, h0, c0, lengths):
    module = impl_module(impl)
    if between_layers is None and hasattr(module, "run_stack"):
        return module.run_stack(spec, params, x, h0, c0, lengths, **options)
    return _run_layers(module, spec, params, x, h0, c0, lengths, between_layers, options)


def _run_layers(module, spec, params, x, h0, c0, lengths, between_layers, options):
    D = spec.num_directions
    hs, cs = [], []
    for layer in range(spec.num_layers):
        if layer > 0 and between_layers is not None:
            x = between_layers(x)
        rows = slice(layer * D, (layer + 1) * D)
        dir_params = [layer_params(spec, params, layer, d) for d in range(D)]
        x, h, c = module.run_layer(spec, dir_params, x, h0[rows], None if c0 is None else c0[rows], lengths,
                                   **options)
        hs.append(h)
        cs.append(c)
    h_n = jnp.concatenate(hs)
    c_n = None if c0 is None else jnp.concatenate(cs)
    return x, h_n, c_n


def _dropout_between_layers(rate: float, key) -> Callable:
    """Inverted dropout on each layer's output but the last (PyTorch's `dropout` argument)."""
    calls = iter(range(1 << 30))  # one fresh key per layer boundary

    def apply(x):
        if rate >= 1.0:
            return jnp.zeros_like(x)
        keep = jax.random.bernoulli(jax.random.fold_in(key, next(calls)), 1.0 - rate, x.shape)
        return jnp.where(keep, x / (1.0 - rate), 0.0).astype(x.dtype)

    return apply

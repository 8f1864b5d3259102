"""The front door of rnnbench.jax: `lstm`, `gru` and `rnn` (any catalogue cell), pure and `jit`-able.

    output, (h_n, c_n) = lstm(params, x, (h0, c0), lengths=None, num_layers=1, bidirectional=False,
                              batch_first=False, proj_size=0, backend="scan", unroll=1)
    output, h_n = gru(params, x, h0, ...)

`params` is the canonical dict (PyTorch `state_dict` names and shapes, NumPy or JAX
arrays); differentiable in `x`, `hx` and `params`.  `backend=` picks the rung
(`rnnbench.jax.BACKENDS`).

`run`, behind the three functions and the NNX modules (`rnnbench.jax.modules`), is the one
front door, as `rnnbench.torch`'s modules are torch's: it checks and normalises the call --
PyTorch's layouts (batch_first, unbatched 2-D input), the compute dtype, default zero
states, lengths -- asks the backend's capability check once (`backends.refusal`: cell,
options, dtype, device), and runs the stacker `rnnbench.jax.stack.run` as one `jax.jit` per
configuration.  Every rung sees the same normalised problem: time-major `x` (T, B, I) in
one float dtype, canonical parameters cast to it, the state as a tuple `(h0,)` or
`(h0, c0)`, `lengths` int32 (B,) or None, the cell as its `rnnbench.jax.cells.JaxCell`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from rnnbench.core.capabilities import BackendUnavailableError, UnsupportedConfigError
from rnnbench.core.catalogue import get_cell
from rnnbench.core.params import ParamError, check_params
from rnnbench.core.spec import RNNSpec

from . import backends, cells, stack as driver

__all__ = ["gru", "lstm", "rnn", "run", "check_lengths", "check_options", "default_device", "spec_from_params"]


def lstm(params, x, hx=None, *, lengths=None, num_layers: int = 1, bidirectional: bool = False,
         batch_first: bool = False, proj_size: int = 0, backend: str = "scan",
         dropout: float = 0.0, dropout_key=None, dtype=None, **backend_options):
    """Multi-layer LSTM with `torch.nn.LSTM`'s parameters and semantics.

    Returns `(output, (h_n, c_n))`: output (T, B, D*H_out) (batch-first if asked), zero
    past each length; h_n (L*D, B, H_out) and c_n (L*D, B, H) at each sequence's last
    valid step, layer-major then direction.  `hx` is `(h0, c0)` or None (zeros).
    `dropout` with a `dropout_key` applies inverted dropout to every layer's output but
    the last (PyTorch's training-mode dropout); without a key nothing is dropped.
    `backend` (default "scan") picks the rung; `backend_options` go to it (e.g. `unroll`,
    `remat` for `scan`).  `dtype` is the dtype of the computation, as Flax's `dtype=`:
    params, x and the state are cast to it inside (differentiably, so gradients come back
    in the arrays' own dtype: float32 parameters with `dtype=jnp.bfloat16` is mixed
    precision); None computes in x's dtype.
    """
    output, h_n, c_n = run("lstm", params, x, hx, lengths=lengths, num_layers=num_layers,
                           bidirectional=bidirectional, batch_first=batch_first, proj_size=proj_size,
                           backend=backend, dropout=dropout, dropout_key=dropout_key,
                           dtype=dtype, **backend_options)
    return output, (h_n, c_n)


def gru(params, x, hx=None, *, lengths=None, num_layers: int = 1, bidirectional: bool = False,
        batch_first: bool = False, backend: str = "scan", dropout: float = 0.0,
        dropout_key=None, dtype=None, **backend_options):
    """Multi-layer GRU with `torch.nn.GRU`'s parameters and semantics; returns `(output, h_n)`.

    Same arguments as `lstm` (no `proj_size`); `hx` is `h0` or None.
    """
    output, h_n, _ = run("gru", params, x, hx, lengths=lengths, num_layers=num_layers, bidirectional=bidirectional,
                         batch_first=batch_first, backend=backend, dropout=dropout,
                         dropout_key=dropout_key, dtype=dtype, **backend_options)
    return output, h_n


def rnn(params, x, hx=None, *, cell: str, lengths=None, num_layers: int = 1, bidirectional: bool = False,
        batch_first: bool = False, proj_size: int = 0, backend: str = "scan",
        dropout: float = 0.0, dropout_key=None, dtype=None, **backend_options):
    """Any catalogue cell (`rnnbench.core.catalogue`) with the layer/direction/lengths machinery of `lstm`.

    `params` holds the canonical names plus the cell's extras (`<prefix>_l{k}[_reverse]`,
    `RNNSpec(cell, ...).param_shapes()`).  An lstm-family cell (state h, c) takes
    `hx = (h0, c0)` and returns `(output, (h_n, c_n))`; a gru-family cell takes `hx = h0`
    and returns `(output, h_n)`.  The `scan` backend runs every cell with a JAX step; the
    others, the cells their `CAPABILITIES` name.
    """
    has_cell_state = get_cell(cell).has_cell_state  # an unknown cell raises naming the catalogue
    output, h_n, c_n = run(cell, params, x, hx, lengths=lengths, num_layers=num_layers, bidirectional=bidirectional,
                           batch_first=batch_first, proj_size=proj_size, backend=backend,
                           dropout=dropout, dropout_key=dropout_key, dtype=dtype, **backend_options)
    return (output, (h_n, c_n)) if has_cell_state else (output, h_n)


# ---- the checks ---------------------------------------------------------------------------------

def spec_from_params(cell: str, params: Mapping, *, num_layers: int, bidirectional: bool, batch_first: bool,
                     proj_size: int) -> RNNSpec:
    """The spec the canonical `params` describe, checked with `rnnbench.core.params.check_params`."""
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


def check_backend(name: str, spec: RNNSpec, *, lengths: bool = False, dtype: str | None = None) -> None:
    """The front door's one ask of the capability check (on JAX's default device): raises
    `BackendUnavailableError` or `UnsupportedConfigError` with the reason."""
    reason = backends.unavailable_reason(name)
    if reason is not None:
        raise BackendUnavailableError(f"backend {name!r} is unavailable here: {reason}; available backends: "
                                      f"{', '.join(backends.available_backends())}")
    reason = backends.unsupported_reason(name, spec, lengths=lengths, dtype=dtype, device=default_device())
    if reason is not None:
        raise UnsupportedConfigError(f"backend {name!r} cannot run this configuration: {reason}")


# ---- the one front door ---------------------------------------------------------------------------

def run(cell: str, params: Mapping, x, hx=None, *, lengths=None, num_layers: int = 1, bidirectional: bool = False,
        batch_first: bool = False, proj_size: int = 0, backend: str | None = None, dropout: float = 0.0,
        dropout_key=None, between_layers: Callable | None = None, dtype=None, **options):
    """Shared body of `lstm`, `gru`, `rnn` and the NNX modules; returns `(output, h_n, c_n or None)`.

    `cell` is a catalogue cell name; `backend` a name of `BACKENDS` (default "scan").
    """
    name = backends.check_backend_name("scan" if backend is None else backend)
    module = backends.MODULES[name]
    jcell = cells.get_jax_cell(cell)  # unknown cell or no JAX step -> an error saying what to do
    check_options(name, module, options)
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

    state = _initial_state(jcell, spec, hx, B, batched, dtype)
    if lengths is not None:
        lengths = check_lengths(lengths, B, T)
    check_backend(name, spec, lengths=lengths is not None, dtype=jnp.dtype(dtype).name)

    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout <= 1.0:
        raise ValueError(f"dropout must be a number in [0, 1], got {dropout!r}")
    if between_layers is None and dropout > 0 and dropout_key is not None and num_layers > 1:
        between_layers = driver.dropout_between_layers(dropout, dropout_key)

    cast = {k: _as_float_array(k, v, dtype) for k, v in params.items()}
    if hasattr(module, "validate"):
        module.validate(spec, cast)
    if between_layers is None:
        try:
            key = tuple(sorted(options.items()))
            hash(key)
        except TypeError:  # an unhashable option value: run uncompiled
            output, state_n = driver.run(module, jcell, spec, cast, x, state, lengths, **options)
        else:
            output, state_n = _compiled(name, spec, key)(cast, x, state, lengths)
    else:
        output, state_n = driver.run(module, jcell, spec, cast, x, state, lengths, between_layers=between_layers,
                                     **options)

    h_n, c_n = state_n[0], (state_n[1] if jcell.has_cell_state else None)
    if not batched:
        output, h_n = output[:, 0], h_n[:, 0]
        c_n = None if c_n is None else c_n[:, 0]
    elif batch_first:
        output = jnp.swapaxes(output, 0, 1)
    return output, h_n, c_n


def _initial_state(jcell, spec: RNNSpec, hx, B: int, batched: bool, dtype) -> tuple:
    """`hx` checked and made (h0,) or (h0, c0), each (L*D, B, .); zeros where not given."""
    shapes = spec.state_shapes(B)
    h0 = c0 = None
    if hx is not None:
        if jcell.has_cell_state:
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise TypeError(f"hx of an LSTM ({spec.cell}) must be a pair (h0, c0), got {type(hx).__name__}")
            h0, c0 = hx
        else:
            if isinstance(hx, (tuple, list)):
                raise TypeError(f"hx of a GRU ({spec.cell}) is one array h0, not a tuple")
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
    return (h0, c0) if jcell.has_cell_state else (h0,)


@functools.lru_cache(maxsize=256)
def _compiled(backend: str, spec: RNNSpec, options: tuple):
    """The whole computation as one jitted function per configuration.

    Called eagerly, `lstm`/`gru` then run one compiled executable instead of dispatching
    (and compiling) every small op; inside a user's `jit` the inner jit is inlined.
    """
    module, cell = backends.MODULES[backend], cells.get_jax_cell(spec.cell)
    return jax.jit(lambda params, x, state, lengths: driver.run(module, cell, spec, params, x, state, lengths,
                                                                **dict(options)))

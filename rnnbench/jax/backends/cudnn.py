"""`cudnn`: cuDNN's LSTM through `jax.experimental.rnn.lstm` (CUDA only, float32, LSTM only).

`jax.experimental.rnn` takes PyTorch's canonical weights flattened into one vector, in
cuDNN's order: for each pseudo-layer (layer 0 forward, layer 0 reverse, layer 1 forward,
...) `W_ih` then `W_hh`, row-major; then, in the same pseudo-layer order, `b_ih` then
`b_hh` (see `flat_weights`; cuDNN's double-bias mode, so `bias=False` passes zeros).
Gate order is PyTorch's `i, f, g, o`.  Input is batch-major (B, T, I); states are
(L*D, B, H) as PyTorch's.  With `seq_lengths` the kernel runs cuDNN's padded-IO mode
(`CUDNN_RNN_PADDED_IO_ENABLED`, padding fill 0): each sequence stops at its length,
`h_n`/`c_n` are at its last valid step and the reverse direction runs over its valid
part reversed -- PyTorch's packed-sequence semantics; outputs past a length are zeroed
here too, so the result never depends on the padding fill.  Without lengths every
sequence gets the full T (the kernel needs the array).  One kernel call runs the whole
stack (`run_stack`).

Not supported (clear errors, declared in `CAPABILITIES`): GRU, `proj_size` (the kernel
fixes proj_size = hidden_size), float64 (the kernel is float32 only), the CPU.
`allow_tf32` (default False) lets cuDNN use TF32 tensor-core math; False asks for full
float32 (`Precision.HIGHEST`), which parity needs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rnnbench.core.capabilities import Capabilities
from rnnbench.core.spec import RNNSpec

from .. import cells, stack as driver
from . import scan
from ._common import zero_past_lengths

OPTIONS = {"allow_tf32": False}

CAPABILITIES = Capabilities(
    cells=("lstm",), dtypes=("float32",), devices=("cuda",), proj_size=False,
    why_not={"cell": "jax.experimental.rnn implements only the LSTM (no GRU)",
             "dtype": "jax.experimental.rnn's cuDNN kernel is float32 only",
             "device": "jax.experimental.rnn has no CPU kernel",
             "proj_size": "jax.experimental.rnn has no proj_size (its cuDNN descriptor fixes proj_size = "
                          "hidden_size)"})


def unavailable_reason(device: str | None = None) -> str | None:
    try:
        from jax.experimental import rnn
    except ImportError as e:
        return f"jax.experimental.rnn cannot be imported ({e})"
    if getattr(rnn, "gpu_rnn", None) is None:
        return "this jaxlib has no GPU RNN kernels (jax.experimental.rnn needs a CUDA build of jaxlib)"
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    if not gpus:
        return (f"jax.experimental.rnn.lstm runs cuDNN kernels and needs a CUDA GPU; JAX sees only "
                f"{', '.join(sorted({d.platform for d in jax.devices()}))}")
    return self_check(gpus[0])


_CHECKED: dict = {}
SELF_CHECK_ATOL = 1e-4  # far above float32 rounding at this size, far below the disagreement docs/gpu.md records


def self_check(device) -> str | None:
    """Why this jaxlib's cuDNN LSTM does not compute PyTorch's LSTM on `device` (None when it does).

    A 2-layer bidirectional LSTM with initial state and unsorted lengths, outputs and every
    gradient under `jit` + `vjp`, against the `scan` rung on the same device in IEEE
    float32.  On the project's first GPU run `jax.experimental.rnn.lstm` under jit + vjp
    disagreed with the reference on every output and gradient while its eager forward agreed
    (docs/gpu.md), so the rung checks before it runs: an answer that is silently wrong is
    worse than none.  Once per device and process.
    """
    if device in _CHECKED:
        return _CHECKED[device]
    import numpy as np

    from rnnbench.core.params import init_params

    from ..precision import ieee_float32

    spec = RNNSpec("lstm", 3, 4, num_layers=2, bidirectional=True)
    rng = np.random.default_rng(0)
    T, B = 5, 3
    put = lambda a: jax.device_put(jnp.asarray(a, jnp.float32), device)  # noqa: E731
    params = {k: put(v) for k, v in init_params(spec, rng).items()}
    x, h0, c0 = (put(rng.standard_normal(shape)) for shape in ((T, B, 3), (4, B, 4), (4, B, 4)))
    lengths = jax.device_put(jnp.asarray([T, 2, 4], jnp.int32), device)

    cotangents = tuple(put(rng.standard_normal(shape)) for shape in ((T, B, 8), (4, B, 4), (4, B, 4)))

    def on_cudnn(params, x, h0, c0):  # the kernel itself (the front door would ask for this check again)
        return _lstm(spec, flat_weights(spec, params), x, h0, c0, lengths, False)

    def on_scan(params, x, h0, c0):
        out, (h_n, c_n) = driver.run(scan, cells.get_jax_cell(spec.cell), spec, params, x, (h0, c0), lengths)
        return out, h_n, c_n

    def outputs_and_gradients(f):
        def both(*args):
            out, vjp = jax.vjp(f, *args)
            return out, vjp(cotangents)
        return jax.jit(both)(params, x, h0, c0)

    try:
        with ieee_float32():
            got, want = (jax.tree_util.tree_leaves(outputs_and_gradients(f)) for f in (on_cudnn, on_scan))
        worst = max(float(jnp.max(jnp.abs(g - w))) for g, w in zip(got, want))
        reason = None if worst <= SELF_CHECK_ATOL else (
            f"jax.experimental.rnn.lstm (jax {jax.__version__}) failed jax.cudnn's self-check on {device}: "
            f"outputs and gradients differ from the scan rung by up to {worst:.3g} (bound {SELF_CHECK_ATOL:g})")
    except Exception as e:  # a kernel that cannot run is unavailable, with its reason
        reason = f"jax.cudnn's self-check could not run on {device}: {type(e).__name__}: {str(e)[:300]}"
    _CHECKED[device] = reason
    return reason


def flat_weights(spec: RNNSpec, params) -> jax.Array:
    """The canonical params as `jax.experimental.rnn`'s flat weight vector (cuDNN layout)."""
    GH = spec.num_gates * spec.hidden_size
    matrices, biases = [], []
    for layer, direction in spec.layers_and_directions():
        s = spec.suffix(layer, direction)
        matrices += [params[f"weight_ih_{s}"].ravel(), params[f"weight_hh_{s}"].ravel()]
        if spec.bias:
            biases += [params[f"bias_ih_{s}"], params[f"bias_hh_{s}"]]
        else:
            zeros = jnp.zeros((GH,), params[f"weight_ih_{s}"].dtype)
            biases += [zeros, zeros]
    return jnp.concatenate(matrices + biases)


def _lstm(spec: RNNSpec, w, x, h0, c0, lengths, allow_tf32: bool):
    from jax import lax
    from jax.experimental import rnn

    if not isinstance(allow_tf32, bool):
        raise ValueError(f"allow_tf32 must be a bool, got {allow_tf32!r}")
    T, B, _ = x.shape
    seq_lengths = jnp.full((B,), T, jnp.int32) if lengths is None else lengths.astype(jnp.int32)
    precision = None if allow_tf32 else lax.Precision.HIGHEST
    y, h_n, c_n = rnn.lstm(jnp.swapaxes(x, 0, 1), h0, c0, w, seq_lengths, spec.input_size, spec.hidden_size,
                           spec.num_layers, 0.0, spec.bidirectional, precision)
    return zero_past_lengths(jnp.swapaxes(y, 0, 1), lengths), h_n, c_n


def run_stack(cell: cells.JaxCell, spec: RNNSpec, params, x, state: tuple, lengths, *, allow_tf32: bool = False):
    """The whole stack in one cuDNN call; see `rnnbench.jax.stack`."""
    h0, c0 = state
    y, h_n, c_n = _lstm(spec, flat_weights(spec, params), x, h0, c0, lengths, allow_tf32)
    return y, (h_n, c_n)

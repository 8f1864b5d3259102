"""`fused`: the recurrence in one C++ kernel (`rnnbench.kernels`), an XLA FFI custom call.

The same compiled library as `torch.fused` (its XLA FFI handlers, registered for the CPU with
`jax.ffi.register_ffi_target`), wrapped in `jax.custom_vjp` with the hand-written backward kernel:
the time loop runs in C++, per step one GEMM and one pass over the gates.  Around the custom call,
as in `bptt`, XLA runs the GEMMs over all steps: the input projection forward, and `dx`, `dW_ih`,
`dW_hh` and the biases' gradients backward, one each.  `jit`-able; float32, and float64 with
`jax_enable_x64`, on the CPU.  The reverse direction runs forward over each sequence's valid part
reversed (a gather of the input and of the output back), as torch's stack does.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from rnnbench import kernels
from rnnbench.core.capabilities import Capabilities
from rnnbench.core.params import LayerParams

from .. import cells as jax_cells

OPTIONS: dict = {}
TARGETS = ("RnnbenchLstmForward", "RnnbenchLstmBackward", "RnnbenchGruForward", "RnnbenchGruBackward")


@functools.lru_cache(maxsize=1)
def _registered() -> None:
    lib = kernels.library()
    for name in TARGETS:
        jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(lib, name)), platform="cpu")


def _call(target: str, shapes, *args):
    """The custom call `target`; its outputs have `shapes`, in the first argument's dtype (under
    `vmap`, one call per element: the kernel has no batch dimension of its own)."""
    _registered()
    out = [jax.ShapeDtypeStruct(s, args[0].dtype) for s in shapes]
    return jax.ffi.ffi_call(target, out, vmap_method="sequential")(*args)


def _weight_grad(dgates, h0, out):
    """dW_hh = sum_t dG_t^T h_{t-1}: one GEMM over all T*B rows (a padded step's dG is zero)."""
    h_prev = jnp.concatenate([h0[None], out[:-1]])
    return dgates.reshape(-1, dgates.shape[-1]).T @ h_prev.reshape(-1, h_prev.shape[-1])


# ---- LSTM --------------------------------------------------------------------------------------

@jax.custom_vjp
def lstm_recurrence(xg, w_hh, h0, c0, lengths):
    """The LSTM over xg (T, B, 4H) = x W_ih^T + b_ih + b_hh: (out, h_n, c_n)."""
    return _lstm_fwd(xg, w_hh, h0, c0, lengths)[0]


def _lstm_fwd(xg, w_hh, h0, c0, lengths):
    T, B, G = xg.shape
    H = G // 4
    out, cs, acts, h_n, c_n = _call("RnnbenchLstmForward", [(T, B, H), (T, B, H), (T, B, G),
                                                            (B, H), (B, H)], xg, w_hh, h0, c0, lengths)
    return (out, h_n, c_n), (w_hh, h0, c0, lengths, out, cs, acts)


def _lstm_bwd(res, cot):
    w_hh, h0, c0, lengths, out, cs, acts = res
    dout, dh_n, dc_n = cot
    T, B, G = acts.shape
    dgates, dh0, dc0 = _call("RnnbenchLstmBackward", [(T, B, G), (B, G // 4), (B, G // 4)],
                             w_hh, c0, lengths, acts, cs, dout, dh_n, dc_n)
    return dgates, _weight_grad(dgates, h0, out), dh0, dc0, None


lstm_recurrence.defvjp(_lstm_fwd, _lstm_bwd)


# ---- GRU ---------------------------------------------------------------------------------------

@jax.custom_vjp
def gru_recurrence(xg, w_hh, b_hh, h0, lengths):
    """The GRU over xg (T, B, 3H) = x W_ih^T + b_ih: (out, h_n)."""
    return _gru_fwd(xg, w_hh, b_hh, h0, lengths)[0]


def _gru_fwd(xg, w_hh, b_hh, h0, lengths):
    T, B, G = xg.shape
    H = G // 3
    out, acts, ghn, h_n = _call("RnnbenchGruForward", [(T, B, H), (T, B, G), (T, B, H),
                                                       (B, H)], xg, w_hh, b_hh, h0, lengths)
    return (out, h_n), (w_hh, h0, lengths, out, acts, ghn)


def _gru_bwd(res, cot):
    w_hh, h0, lengths, out, acts, ghn = res
    dout, dh_n = cot
    T, B, G = acts.shape
    dgates_i, dgates_h, dh0 = _call("RnnbenchGruBackward", [(T, B, G), (T, B, G), (B, G // 3)],
                                    w_hh, h0, lengths, acts, ghn, out, dout, dh_n)
    return dgates_i, _weight_grad(dgates_h, h0, out), dgates_h.sum((0, 1)), dh0, None


gru_recurrence.defvjp(_gru_fwd, _gru_bwd)


# ---- the rung ----------------------------------------------------------------------------------

def _projection(x, w_ih, b):
    """x W_ih^T + b for all steps: one GEMM over T*B rows."""
    xg = x @ w_ih.T
    return xg if b is None else xg + b


def _lstm(p: LayerParams, x, state, lengths):
    h0, c0 = state
    bias = None if p.b_ih is None else p.b_ih + p.b_hh
    out, h_n, c_n = lstm_recurrence(_projection(x, p.w_ih, bias), p.w_hh, h0, c0, lengths)
    return out, (h_n, c_n)


def _gru(p: LayerParams, x, state, lengths):
    (h0,) = state
    b_hh = p.b_hh if p.b_hh is not None else jnp.zeros(p.w_hh.shape[0], x.dtype)
    out, h_n = gru_recurrence(_projection(x, p.w_ih, p.b_ih), p.w_hh, b_hh, h0, lengths)
    return out, (h_n,)


DIRECTIONS = {"lstm": _lstm, "gru": _gru}
CAPABILITIES = Capabilities(cells=tuple(DIRECTIONS), **kernels.DECLARATION)


def unavailable_reason(device: str | None) -> str | None:
    """Why the kernel cannot be built or loaded here (no compiler, no BLAS, no XLA handlers), or None."""
    reason = kernels.unavailable_reason()
    if reason is None and not kernels.has_xla_handlers():
        return "the fused kernels were built without jaxlib's XLA FFI headers (jax.ffi.include_dir())"
    return reason


def _reverse_index(lengths, steps: int):
    """(T, B): step t of sequence b reversed within its valid part (t < len: len-1-t; else t)."""
    t = jnp.arange(steps)[:, None]
    return jnp.where(t < lengths[None, :], lengths[None, :] - 1 - t, t)


def run_direction(cell: jax_cells.JaxCell, p: LayerParams, x, state: tuple, lengths, *, reverse: bool):
    """One direction over time-major x (T, B, I); see `rnnbench.jax.stack`."""
    if cell.name not in DIRECTIONS:
        raise ValueError(f"jax.fused runs {', '.join(DIRECTIONS)} only, not {cell.name!r}")
    if p.w_hr is not None:
        raise ValueError("jax.fused does not support proj_size")
    steps, batch = x.shape[:2]
    full = jnp.full((batch,), steps, jnp.int32) if lengths is None else lengths
    if not reverse:
        return DIRECTIONS[cell.name](p, x, state, full)
    index = _reverse_index(full, steps)
    gather = lambda a: jnp.take_along_axis(a, index[:, :, None], axis=0)  # noqa: E731  (an involution)
    out, state_n = DIRECTIONS[cell.name](p, gather(x), state, full)
    return gather(out), state_n

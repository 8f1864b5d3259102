"""`fused`: the recurrence in one C++ kernel (`rnnbench.kernels`), a `torch.library` custom op.

What it changes from `bptt`: the time loop runs in C++, not Python, so a step costs one GEMM
(`h @ W_hh^T` added onto the step's input projection) and ONE pass over the (B, 4H) gates for
the nonlinearities and the state update, with no dispatch per step; the backward is the same
kind of loop (one pass for the gate gradients, one GEMM for `dh`).  Around the kernel, as in
`bptt`, the framework runs the GEMMs over all steps: the input projection forward, and
`dx`, `dW_ih`, `dW_hh` and the biases' gradients backward, one GEMM or reduction each.

The ops (`rnnbench::fused_lstm`, `rnnbench::fused_gru`) carry an autograd formula
(`torch.library.register_autograd`) and a fake kernel, so `torch.compile` traces through them
as single nodes.  They call the same compiled library as `jax.fused` (its C entry points, through
ctypes); the difference between the two rungs is what each framework costs around one kernel.
float32 and float64 on the CPU.  Under create_graph=True (double backward) or batched
grad_outputs the backward is the same recurrence recorded by autograd (`recorded_recurrence`), as in
`bptt`; under torch.func transforms and for an empty batch the `eager` rung runs instead.
"""

from __future__ import annotations

import ctypes

import torch
from torch import Tensor

from rnnbench import kernels
from rnnbench.core.capabilities import Capabilities

from . import eager
from ._common import (differentiable_grads, gru_recurrent_step, input_projection, kernel_backward_unusable,
                      lstm_recurrent_step, recorded_recurrence, recurrent_weight_grad, under_func_transform)

_DTYPES = {torch.float32: "f32", torch.float64: "f64"}


def _ptr(t: Tensor | None):
    return ctypes.c_void_p(None if t is None else t.data_ptr())


def _call(name: str, dtype: torch.dtype, *args) -> None:
    fn = getattr(kernels.library(), f"rnnbench_{name}_{_DTYPES[dtype]}")
    fn(*(ctypes.c_int64(a) if isinstance(a, int) else _ptr(a) for a in args))


def _lengths(lengths: Tensor | None) -> Tensor | None:
    return None if lengths is None else lengths.to(dtype=torch.int64).contiguous()


# ---- LSTM --------------------------------------------------------------------------------------

@torch.library.custom_op("rnnbench::fused_lstm", mutates_args=(), device_types="cpu")
def fused_lstm(xg: Tensor, w_hh: Tensor, h0: Tensor, c0: Tensor, lengths: Tensor | None
               ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The LSTM recurrence over xg (T, B, 4H) = x W_ih^T + b_ih + b_hh: (out, cs, acts, h_n, c_n)."""
    T, B, G = xg.shape
    xg, w_hh, h0, c0 = (t.contiguous() for t in (xg, w_hh, h0, c0))
    out, cs = xg.new_empty(T, B, G // 4), xg.new_empty(T, B, G // 4)
    acts, h_n, c_n = xg.new_empty(T, B, G), xg.new_empty(B, G // 4), xg.new_empty(B, G // 4)
    _call("lstm_forward", xg.dtype, T, B, G // 4, xg, w_hh, h0, c0, _lengths(lengths), out, cs, acts, h_n, c_n)
    return out, cs, acts, h_n, c_n


@fused_lstm.register_fake
def _(xg, w_hh, h0, c0, lengths):
    T, B, G = xg.shape
    return (xg.new_empty(T, B, G // 4), xg.new_empty(T, B, G // 4), xg.new_empty(T, B, G), xg.new_empty(B, G // 4),
            xg.new_empty(B, G // 4))


@torch.library.custom_op("rnnbench::fused_lstm_backward", mutates_args=(), device_types="cpu")
def fused_lstm_backward(w_hh: Tensor, c0: Tensor, lengths: Tensor | None, acts: Tensor, cs: Tensor, dout: Tensor,
                        dh_n: Tensor, dc_n: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(dgates (T, B, 4H) before the nonlinearities, dh0, dc0)."""
    T, B, G = acts.shape
    args = [t.contiguous() for t in (w_hh, c0, acts, cs, dout, dh_n, dc_n)]
    dgates, dh0, dc0 = acts.new_empty(T, B, G), acts.new_empty(B, G // 4), acts.new_empty(B, G // 4)
    _call("lstm_backward", acts.dtype, T, B, G // 4, args[0], args[1], _lengths(lengths), *args[2:], dgates, dh0, dc0)
    return dgates, dh0, dc0


@fused_lstm_backward.register_fake
def _(w_hh, c0, lengths, acts, cs, dout, dh_n, dc_n):
    T, B, G = acts.shape
    return acts.new_empty(T, B, G), acts.new_empty(B, G // 4), acts.new_empty(B, G // 4)


def _lstm_setup(ctx, inputs, output):
    xg, w_hh, h0, c0, lengths = inputs
    out, cs, acts, _, _ = output
    ctx.save_for_backward(xg, w_hh, h0, c0, lengths, out, cs, acts)


def _lstm_backward(ctx, dout, dcs, dacts, dh_n, dc_n):
    xg, w_hh, h0, c0, lengths, out, cs, acts = ctx.saved_tensors
    if kernel_backward_unusable((dout, dh_n, dc_n)):
        def recompute(xg, w_hh, h0, c0):
            return recorded_recurrence(lstm_recurrent_step(w_hh), xg, (h0, c0), lengths)
        return (*differentiable_grads(recompute, (xg, w_hh, h0, c0), ctx.needs_input_grad[:4], (dout, dh_n, dc_n)),
                None)
    # torch.library materialises an unused output's gradient as zeros: never None here
    dgates, dh0, dc0 = fused_lstm_backward(w_hh, c0, lengths, acts, cs, dout, dh_n, dc_n)
    return dgates, recurrent_weight_grad(dgates, h0, out), dh0, dc0, None


fused_lstm.register_autograd(_lstm_backward, setup_context=_lstm_setup)


# ---- GRU ---------------------------------------------------------------------------------------

@torch.library.custom_op("rnnbench::fused_gru", mutates_args=(), device_types="cpu")
def fused_gru(xg: Tensor, w_hh: Tensor, b_hh: Tensor, h0: Tensor, lengths: Tensor | None
              ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The GRU recurrence over xg (T, B, 3H) = x W_ih^T + b_ih: (out, acts, ghn, h_n)."""
    T, B, G = xg.shape
    torch._check(b_hh.shape == (G,), lambda: f"fused_gru: b_hh must have shape ({G},), got {tuple(b_hh.shape)}")
    xg, w_hh, b_hh, h0 = (t.contiguous() for t in (xg, w_hh, b_hh, h0))
    out, acts, ghn, h_n = xg.new_empty(T, B, G // 3), xg.new_empty(T, B, G), xg.new_empty(T, B, G // 3), \
        xg.new_empty(B, G // 3)
    _call("gru_forward", xg.dtype, T, B, G // 3, xg, w_hh, b_hh, h0, _lengths(lengths), out, acts, ghn, h_n)
    return out, acts, ghn, h_n


@fused_gru.register_fake
def _(xg, w_hh, b_hh, h0, lengths):
    T, B, G = xg.shape
    return xg.new_empty(T, B, G // 3), xg.new_empty(T, B, G), xg.new_empty(T, B, G // 3), xg.new_empty(B, G // 3)


@torch.library.custom_op("rnnbench::fused_gru_backward", mutates_args=(), device_types="cpu")
def fused_gru_backward(w_hh: Tensor, h0: Tensor, lengths: Tensor | None, acts: Tensor, ghn: Tensor, out: Tensor,
                       dout: Tensor, dh_n: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(dgates_i, dgates_h (T, B, 3H): the gradients of x W_ih^T + b_ih and of h W_hh^T + b_hh, dh0)."""
    T, B, G = acts.shape
    args = [t.contiguous() for t in (w_hh, h0, acts, ghn, out, dout, dh_n)]
    dgates_i, dgates_h, dh0 = acts.new_empty(T, B, G), acts.new_empty(T, B, G), acts.new_empty(B, G // 3)
    _call("gru_backward", acts.dtype, T, B, G // 3, args[0], args[1], _lengths(lengths), *args[2:], dgates_i,
          dgates_h, dh0)
    return dgates_i, dgates_h, dh0


@fused_gru_backward.register_fake
def _(w_hh, h0, lengths, acts, ghn, out, dout, dh_n):
    T, B, G = acts.shape
    return acts.new_empty(T, B, G), acts.new_empty(T, B, G), acts.new_empty(B, G // 3)


def _gru_setup(ctx, inputs, output):
    xg, w_hh, b_hh, h0, lengths = inputs
    out, acts, ghn, _ = output
    ctx.save_for_backward(xg, w_hh, b_hh, h0, lengths, out, acts, ghn)


def _gru_backward(ctx, dout, dacts, dghn, dh_n):
    xg, w_hh, b_hh, h0, lengths, out, acts, ghn = ctx.saved_tensors
    if kernel_backward_unusable((dout, dh_n)):
        def recompute(xg, w_hh, b_hh, h0):
            return recorded_recurrence(gru_recurrent_step(w_hh, b_hh), xg, (h0,), lengths)
        return (*differentiable_grads(recompute, (xg, w_hh, b_hh, h0), ctx.needs_input_grad[:4], (dout, dh_n)), None)
    dgates_i, dgates_h, dh0 = fused_gru_backward(w_hh, h0, lengths, acts, ghn, out, dout, dh_n)
    return dgates_i, recurrent_weight_grad(dgates_h, h0, out), dgates_h.sum((0, 1)), dh0, None


fused_gru.register_autograd(_gru_backward, setup_context=_gru_setup)


# ---- the rung ----------------------------------------------------------------------------------

def _lstm(x, state, p, lengths):
    h0, c0 = state
    bias = None if p.b_ih is None else p.b_ih + p.b_hh
    out, _, _, h_n, c_n = fused_lstm(input_projection(x, p.w_ih, bias), p.w_hh, h0, c0, lengths)
    return out, (h_n, c_n)


def _gru(x, state, p, lengths):
    (h0,) = state
    b_hh = p.b_hh if p.b_hh is not None else x.new_zeros(p.w_hh.shape[0])
    out, _, _, h_n = fused_gru(input_projection(x, p.w_ih, p.b_ih), p.w_hh, b_hh, h0, lengths)
    return out, (h_n,)


DIRECTIONS = {"lstm": _lstm, "gru": _gru}
CAPABILITIES = Capabilities(cells=tuple(DIRECTIONS), **kernels.DECLARATION)


def unavailable_reason(device: str) -> str | None:
    """Why the kernel cannot be built or loaded here (no compiler, no BLAS), or None."""
    return kernels.unavailable_reason()


def run_direction(cell, p, x, state, lengths):
    if x.shape[1] == 0 or under_func_transform():
        return eager.run_direction(cell, p, x, state, lengths)
    return DIRECTIONS[cell.name](x, state, p, lengths)


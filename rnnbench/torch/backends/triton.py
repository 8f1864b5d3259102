"""`triton`: the LSTM and GRU recurrences as fused Triton kernels, one launch per time step (CUDA).

How it is built.  As in `bptt` and `fused`, the input projection of all T steps is ONE torch GEMM
(`x W_ih^T + bias` over T*B rows, recorded by autograd: dx, dW_ih and the biases' gradients come
from it).  Then each step is ONE Triton kernel: a program owns a tile of BLOCK_H hidden units and
BLOCK_B batch rows; it computes the recurrent product h_{t-1} W_hh^T for each gate of its units
(a loop over K = H in blocks), adds the step's projected input (and, for the GRU, b_hh:
reset-after, n = tanh(x_n + r * (W_hn h + b_hn))), applies the gate nonlinearities, and writes
h_t, c_t and the activations the backward needs.  PyTorch's math and gate order (LSTM i, f, g, o;
GRU r, z, n), both biases, initial states and ragged `lengths` (a row past its length keeps its
state and outputs zeros, as `fused.recorded_recurrence` documents).  The backward is the same kind of loop,
one kernel per step from the last: it forms dh_t = dout_t + dgates_{t+1} W_hh for its tile (the
product with the whole (B, G) dgates of the step after, written by the previous launch), then the
gate gradients, and carries dc (LSTM) and the elementwise part of dh (GRU: dh z; a row past its
length: dh itself) in place.  dW_hh is ONE torch GEMM over all steps (as `fused`), the
GRU's db_hh one reduction.  A step reads only what the previous launch wrote, so no program waits
on another: no grid barrier.

The product inside a step: `tl.dot` on (BLOCK_B, BLOCK_K) x (BLOCK_K, BLOCK_H) tiles, each dim 16
or more (tl.dot's minimum on the GPU; rows and columns past B, H or K are loaded as zeros, so a small
H or B costs padding, never a second code path), always with `input_precision="ieee"`: Triton's
GPU default for float32 is TF32 (a test reads this source and checks every call).  float64 uses
the same `tl.dot` on float64 operands (float64 arithmetic; there is no TF32 for it; that Triton
compiles it for the GPU at hand is among what only a GPU run shows).  No
`tl.sum` of broadcast products: the interpreter here cannot call Triton's jitted helpers (`tl.sum`,
`tl.sigmoid`, `tl.zeros`), so the kernels use only builtins (`tl.dot`, `tl.exp`, `tl.where`, ...;
sigmoid and tanh written out: tanh(x) = 2 sigmoid(2x) - 1, good to a few units of rounding in absolute terms, and
the form Triton 3.9's LLVM compiles: its SLP vectorizer aborts on the LSTM forward written with
tl.where(x >= 0, ...)) and the same source runs compiled and interpreted.  bfloat16 and
float16 are not claimed (`CAPABILITIES.why_not`).

CUDA graphs: the step loop makes no host sync (lengths are a device tensor, each step's index a
launch argument), so a caller may capture the forward and the backward in a CUDA graph.  Not
built: a persistent variant (one launch for all T steps with a grid barrier between steps).

On the CPU the rung is not available for measurement (`CAPABILITIES.devices` is cuda only).
Its CPU test path is Triton's interpreter: inside `with interpreted():`, `run_direction` on CPU
tensors runs the very same kernel functions as `triton.runtime.interpreter.InterpretedFunction`
(tests/frameworks/torch/test_torch_triton.py).  What the interpreter cannot prove: it ignores
`input_precision` (its float32 dot is IEEE whatever is asked), runs the programs one after
another, has no register or shared-memory limits, and computes `tl.exp` with numpy, not the
GPU's approximate exp; that the kernels compile and meet the float32 bounds there needs a GPU.

Under create_graph=True (double backward) or batched grad_outputs the backward is the same
recurrence recorded by autograd (`recorded_recurrence`, as `fused`'s; `_common.differentiable_grads`); under
torch.func transforms and for an empty batch the `eager` rung runs instead.
"""

import contextlib

import torch
from torch import Tensor

from rnnbench.core.capabilities import BackendUnavailableError, Capabilities, UnsupportedConfigError

from . import eager
from ._common import (differentiable_grads, gru_recurrent_step, input_projection, kernel_backward_unusable,
                      lstm_recurrent_step, or_zeros, recorded_recurrence, recurrent_weight_grad, under_func_transform)

try:
    import triton
    import triton.language as tl
    _IMPORT_ERROR = None
except Exception as e:  # not installed, or an install that cannot load
    triton = None
    _IMPORT_ERROR = f"{type(e).__name__}: {e}"

    class tl:  # noqa: N801 -- the kernels' annotations evaluate without triton (the module imports anyway)
        constexpr = "tl.constexpr"

# No `from __future__ import annotations` here: the kernels' `tl.constexpr` annotations are the class
# itself, which every Triton version reads (the interpreter reads its own re-compiled source).

_DTYPES = (torch.float32, torch.float64)
BLOCK_B = 16  # batch rows per program (tl.dot needs >= 16; rows past B are masked)
BLOCK_K = 32  # the K block of a float32 tl.dot


# ---- the kernels ----------------------------------------------------------------------------------
# Plain functions: `_kernel` makes each a triton.jit kernel (CUDA) or an InterpretedFunction (the CPU,
# in tests).  Only Triton builtins inside: the interpreter cannot call the standard library's jitted
# helpers (tl.sigmoid, tl.sum, tl.zeros) of a Triton imported without TRITON_INTERPRET.

def _lstm_fwd_kernel(xg_ptr, w_ptr, h_ptr, c_ptr, out_ptr, hs_ptr, cs_ptr, act_ptr, len_ptr, t, B,
                     H: tl.constexpr, HAS_LENGTHS: tl.constexpr, BLOCK_B: tl.constexpr,
                     BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, NUM_K: tl.constexpr):
    """One LSTM step for a (BLOCK_B, BLOCK_H) tile: xg (B, 4H) this step's x W_ih^T + b_ih + b_hh,
    w (4H, H) W_hh, h, c (B, H) the carried state; writes out, hs, cs (B, H) and act (B, 4H) =
    i, f, g, o after their nonlinearities."""
    rows = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    cols = tl.program_id(0) * BLOCK_H + tl.arange(0, BLOCK_H)
    row_ok = rows < B
    col_ok = cols < H
    mask = row_ok[:, None] & col_ok[None, :]
    tile = rows[:, None] * H + cols[None, :]
    gate = rows[:, None] * (4 * H) + cols[None, :]
    a_i = tl.load(xg_ptr + gate, mask=mask, other=0.0)
    a_f = tl.load(xg_ptr + gate + H, mask=mask, other=0.0)
    a_g = tl.load(xg_ptr + gate + 2 * H, mask=mask, other=0.0)
    a_o = tl.load(xg_ptr + gate + 3 * H, mask=mask, other=0.0)
    for kb in tl.static_range(NUM_K):  # h_{t-1} W_hh^T, K = H in blocks
        ks = kb * BLOCK_K + tl.arange(0, BLOCK_K)
        k_ok = ks < H
        hk = tl.load(h_ptr + rows[:, None] * H + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        wt = cols[None, :] * H + ks[:, None]  # W_hh^T's (BLOCK_K, BLOCK_H) tile of gate i
        wm = k_ok[:, None] & col_ok[None, :]
        a_i += tl.dot(hk, tl.load(w_ptr + wt, mask=wm, other=0.0), input_precision="ieee")
        a_f += tl.dot(hk, tl.load(w_ptr + wt + H * H, mask=wm, other=0.0), input_precision="ieee")
        a_g += tl.dot(hk, tl.load(w_ptr + wt + 2 * H * H, mask=wm, other=0.0), input_precision="ieee")
        a_o += tl.dot(hk, tl.load(w_ptr + wt + 3 * H * H, mask=wm, other=0.0), input_precision="ieee")
    i = 1.0 / (1.0 + tl.exp(-a_i))
    f = 1.0 / (1.0 + tl.exp(-a_f))
    o = 1.0 / (1.0 + tl.exp(-a_o))
    g = 2.0 / (1.0 + tl.exp(-2.0 * a_g)) - 1.0  # tanh
    c_prev = tl.load(c_ptr + tile, mask=mask, other=0.0)
    h_prev = tl.load(h_ptr + tile, mask=mask, other=0.0)
    c = f * c_prev + i * g
    h = o * (2.0 / (1.0 + tl.exp(-2.0 * c)) - 1.0)  # o tanh(c)
    if HAS_LENGTHS:
        valid = (t < tl.load(len_ptr + rows, mask=row_ok, other=0))[:, None]
    else:
        valid = (rows >= 0)[:, None]
    tl.store(out_ptr + tile, tl.where(valid, h, 0.0), mask=mask)
    tl.store(hs_ptr + tile, tl.where(valid, h, h_prev), mask=mask)
    tl.store(cs_ptr + tile, tl.where(valid, c, c_prev), mask=mask)
    tl.store(act_ptr + gate, i, mask=mask)
    tl.store(act_ptr + gate + H, f, mask=mask)
    tl.store(act_ptr + gate + 2 * H, g, mask=mask)
    tl.store(act_ptr + gate + 3 * H, o, mask=mask)


def _lstm_bwd_kernel(dg_next_ptr, w_ptr, dhd_ptr, dc_ptr, dout_ptr, act_ptr, c_ptr, c_prev_ptr, dg_ptr, len_ptr, t, B,
                     H: tl.constexpr, HAS_NEXT: tl.constexpr, HAS_LENGTHS: tl.constexpr,
                     BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, NUM_K: tl.constexpr):
    """One LSTM step backward for a tile: dh_t = dhd + dg_{t+1} W_hh (dg_next (B, 4H), read when
    HAS_NEXT) + dout_t; writes dg (B, 4H), the gradient of the step's pre-activations; carries dc
    (B, H) and dhd (B, H: zero for a row in its length, the whole dh for a row past it) in place."""
    rows = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    cols = tl.program_id(0) * BLOCK_H + tl.arange(0, BLOCK_H)
    row_ok = rows < B
    col_ok = cols < H
    mask = row_ok[:, None] & col_ok[None, :]
    tile = rows[:, None] * H + cols[None, :]
    gate = rows[:, None] * (4 * H) + cols[None, :]
    dh = tl.load(dhd_ptr + tile, mask=mask, other=0.0)
    if HAS_NEXT:  # dgates_{t+1} W_hh, K = 4H in blocks
        for kb in tl.static_range(NUM_K):
            ks = kb * BLOCK_K + tl.arange(0, BLOCK_K)
            k_ok = ks < 4 * H
            dg = tl.load(dg_next_ptr + rows[:, None] * (4 * H) + ks[None, :], mask=row_ok[:, None] & k_ok[None, :],
                         other=0.0)
            w = tl.load(w_ptr + ks[:, None] * H + cols[None, :], mask=k_ok[:, None] & col_ok[None, :], other=0.0)
            dh += tl.dot(dg, w, input_precision="ieee")
    if HAS_LENGTHS:
        valid = (t < tl.load(len_ptr + rows, mask=row_ok, other=0))[:, None]
    else:
        valid = (rows >= 0)[:, None]
    dh += tl.where(valid, tl.load(dout_ptr + tile, mask=mask, other=0.0), 0.0)
    i = tl.load(act_ptr + gate, mask=mask, other=0.0)
    f = tl.load(act_ptr + gate + H, mask=mask, other=0.0)
    g = tl.load(act_ptr + gate + 2 * H, mask=mask, other=0.0)
    o = tl.load(act_ptr + gate + 3 * H, mask=mask, other=0.0)
    c = tl.load(c_ptr + tile, mask=mask, other=0.0)
    c_prev = tl.load(c_prev_ptr + tile, mask=mask, other=0.0)
    dc_next = tl.load(dc_ptr + tile, mask=mask, other=0.0)
    tc = 2.0 / (1.0 + tl.exp(-2.0 * c)) - 1.0  # tanh
    dc = dc_next + dh * o * (1.0 - tc * tc)
    tl.store(dg_ptr + gate, tl.where(valid, dc * g * i * (1.0 - i), 0.0), mask=mask)
    tl.store(dg_ptr + gate + H, tl.where(valid, dc * c_prev * f * (1.0 - f), 0.0), mask=mask)
    tl.store(dg_ptr + gate + 2 * H, tl.where(valid, dc * i * (1.0 - g * g), 0.0), mask=mask)
    tl.store(dg_ptr + gate + 3 * H, tl.where(valid, dh * tc * o * (1.0 - o), 0.0), mask=mask)
    tl.store(dc_ptr + tile, tl.where(valid, dc * f, dc_next), mask=mask)
    tl.store(dhd_ptr + tile, tl.where(valid, 0.0, dh), mask=mask)


def _gru_fwd_kernel(xg_ptr, w_ptr, b_ptr, h_ptr, out_ptr, hs_ptr, act_ptr, ghn_ptr, len_ptr, t, B,
                    H: tl.constexpr, HAS_LENGTHS: tl.constexpr, BLOCK_B: tl.constexpr,
                    BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, NUM_K: tl.constexpr):
    """One GRU step for a tile: xg (B, 3H) this step's x W_ih^T + b_ih, w (3H, H) W_hh, b (3H,)
    b_hh, h (B, H); writes out, hs (B, H), act (B, 3H) = r, z, n and ghn (B, H) = W_hn h + b_hn."""
    rows = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    cols = tl.program_id(0) * BLOCK_H + tl.arange(0, BLOCK_H)
    row_ok = rows < B
    col_ok = cols < H
    mask = row_ok[:, None] & col_ok[None, :]
    tile = rows[:, None] * H + cols[None, :]
    gate = rows[:, None] * (3 * H) + cols[None, :]
    a_r = tl.load(xg_ptr + gate, mask=mask, other=0.0) + tl.load(b_ptr + cols, mask=col_ok, other=0.0)[None, :]
    a_z = tl.load(xg_ptr + gate + H, mask=mask, other=0.0) + tl.load(b_ptr + cols + H, mask=col_ok, other=0.0)[None, :]
    hn = tl.broadcast_to(tl.load(b_ptr + cols + 2 * H, mask=col_ok, other=0.0)[None, :], (BLOCK_B, BLOCK_H))
    for kb in tl.static_range(NUM_K):  # h_{t-1} W_hh^T, K = H in blocks
        ks = kb * BLOCK_K + tl.arange(0, BLOCK_K)
        k_ok = ks < H
        hk = tl.load(h_ptr + rows[:, None] * H + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        wt = cols[None, :] * H + ks[:, None]
        wm = k_ok[:, None] & col_ok[None, :]
        a_r += tl.dot(hk, tl.load(w_ptr + wt, mask=wm, other=0.0), input_precision="ieee")
        a_z += tl.dot(hk, tl.load(w_ptr + wt + H * H, mask=wm, other=0.0), input_precision="ieee")
        hn += tl.dot(hk, tl.load(w_ptr + wt + 2 * H * H, mask=wm, other=0.0), input_precision="ieee")
    r = 1.0 / (1.0 + tl.exp(-a_r))
    z = 1.0 / (1.0 + tl.exp(-a_z))
    a_n = tl.load(xg_ptr + gate + 2 * H, mask=mask, other=0.0) + r * hn
    n = 2.0 / (1.0 + tl.exp(-2.0 * a_n)) - 1.0  # tanh
    h_prev = tl.load(h_ptr + tile, mask=mask, other=0.0)
    h = (1.0 - z) * n + z * h_prev
    if HAS_LENGTHS:
        valid = (t < tl.load(len_ptr + rows, mask=row_ok, other=0))[:, None]
    else:
        valid = (rows >= 0)[:, None]
    tl.store(out_ptr + tile, tl.where(valid, h, 0.0), mask=mask)
    tl.store(hs_ptr + tile, tl.where(valid, h, h_prev), mask=mask)
    tl.store(act_ptr + gate, r, mask=mask)
    tl.store(act_ptr + gate + H, z, mask=mask)
    tl.store(act_ptr + gate + 2 * H, n, mask=mask)
    tl.store(ghn_ptr + tile, hn, mask=mask)


def _gru_bwd_kernel(dgh_next_ptr, w_ptr, dhd_ptr, dout_ptr, act_ptr, ghn_ptr, h_prev_ptr, dgi_ptr, dgh_ptr, len_ptr,
                    t, B, H: tl.constexpr, HAS_NEXT: tl.constexpr, HAS_LENGTHS: tl.constexpr,
                    BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, NUM_K: tl.constexpr):
    """One GRU step backward for a tile: dh_t = dhd + dgh_{t+1} W_hh + dout_t; writes dgi (B, 3H),
    the gradient of x W_ih^T + b_ih, and dgh (B, 3H), of h W_hh^T + b_hh; carries dhd (B, H: dh z
    for a row in its length, the whole dh past it) in place."""
    rows = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    cols = tl.program_id(0) * BLOCK_H + tl.arange(0, BLOCK_H)
    row_ok = rows < B
    col_ok = cols < H
    mask = row_ok[:, None] & col_ok[None, :]
    tile = rows[:, None] * H + cols[None, :]
    gate = rows[:, None] * (3 * H) + cols[None, :]
    dh = tl.load(dhd_ptr + tile, mask=mask, other=0.0)
    if HAS_NEXT:  # dgates_h_{t+1} W_hh, K = 3H in blocks
        for kb in tl.static_range(NUM_K):
            ks = kb * BLOCK_K + tl.arange(0, BLOCK_K)
            k_ok = ks < 3 * H
            dg = tl.load(dgh_next_ptr + rows[:, None] * (3 * H) + ks[None, :], mask=row_ok[:, None] & k_ok[None, :],
                         other=0.0)
            w = tl.load(w_ptr + ks[:, None] * H + cols[None, :], mask=k_ok[:, None] & col_ok[None, :], other=0.0)
            dh += tl.dot(dg, w, input_precision="ieee")
    if HAS_LENGTHS:
        valid = (t < tl.load(len_ptr + rows, mask=row_ok, other=0))[:, None]
    else:
        valid = (rows >= 0)[:, None]
    dh += tl.where(valid, tl.load(dout_ptr + tile, mask=mask, other=0.0), 0.0)
    r = tl.load(act_ptr + gate, mask=mask, other=0.0)
    z = tl.load(act_ptr + gate + H, mask=mask, other=0.0)
    n = tl.load(act_ptr + gate + 2 * H, mask=mask, other=0.0)
    hn = tl.load(ghn_ptr + tile, mask=mask, other=0.0)
    h_prev = tl.load(h_prev_ptr + tile, mask=mask, other=0.0)
    d_n = dh * (1.0 - z) * (1.0 - n * n)
    d_r = d_n * hn * r * (1.0 - r)
    d_z = dh * (h_prev - n) * z * (1.0 - z)
    tl.store(dgi_ptr + gate, tl.where(valid, d_r, 0.0), mask=mask)
    tl.store(dgi_ptr + gate + H, tl.where(valid, d_z, 0.0), mask=mask)
    tl.store(dgi_ptr + gate + 2 * H, tl.where(valid, d_n, 0.0), mask=mask)
    tl.store(dgh_ptr + gate, tl.where(valid, d_r, 0.0), mask=mask)
    tl.store(dgh_ptr + gate + H, tl.where(valid, d_z, 0.0), mask=mask)
    tl.store(dgh_ptr + gate + 2 * H, tl.where(valid, d_n * r, 0.0), mask=mask)
    tl.store(dhd_ptr + tile, tl.where(valid, dh * z, dh), mask=mask)


KERNELS = (_lstm_fwd_kernel, _lstm_bwd_kernel, _gru_fwd_kernel, _gru_bwd_kernel)


# ---- compiled or interpreted ----------------------------------------------------------------------

_INTERPRETED = False
_BUILT: dict = {}


@contextlib.contextmanager
def interpreted():
    """Within it, `run_direction` on CPU tensors runs the kernels through Triton's interpreter
    (`triton.runtime.interpreter.InterpretedFunction` of the same functions): the rung's CPU test
    path.  Slow, and it proves the arithmetic, not the GPU's compilation or timing."""
    global _INTERPRETED
    if _IMPORT_ERROR is not None:
        raise BackendUnavailableError(f"triton cannot be imported ({_IMPORT_ERROR})")
    before, _INTERPRETED = _INTERPRETED, True
    try:
        yield
    finally:
        _INTERPRETED = before


def _kernel(fn, device: torch.device):
    """`fn` as a kernel for `device`: triton.jit on CUDA, the interpreter elsewhere (in `interpreted()`)."""
    if _IMPORT_ERROR is not None:
        raise BackendUnavailableError(f"torch.triton needs triton, which cannot be imported ({_IMPORT_ERROR})")
    if device.type == "cuda":
        key = (fn, "jit")
        if key not in _BUILT:
            # the step index and the batch size vary between launches: one compiled kernel for all of them
            _BUILT[key] = triton.jit(fn, do_not_specialize=["t", "B"])
        return _BUILT[key]
    if not _INTERPRETED:
        raise BackendUnavailableError(
            f"torch.triton runs its kernels on CUDA; on {device.type} only through Triton's interpreter, the "
            "rung's test path: run it inside rnnbench.torch.backends.triton.interpreted()")
    key = (fn, "interpret")
    if key not in _BUILT:
        from triton.runtime.interpreter import InterpretedFunction
        _BUILT[key] = InterpretedFunction(fn)
    return _BUILT[key]


def _meta(H: int, K: int) -> dict:
    """The launch's constexprs: tile sizes (each >= 16, tl.dot's minimum) and the K loop's count."""
    block_h = 16 if H <= 16 else 32
    return dict(H=H, BLOCK_B=BLOCK_B, BLOCK_H=block_h, BLOCK_K=BLOCK_K,
                NUM_K=-(-K // BLOCK_K))


def _grid(B: int, H: int, meta: dict) -> tuple:
    return (-(-H // meta["BLOCK_H"]), -(-B // BLOCK_B))


def _on(device: torch.device):
    """Launches go to the current CUDA device: make it the tensors' one."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _len_arg(lengths: Tensor | None, like: Tensor) -> Tensor:
    # a placeholder pointer when there are no lengths (HAS_LENGTHS=False never reads it)
    return like if lengths is None else lengths


# ---- the recurrences: launches per step ----------------------------------------------------------

def lstm_forward(xg: Tensor, w_hh: Tensor, h0: Tensor, c0: Tensor, lengths: Tensor | None):
    """(out, hs, cs, acts): the LSTM over xg (T, B, 4H) = x W_ih^T + b_ih + b_hh; hs and cs the
    carried states after each step (T, B, H), acts (T, B, 4H) = i, f, g, o."""
    T, B, G = xg.shape
    H = G // 4
    xg, w_hh, h0, c0 = (t.contiguous() for t in (xg, w_hh, h0, c0))
    out, hs, cs, acts = xg.new_empty(T, B, H), xg.new_empty(T, B, H), xg.new_empty(T, B, H), xg.new_empty(T, B, G)
    kernel, meta = _kernel(_lstm_fwd_kernel, xg.device), _meta(H, H)
    grid, lens = _grid(B, H, meta), _len_arg(lengths, xg)
    with _on(xg.device):
        for t in range(T):
            h, c = (h0, c0) if t == 0 else (hs[t - 1], cs[t - 1])
            kernel[grid](xg[t], w_hh, h, c, out[t], hs[t], cs[t], acts[t], lens, t, B, HAS_LENGTHS=lengths is not None,
                         **meta)
    return out, hs, cs, acts


def lstm_backward(w_hh: Tensor, c0: Tensor, lengths: Tensor | None, acts: Tensor, cs: Tensor, dout: Tensor,
                  dh_n: Tensor, dc_n: Tensor):
    """(dgates (T, B, 4H) before the nonlinearities, dh0, dc0)."""
    T, B, G = acts.shape
    H = G // 4
    w_hh, c0, dout = w_hh.contiguous(), c0.contiguous(), dout.contiguous()
    dgates = acts.new_empty(T, B, G)
    dhd, dc = dh_n.clone(memory_format=torch.contiguous_format), dc_n.clone(memory_format=torch.contiguous_format)
    kernel, meta = _kernel(_lstm_bwd_kernel, acts.device), _meta(H, G)
    grid, lens = _grid(B, H, meta), _len_arg(lengths, acts)
    with _on(acts.device):
        for t in range(T - 1, -1, -1):
            kernel[grid](dgates[t + 1] if t + 1 < T else dgates[t], w_hh, dhd, dc, dout[t], acts[t], cs[t],
                         c0 if t == 0 else cs[t - 1], dgates[t], lens, t, B, HAS_NEXT=t + 1 < T,
                         HAS_LENGTHS=lengths is not None, **meta)
    return dgates, torch.addmm(dhd, dgates[0], w_hh), dc


def gru_forward(xg: Tensor, w_hh: Tensor, b_hh: Tensor, h0: Tensor, lengths: Tensor | None):
    """(out, hs, acts, ghn): the GRU over xg (T, B, 3H) = x W_ih^T + b_ih; hs the carried state,
    acts (T, B, 3H) = r, z, n, ghn (T, B, H) = W_hn h + b_hn."""
    T, B, G = xg.shape
    H = G // 3
    xg, w_hh, b_hh, h0 = (t.contiguous() for t in (xg, w_hh, b_hh, h0))
    out, hs, acts, ghn = xg.new_empty(T, B, H), xg.new_empty(T, B, H), xg.new_empty(T, B, G), xg.new_empty(T, B, H)
    kernel, meta = _kernel(_gru_fwd_kernel, xg.device), _meta(H, H)
    grid, lens = _grid(B, H, meta), _len_arg(lengths, xg)
    with _on(xg.device):
        for t in range(T):
            kernel[grid](xg[t], w_hh, b_hh, h0 if t == 0 else hs[t - 1], out[t], hs[t], acts[t], ghn[t], lens, t, B,
                         HAS_LENGTHS=lengths is not None, **meta)
    return out, hs, acts, ghn


def gru_backward(w_hh: Tensor, h0: Tensor, lengths: Tensor | None, acts: Tensor, ghn: Tensor, hs: Tensor, dout: Tensor,
                 dh_n: Tensor):
    """(dgates_i, dgates_h (T, B, 3H): the gradients of x W_ih^T + b_ih and of h W_hh^T + b_hh, dh0)."""
    T, B, G = acts.shape
    H = G // 3
    w_hh, h0, dout = w_hh.contiguous(), h0.contiguous(), dout.contiguous()
    dgates_i, dgates_h = acts.new_empty(T, B, G), acts.new_empty(T, B, G)
    dhd = dh_n.clone(memory_format=torch.contiguous_format)
    kernel, meta = _kernel(_gru_bwd_kernel, acts.device), _meta(H, G)
    grid, lens = _grid(B, H, meta), _len_arg(lengths, acts)
    with _on(acts.device):
        for t in range(T - 1, -1, -1):
            kernel[grid](dgates_h[t + 1] if t + 1 < T else dgates_h[t], w_hh, dhd, dout[t], acts[t], ghn[t],
                         h0 if t == 0 else hs[t - 1], dgates_i[t], dgates_h[t], lens, t, B, HAS_NEXT=t + 1 < T,
                         HAS_LENGTHS=lengths is not None, **meta)
    return dgates_i, dgates_h, torch.addmm(dhd, dgates_h[0], w_hh)


# ---- autograd ---------------------------------------------------------------------------------------

class LSTMFunction(torch.autograd.Function):
    """(out, h_n, c_n) of the LSTM over xg (T, B, 4H) = x W_ih^T + b_ih + b_hh; inputs (xg, w_hh, h0, c0, lengths)."""

    @staticmethod
    def forward(ctx, xg, w_hh, h0, c0, lengths):
        out, hs, cs, acts = lstm_forward(xg, w_hh, h0, c0, lengths)
        ctx.save_for_backward(xg, w_hh, h0, c0, lengths, hs, cs, acts)
        return out, hs[-1].clone(), cs[-1].clone()

    @staticmethod
    def backward(ctx, dout, dh_n, dc_n):
        xg, w_hh, h0, c0, lengths, hs, cs, acts = ctx.saved_tensors
        if kernel_backward_unusable((dout, dh_n, dc_n)):
            def recompute(xg, w_hh, h0, c0):
                return recorded_recurrence(lstm_recurrent_step(w_hh), xg, (h0, c0), lengths)
            return (*differentiable_grads(recompute, (xg, w_hh, h0, c0), ctx.needs_input_grad[:4],
                                          (dout, dh_n, dc_n)), None)
        dgates, dh0, dc0 = lstm_backward(w_hh, c0, lengths, acts, cs, or_zeros(dout, hs), or_zeros(dh_n, h0),
                                         or_zeros(dc_n, c0))
        return dgates, recurrent_weight_grad(dgates, h0, hs), dh0, dc0, None


class GRUFunction(torch.autograd.Function):
    """(out, h_n) of the GRU over xg (T, B, 3H) = x W_ih^T + b_ih; inputs (xg, w_hh, b_hh, h0, lengths)."""

    @staticmethod
    def forward(ctx, xg, w_hh, b_hh, h0, lengths):
        out, hs, acts, ghn = gru_forward(xg, w_hh, b_hh, h0, lengths)
        ctx.save_for_backward(xg, w_hh, b_hh, h0, lengths, hs, acts, ghn)
        return out, hs[-1].clone()

    @staticmethod
    def backward(ctx, dout, dh_n):
        xg, w_hh, b_hh, h0, lengths, hs, acts, ghn = ctx.saved_tensors
        if kernel_backward_unusable((dout, dh_n)):
            def recompute(xg, w_hh, b_hh, h0):
                return recorded_recurrence(gru_recurrent_step(w_hh, b_hh), xg, (h0,), lengths)
            return (*differentiable_grads(recompute, (xg, w_hh, b_hh, h0), ctx.needs_input_grad[:4], (dout, dh_n)),
                    None)
        dgates_i, dgates_h, dh0 = gru_backward(w_hh, h0, lengths, acts, ghn, hs, or_zeros(dout, hs),
                                               or_zeros(dh_n, h0))
        return dgates_i, recurrent_weight_grad(dgates_h, h0, hs), dgates_h.sum((0, 1)), dh0, None


# ---- the rung ----------------------------------------------------------------------------------

def _lstm(x, state, p, lengths):
    h0, c0 = state
    bias = None if p.b_ih is None else p.b_ih + p.b_hh
    out, h_n, c_n = LSTMFunction.apply(input_projection(x, p.w_ih, bias), p.w_hh, h0, c0, lengths)
    return out, (h_n, c_n)


def _gru(x, state, p, lengths):
    (h0,) = state
    b_hh = p.b_hh if p.b_hh is not None else x.new_zeros(p.w_hh.shape[0])
    out, h_n = GRUFunction.apply(input_projection(x, p.w_ih, p.b_ih), p.w_hh, b_hh, h0, lengths)
    return out, (h_n,)


DIRECTIONS = {"lstm": _lstm, "gru": _gru}
CAPABILITIES = Capabilities(
    cells=tuple(DIRECTIONS), dtypes=("float64", "float32"), devices=("cuda",),
    why_not={"cell": "the Triton kernels have the LSTM and GRU recurrences only",
             "dtype": "the Triton kernels compute float32 (tl.dot in IEEE float32) and float64; bfloat16 is not "
                      "claimed: Triton's interpreter, the rung's only CPU test, computes bfloat16 tl.dot wrongly, "
                      "so it could not be proven here",
             "device": "the Triton kernels are compiled for CUDA; on the CPU they run only through Triton's "
                       "interpreter, the rung's test path (rnnbench.torch.backends.triton.interpreted()), "
                       "not for measurement",
             "proj_size": "the Triton kernels have no output projection"})


def unavailable_reason(device: str) -> str | None:
    """Why the kernels cannot run on `device` here (triton cannot be imported), or None."""
    if _IMPORT_ERROR is not None:
        return f"triton cannot be imported ({_IMPORT_ERROR})"
    return None


def run_direction(cell, p, x, state, lengths):
    if x.shape[1] == 0 or under_func_transform():
        return eager.run_direction(cell, p, x, state, lengths)
    if x.dtype not in _DTYPES:
        raise UnsupportedConfigError(f"torch.triton supports dtypes float64, float32, not {x.dtype}: "
                                     f"{CAPABILITIES.why_not['dtype']}")
    if p.w_hr is not None:
        raise UnsupportedConfigError(f"torch.triton does not support proj_size: {CAPABILITIES.why_not['proj_size']}")
    if lengths is not None:
        lengths = lengths.to(device=x.device, dtype=torch.int64).contiguous()
    return DIRECTIONS[cell.name](x, state, p, lengths)

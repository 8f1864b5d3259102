"""The `bptt` rung's LSTM and GRU kernels: one custom `torch.autograd.Function` per layer
and direction, whose backward is hand-written back-propagation through time (BPTT).

What makes it fast, compared with letting autograd record every step (the `eager` rung):

- forward: the input projection for all steps is ONE GEMM; each step is one GEMM
  `h @ W_hh^T` (fused with the add of the input projection) plus in-place gate math on
  preallocated buffers;
- while it is at it, the forward writes the *local derivatives* the backward needs
  (e.g. `g*i*(1-i)` for the input gate), so the backward does a handful of
  multiplications per step and the recurrent GEMM `dG_t @ W_hh`, nothing else;
- the weight gradients `dW_ih = dG^T X`, `dW_hh = dG^T H_prev`, the bias gradients
  `sum dG` and the input gradient `dX = dG W_ih` are each ONE GEMM or reduction over
  all T*B rows, not T small ones;
- the step GEMMs go through `gemm.Gemm`: BLAS (MKL on the CPU, cuBLAS on CUDA) or oneDNN
  with prepacked weights (the library `nn.LSTM` uses on the CPU; float32 only), whichever
  this machine runs faster at each shape (decided once per machine, `gemm.py`; RNNBENCH_GEMM
  overrides it).  The input projection is a BLAS GEMM into a preallocated buffer; internal
  scratch buffers are reused across calls (no page faults after the first).

The equations are the catalogue's (rnnbench/core/catalogue.py); the gates are stacked in the order
of the weight rows (i, f, g, o; r, z, n).

Backward, with dh the gradient reaching h' (from the output and from step t+1):

LSTM: ``m = o*tanh(c')``, ``dm = dh`` (or ``dh @ W_hr`` with a projection);
``dc += dm * o * (1 - tanh(c')^2)``; ``dG_i = dc * g * i(1-i)``,
``dG_f = dc * c * f(1-f)``, ``dG_g = dc * i * (1-g^2)``, ``dG_o = dm * tanh(c') * o(1-o)``;
carry ``dc <- dc * f`` and ``dh <- dG @ W_hh``.

GRU: ``dn_pre = dh (1-z)(1-n^2)``, ``dz_pre = dh (h-n) z(1-z)``,
``dr_pre = dn_pre * (W_hn h + b_hn) * r(1-r)``; input-side ``dG_i = [dr_pre, dz_pre, dn_pre]``,
hidden-side ``dG_h = [dr_pre, dz_pre, dn_pre * r]``; carry ``dh <- dh * z + dG_h @ W_hh``.

Variable lengths (`lengths[b]` valid steps of sequence b, any order): the valid steps of
each sequence are a prefix, so the forward simply runs all T steps and afterwards zeroes
`out[t, b]` for `t >= lengths[b]` and takes `h_n`/`c_n` from step `lengths[b] - 1`.  In the
backward, the gradient of a padded step is zero (its output is the constant 0 and no
later valid step depends on it), so its dG is exactly zero and it contributes nothing;
`dh_n`/`dc_n` enter at step `lengths[b] - 1`.  This gives exactly the gradients of the
"hold the state past the end" semantics without any per-step masking.
"""

from __future__ import annotations

import threading

import torch

from rnnbench.core.catalogue import get_cell
from rnnbench.core.params import LayerParams

from ... import cells
from .. import eager
from .._common import differentiable_grads, kernel_backward_unusable
from .gemm import Gemm

__all__ = ["KERNELS", "gru", "lstm", "run_kernel"]


# ---------------------------------------------------------------------------------------
# public entry points
# ---------------------------------------------------------------------------------------
def lstm(x, h0, c0, w_ih, w_hh, b_ih=None, b_hh=None, w_hr=None, lengths=None):
    """One LSTM layer forward in time over `x`, as one autograd node when gradients are wanted.

    Args:
        x: (T, B, I) input.
        h0: (B, H_out) initial hidden state (H_out = proj_size or hidden_size); None: zeros.
        c0: (B, H) initial cell state (None: zeros).
        w_ih (4H, I), w_hh (4H, H_out), b_ih / b_hh (4H,) or None, w_hr (H_out, H) or
            None (projection): the canonical parameters of this layer and direction.
        lengths: None, or an int64 (B,) tensor on x.device with 1 <= lengths[b] <= T.

    Returns:
        (out (T, B, H_out), h_n (B, H_out), c_n (B, H)).  Past a sequence's length its
        output is zero and h_n/c_n are the state after its last valid step.
    """
    T, B, H, H_out = _check_inputs("lstm", x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths)
    h0 = x.new_zeros(B, H_out) if h0 is None else h0
    c0 = x.new_zeros(B, H) if c0 is None else c0
    if _needs_grad(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr):
        return _LSTMFunction.apply(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths)
    with torch.no_grad():
        out, h_n, c_n, _ = _lstm_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths, for_backward=False)
    return out, h_n, c_n


def gru(x, h0, w_ih, w_hh, b_ih=None, b_hh=None, lengths=None):
    """One GRU layer forward in time over `x` (as `lstm`, without c0 and projection);
    returns (out (T, B, H), h_n (B, H))."""
    T, B, H, H_out = _check_inputs("gru", x, h0, None, w_ih, w_hh, b_ih, b_hh, None, lengths)
    h0 = x.new_zeros(B, H) if h0 is None else h0
    if _needs_grad(x, h0, w_ih, w_hh, b_ih, b_hh):
        return _GRUFunction.apply(x, h0, w_ih, w_hh, b_ih, b_hh, lengths)
    with torch.no_grad():
        out, h_n, _ = _gru_forward(x, h0, w_ih, w_hh, b_ih, b_hh, lengths, for_backward=False)
    return out, h_n


KERNELS = {"lstm": lstm, "gru": gru}


def run_kernel(cell: str, x, h0, c0, w_ih, w_hh, b_ih=None, b_hh=None, w_hr=None, lengths=None):
    """`lstm` or `gru` by name with one signature; returns (out, h_n, c_n or None)."""
    if cell not in KERNELS:
        raise ValueError(f"cell must be one of {tuple(KERNELS)}, got {cell!r}")
    if not get_cell(cell).has_cell_state:
        if c0 is not None:
            raise ValueError(f"c0 must be None for cell={cell!r} (a GRU has no cell state)")
        if w_hr is not None:
            raise ValueError(f"w_hr (projection) is only supported for cell='lstm', got cell={cell!r}")
        return (*KERNELS[cell](x, h0, w_ih, w_hh, b_ih, b_hh, lengths), None)
    return KERNELS[cell](x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths)


def _needs_grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _check_inputs(cell, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths):
    """Raise ValueError/TypeError naming the offending argument; return (T, B, H, H_out)."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise ValueError(f"x must be a 3-D tensor (T, B, I), got {_describe(x)}")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got dtype {x.dtype}")
    T, B, I = x.shape
    if T < 1:
        raise ValueError(f"x must have at least one step, got shape {tuple(x.shape)}")
    G = len(get_cell(cell).gates)
    if not isinstance(w_hh, torch.Tensor) or w_hh.dim() != 2 or w_hh.shape[0] % G:
        raise ValueError(f"w_hh must be a 2-D tensor ({G}*hidden_size, h_size) for {cell}, got {_describe(w_hh)}")
    H, H_out = w_hh.shape[0] // G, w_hh.shape[1]
    expected = {"w_ih": (G * H, I), "w_hh": (G * H, H_out), "b_ih": (G * H,), "b_hh": (G * H,),
                "h0": (B, H_out), "c0": (B, H)}
    if w_hr is not None:
        expected["w_hr"] = (H_out, H)
    elif H_out != H:
        raise ValueError(f"w_hh has {H_out} columns but hidden_size is {H}; without w_hr (projection) "
                         f"they must be equal")
    given = {"w_ih": w_ih, "w_hh": w_hh, "b_ih": b_ih, "b_hh": b_hh, "h0": h0, "c0": c0, "w_hr": w_hr}
    if w_ih is None:
        raise ValueError("w_ih is required")
    for name, value in given.items():
        if value is None:
            continue
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor or None, got {type(value).__name__}")
        if tuple(value.shape) != expected[name]:
            raise ValueError(f"{name} has shape {tuple(value.shape)}, expected {expected[name]} "
                             f"(cell={cell}, T={T}, B={B}, input_size={I}, hidden_size={H}, h_size={H_out})")
        if value.dtype != x.dtype:
            raise TypeError(f"{name} has dtype {value.dtype}, expected x's dtype {x.dtype}")
        if value.device != x.device:
            raise ValueError(f"{name} is on {value.device}, expected x's device {x.device}")
    if lengths is not None:
        if not isinstance(lengths, torch.Tensor) or lengths.shape != (B,):
            raise ValueError(f"lengths must be a tensor of shape ({B},), got {_describe(lengths)}")
        if lengths.dtype != torch.int64:
            raise TypeError(f"lengths must be int64, got {lengths.dtype}")
        if lengths.device != x.device:
            raise ValueError(f"lengths is on {lengths.device}, expected x's device {x.device}")
        low, high = int(lengths.min()), int(lengths.max())
        if low < 1 or high > T:
            raise ValueError(f"lengths must be in [1, T={T}], got values in [{low}, {high}]")
    return T, B, H, H_out


def _describe(value):
    if isinstance(value, torch.Tensor):
        return f"tensor of shape {tuple(value.shape)}"
    return type(value).__name__


# ---------------------------------------------------------------------------------------
# helpers shared by both cells
# ---------------------------------------------------------------------------------------
def _sum_biases(b_ih, b_hh):
    if b_ih is None:
        return b_hh
    if b_hh is None:
        return b_ih
    return b_ih + b_hh


def _valid_mask(lengths, T, dtype):
    """(T, B, 1) float mask: 1 where step t < lengths[b]."""
    steps = torch.arange(T, device=lengths.device)
    return (steps[:, None] < lengths[None, :]).to(dtype).unsqueeze(-1)


def _last_valid(seq, lengths):
    """seq (T, B, F) -> (B, F): seq[lengths[b] - 1, b]."""
    return seq[lengths - 1, torch.arange(seq.shape[1], device=seq.device)]


def _effective_dout(dout, dh_n, lengths):
    """The gradient reaching each step's h from outside the recurrence, as a fresh (T, B, F)
    tensor: the output's gradient where the output is valid, plus dh_n at each sequence's
    last valid step."""
    T, B, _ = dout.shape
    d = _scratch.take(dout.shape, dout)
    if lengths is None:
        d.copy_(dout)
        d[T - 1] += dh_n
        return d
    torch.mul(dout, _valid_mask(lengths, T, dout.dtype), out=d)
    d.index_put_((lengths - 1, torch.arange(B, device=d.device)), dh_n, accumulate=True)
    return d


def _flat(t):
    return t.reshape(-1, t.shape[-1])


class _ScratchPool:
    """Large CPU scratch buffers reused across calls, per thread.

    A fresh large tensor costs its page faults on first touch, a sizable share of the GEMM
    that fills a (T, B, 4H) buffer at the study's sizes.  Buffers that live only inside one call (the no-grad input
    projection, dG in the backward, the external dh) are taken from this pool and given
    back at the end of the call, so only the first call pays.  (CUDA has PyTorch's
    caching allocator for this, so only CPU tensors are pooled.)  At most `max_bytes`
    are kept; beyond that the pool is emptied.
    """

    def __init__(self, max_bytes: int = 1 << 30):
        self.max_bytes = max_bytes
        self._local = threading.local()

    def _free(self):
        if not hasattr(self._local, "free"):
            self._local.free, self._local.bytes = {}, 0
        return self._local.free

    def take(self, shape, like: torch.Tensor) -> torch.Tensor:
        if like.device.type != "cpu":
            return like.new_empty(shape)
        stack = self._free().get((tuple(shape), like.dtype))
        if stack:
            buffer = stack.pop()
            self._local.bytes -= buffer.nbytes
            return buffer
        return like.new_empty(shape)

    def give(self, *buffers) -> None:
        """Return buffers nobody else references (never a returned or saved tensor)."""
        free = self._free()
        for buffer in buffers:
            if buffer is None or buffer.device.type != "cpu":
                continue
            if self._local.bytes + buffer.nbytes > self.max_bytes:
                free.clear()
                self._local.bytes = 0
            free.setdefault((tuple(buffer.shape), buffer.dtype), []).append(buffer)
            self._local.bytes += buffer.nbytes


_scratch = _ScratchPool()


def _input_projection(x_flat, w, bias, out):
    """out = x_flat @ w^T + bias, all steps in one GEMM, through `Gemm` like the step GEMMs
    (oneDNN allocates its result, so there it costs a copy into `out`; "auto" times that too)."""
    return Gemm(w, x_flat.shape[0])(x_flat, bias, out=out)


def _dw_hh(dG_hidden, h0, hs):
    """dW_hh = sum_t dG_t^T h_{t-1} with h_{-1} = h0: one GEMM over steps 1..T-1 plus h0's."""
    T = dG_hidden.shape[0]
    dW = torch.mm(dG_hidden[0].t(), h0)
    if T > 1:
        dW.addmm_(_flat(dG_hidden[1:]).t(), _flat(hs[:-1]))
    return dW


# ---------------------------------------------------------------------------------------
# LSTM
# ---------------------------------------------------------------------------------------
def _lstm_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths, for_backward):
    """Returns (out, h_n, c_n, saved) where `saved` holds what the backward needs."""
    T, B, I = x.shape
    H, P = w_hh.shape[0] // 4, w_hh.shape[1]
    x_flat = x.reshape(T * B, I)
    # One GEMM for the input projection of every step, both biases folded in.
    # In training this buffer then receives the local derivatives K (saved); otherwise it
    # is scratch.
    pre_x = x.new_empty(T, B, 4 * H) if for_backward else _scratch.take((T, B, 4 * H), x)
    _input_projection(x_flat, w_ih, _sum_biases(b_ih, b_hh), pre_x.view(T * B, 4 * H))
    step_gemm = Gemm(w_hh, B)
    proj_gemm = Gemm(w_hr, B) if w_hr is not None else None

    hs = x.new_empty(T, B, P)  # h after each step (internal: not masked)
    cs = x.new_empty(T, B, H)  # c after each step
    tanh_c = x.new_empty(B, H)
    ms = x.new_empty(T, B, H) if w_hr is not None else None  # o*tanh(c) before the projection
    if for_backward:
        # Local derivatives, laid out like the gates [i, f, g, o]: the backward's dG_t is
        # this times [dc, dc, dc, dh].  Written over pre_x[t] once step t has read it.
        K = pre_x
        K_c = x.new_empty(T, B, H)  # o * (1 - tanh(c)^2): d h / d c
        fs = x.new_empty(T, B, H)  # forget gate, for the dc carry
    h, c = h0, c0
    for t in range(T):
        a = step_gemm(h, add=pre_x[t])  # (B, 4H) pre-activations of this step
        a[:, :2 * H].sigmoid_()
        a[:, 2 * H:3 * H].tanh_()
        a[:, 3 * H:].sigmoid_()
        i, f, g, o = a.chunk(4, 1)
        c_new = cs[t]
        torch.mul(f, c, out=c_new)
        c_new.addcmul_(i, g)
        torch.tanh(c_new, out=tanh_c)
        if proj_gemm is None:
            h_new = torch.mul(o, tanh_c, out=hs[t])
        else:
            torch.mul(o, tanh_c, out=ms[t])
            h_new = proj_gemm(ms[t], out=hs[t])
        if for_backward:
            k = K[t]
            k_i, k_f, k_g, k_o = k.chunk(4, 1)
            torch.addcmul(a, a, a, value=-1, out=k)  # s * (1 - s) for the sigmoid gates
            k_i.mul_(g)  # g * i(1-i)
            k_f.mul_(c)  # c_prev * f(1-f)
            torch.mul(g, g, out=k_g)
            torch.addcmul(i, i, k_g, value=-1, out=k_g)  # i * (1 - g^2)
            k_o.mul_(tanh_c)  # tanh(c) * o(1-o)
            torch.mul(tanh_c, tanh_c, out=K_c[t])
            torch.addcmul(o, o, K_c[t], value=-1, out=K_c[t])  # o * (1 - tanh(c)^2)
            fs[t].copy_(f)
        h, c = h_new, c_new
    if not for_backward:
        _scratch.give(pre_x)

    if lengths is None:
        out, h_n, c_n = hs, hs[T - 1].clone(), cs[T - 1].clone()
    else:
        out = hs * _valid_mask(lengths, T, x.dtype)
        h_n, c_n = _last_valid(hs, lengths), _last_valid(cs, lengths)
    saved = (x_flat, hs, ms, K, K_c, fs) if for_backward else None
    return out, h_n, c_n, saved


class _LSTMFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths):
        out, h_n, c_n, saved = _lstm_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths, for_backward=True)
        _, hs, ms, K, K_c, fs = saved
        ctx.save_for_backward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths, hs, ms, K, K_c, fs)
        return out, h_n, c_n

    @staticmethod
    def backward(ctx, d_out, d_h_n, d_c_n):
        x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths, hs, ms, K, K_c, fs = ctx.saved_tensors
        need = ctx.needs_input_grad  # x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths
        if kernel_backward_unusable((d_out, d_h_n, d_c_n)):
            return differentiable_grads(_lstm_recorded, (x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths), need,
                                        (d_out, d_h_n, d_c_n))
        T, B, I = x.shape
        x_flat = x.reshape(T * B, I)
        H, P = w_hh.shape[0] // 4, w_hh.shape[1]

        d_ext = _effective_dout(d_out, d_h_n, lengths)  # (T, B, P): dL/dh_t from outside
        dc = d_c_n.clone() if lengths is None else torch.zeros_like(d_c_n)
        if lengths is not None:  # dc_n enters at each sequence's last valid step
            ends = set((lengths - 1).tolist())
            steps = torch.arange(T, device=lengths.device)
            end_mask = (steps[:, None] == (lengths - 1)[None, :]).to(dc.dtype).unsqueeze(-1)
        hh_back = Gemm(w_hh.t(), B)  # dG_t @ W_hh
        proj_back = Gemm(w_hr.t(), B) if w_hr is not None else None  # dh @ W_hr
        dhs = x_flat.new_empty(T, B, P) if w_hr is not None else None  # for dW_hr

        dh = d_ext[T - 1]
        dh0 = None
        # A fresh buffer, not K in place: the saved tensors must survive for a second
        # backward (retain_graph=True, gradcheck).
        dG = _scratch.take(K.shape, K)
        for t in range(T - 1, -1, -1):
            if lengths is not None and t in ends:
                dc.addcmul_(end_mask[t], d_c_n)
            if proj_back is None:
                dm = dh
            else:
                dhs[t].copy_(dh)
                dm = proj_back(dh)
            dc.addcmul_(dm, K_c[t])
            g_t, k_t = dG[t], K[t]
            torch.mul(k_t[:, 3 * H:], dm, out=g_t[:, 3 * H:])  # dG_o
            torch.mul(k_t[:, :3 * H].view(B, 3, H), dc.unsqueeze(1), out=g_t[:, :3 * H].view(B, 3, H))  # dG_i,f,g
            dc.mul_(fs[t])
            if t > 0:
                dh = hh_back(g_t, add=d_ext[t - 1])
            elif need[1]:
                dh0 = hh_back(g_t)

        dG_flat = _flat(dG)
        dx = Gemm(w_ih.t(), T * B)(dG_flat).view(T, B, I) if need[0] else None
        dw_ih = torch.mm(dG_flat.t(), x_flat) if need[3] else None
        dw_hh = _dw_hh(dG, h0, hs) if need[4] else None
        db = dG_flat.sum(0) if (need[5] or need[6]) else None
        db_ih = db if need[5] else None
        db_hh = (db.clone() if need[5] else db) if need[6] else None  # never hand out one tensor twice
        dw_hr = torch.mm(_flat(dhs).t(), _flat(ms)) if (w_hr is not None and need[7]) else None
        dc0 = dc if need[2] else None
        _scratch.give(dG, d_ext)
        return dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh, dw_hr, None


# ---------------------------------------------------------------------------------------
# GRU
# ---------------------------------------------------------------------------------------
def _gru_forward(x, h0, w_ih, w_hh, b_ih, b_hh, lengths, for_backward):
    """Returns (out, h_n, saved)."""
    T, B, I = x.shape
    H = w_hh.shape[0] // 3
    x_flat = x.reshape(T * B, I)
    # One GEMM for the input projection of all steps (b_ih folded in).  Step t turns its
    # slice into the activations r, z, n and, in training, then into the local
    # derivatives K_i (saved; dG_i = K_i * dh).  Otherwise it is scratch.
    acts = x.new_empty(T, B, 3 * H) if for_backward else _scratch.take((T, B, 3 * H), x)
    _input_projection(x_flat, w_ih, b_ih, acts.view(T * B, 3 * H))
    step_gemm = Gemm(w_hh, B)
    hs = x.new_empty(T, B, H)
    if for_backward:
        K_i = acts
        K_hn = x.new_empty(T, B, H)  # dG_h = [dG_i_r, dG_i_z, K_hn * dh]  (hidden side)
        zs = x.new_empty(T, B, H)  # update gate, for the dh carry
        ones = x.new_ones(B, H)
        z_1mz = x.new_empty(B, H)
    h = h0
    for t in range(T):
        gh = step_gemm(h, b_hh)  # (B, 3H) = W_hh h + b_hh
        a = acts[t]
        rz = a[:, :2 * H]
        rz.add_(gh[:, :2 * H]).sigmoid_()
        r, z, n = a.chunk(3, 1)
        gh_n = gh[:, 2 * H:]
        n.addcmul_(r, gh_n).tanh_()
        h_new = torch.lerp(n, h, z, out=hs[t])  # n + z * (h - n)
        if for_backward:  # overwrite r, z, n by K_r, K_z, K_n in an order that reads each first
            z_t = zs[t]
            z_t.copy_(z)
            torch.addcmul(z_t, z_t, z_t, value=-1, out=z_1mz)
            torch.sub(h, n, out=z).mul_(z_1mz)  # K_z = (h - n) z(1-z)
            torch.addcmul(ones, n, n, value=-1, out=n)  # 1 - n^2
            n.addcmul_(n, z_t, value=-1)  # K_n = (1 - z)(1 - n^2)
            torch.mul(n, r, out=K_hn[t])
            torch.addcmul(r, r, r, value=-1, out=r).mul_(gh_n).mul_(n)  # K_r = K_n * gh_n * r(1-r)
        h = h_new
    if not for_backward:
        _scratch.give(acts)

    if lengths is None:
        out, h_n = hs, hs[T - 1].clone()
    else:
        out = hs * _valid_mask(lengths, T, x.dtype)
        h_n = _last_valid(hs, lengths)
    saved = (x_flat, hs, zs, K_i, K_hn) if for_backward else None
    return out, h_n, saved


class _GRUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, h0, w_ih, w_hh, b_ih, b_hh, lengths):
        out, h_n, saved = _gru_forward(x, h0, w_ih, w_hh, b_ih, b_hh, lengths, for_backward=True)
        _, hs, zs, K_i, K_hn = saved
        ctx.save_for_backward(x, h0, w_ih, w_hh, b_ih, b_hh, lengths, hs, zs, K_i, K_hn)
        return out, h_n

    @staticmethod
    def backward(ctx, d_out, d_h_n):
        x, h0, w_ih, w_hh, b_ih, b_hh, lengths, hs, zs, K_i, K_hn = ctx.saved_tensors
        need = ctx.needs_input_grad  # x, h0, w_ih, w_hh, b_ih, b_hh, lengths
        if kernel_backward_unusable((d_out, d_h_n)):
            return differentiable_grads(_gru_recorded, (x, h0, w_ih, w_hh, b_ih, b_hh, lengths), need, (d_out, d_h_n))
        T, B, I = x.shape
        x_flat = x.reshape(T * B, I)
        H = w_hh.shape[0] // 3
        d_ext = _effective_dout(d_out, d_h_n, lengths)
        hh_back = Gemm(w_hh.t(), B)
        dh = d_ext[T - 1]
        dh0 = None
        dG_i, dG_h = _scratch.take(K_i.shape, K_i), _scratch.take(K_i.shape, K_i)
        for t in range(T - 1, -1, -1):
            gi, gh = dG_i[t], dG_h[t]
            torch.mul(K_i[t].view(B, 3, H), dh.unsqueeze(1), out=gi.view(B, 3, H))  # [dr_pre, dz_pre, dn_pre]
            gh[:, :2 * H].copy_(gi[:, :2 * H])
            torch.mul(K_hn[t], dh, out=gh[:, 2 * H:])  # dn_pre * r
            z = zs[t]
            if t > 0:
                dh = hh_back(gh, add=torch.addcmul(d_ext[t - 1], dh, z))
            elif need[1]:
                dh0 = hh_back(gh, add=dh * z)

        gi_flat, gh_flat = _flat(dG_i), _flat(dG_h)
        dx = Gemm(w_ih.t(), T * B)(gi_flat).view(T, B, I) if need[0] else None
        dw_ih = torch.mm(gi_flat.t(), x_flat) if need[2] else None
        dw_hh = _dw_hh(dG_h, h0, hs) if need[3] else None
        db_ih = gi_flat.sum(0) if need[4] else None
        db_hh = gh_flat.sum(0) if need[5] else None
        _scratch.give(dG_i, dG_h, d_ext)
        return dx, dh0, dw_ih, dw_hh, db_ih, db_hh, None


# ---------------------------------------------------------------------------------------
# the same layers recorded by autograd (double backward, batched grad_outputs)
# ---------------------------------------------------------------------------------------
def _recorded(cell, x, state, w_ih, w_hh, b_ih, b_hh, w_hr, lengths):
    return eager.run_direction(cells.get_torch_cell(cell), LayerParams(w_ih, w_hh, b_ih, b_hh, w_hr), x, state,
                               lengths)


def _lstm_recorded(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths):
    out, (h_n, c_n) = _recorded("lstm", x, (h0, c0), w_ih, w_hh, b_ih, b_hh, w_hr, lengths)
    return out, h_n, c_n


def _gru_recorded(x, h0, w_ih, w_hh, b_ih, b_hh, lengths):
    out, (h_n,) = _recorded("gru", x, (h0,), w_ih, w_hh, b_ih, b_hh, None, lengths)
    return out, h_n

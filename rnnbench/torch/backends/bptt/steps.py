"""The `bptt` rung's kernels for catalogue cells: hand-written BPTT in one `autograd.Function`.

`peephole_lstm` and `ln_lstm`.  Same recipe as `lstm_gru`: the input projection of all
steps is ONE GEMM (both biases folded in), each step is one `addmm` plus in-place gate
math into preallocated (T, B, .) buffers, and the backward does per step only the
pointwise chain and the recurrent GEMM `dG_t W_hh`; the weight, bias, peephole and
input gradients are each ONE GEMM or reduction over all T*B rows.  The forward
equations are the catalogue's (rnnbench/core/catalogue.py).

Peephole LSTM backward, dh reaching h' (output + next step), dc reaching c' from step t+1::

    dA_o = dh * tanh(c') * o(1-o)
    dc'  = dc + dh * o * (1 - tanh(c')^2) + dA_o * p_o
    dA_i = dc' * g * i(1-i);  dA_f = dc' * c * f(1-f);  dA_g = dc' * i * (1-g^2)
    carry: dc <- dc' * f + dA_i * p_i + dA_f * p_f;   dh <- dA W_hh
    dp_i = sum dA_i * c,  dp_f = sum dA_f * c,  dp_o = sum dA_o * c'   (over t and b)

Variable lengths, as in `lstm_gru`: all T steps run; outputs past a sequence's
length are zeroed and h_n/c_n are taken at its last valid step; in the backward the
padded steps receive no gradient, so their dA is exactly zero, and dh_n/dc_n enter at
each sequence's last valid step: the "hold the state" semantics without masks.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ... import cells
from .._common import differentiable_grads, kernel_backward_unusable

LN_EPS = cells.LN_EPS


def peephole_lstm(x, state, p, lengths):
    """One peephole-LSTM layer: x (T, B, I), state (h0, c0), p a LayerParams with extras
    {"peephole": (3H,)}; returns (out, (h_n, c_n))."""
    h0, c0 = state
    peephole = (p.extras or {}).get("peephole")
    if peephole is None:
        raise ValueError("peephole_lstm needs its 'peephole' parameter (3H,) in extras")
    bias = None if p.b_ih is None else p.b_ih + p.b_hh  # autograd differentiates the sum for us
    tensors = (x, h0, c0, p.w_ih, p.w_hh, bias, peephole)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        out, h_n, c_n = _PeepholeFunction.apply(x, h0, c0, p.w_ih, p.w_hh, bias, peephole, lengths)
    else:
        with torch.no_grad():
            out, h_n, c_n, _ = _peephole_forward(x, h0, c0, p.w_ih, p.w_hh, bias, peephole, lengths, save=False)
    return out, (h_n, c_n)


def _external_grads(d_out, d_hn, d_cn, lengths, shape, like):
    """The gradients reaching each h_t and c_t from outside the recurrence, (T, B, H) each:
    the output's where it is valid, plus dh_n / dc_n at each sequence's last valid step."""
    T, B, _ = shape
    d_h_ext = d_out.clone() if d_out is not None else like.new_zeros(shape)
    d_c_ext = like.new_zeros(shape)
    rows = torch.arange(B, device=like.device)
    if lengths is None:
        last = torch.full((B,), T - 1, device=like.device)
    else:
        last = lengths - 1
        d_h_ext.mul_((torch.arange(T, device=like.device)[:, None] < lengths[None, :]).unsqueeze(-1))
    if d_hn is not None:
        d_h_ext.index_put_((last, rows), d_hn, accumulate=True)
    if d_cn is not None:
        d_c_ext.index_put_((last, rows), d_cn, accumulate=True)
    return d_h_ext, d_c_ext


def _last_valid(seq: Tensor, lengths: Tensor) -> Tensor:
    return seq[lengths - 1, torch.arange(seq.shape[1], device=seq.device)]


def _peephole_forward(x, h0, c0, w_ih, w_hh, bias, peephole, lengths, save):
    T, B, I = x.shape
    H = w_hh.shape[1]
    A = x.new_empty(T, B, 4 * H)  # pre-activations, then the activated gates [i, f, g, o]
    x_flat = x.reshape(T * B, I)
    if bias is None:
        torch.mm(x_flat, w_ih.t(), out=A.view(T * B, 4 * H))
    else:
        torch.addmm(bias, x_flat, w_ih.t(), out=A.view(T * B, 4 * H))
    hs = x.new_empty(T, B, H)
    cs = x.new_empty(T, B, H)
    tcs = x.new_empty(T, B, H)  # tanh(c')
    p_i, p_f, p_o = peephole.chunk(3)
    p_if = torch.cat([p_i, p_f])  # i and f peep at the same c: one fused op for both
    w_hh_t = w_hh.t()
    h, c = h0, c0
    for t in range(T):
        a = A[t]
        a.addmm_(h, w_hh_t)
        a_if, a_g, a_o = a.split([2 * H, H, H], 1)
        a_if.view(B, 2, H).addcmul_(p_if.view(2, H), c.unsqueeze(1)).sigmoid_()
        a_g.tanh_()
        i, f = a_if.chunk(2, 1)
        c_new = torch.mul(f, c, out=cs[t]).addcmul_(i, a_g)
        a_o.addcmul_(p_o, c_new).sigmoid_()
        torch.tanh(c_new, out=tcs[t])
        h = torch.mul(a_o, tcs[t], out=hs[t])
        c = c_new
    if lengths is None:
        out, h_n, c_n = hs, hs[T - 1], cs[T - 1]
    else:
        valid = (torch.arange(T, device=x.device)[:, None] < lengths[None, :]).unsqueeze(-1)
        out = hs * valid
        h_n, c_n = _last_valid(hs, lengths), _last_valid(cs, lengths)
    saved = (A, hs, cs, tcs) if save else None
    return out, h_n.clone(), c_n.clone(), saved


class _PeepholeFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, h0, c0, w_ih, w_hh, bias, peephole, lengths):
        out, h_n, c_n, (A, hs, cs, tcs) = _peephole_forward(x, h0, c0, w_ih, w_hh, bias, peephole,
                                                              lengths, save=True)
        ctx.save_for_backward(x, h0, c0, w_ih, w_hh, bias, peephole, lengths, A, hs, cs, tcs)
        ctx.has_bias = bias is not None
        return out, h_n, c_n

    @staticmethod
    def backward(ctx, d_out, d_hn, d_cn):
        x, h0, c0, w_ih, w_hh, bias, peephole, lengths, A, hs, cs, tcs = ctx.saved_tensors
        if kernel_backward_unusable((d_out, d_hn, d_cn)):
            return differentiable_grads(_peephole_recorded, (x, h0, c0, w_ih, w_hh, bias, peephole, lengths),
                                        ctx.needs_input_grad, (d_out, d_hn, d_cn))
        T, B, I = x.shape
        H = w_hh.shape[1]
        d_h_ext, d_c_ext = _external_grads(d_out, d_hn, d_cn, lengths, (T, B, H), x)
        p_i, p_f, p_o = peephole.chunk(3)
        dA = torch.empty_like(A)
        dh = x.new_zeros(B, H)
        dc = x.new_zeros(B, H)
        tmp = x.new_empty(B, H)
        for t in range(T - 1, -1, -1):
            i, f, g, o = A[t].chunk(4, 1)
            c_prev = cs[t - 1] if t > 0 else c0
            tc = tcs[t]
            d_i, d_f, d_g, d_o = dA[t].chunk(4, 1)
            dh.add_(d_h_ext[t])
            dc.add_(d_c_ext[t])
            # dA_o = dh * tanh(c') * o(1-o)
            torch.addcmul(o, o, o, value=-1, out=d_o).mul_(tc).mul_(dh)
            # dc' = dc + dh * o * (1 - tanh(c')^2) + dA_o * p_o
            torch.addcmul(o, o, torch.mul(tc, tc, out=tmp), value=-1, out=tmp).mul_(dh)
            dc.add_(tmp).addcmul_(d_o, p_o)
            torch.addcmul(i, i, i, value=-1, out=d_i).mul_(g).mul_(dc)
            torch.addcmul(f, f, f, value=-1, out=d_f).mul_(c_prev).mul_(dc)
            torch.addcmul(i, i, torch.mul(g, g, out=d_g), value=-1, out=d_g).mul_(dc)
            # carry: dc <- dc' * f + dA_i * p_i + dA_f * p_f;  dh <- dA W_hh
            dc.mul_(f).addcmul_(d_i, p_i).addcmul_(d_f, p_f)
            torch.mm(dA[t], w_hh, out=dh)
        dA_flat = dA.view(T * B, 4 * H)
        d_x = torch.mm(dA_flat, w_ih).view(T, B, I) if ctx.needs_input_grad[0] else None
        d_w_ih = torch.mm(dA_flat.t(), x.reshape(T * B, I))
        d_w_hh = torch.mm(dA[0].t(), h0)
        c_prev_all = torch.cat([c0.unsqueeze(0), cs[:-1]]) if T > 1 else c0.unsqueeze(0)
        if T > 1:
            d_w_hh.addmm_(dA[1:].reshape((T - 1) * B, 4 * H).t(), hs[:-1].reshape((T - 1) * B, H))
        d_bias = dA_flat.sum(0) if ctx.has_bias else None
        d_peep = torch.cat([(dA[..., :H] * c_prev_all).sum((0, 1)), (dA[..., H:2 * H] * c_prev_all).sum((0, 1)),
                            (dA[..., 3 * H:] * cs).sum((0, 1))])
        # dh, dc now hold the gradients of h0, c0 (the carries past step 0)
        return d_x, dh, dc, d_w_ih, d_w_hh, d_bias, d_peep, None


# ---- LayerNorm LSTM ------------------------------------------------------------------------------

def ln_lstm(x, state, p, lengths):
    """One LayerNorm-LSTM layer (state (h0, c0), p a LayerParams with the LN extras).  The
    hoisted part, LN_ih(W_ih x + b_ih) + beta_hh for all steps, by plain autograd (one GEMM
    and one layer_norm over T*B rows); the recurrence by `_LNLSTMFunction`."""
    h0, c0 = state
    extras = p.extras or {}
    missing = [k for k in ("layernorm_ih_weight", "layernorm_ih_bias", "layernorm_hh_weight", "layernorm_hh_bias",
                           "layernorm_c_weight", "layernorm_c_bias") if extras.get(k) is None]
    if missing:
        raise ValueError(f"ln_lstm needs its parameters {', '.join(missing)} in extras")
    T, B = x.shape[0], x.shape[1]
    q = {"weight_ih": p.w_ih, "bias_ih": p.b_ih, **extras}
    xpb = (cells.ln_lstm_project(x.reshape(T * B, x.shape[2]), q) + extras["layernorm_hh_bias"]).view(T, B, -1)
    args = (xpb, h0, c0, p.w_hh, p.b_hh, extras["layernorm_hh_weight"], extras["layernorm_c_weight"],
            extras["layernorm_c_bias"])
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in args):
        out, h_n, c_n = _LNLSTMFunction.apply(*args, lengths)
    else:
        with torch.no_grad():
            out, h_n, c_n, _ = _ln_lstm_forward(*args, lengths, save=False)
    return out, (h_n, c_n)


def _ln_lstm_forward(xpb, h0, c0, w_hh, b_hh, g_hh, g_c, b_c, lengths, save):
    """LN-LSTM recurrence from xpb = LN_ih(W_ih x + b_ih) + beta_hh:

        rec = h W_hh^T + b_hh;  a = xpb + g_hh * normalise(rec)
        c_raw = sigmoid(a_f) * c + sigmoid(a_i) * tanh(a_g);  c' = g_c * normalise(c_raw) + b_c
        h' = sigmoid(a_o) * tanh(c')
    (normalise: zero mean, unit biased variance + eps over the features).  Each LN is ATen's
    fused `native_layer_norm`; for the backward it keeps its input, mean and rstd, so that
    the backward runs ATen's fused `native_layer_norm_backward` per step.  Per-step tensors
    are kept in lists, not (T, B, .) buffers: a fresh 50 MB buffer is mmapped and page-faulted
    on every call, while (B, 4H) blocks are recycled by the allocator."""
    T, B, G = xpb.shape
    H = G // 4
    keep = {k: [] for k in ("gates", "rec", "c_raw", "c", "tc", "m_hh", "r_hh", "m_c", "r_c")}
    hs = []
    w_hh_t = w_hh.t()
    h, c = h0, c0
    for t in range(T):
        rec = torch.mm(h, w_hh_t) if b_hh is None else torch.addmm(b_hh, h, w_hh_t)
        y, m_hh, r_hh = torch.native_layer_norm(rec, (G,), g_hh, None, LN_EPS)
        a = y.add_(xpb[t])
        a_i, a_f, a_g, a_o = a.chunk(4, 1)
        a[:, :2 * H].sigmoid_()
        a_g.tanh_()
        a_o.sigmoid_()
        c_raw = torch.mul(a_f, c).addcmul_(a_i, a_g)
        c, m_c, r_c = torch.native_layer_norm(c_raw, (H,), g_c, b_c, LN_EPS)
        tc = torch.tanh(c)
        h = a_o * tc
        hs.append(h)
        if save:
            for k, v in zip(keep, (a, rec, c_raw, c, tc, m_hh, r_hh, m_c, r_c)):
                keep[k].append(v)
        elif lengths is not None:
            keep["c"].append(c)
    out = torch.stack(hs)
    if lengths is None:
        h_n, c_n = hs[-1], c
    else:
        valid = (torch.arange(T, device=xpb.device)[:, None] < lengths[None, :]).unsqueeze(-1)
        h_n, c_n = _last_valid(out, lengths), _last_valid(torch.stack(keep["c"]), lengths)
        out = out * valid
    return out, h_n.clone(), c_n.clone(), (keep, out) if save else None


def _ln_grads(d_y, v, mean, rstd, gain, with_bias: bool):
    """(dL/dv, dL/dgain, dL/dbias or None) through y = gain * (v - mean) * rstd (+ bias):
    ATen's fused LayerNorm backward (one kernel per step, the gain/bias sums included)."""
    # The bias's value does not enter the backward; ATen wants a tensor of its shape to return
    # dL/dbias, and the gain has that shape.
    return torch.ops.aten.native_layer_norm_backward(d_y, v, [v.shape[1]], mean, rstd, gain,
                                                     gain if with_bias else None, [True, True, with_bias])


class _LNLSTMFunction(torch.autograd.Function):
    """Backward, dh reaching h' and dc reaching c' (from step t+1 and outside)::

        dA_o = dh * tanh(c') * o(1-o);   dc' = dc + dh * o * (1 - tanh(c')^2)
        dc_raw = LN_c backward of dc'                (dg_c, db_c summed per step by the same kernel)
        dA_i = dc_raw * g * i(1-i);  dA_f = dc_raw * c * f(1-f);  dA_g = dc_raw * i * (1-g^2)
        carry: dc <- dc_raw * f
        drec = LN_hh backward of dA                  (dg_hh likewise; dxpb = dA)
        dh <- drec W_hh;   dW_hh = sum drec^T h_prev,  db_hh = sum drec   (one GEMM / sum at the end)
    """

    @staticmethod
    def forward(ctx, xpb, h0, c0, w_hh, b_hh, g_hh, g_c, b_c, lengths):
        out, h_n, c_n, (keep, _) = _ln_lstm_forward(xpb, h0, c0, w_hh, b_hh, g_hh, g_c, b_c, lengths, save=True)
        # The per-step intermediates go through save_for_backward too, so that autograd frees
        # them after the backward (and keeps them for a second one under retain_graph=True).
        ctx.keys = tuple(keep)
        ctx.save_for_backward(xpb, h0, c0, w_hh, b_hh, g_hh, g_c, b_c, lengths,
                              *[t for k in ctx.keys for t in keep[k]])
        ctx.has_bias = b_hh is not None
        return out, h_n, c_n

    @staticmethod
    def backward(ctx, d_out, d_hn, d_cn):
        xpb, h0, c0, w_hh, b_hh, g_hh, g_c, b_c, lengths, *steps = ctx.saved_tensors
        if kernel_backward_unusable((d_out, d_hn, d_cn)):
            return differentiable_grads(_ln_lstm_recorded, (xpb, h0, c0, w_hh, b_hh, g_hh, g_c, b_c, lengths),
                                        ctx.needs_input_grad, (d_out, d_hn, d_cn))
        T = xpb.shape[0]
        k = {key: steps[n * T:(n + 1) * T] for n, key in enumerate(ctx.keys)}
        gates, cs, tcs = k["gates"], k["c"], k["tc"]
        T = len(gates)
        B, G = gates[0].shape
        H = G // 4
        d_h_ext, d_c_ext = _external_grads(d_out, d_hn, d_cn, lengths, (T, B, H), h0)
        dA = h0.new_empty(T, B, G)
        d_rec = h0.new_empty(T, B, G)
        d_g_hh, d_g_c, d_b_c = torch.zeros_like(g_hh), torch.zeros_like(g_c), torch.zeros_like(g_c)
        dh = h0.new_zeros(B, H)
        dc = h0.new_zeros(B, H)
        tmp = h0.new_empty(B, H)
        for t in range(T - 1, -1, -1):
            i, f, g, o = gates[t].chunk(4, 1)
            c_prev = cs[t - 1] if t > 0 else c0
            tc = tcs[t]
            d_i, d_f, d_g, d_o = dA[t].chunk(4, 1)
            dh.add_(d_h_ext[t])
            torch.addcmul(o, o, o, value=-1, out=d_o).mul_(tc).mul_(dh)
            torch.addcmul(o, o, torch.mul(tc, tc, out=tmp), value=-1, out=tmp).mul_(dh)
            dcp = dc.add_(tmp)  # dL/dc'
            if d_c_ext is not None:
                dcp.add_(d_c_ext[t])
            dc_raw, dg, db = _ln_grads(dcp, k["c_raw"][t], k["m_c"][t], k["r_c"][t], g_c, True)
            d_g_c += dg
            d_b_c += db
            torch.addcmul(i, i, i, value=-1, out=d_i).mul_(g).mul_(dc_raw)
            torch.addcmul(f, f, f, value=-1, out=d_f).mul_(c_prev).mul_(dc_raw)
            torch.addcmul(i, i, torch.mul(g, g, out=d_g), value=-1, out=d_g).mul_(dc_raw)
            dc = dc_raw.mul_(f)
            d_rec[t], dg, _ = _ln_grads(dA[t], k["rec"][t], k["m_hh"][t], k["r_hh"][t], g_hh, False)
            d_g_hh += dg
            torch.mm(d_rec[t], w_hh, out=dh)
        d_w_hh = torch.mm(d_rec[0].t(), h0)
        if T > 1:
            h_prev = torch.stack([i_o.chunk(4, 1)[3] * tc for i_o, tc in zip(gates[:-1], tcs[:-1])])
            d_w_hh.addmm_(d_rec[1:].reshape((T - 1) * B, G).t(), h_prev.reshape((T - 1) * B, H))
        d_b_hh = d_rec.sum((0, 1)) if ctx.has_bias else None
        return dA, dh, dc, d_w_hh, d_b_hh, d_g_hh, d_g_c, d_b_c, None


# ---- the same recurrences recorded by autograd (double backward, batched grad_outputs) ------------

def _peephole_recorded(x, h0, c0, w_ih, w_hh, bias, peephole, lengths):
    T, B, I = x.shape
    x_proj = cells.linear(x.reshape(T * B, I), w_ih, bias).view(T, B, -1)
    out, (h_n, c_n) = cells.time_loop(cells.peephole_lstm_step, x_proj, (h0, c0),
                                      {"weight_hh": w_hh, "peephole": peephole}, lengths)
    return out, h_n, c_n


def _ln_lstm_recorded(xpb, h0, c0, w_hh, b_hh, g_hh, g_c, b_c, lengths):
    """xpb already holds LN_hh's bias, so the step's LN_hh runs without one."""
    p = {"weight_hh": w_hh, "bias_hh": b_hh, "layernorm_hh_weight": g_hh, "layernorm_hh_bias": None,
         "layernorm_c_weight": g_c, "layernorm_c_bias": b_c}
    out, (h_n, c_n) = cells.time_loop(cells.ln_lstm_step, xpb, (h0, c0), p, lengths)
    return out, h_n, c_n

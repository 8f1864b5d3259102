"""`pallas`: the recurrence in fused Pallas kernels (`jax.experimental.pallas`), one per time step.

As in `fused` and `bptt`, XLA runs the GEMMs over all steps: the input projection
x W_ih^T (+ biases) forward, and dx, dW_ih, dW_hh and the biases' gradients backward, one
each.  The recurrence is a `lax.scan` over steps whose body is one `pl.pallas_call`: a grid
over tiles of `block_h` hidden units, where each program computes, for every gate of its
tile, the recurrent product h_{t-1} W_hh^T, adds the step's projected input (and, for the
GRU, b_hh: reset-after, n = tanh(x_n + r * (W_hn h + b_hn))), applies the gate
nonlinearities and the state update, and writes h_t (c_t), the step's output and the gate
activations the backward needs.  PyTorch's gate order (LSTM i, f, g, o; GRU r, z, n).

`jax.grad` cannot differentiate a `pallas_call`, so the recurrence is a `jax.custom_vjp` with
a hand-written backward: a reverse `lax.scan` whose body is one fused kernel per step, over
the same tiles, giving the gate pre-activation gradients, dc_{t-1} and dh_{t-1} (each tile's
share of dG_t W_hh, summed over tiles by XLA); dW_hh (and db_hh) are then one GEMM over all
T*B rows (as `fused._weight_grad`).  `jit`-able.

Ragged `lengths`: a row past its length keeps its state and outputs zeros (a per-step mask
inside the kernels); the reverse direction runs forward over each sequence's valid part
reversed (a gather, `fused._reverse_index`).  Layers and directions: `rnnbench.jax.stack`.

Shapes: Pallas's Triton lowering on the GPU wants power-of-two block shapes and dots of at
least 16 x 16, so the batch and the hidden size are zero-padded to powers of two >= 16 (a
padded hidden unit stays exactly 0 through both cells; a padded row has length 0) and the
gates are passed as separate (B, H) arrays (the GRU's 3 gates would not be a power of two).

Every dot asks for `Precision.HIGHEST` (on a GPU the default is TF32).  The rung is declared
for CUDA in float32 (`CAPABILITIES`); the option `interpret=True` runs the same kernels
through Pallas's interpreter on any device, float64 included (with `jax_enable_x64`): that is
how the tests prove it on the CPU.  Not supported: proj_size, other cells.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from rnnbench.core.capabilities import Capabilities
from rnnbench.core.params import LayerParams

from .. import cells as jax_cells

OPTIONS = {"interpret": False, "block_h": 64}
MIN_BLOCK = 16  # Triton's dots need every dimension >= 16
_HIGHEST = lax.Precision.HIGHEST


def unavailable_reason(device: str | None = None) -> str | None:
    """Why the kernels cannot run here (no Pallas, no CUDA GPU), or None (mirrors `cudnn`'s)."""
    try:
        from jax.experimental import pallas  # noqa: F401
    except ImportError as e:
        return f"jax.experimental.pallas cannot be imported ({e})"
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    if not gpus:
        return (f"jax.pallas compiles its kernels with Pallas's Triton lowering and needs a CUDA GPU; JAX sees only "
                f"{', '.join(sorted({d.platform for d in jax.devices()}))} (the tests run the same kernels in "
                f"Pallas's interpret mode on the CPU)")
    return None


class _Config(NamedTuple):
    interpret: bool
    block_h: int


def _check_options(interpret, block_h) -> _Config:
    if not isinstance(interpret, bool):
        raise ValueError(f"interpret must be a bool, got {interpret!r}")
    if isinstance(block_h, bool) or not isinstance(block_h, int) or block_h < MIN_BLOCK or block_h & (block_h - 1):
        raise ValueError(f"block_h must be a power of two >= {MIN_BLOCK}, got {block_h!r}")
    return _Config(interpret, block_h)


def _pow2(n: int) -> int:
    return max(MIN_BLOCK, 1 << (int(n) - 1).bit_length())


def _dot(a, b):
    return jnp.dot(a, b, precision=_HIGHEST)


def _sigmoid(v):
    return 1.0 / (1.0 + jnp.exp(-v))


# ---- the per-step calls ------------------------------------------------------------------------

def _call(kernel, cfg: _Config, Bp: int, Hp: int, ins: str, outs: str, dtype):
    """One step's `pallas_call` over tiles of hidden units.  `ins`/`outs` spell each operand's
    block: T a (Bp, tH) tile, F the full (Bp, Hp), W a (Hp, tH) column tile of a (Hp, Hp) weight,
    R a (tH, Hp) row tile of one, M the (Bp, 1) mask, b a (1, tH) bias tile, P this tile's
    (Bp, Hp) share of a (Bp, ntiles*Hp) sum."""
    from jax.experimental import pallas as pl

    tH = min(cfg.block_h, Hp)
    blocks = {"T": ((Bp, tH), lambda j: (0, j)), "F": ((Bp, Hp), lambda j: (0, 0)),
              "W": ((Hp, tH), lambda j: (0, j)), "R": ((tH, Hp), lambda j: (j, 0)),
              "M": ((Bp, 1), lambda j: (0, 0)), "b": ((1, tH), lambda j: (0, j)),
              "P": ((Bp, Hp), lambda j: (0, j))}
    shapes = {"T": (Bp, Hp), "P": (Bp, (Hp // tH) * Hp)}
    spec = lambda k: pl.BlockSpec(*blocks[k])  # noqa: E731
    return pl.pallas_call(kernel, grid=(Hp // tH,), in_specs=[spec(k) for k in ins],
                          out_specs=[spec(k) for k in outs],
                          out_shape=[jax.ShapeDtypeStruct(shapes[k], dtype) for k in outs],
                          interpret=cfg.interpret)


def _lstm_fwd_kernel(xi, xf, xg, xo, wi, wf, wg, wo, h_ref, hj_ref, c_ref, m_ref,
                     h_out, c_out, y_out, ai_out, af_out, ag_out, ao_out):
    h = h_ref[...]
    i = _sigmoid(xi[...] + _dot(h, wi[...]))
    f = _sigmoid(xf[...] + _dot(h, wf[...]))
    g = jnp.tanh(xg[...] + _dot(h, wg[...]))
    o = _sigmoid(xo[...] + _dot(h, wo[...]))
    c_prev = c_ref[...]
    c = f * c_prev + i * g
    hn = o * jnp.tanh(c)
    valid = m_ref[...] > 0
    h_out[...] = jnp.where(valid, hn, hj_ref[...])
    c_out[...] = jnp.where(valid, c, c_prev)
    y_out[...] = jnp.where(valid, hn, jnp.zeros_like(hn))
    ai_out[...], af_out[...], ag_out[...], ao_out[...] = i, f, g, o


def _lstm_bwd_kernel(dy_ref, dh_ref, dc_ref, ai, af, ag, ao, c_ref, cp_ref, m_ref, wi, wf, wg, wo,
                     di_out, df_out, dg_out, do_out, dcp_out, dhd_out, dhp_out):
    i, f, g, o = ai[...], af[...], ag[...], ao[...]
    dh_carry, dc_carry = dh_ref[...], dc_ref[...]
    valid = m_ref[...] > 0
    zero = jnp.zeros_like(i)
    dh = dy_ref[...] + dh_carry
    tc = jnp.tanh(c_ref[...])
    dc = dc_carry + dh * o * (1.0 - tc * tc)
    da_i = jnp.where(valid, dc * g * i * (1.0 - i), zero)
    da_f = jnp.where(valid, dc * cp_ref[...] * f * (1.0 - f), zero)
    da_g = jnp.where(valid, dc * i * (1.0 - g * g), zero)
    da_o = jnp.where(valid, dh * tc * o * (1.0 - o), zero)
    di_out[...], df_out[...], dg_out[...], do_out[...] = da_i, da_f, da_g, da_o
    dcp_out[...] = jnp.where(valid, dc * f, dc_carry)
    dhd_out[...] = jnp.where(valid, zero, dh_carry)
    dhp_out[...] = _dot(da_i, wi[...]) + _dot(da_f, wf[...]) + _dot(da_g, wg[...]) + _dot(da_o, wo[...])


def _gru_fwd_kernel(xr, xz, xn, wr, wz, wn, br, bz, bn, h_ref, hj_ref, m_ref,
                    h_out, y_out, ar_out, az_out, an_out, ghn_out):
    h = h_ref[...]
    h_prev = hj_ref[...]
    r = _sigmoid(xr[...] + _dot(h, wr[...]) + br[...])
    z = _sigmoid(xz[...] + _dot(h, wz[...]) + bz[...])
    ghn = _dot(h, wn[...]) + bn[...]
    n = jnp.tanh(xn[...] + r * ghn)
    hn = (1.0 - z) * n + z * h_prev
    valid = m_ref[...] > 0
    h_out[...] = jnp.where(valid, hn, h_prev)
    y_out[...] = jnp.where(valid, hn, jnp.zeros_like(hn))
    ar_out[...], az_out[...], an_out[...], ghn_out[...] = r, z, n, ghn


def _gru_bwd_kernel(dy_ref, dh_ref, ar, az, an, ghn_ref, hp_ref, m_ref, wr, wz, wn,
                    dr_out, dz_out, dn_out, dhn_out, dhd_out, dhp_out):
    r, z, n = ar[...], az[...], an[...]
    dh_carry = dh_ref[...]
    valid = m_ref[...] > 0
    zero = jnp.zeros_like(r)
    dh = dy_ref[...] + dh_carry
    da_n = jnp.where(valid, dh * (1.0 - z) * (1.0 - n * n), zero)
    da_r = jnp.where(valid, da_n * ghn_ref[...] * r * (1.0 - r), zero)
    da_z = jnp.where(valid, dh * (hp_ref[...] - n) * z * (1.0 - z), zero)
    dhn = da_n * r  # the gradient of W_hn h + b_hn
    dr_out[...], dz_out[...], dn_out[...], dhn_out[...] = da_r, da_z, da_n, dhn
    dhd_out[...] = jnp.where(valid, dh * z, dh_carry)
    dhp_out[...] = _dot(da_r, wr[...]) + _dot(da_z, wz[...]) + _dot(dhn, wn[...])


def _sum_tiles(part, Hp: int):
    """(Bp, ntiles*Hp) -> (Bp, Hp): the tiles' shares of dG W_hh added."""
    return part.reshape(part.shape[0], -1, Hp).sum(1)


# ---- padding and layout ------------------------------------------------------------------------

class _Sizes(NamedTuple):
    T: int
    B: int
    H: int
    G: int
    Bp: int
    Hp: int


def _sizes(xg, G: int) -> _Sizes:
    T, B, GH = xg.shape
    return _Sizes(T, B, GH // G, G, _pow2(B), _pow2(GH // G))


def _pad(a, shape):
    return jnp.pad(a, [(0, n - s) for s, n in zip(a.shape, shape)])


def _gates_in(xg, s: _Sizes):
    """(T, B, G*H) -> G arrays (T, Bp, Hp)."""
    x = _pad(xg.reshape(s.T, s.B, s.G, s.H), (s.T, s.Bp, s.G, s.Hp))
    return tuple(x[:, :, k] for k in range(s.G))


def _gates_out(parts, s: _Sizes):
    """G arrays (T, Bp, Hp) -> (T, B, G*H)."""
    return jnp.stack([p[:, :s.B, :s.H] for p in parts], axis=2).reshape(s.T, s.B, s.G * s.H)


def _weights(w_hh, s: _Sizes):
    """W_hh (G*H, H) -> per gate (Hp, Hp): transposed (forward, h @ W_k^T) and as is (backward)."""
    w = _pad(w_hh.reshape(s.G, s.H, s.H), (s.G, s.Hp, s.Hp))
    return tuple(w[k].T for k in range(s.G)), tuple(w[k] for k in range(s.G))


def _masks(lengths, s: _Sizes, dtype):
    """(T, Bp, 1): 1 where step t is inside sequence b (a padded row has length 0)."""
    lens = _pad(lengths.astype(jnp.int32), (s.Bp,))
    return (jnp.arange(s.T)[:, None] < lens[None, :]).astype(dtype)[:, :, None]


def _weight_grad(dgates, h_prev):
    """sum_t dG_t^T h_{t-1}: one GEMM over all T*B rows (a padded step's dG is zero)."""
    return jnp.dot(dgates.reshape(-1, dgates.shape[-1]).T, h_prev.reshape(-1, h_prev.shape[-1]), precision=_HIGHEST)


def _check_dtype(dtype, cfg: _Config) -> None:
    allowed = ("float32", "float64") if cfg.interpret else ("float32",)
    if jnp.dtype(dtype).name not in allowed:
        raise ValueError(f"jax.pallas computes {' and '.join(allowed)}"
                         f"{' in interpret mode' if cfg.interpret else ' on the GPU'}, not {jnp.dtype(dtype).name}")


# ---- LSTM --------------------------------------------------------------------------------------

@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def lstm_recurrence(cfg: _Config, xg, w_hh, h0, c0, lengths):
    """The LSTM over xg (T, B, 4H) = x W_ih^T + b_ih + b_hh: (out, h_n, c_n)."""
    return _lstm_fwd(cfg, xg, w_hh, h0, c0, lengths)[0]


def _lstm_fwd(cfg, xg, w_hh, h0, c0, lengths):
    s = _sizes(xg, 4)
    dtype = xg.dtype
    xs = _gates_in(xg, s)
    w_t, w = _weights(w_hh, s)
    masks = _masks(lengths, s, dtype)
    h0p, c0p = _pad(h0, (s.Bp, s.Hp)), _pad(c0, (s.Bp, s.Hp))
    step = _call(_lstm_fwd_kernel, cfg, s.Bp, s.Hp, "TTTTWWWWFTTM", "TTTTTTT", dtype)

    def body(carry, inp):
        h, c = carry
        x4, m = inp[:4], inp[4]
        h_n, c_n, y, *acts = step(*x4, *w_t, h, h, c, m)
        return (h_n, c_n), (y, c_n, *acts)

    (h_n, c_n), (ys, cs, *acts) = lax.scan(body, (h0p, c0p), (*xs, masks))
    out = ys[:, :s.B, :s.H]
    res = (w, h0, c0p, masks, out, cs, tuple(acts))
    return (out, h_n[:s.B, :s.H], c_n[:s.B, :s.H]), res


def _lstm_bwd(cfg, res, cot):
    w, h0, c0p, masks, out, cs, acts = res
    dout, dh_n, dc_n = cot
    T, Bp, Hp = cs.shape
    B, H = h0.shape
    s = _Sizes(T, B, H, 4, Bp, Hp)
    dys = _pad(dout, (T, Bp, Hp))
    c_prev = jnp.concatenate([c0p[None], cs[:-1]])
    step = _call(_lstm_bwd_kernel, cfg, Bp, Hp, "TTTTTTTTTMRRRR", "TTTTTTP", cs.dtype)

    def body(carry, inp):
        dh, dc = carry
        dy, a_i, a_f, a_g, a_o, c, cp, m = inp
        *dg, dc_prev, dh_direct, dh_part = step(dy, dh, dc, a_i, a_f, a_g, a_o, c, cp, m, *w)
        return (dh_direct + _sum_tiles(dh_part, Hp), dc_prev), tuple(dg)

    init = (_pad(dh_n, (Bp, Hp)), _pad(dc_n, (Bp, Hp)))
    (dh0, dc0), dgs = lax.scan(body, init, (dys, *acts, cs, c_prev, masks), reverse=True)
    dgates = _gates_out(dgs, s)
    h_prev = jnp.concatenate([h0[None], out[:-1]])
    return dgates, _weight_grad(dgates, h_prev), dh0[:B, :H], dc0[:B, :H], None


lstm_recurrence.defvjp(_lstm_fwd, _lstm_bwd)


# ---- GRU ---------------------------------------------------------------------------------------

@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def gru_recurrence(cfg: _Config, xg, w_hh, b_hh, h0, lengths):
    """The GRU over xg (T, B, 3H) = x W_ih^T + b_ih: (out, h_n)."""
    return _gru_fwd(cfg, xg, w_hh, b_hh, h0, lengths)[0]


def _gru_fwd(cfg, xg, w_hh, b_hh, h0, lengths):
    s = _sizes(xg, 3)
    dtype = xg.dtype
    xs = _gates_in(xg, s)
    w_t, w = _weights(w_hh, s)
    b = _pad(b_hh.reshape(3, 1, s.H), (3, 1, s.Hp))
    masks = _masks(lengths, s, dtype)
    h0p = _pad(h0, (s.Bp, s.Hp))
    step = _call(_gru_fwd_kernel, cfg, s.Bp, s.Hp, "TTTWWWbbbFTM", "TTTTTT", dtype)

    def body(h, inp):
        x3, m = inp[:3], inp[3]
        h_n, y, *acts = step(*x3, *w_t, b[0], b[1], b[2], h, h, m)
        return h_n, (y, h_n, *acts)

    h_n, (ys, hs, *acts) = lax.scan(body, h0p, (*xs, masks))
    out = ys[:, :s.B, :s.H]
    res = (w, h0, h0p, masks, out, hs, tuple(acts))
    return (out, h_n[:s.B, :s.H]), res


def _gru_bwd(cfg, res, cot):
    w, h0, h0p, masks, out, hs, acts = res
    dout, dh_n = cot
    T, Bp, Hp = hs.shape
    B, H = h0.shape
    s = _Sizes(T, B, H, 3, Bp, Hp)
    dys = _pad(dout, (T, Bp, Hp))
    h_prev = jnp.concatenate([h0p[None], hs[:-1]])
    step = _call(_gru_bwd_kernel, cfg, Bp, Hp, "TTTTTTTMRRR", "TTTTTP", hs.dtype)

    def body(dh, inp):
        dy, a_r, a_z, a_n, ghn, hp, m = inp
        d_r, d_z, d_n, d_hn, dh_direct, dh_part = step(dy, dh, a_r, a_z, a_n, ghn, hp, m, *w)
        return dh_direct + _sum_tiles(dh_part, Hp), (d_r, d_z, d_n, d_hn)

    dh0, (d_r, d_z, d_n, d_hn) = lax.scan(body, _pad(dh_n, (Bp, Hp)), (dys, *acts, h_prev, masks), reverse=True)
    dgates_i = _gates_out((d_r, d_z, d_n), s)
    dgates_h = _gates_out((d_r, d_z, d_hn), s)
    real_h_prev = jnp.concatenate([h0[None], out[:-1]])
    return dgates_i, _weight_grad(dgates_h, real_h_prev), dgates_h.sum((0, 1)), dh0[:B, :H], None


gru_recurrence.defvjp(_gru_fwd, _gru_bwd)


# ---- the rung ----------------------------------------------------------------------------------

def _projection(x, w_ih, b):
    """x W_ih^T + b for all steps: one GEMM over T*B rows, in full precision."""
    xg = jnp.einsum("tbi,gi->tbg", x, w_ih, precision=_HIGHEST)
    return xg if b is None else xg + b


def _lstm(cfg, p: LayerParams, x, state, lengths):
    h0, c0 = state
    bias = None if p.b_ih is None else p.b_ih + p.b_hh
    out, h_n, c_n = lstm_recurrence(cfg, _projection(x, p.w_ih, bias), p.w_hh, h0, c0, lengths)
    return out, (h_n, c_n)


def _gru(cfg, p: LayerParams, x, state, lengths):
    (h0,) = state
    b_hh = p.b_hh if p.b_hh is not None else jnp.zeros(p.w_hh.shape[0], x.dtype)
    out, h_n = gru_recurrence(cfg, _projection(x, p.w_ih, p.b_ih), p.w_hh, b_hh, h0, lengths)
    return out, (h_n,)


DIRECTIONS = {"lstm": _lstm, "gru": _gru}
CAPABILITIES = Capabilities(
    cells=tuple(DIRECTIONS), dtypes=("float32",), devices=("cuda",), proj_size=False,
    why_not={"cell": "the Pallas kernels have the LSTM and GRU recurrences only",
             "dtype": "the Pallas kernels are built and measured in float32 on the GPU (interpret mode also "
                      "runs float64, on the CPU, for the tests)",
             "device": "its kernels are compiled by Pallas's Triton lowering for a CUDA GPU; on the CPU the "
                       "tests run the same kernels in Pallas's interpret mode (interpret=True)",
             "proj_size": "the Pallas kernels have no output projection"})


def _reverse_index(lengths, steps: int):
    """(T, B): step t of sequence b reversed within its valid part (t < len: len-1-t; else t)."""
    t = jnp.arange(steps)[:, None]
    return jnp.where(t < lengths[None, :], lengths[None, :] - 1 - t, t)


def run_direction(cell: jax_cells.JaxCell, p: LayerParams, x, state: tuple, lengths, *, reverse: bool,
                  interpret: bool = OPTIONS["interpret"], block_h: int = OPTIONS["block_h"]):
    """One direction over time-major x (T, B, I); see `rnnbench.jax.stack`.  `interpret=True` runs
    the kernels through Pallas's interpreter (any device; the tests' CPU path)."""
    cfg = _check_options(interpret, block_h)
    if cell.name not in DIRECTIONS:
        raise ValueError(f"jax.pallas runs {', '.join(DIRECTIONS)} only, not {cell.name!r}")
    if p.w_hr is not None:
        raise ValueError("jax.pallas does not support proj_size")
    _check_dtype(x.dtype, cfg)
    steps, batch = x.shape[:2]
    full = jnp.full((batch,), steps, jnp.int32) if lengths is None else lengths.astype(jnp.int32)
    if not reverse:
        return DIRECTIONS[cell.name](cfg, p, x, state, full)
    index = _reverse_index(full, steps)
    gather = lambda a: jnp.take_along_axis(a, index[:, :, None], axis=0)  # noqa: E731  (an involution)
    out, state_n = DIRECTIONS[cell.name](cfg, p, gather(x), state, full)
    return gather(out), state_n

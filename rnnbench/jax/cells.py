"""Every cell in JAX, plain lstm and gru included, and the one masked time loop.

Mirrors `rnnbench/torch/cells.py`.  A cell is its equations, written once in its `CellDef`
(`rnnbench.core.catalogue`), plus, here, a `JaxCell`:

    prepare(p) -> q                    once per layer and direction: the arrays the step wants;
                                       `p` is a `driver.LayerParams`; default: the canonical
                                       short names (`weight_ih`, `weight_hh`, `bias_ih`,
                                       `bias_hh`, `weight_hr`, each extra's prefix) -> arrays or None
    project(x2d, q) -> x_proj          hoisted out of the time loop: ONE GEMM over all T*B
                                       rows (default: x W_ih^T + b_ih)
    step(x_proj_t, state, q) -> state  one time step: x_proj_t (B, G*H), state = (h,) or
                                       (h, c), each (B, H); the new h is also the output

`time_loop` runs a step over time with `lax.scan` and PyTorch's packed-sequence masking;
the `scan` backend runs every cell through it.  Gate order is PyTorch's: `i, f, g, o`
(LSTM) and `r, z, n` (GRU).  Adding a cell never means editing a driver or a backend:

    from rnnbench.core.catalogue import CellDef, register_cell
    import rnnbench.jax
    register_cell(CellDef("mgu", "gru", ("f", "n"), "...", "equations"))
    rnnbench.jax.register_cell("mgu", step)            # (+ project=... when it hoists more)
    output, h_n = rnnbench.jax.rnn(params, x, cell="mgu", num_layers=2, bidirectional=True)
    model = rnnbench.jax.RNN("mgu", 16, 32, rngs=nnx.Rngs(0))
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jax import lax

from rnnbench.core.catalogue import CellTable, FrameworkCell

LN_EPS = 1e-5  # nn.LayerNorm's default, as the catalogue says


# ---- the gate math lstm and gru share with the hand-written kernels -------------------------------

def lstm_gate_scales(H: int, dtype) -> tuple[jax.Array, jax.Array]:
    """(s, b) with tanh(s a) s + b = [sigmoid(a_i), sigmoid(a_f), tanh(a_g), sigmoid(a_o)].

    sigmoid(a) = 1/2 + tanh(a/2)/2, so one tanh over all 4H gate columns gives every
    activation (s = 1/2, b = 1/2 on i, f, o; s = 1, b = 0 on g), and its derivative is
    s^2 (1 - t^2) with t = tanh(s a): the same expression for the four gates.  One
    elementwise pass instead of four slices, three sigmoids, a tanh and a concatenation
    (measured faster on XLA's CPU backend; see the JAX page of the docs).
    """
    s = jnp.concatenate([jnp.full((2 * H,), 0.5, dtype), jnp.ones((H,), dtype), jnp.full((H,), 0.5, dtype)])
    return s, jnp.where(s == 1, 0, 0.5).astype(dtype)


def lstm_cell(gates: jax.Array, c: jax.Array) -> tuple[jax.Array, jax.Array]:
    r"""One LSTM step from its gate pre-activations (the equations: the catalogue's `lstm`).

    `gates` is `W_ih x + b_ih + W_hh h + b_hh`, shape (B, 4H), gate blocks `i, f, g, o`.
    Returns `(h', c')`, each (B, H), before the projection (`proj_size`: the caller
    multiplies by `W_hr`).  The four activations come from one tanh (`lstm_gate_scales`);
    the derivative rule below is written out so that autodiff (forward or reverse) keeps
    that single pass too (differentiating the sliced form was measured slower).
    """
    s, b = lstm_gate_scales(c.shape[-1], gates.dtype)
    i, f, g, o = jnp.split(jnp.tanh(gates * s) * s + b, 4, axis=-1)
    c_new = f * c + i * g
    return o * jnp.tanh(c_new), c_new


def _lstm_cell_jvp(primals, tangents):
    """d(gate act) = s^2 (1 - t^2) d(gates);  dc' = df c + f dc + di g + i dg;
    dh' = do tanh(c') + o (1 - tanh^2 c') dc'."""
    gates, c = primals
    d_gates, dc = tangents
    s, b = lstm_gate_scales(c.shape[-1], gates.dtype)
    t = jnp.tanh(gates * s)
    i, f, g, o = jnp.split(t * s + b, 4, axis=-1)
    c_new = f * c + i * g
    tanh_c = jnp.tanh(c_new)
    di, df, dg, do = jnp.split(d_gates * (s * s) * (1 - t * t), 4, axis=-1)
    dc_new = df * c + f * dc + di * g + i * dg
    return (o * tanh_c, c_new), (do * tanh_c + o * (1 - tanh_c * tanh_c) * dc_new, dc_new)


# Wrapped by call, not by decorator: the same custom_jvp function, and mutation testing (mutmut
# leaves decorated functions alone) reaches the gate math and its derivative rule.
lstm_cell = jax.custom_jvp(lstm_cell)
lstm_cell.defjvp(_lstm_cell_jvp)


def gru_cell(rz: jax.Array, n_x: jax.Array, n_h: jax.Array, h: jax.Array) -> jax.Array:
    r"""One GRU step, PyTorch's form (the equations: the catalogue's `gru`).

    `rz` is the summed pre-activation of the r and z gates, (B, 2H); `n_x = W_in x + b_in`
    and `n_h = W_hn h + b_hn` stay separate because the reset gate scales only `n_h`.
    """
    r, z = jnp.split(jax.nn.sigmoid(rz), 2, axis=-1)
    n = jnp.tanh(n_x + r * n_h)
    return (1.0 - z) * n + z * h


def lstm_step_bias(b_ih: jax.Array | None, b_hh: jax.Array | None) -> jax.Array | None:
    """The LSTM's step bias `b_ih + b_hh` (None without biases).

    Added in the step, where it fuses with the add of the step's GEMM output, not to the
    hoisted projection: that would be one more pass over a (T, B, G*H) array.
    """
    return None if b_ih is None else b_ih + b_hh


def gru_step_biases(b_ih: jax.Array | None, b_hh: jax.Array | None) -> tuple[jax.Array | None, jax.Array | None]:
    """The GRU's step biases: `b_x = b_ih + [b_hr, b_hz, 0]` and `b_hn`, which stays with
    `W_hn h` because the reset gate multiplies it ((None, None) without biases)."""
    if b_ih is None:
        return None, None
    H = b_ih.shape[0] // 3
    return jnp.concatenate([b_ih[:2 * H] + b_hh[:2 * H], b_ih[2 * H:]]), b_hh[2 * H:]


# ---- building blocks of the steps ---------------------------------------------------------------

def recurrent(h: jax.Array, w_hh: jax.Array) -> jax.Array:
    """h W_hh^T, the step's recurrent product, (B, G*H).

    At batch 1 it is computed as (W_hh h^T)^T, a matrix-vector product with the weight as
    the left operand: XLA's CPU backend runs that form faster there (measured; see the JAX
    page of the docs); at larger batches the plain form is as fast.
    """
    if h.shape[0] == 1:
        return jax.lax.dot_general(w_hh, h, (((1,), (1,)), ((), ()))).T
    return h @ w_hh.T


def linear(x: jax.Array, weight: jax.Array, bias: jax.Array | None) -> jax.Array:
    """x W^T + b (just x W^T when bias is None)."""
    y = x @ weight.T
    return y if bias is None else y + bias


def layer_norm(v: jax.Array, gain: jax.Array, bias: jax.Array) -> jax.Array:
    """(v - mean) / sqrt(var + 1e-5) * gain + bias over the last axis (biased variance, nn.LayerNorm)."""
    mean = jnp.mean(v, axis=-1, keepdims=True)
    centred = v - mean
    var = jnp.mean(centred * centred, axis=-1, keepdims=True)
    return centred * jax.lax.rsqrt(var + LN_EPS) * gain + bias


def default_project(x2d: jax.Array, q: dict) -> jax.Array:
    """x W_ih^T + b_ih for every step at once (the input half of every gate)."""
    return linear(x2d, q["weight_ih"], q["bias_ih"])


JaxCell = FrameworkCell
CELLS = CellTable.for_framework("JAX", "rnnbench.jax", default_project)
JAX_CELLS = CELLS.cells
register_cell = CELLS.register
get_jax_cell = CELLS.get
has_cell = CELLS.has


# ---- lstm and gru: PyTorch's cells -----------------------------------------------------------------
#
# The input projection is hoisted without its bias; the step adds the bias (`lstm_step_bias`,
# `gru_step_biases`) where it fuses with the recurrent GEMM's output.

def lstm_prepare(p) -> dict:
    return {"weight_ih": p.w_ih, "weight_hh": p.w_hh, "bias": lstm_step_bias(p.b_ih, p.b_hh),
            "weight_hr_t": None if p.w_hr is None else p.w_hr.T}


def gru_prepare(p) -> dict:
    b_x, b_hn = gru_step_biases(p.b_ih, p.b_hh)
    return {"weight_ih": p.w_ih, "weight_hh": p.w_hh, "bias": b_x, "bias_hn": b_hn}


def bias_free_project(x2d: jax.Array, q: dict) -> jax.Array:
    """x W_ih^T for every step at once (the step adds the bias)."""
    return x2d @ q["weight_ih"].T


def lstm_step(x_proj_t: jax.Array, state: tuple, q: dict) -> tuple:
    """The catalogue's `lstm`: gate math by `lstm_cell`, then the projection with proj_size."""
    h, c = state
    if q["bias"] is not None:
        x_proj_t = x_proj_t + q["bias"]
    h_new, c_new = lstm_cell(x_proj_t + recurrent(h, q["weight_hh"]), c)
    if q["weight_hr_t"] is not None:
        h_new = h_new @ q["weight_hr_t"]
    return h_new, c_new


def gru_step(x_proj_t: jax.Array, state: tuple, q: dict) -> tuple:
    """The catalogue's `gru`: one recurrent GEMM for the three gates, `b_hn` kept with `W_hn h`."""
    (h,) = state
    if q["bias"] is not None:
        x_proj_t = x_proj_t + q["bias"]
    H = h.shape[-1]
    gh = recurrent(h, q["weight_hh"])
    n_h = gh[:, 2 * H:] if q["bias_hn"] is None else gh[:, 2 * H:] + q["bias_hn"]
    return (gru_cell(x_proj_t[:, :2 * H] + gh[:, :2 * H], x_proj_t[:, 2 * H:], n_h, h),)


# ---- the other catalogue cells -----------------------------------------------------------------------

def ln_lstm_project(x2d: jax.Array, q: dict) -> jax.Array:
    """LN_ih(W_ih x + b_ih) for all steps: it does not depend on h, so it is hoisted whole."""
    return layer_norm(linear(x2d, q["weight_ih"], q["bias_ih"]), q["layernorm_ih_weight"], q["layernorm_ih_bias"])


def ln_lstm_step(x_proj_t: jax.Array, state: tuple, q: dict) -> tuple:
    """The catalogue's `ln_lstm`; `x_proj_t` = LN_ih(W_ih x + b_ih) (hoisted), c' normalised is
    the carried state."""
    h, c = state
    rec = linear(h, q["weight_hh"], q["bias_hh"])
    a = x_proj_t + layer_norm(rec, q["layernorm_hh_weight"], q["layernorm_hh_bias"])
    i, f, g, o = jnp.split(a, 4, axis=-1)
    c_raw = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    c_new = layer_norm(c_raw, q["layernorm_c_weight"], q["layernorm_c_bias"])
    return jax.nn.sigmoid(o) * jnp.tanh(c_new), c_new


def lstm_family_project(x2d: jax.Array, q: dict) -> jax.Array:
    """x W_ih^T + b_ih + b_hh: both biases are additive in every gate, so both are hoisted."""
    bias = None if q["bias_ih"] is None else q["bias_ih"] + q["bias_hh"]
    return linear(x2d, q["weight_ih"], bias)


def peephole_lstm_step(x_proj_t: jax.Array, state: tuple, q: dict) -> tuple:
    """The catalogue's `peephole_lstm`; `x_proj_t` = W_ih x + b_ih + b_hh (hoisted),
    `peephole` = [p_i, p_f, p_o]."""
    h, c = state
    a = x_proj_t + h @ q["weight_hh"].T
    a_i, a_f, a_g, a_o = jnp.split(a, 4, axis=-1)
    p_i, p_f, p_o = jnp.split(q["peephole"], 3)
    i = jax.nn.sigmoid(a_i + p_i * c)
    f = jax.nn.sigmoid(a_f + p_f * c)
    c_new = f * c + i * jnp.tanh(a_g)
    o = jax.nn.sigmoid(a_o + p_o * c_new)
    return o * jnp.tanh(c_new), c_new


def gru_reset_before_step(x_proj_t: jax.Array, state: tuple, q: dict) -> tuple:
    """The catalogue's `gru_reset_before`; `x_proj_t` = W_ih x + b_ih + b_hh (every bias is
    additive here, all hoisted); `h' = n + z (h - n)` is `(1 - z) n + z h`."""
    (h,) = state
    H = h.shape[-1]
    w_hh = q["weight_hh"]
    r, z = jnp.split(jax.nn.sigmoid(x_proj_t[:, :2 * H] + h @ w_hh[:2 * H].T), 2, axis=-1)
    n = jnp.tanh(x_proj_t[:, 2 * H:] + (r * h) @ w_hh[2 * H:].T)
    return (n + z * (h - n),)


_BUILT_IN = {
    "lstm": dict(step=lstm_step, project=bias_free_project, prepare=lstm_prepare),
    "gru": dict(step=gru_step, project=bias_free_project, prepare=gru_prepare),
    "ln_lstm": dict(step=ln_lstm_step, project=ln_lstm_project),
    "peephole_lstm": dict(step=peephole_lstm_step, project=lstm_family_project),
    "gru_reset_before": dict(step=gru_reset_before_step, project=lstm_family_project),
}
for _name, _parts in _BUILT_IN.items():
    register_cell(_name, **_parts, built_in=True)


# ---- the one masked time loop ----------------------------------------------------------------------

def valid_steps(lengths: jax.Array | None, seq_len: int) -> jax.Array | None:
    """Per-step masks, boolean (T, B, 1): True where step t is inside sequence b (t < lengths[b]);
    None without lengths."""
    if lengths is None:
        return None
    return (jnp.arange(seq_len, dtype=lengths.dtype)[:, None] < lengths[None, :])[:, :, None]


def advance(valid: jax.Array | None, new: tuple, old: tuple) -> tuple[tuple, jax.Array]:
    """(state, output) after a step: with a mask (B, 1), a finished sequence (valid False)
    holds its state and outputs zero.  Every forward loop masks with it: `time_loop`, `naive`
    and the forward steps of `backends.bptt`'s kernels (whose backward masks the gradients
    with `bptt.common.valid_only` / `mask_carry`, this function differentiated)."""
    if valid is None:
        return tuple(new), new[0]
    new = tuple(jnp.where(valid, n, o) for n, o in zip(new, old))
    return new, jnp.where(valid, new[0], jnp.zeros((), new[0].dtype))


def project_all(cell: JaxCell, x: jax.Array, q: dict) -> jax.Array:
    """x (T, B, I) -> cell.project over all T*B rows, as (T, B, G*H)."""
    T, B, I = x.shape
    return cell.project(x.reshape(T * B, I), q).reshape(T, B, -1)


def time_loop(step: Callable, x_proj: jax.Array, state: tuple, q: dict, lengths: jax.Array | None = None, *,
              reverse: bool = False, unroll: int = 1, remat: bool = False) -> tuple[jax.Array, tuple]:
    """`step(x_proj[t], state, q)` over t with `lax.scan` (t = T-1 .. 0 with `reverse`).

    With lengths a finished sequence holds its state and outputs zero (`advance`); the
    reverse direction, walking t = T-1 .. 0, keeps the initial state until t = len-1, so
    it runs over each sequence's valid part reversed -- PyTorch's packed-sequence
    semantics, no gather of the input needed.  `unroll`: steps per loop iteration;
    `remat`: `jax.checkpoint` the step (backward recomputes it instead of storing).
    Returns (outputs (T, B, H_out), the final state tuple).
    """
    T = x_proj.shape[0]

    def body(carry, inputs):
        x_t, valid = inputs if lengths is not None else (inputs, None)
        return advance(valid, step(x_t, carry, q), carry)

    xs = x_proj if lengths is None else (x_proj, valid_steps(lengths, T))
    if remat:
        body = jax.checkpoint(body)
    state, outputs = lax.scan(body, tuple(state), xs, reverse=reverse, unroll=min(unroll, T))
    return outputs, state

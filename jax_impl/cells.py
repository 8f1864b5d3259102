"""Cell math in JAX: LSTM/GRU gate functions, and the catalogue cells' step table.

The matmuls live in the impls (one dense of [x, h] per step in `naive`, a hoisted input
projection plus one recurrent matmul per step in `scan`); the cells below only apply
the gate non-linearities, so every impl shares the same equations.  Gate order is
PyTorch's: `i, f, g, o` (LSTM) and `r, z, n` (GRU).  Put this file beside
`torch_impl/cells.py` and the math lines up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp

from shared.cells import get_cell


def lstm_gate_scales(H: int, dtype) -> tuple[jax.Array, jax.Array]:
    """(s, b) with tanh(s a) s + b = [sigmoid(a_i), sigmoid(a_f), tanh(a_g), sigmoid(a_o)].

    sigmoid(a) = 1/2 + tanh(a/2)/2, so one tanh over all 4H gate columns gives every
    activation (s = 1/2, b = 1/2 on i, f, o; s = 1, b = 0 on g), and its derivative is
    s^2 (1 - t^2) with t = tanh(s a): the same expression for the four gates.  One
    elementwise pass instead of four slices, three sigmoids, a tanh and a concatenation:
    about 15-20% off the S1 forward on XLA's CPU backend (`scripts/bench_jax.py`).
    """
    s = jnp.concatenate([jnp.full((2 * H,), 0.5, dtype), jnp.ones((H,), dtype), jnp.full((H,), 0.5, dtype)])
    return s, jnp.where(s == 1, 0, 0.5).astype(dtype)


@jax.custom_jvp
def lstm_cell(gates: jax.Array, c: jax.Array) -> tuple[jax.Array, jax.Array]:
    r"""One LSTM step from its gate pre-activations.

    `gates` is `W_ih x + b_ih + W_hh h + b_hh`, shape (B, 4H), gate blocks `i, f, g, o`:

        i = sigmoid(gates_i)    f = sigmoid(gates_f)
        g = tanh(gates_g)       o = sigmoid(gates_o)
        c' = f * c + i * g
        h' = o * tanh(c')

    Returns `(h', c')`, each (B, H).  With `proj_size` the caller projects `h'` by
    `W_hr` afterwards (PyTorch's LSTMP: `h' = W_hr (o * tanh(c'))`).  The four
    activations come from one tanh (`lstm_gate_scales`); the derivative rule below is
    written out so that autodiff (forward or reverse) keeps that single pass too --
    differentiating the sliced form instead made the S1 train step about 5% slower.
    """
    s, b = lstm_gate_scales(c.shape[-1], gates.dtype)
    i, f, g, o = jnp.split(jnp.tanh(gates * s) * s + b, 4, axis=-1)
    c_new = f * c + i * g
    return o * jnp.tanh(c_new), c_new


@lstm_cell.defjvp
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


def gru_cell(rz: jax.Array, n_x: jax.Array, n_h: jax.Array, h: jax.Array) -> jax.Array:
    r"""One GRU step, PyTorch's form (reset applied *after* the recurrent matmul).

    `rz` is the summed pre-activation of the r and z gates, (B, 2H):
    `W_i{r,z} x + b_i{r,z} + W_h{r,z} h + b_h{r,z}`; `n_x = W_in x + b_in` and
    `n_h = W_hn h + b_hn` stay separate because the reset gate scales only `n_h`:

        r = sigmoid(rz_r)       z = sigmoid(rz_z)
        n = tanh(n_x + r * n_h)
        h' = (1 - z) * n + z * h
    """
    r, z = jnp.split(jax.nn.sigmoid(rz), 2, axis=-1)
    n = jnp.tanh(n_x + r * n_h)
    return (1.0 - z) * n + z * h


# =================================================================================
# Catalogue cells (`shared.cells`): a step function per cell, run by the `scan` impl.
#
# Mirrors `torch_impl/cells.py`: a cell is its equations (the `CellDef`) plus, here,
#
#     project(x2d, p) -> x_proj          the part hoisted out of the time loop: ONE GEMM
#                                        over all T*B rows (default: x W_ih^T + b_ih)
#     step(x_proj_t, state, p) -> state  one time step: x_proj_t (B, G*H), state = (h,)
#                                        or (h, c), each (B, H); h' (first entry) is the output
#
# `p` maps the canonical short names of one layer and direction (`weight_ih`,
# `weight_hh`, `bias_ih`, `bias_hh`, and each extra parameter's prefix, e.g.
# `layernorm_c_weight`, `peephole`) to arrays; `bias_ih`/`bias_hh` are None when the
# spec has `bias=False`.  `lstm` and `gru` keep their tuned paths in the impls; every
# other cell runs through `jax_impl.scan`'s generic direction loop, composed over
# layers, directions and lengths by `jax_impl.driver`, so adding a cell never means
# editing a driver:
#
#     from shared.cells import CellDef, register_cell
#     import jax_impl
#     register_cell(CellDef("mgu", "gru", ("f", "n"), "...", "equations"))
#     jax_impl.register_cell("mgu", step)            # (+ project=... when it hoists more)
#     output, h_n = jax_impl.rnn(params, x, cell="mgu", num_layers=2, bidirectional=True)
#     model = jax_impl.RNN("mgu", 16, 32, rngs=nnx.Rngs(0))
# =================================================================================

LN_EPS = 1e-5  # nn.LayerNorm's default, as shared.cells documents


def recurrent(h: jax.Array, w_hh: jax.Array) -> jax.Array:
    """h W_hh^T, the step's recurrent product, (B, G*H).

    At batch 1 it is computed as (W_hh h^T)^T, a matrix-vector product with the weight as
    the left operand: XLA's CPU backend runs that form about 20% faster there (S2 forward
    loop, same process, interleaved: 3.6 -> 2.8 ms median); at larger batches the plain
    form is as fast.
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


def default_project(x2d: jax.Array, p: dict) -> jax.Array:
    """x W_ih^T + b_ih for every step at once (the input half of every gate)."""
    return linear(x2d, p["weight_ih"], p["bias_ih"])


@dataclass(frozen=True)
class JaxCell:
    name: str
    step: Callable  # step(x_proj_t, state, p) -> new state tuple
    project: Callable = default_project  # project(x2d (T*B, I), p) -> (T*B, G*H)


JAX_CELLS: dict[str, JaxCell] = {}


def register_cell(name: str, step: Callable, project: Callable | None = None) -> JaxCell:
    """Give catalogue cell `name` its JAX step (and optionally its hoisted projection).

    Register the `CellDef` first (`shared.cells.register_cell`).  Registering the same
    functions again is harmless; different ones under a registered name raise.
    """
    get_cell(name)  # raises naming the catalogue's cells when `name` is not in it
    if name in ("lstm", "gru"):
        raise ValueError(f"{name!r} is implemented by the impls themselves; register a new cell name")
    cell = JaxCell(name, step, project or default_project)
    if name in JAX_CELLS and JAX_CELLS[name] != cell:
        raise ValueError(f"a different JAX step is already registered for cell {name!r}")
    JAX_CELLS[name] = cell
    return cell


def get_jax_cell(name: str) -> JaxCell:
    try:
        return JAX_CELLS[name]
    except KeyError:
        raise ValueError(f"cell {name!r} has no JAX step; add one with "
                         f"jax_impl.register_cell({name!r}, step)") from None


def has_jax_cell(name: str) -> bool:
    return name in ("lstm", "gru") or name in JAX_CELLS


# ---- the catalogue cells ----------------------------------------------------------------------

def ln_lstm_project(x2d: jax.Array, p: dict) -> jax.Array:
    """LN_ih(W_ih x + b_ih) for all steps: it does not depend on h, so it is hoisted whole."""
    return layer_norm(linear(x2d, p["weight_ih"], p["bias_ih"]), p["layernorm_ih_weight"], p["layernorm_ih_bias"])


def ln_lstm_step(x_proj_t: jax.Array, state: tuple, p: dict) -> tuple:
    """LayerNorm LSTM (Ba et al. 2016), gates i, f, g, o; x_proj_t = LN_ih(W_ih x + b_ih):

        a = x_proj_t + LN_hh(W_hh h + b_hh)              (each LN over the 4H features)
        c' = LN_c(sigmoid(a_f) * c + sigmoid(a_i) * tanh(a_g))
        h' = sigmoid(a_o) * tanh(c')                     (c' normalised is the carried state)
    """
    h, c = state
    rec = linear(h, p["weight_hh"], p["bias_hh"])
    a = x_proj_t + layer_norm(rec, p["layernorm_hh_weight"], p["layernorm_hh_bias"])
    i, f, g, o = jnp.split(a, 4, axis=-1)
    c_raw = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    c_new = layer_norm(c_raw, p["layernorm_c_weight"], p["layernorm_c_bias"])
    return jax.nn.sigmoid(o) * jnp.tanh(c_new), c_new


def lstm_family_project(x2d: jax.Array, p: dict) -> jax.Array:
    """x W_ih^T + b_ih + b_hh: both biases are additive in every gate, so both are hoisted."""
    bias = None if p["bias_ih"] is None else p["bias_ih"] + p["bias_hh"]
    return linear(x2d, p["weight_ih"], bias)


def peephole_lstm_step(x_proj_t: jax.Array, state: tuple, p: dict) -> tuple:
    """Peephole LSTM (Gers and Schmidhuber 2000), gates i, f, g, o; peephole = [p_i, p_f, p_o]:

        [a_i, a_f, a_g, a_o] = x_proj_t + h W_hh^T       (x_proj_t = W_ih x + b_ih + b_hh)
        i = sigmoid(a_i + p_i * c);  f = sigmoid(a_f + p_f * c);  g = tanh(a_g)
        c' = f * c + i * g
        o = sigmoid(a_o + p_o * c');  h' = o * tanh(c')
    """
    h, c = state
    a = x_proj_t + h @ p["weight_hh"].T
    a_i, a_f, a_g, a_o = jnp.split(a, 4, axis=-1)
    p_i, p_f, p_o = jnp.split(p["peephole"], 3)
    i = jax.nn.sigmoid(a_i + p_i * c)
    f = jax.nn.sigmoid(a_f + p_f * c)
    c_new = f * c + i * jnp.tanh(a_g)
    o = jax.nn.sigmoid(a_o + p_o * c_new)
    return o * jnp.tanh(c_new), c_new


def gru_reset_before_step(x_proj_t: jax.Array, state: tuple, p: dict) -> tuple:
    """GRU, reset before the recurrent matmul (Cho et al. 2014), gates r, z, n:

        [x_r, x_z, x_n] = x_proj_t                      (= W_ih x + b_ih + b_hh, all hoisted)
        r, z = sigmoid([x_r, x_z] + h W_h{r,z}^T)
        n = tanh(x_n + (r * h) W_hn^T);  h' = n + z * (h - n)  (= (1 - z) * n + z * h)
    """
    (h,) = state
    H = h.shape[-1]
    w_hh = p["weight_hh"]
    r, z = jnp.split(jax.nn.sigmoid(x_proj_t[:, :2 * H] + h @ w_hh[:2 * H].T), 2, axis=-1)
    n = jnp.tanh(x_proj_t[:, 2 * H:] + (r * h) @ w_hh[2 * H:].T)
    return (n + z * (h - n),)


register_cell("ln_lstm", ln_lstm_step, ln_lstm_project)
register_cell("peephole_lstm", peephole_lstm_step, lstm_family_project)
register_cell("gru_reset_before", gru_reset_before_step, lstm_family_project)

"""LSTM and GRU cell math in JAX: pure functions on pre-activations.

The matmuls live in the impls (one dense of [x, h] per step in `naive`, a hoisted input
projection plus one recurrent matmul per step in `scan`); the cells below only apply
the gate non-linearities, so every impl shares the same equations.  Gate order is
PyTorch's: `i, f, g, o` (LSTM) and `r, z, n` (GRU).  Put this file beside
`torch_impl/cells.py` and the math lines up.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def lstm_cell(gates: jax.Array, c: jax.Array) -> tuple[jax.Array, jax.Array]:
    r"""One LSTM step from its gate pre-activations.

    `gates` is `W_ih x + b_ih + W_hh h + b_hh`, shape (B, 4H), gate blocks `i, f, g, o`:

        i = sigmoid(gates_i)    f = sigmoid(gates_f)
        g = tanh(gates_g)       o = sigmoid(gates_o)
        c' = f * c + i * g
        h' = o * tanh(c')

    Returns `(h', c')`, each (B, H).  With `proj_size` the caller projects `h'` by
    `W_hr` afterwards (PyTorch's LSTMP: `h' = W_hr (o * tanh(c'))`).
    """
    i, f, g, o = jnp.split(gates, 4, axis=-1)
    i = jax.nn.sigmoid(i)
    f = jax.nn.sigmoid(f)
    g = jnp.tanh(g)
    o = jax.nn.sigmoid(o)
    c_new = f * c + i * g
    h_new = o * jnp.tanh(c_new)
    return h_new, c_new


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

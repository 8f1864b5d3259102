"""Helpers both hand-written-backward kernels use (`lstm_gru`, `cells`).

Each exists so that the kernels keep the same array layout: projections without their
bias (the step adds it), weight gradients as one GEMM over all T*B rows, column sums as
GEMVs, and the forward/backward masking of padded steps written once.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ...cells import advance


def project(x: jax.Array, w: jax.Array) -> jax.Array:
    """x W^T for all T*B rows in one GEMM, (T, B, G*H) (biases are added in the step)."""
    T, B, I = x.shape
    return (x.reshape(T * B, I) @ w.T).reshape(T, B, -1)


def add(a, b):
    """a + b where b may be None (an absent bias)."""
    return a if b is None else a + b


def weight_grad(dg: jax.Array, inp: jax.Array) -> jax.Array:
    """sum over t, b of dg[t, b, :, None] * inp[t, b, None, :]: (G*H, K), one GEMM over all T*B rows.

    Computed as (inp^T dg)^T with the transpose kept out of the GEMM by an optimization
    barrier: XLA would otherwise fold it in and run the slower dg^T inp form.
    """
    inp2, dg2 = inp.reshape(-1, inp.shape[-1]), dg.reshape(-1, dg.shape[-1])
    return lax.optimization_barrier(inp2.T @ dg2).T


def sum_rows(a: jax.Array) -> jax.Array:
    """Sum over all leading axes, as a GEMV with a ones vector (XLA's CPU reduction over
    (T, B) is several times slower)."""
    a2 = a.reshape(-1, a.shape[-1])
    return jnp.ones((a2.shape[0],), a.dtype) @ a2


def valid_only(v, a):
    """a on valid steps, 0 on padded ones (v None: no lengths)."""
    return a if v is None else jnp.where(v, a, 0)


def mask_carry(v, new, old):
    """The carry after a step: `new` where valid; on a padded step `new` is 0 and `old` passes."""
    return new if v is None else new + jnp.where(v, 0, old)


def masked_outputs(v, new_state, old_state, saved):
    """A forward step's (carry, scanned outputs) for state tuples (h, ...).

    Scanned: (output, saved, the state sequence).  Without lengths the output is h' and is
    emitted once (it is also the h sequence the backward needs); with lengths a padded
    step keeps the old state and outputs zero, and the h sequence is emitted apart.
    """
    new_state, out = advance(v, new_state, old_state)
    return new_state, (out, saved, new_state[1:] if v is None else new_state)


def scan_outputs(ys, valid):
    """(output, saved, state sequences (h, ...)) from `masked_outputs`' scanned tuples."""
    output, saved, states = ys
    return output, saved, ((output,) + states if valid is None else states)


def previous(seq: jax.Array, h0: jax.Array, reverse: bool) -> jax.Array:
    """The state each step started from: h_{t-1} (forward) or h_{t+1} (reverse), h0 at the start."""
    if reverse:
        return jnp.concatenate([seq[1:], h0[None]], axis=0)
    return jnp.concatenate([h0[None], seq[:-1]], axis=0)

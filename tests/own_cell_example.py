"""The own-cell worked example: what a user writes for a minimal gated unit (MGU, Zhou et al.
2016) -- the catalogue entry, the NumPy step, and the rnnbench.torch and rnnbench.jax steps.

docs/own-cell.md walks through it; tests/cross/test_own_cell.py tests it and
tests/own_cell_module.py registers it for the study's workers and asv.  Importing this
module registers nothing.
"""

from __future__ import annotations

import numpy as np

from rnnbench import reference
from rnnbench.core.catalogue import CellDef, register_cell

MGU = CellDef(
    name="mgu", family="gru", gates=("f", "n"),
    summary="Minimal gated unit (Zhou et al. 2016): one forget gate, reset tied to it",
    equations="""f  = sigmoid(W_if x + b_if + W_hf h + b_hf)
n  = tanh(W_in x + b_in + W_hn (f * h) + b_hn)
h' = (1 - f) * h + f * n""")


def mgu_step(x, state, p):
    """One MGU step, batch-major rows: x (B, I), state (h,), p short-named parameters.

    Complex-safe NumPy only (reference.sigmoid, np.tanh, arithmetic, @), so the
    reference can differentiate it by the complex step.
    """
    (h,) = state
    W_if, W_in = np.split(p["weight_ih"], 2)
    W_hf, W_hn = np.split(p["weight_hh"], 2)
    b_if, b_in = np.split(p["bias_ih"], 2)   # zeros when spec.bias is False
    b_hf, b_hn = np.split(p["bias_hh"], 2)
    f = reference.sigmoid(x @ W_if.T + b_if + h @ W_hf.T + b_hf)
    n = np.tanh(x @ W_in.T + b_in + (f * h) @ W_hn.T + b_hn)
    return ((1.0 - f) * h + f * n,)


def register_mgu():
    register_cell(MGU)                          # the catalogue: RNNSpec("mgu", ...) now works
    reference.register_cell_step("mgu", mgu_step)  # the NumPy reference: forward + gradients


def mgu_step_torch(x_proj_t, state, p):
    """One MGU step for rnnbench.torch: x_proj_t = W_ih x + b_ih (B, 2H), hoisted by the driver for
    all steps at once (the default `project`); p holds weight_hh, bias_hh (None without bias).

        f  = sigmoid(x_f + h W_hf^T + b_hf)
        n  = tanh(x_n + (f * h) W_hn^T + b_hn)
        h' = (1 - f) * h + f * n  (= h + f * (n - h))
    """
    import torch

    import rnnbench.torch.cells as tc

    (h,) = state
    H = h.shape[1]
    x_f, x_n = x_proj_t.split([H, H], 1)
    w_hf, w_hn = p["weight_hh"].split([H, H])
    b_hf, b_hn = (None, None) if p["bias_hh"] is None else p["bias_hh"].split([H, H])
    f = torch.sigmoid(x_f + tc.linear(h, w_hf, b_hf))
    n = torch.tanh(x_n + tc.linear(f * h, w_hn, b_hn))
    return (h + f * (n - h),)


def mgu_step_jax(x_proj_t, state, p):
    """One MGU step for rnnbench.jax: x_proj_t = W_ih x + b_ih (B, 2H), hoisted by the driver for
    all steps at once (the default `project`); p holds weight_hh, bias_hh (None without bias).

        f  = sigmoid(x_f + h W_hf^T + b_hf)
        n  = tanh(x_n + (f * h) W_hn^T + b_hn)
        h' = (1 - f) * h + f * n  (= h + f * (n - h))
    """
    import jax
    import jax.numpy as jnp

    from rnnbench.jax.cells import linear

    (h,) = state
    x_f, x_n = jnp.split(x_proj_t, 2, axis=-1)
    w_hf, w_hn = jnp.split(p["weight_hh"], 2)
    b_hf, b_hn = (None, None) if p["bias_hh"] is None else jnp.split(p["bias_hh"], 2)
    f = jax.nn.sigmoid(x_f + linear(h, w_hf, b_hf))
    n = jnp.tanh(x_n + linear(f * h, w_hn, b_hn))
    return (h + f * (n - h),)

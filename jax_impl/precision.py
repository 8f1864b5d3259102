"""`shared.precision`'s names in JAX terms: the storage dtype and the compute dtype."""

from __future__ import annotations

import jax.numpy as jnp

from shared.precision import precision


def storage_dtype(name: str):
    """The dtype parameters and inputs are stored in; ValueError naming the valid names."""
    return jnp.dtype(precision(name).storage)


def compute_dtype(name: str):
    """The `dtype=` (Flax's compute dtype) of a mixed precision, None for a pure one."""
    p = precision(name)
    return jnp.dtype(p.compute) if p.mixed else None

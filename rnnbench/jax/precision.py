"""`rnnbench.core.precision`'s names in JAX terms: the storage dtype, the compute dtype, and IEEE float32."""

from __future__ import annotations

import jax.numpy as jnp

from rnnbench.core.precision import precision


def storage_dtype(name: str):
    """The dtype parameters and inputs are stored in; ValueError naming the valid names."""
    return jnp.dtype(precision(name).storage)


def compute_dtype(name: str):
    """The `dtype=` (Flax's compute dtype) of a mixed precision, None for a pure one."""
    p = precision(name)
    return jnp.dtype(p.compute) if p.mixed else None


def ieee_float32():
    """XLA computes float32 dots as float32, not TF32, inside this context.

    On an Ampere or newer GPU, XLA's default precision lets float32 matrix products run in
    TF32 (about 10 mantissa bits): more than a hundred times the float32 bound, and not
    the arithmetic the other rungs do.  `jax.default_matmul_precision("highest")` is part
    of jit's cache key, so a function must be called inside it, not only traced.  No
    effect on the CPU.  The mirror of `rnnbench.torch.precision.ieee_float32`.
    """
    import jax
    return jax.default_matmul_precision("highest")

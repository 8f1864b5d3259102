"""The tolerance policy, in one place: one derived rule for every implementation and dtype.

Every implementation's outputs, final states and gradients are compared with the float64
NumPy reference by maximum absolute error, per array (`key`: "output", "h_n", "c_n",
"grad/<name>").  The bound on an array's error is

    tol = LAMBDA * u(dtype) * sqrt(n * d) * max(1, max |reference value|)

- `u(dtype)`: the unit roundoff of the dtype the arithmetic runs in (2^-53 float64, 2^-24
  float32, 2^-11 float16, 2^-8 bfloat16; a mixed precision such as amp_bfloat16 takes its
  compute dtype's, `rnnbench.core.precision`);
- `n`: the longest sum the value depends on within one step: the gate pre-activation
  W_ih x + W_hh h + b_ih + b_hh, n = input size + h size + 2 of the widest layer (+ H
  with a projection); a weight or bias gradient also sums over every step and sequence,
  n = max(that, T * B);
- `d`: the depth, how many such steps feed the value: T * num_layers forward, twice that
  for a gradient (the backward pass walks the same chain back);
- `LAMBDA = 8`: the confidence constant of the probabilistic rounding-error bound
  (Higham and Mary, SIAM J. Sci. Comput. 2019: a sum of n rounded terms errs by more than
  lambda * sqrt(n) * u * sum|terms| with probability at most 2 exp(-lambda^2 (1-u)^2 / 2),
  about 3e-14 for lambda = 8); errors of independent steps add like a random walk, hence
  sqrt(n * d) rather than n * d;
- the scale: values (and gradients) larger than 1 err in proportion; the gates squash
  every value into [-1, 1] before it reaches the next step, so below 1 the absolute error
  does not shrink with the value;
- a cell that normalises N features inside its step (the LayerNorm LSTM: N = 4H) divides
  by their standard deviation, which scales rounding errors by up to sqrt(N) (for centred
  values max |v| <= sqrt(N) std): the catalogue declares it (`CellDef.normalizes`) and the
  growth factor includes it.

`tests/cross/test_parity_matrix.py` checks the rule on every shared vector and rung it runs:
no observed error exceeds it, and it is not vacuous (per rung and dtype, float32 and bfloat16
included, the worst error reaches at least 1/50 of it; a bound 100x looser fails, and a
planted sigmoid candidate gate fails the bfloat16 bound on every rung).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from .precision import precision

UNIT_ROUNDOFF = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
DTYPES = tuple(UNIT_ROUNDOFF)
LAMBDA = 8.0


def growth(spec, seq_len: int, batch: int, key: str) -> float:
    """sqrt(n * d) of the rule for array `key` of a case (see the module docstring)."""
    widest = max(spec.layer_input_size(layer) for layer in range(spec.num_layers))
    n = widest + spec.output_hidden_size + 2 + (spec.hidden_size if spec.proj_size else 0)
    d = max(1, seq_len) * spec.num_layers
    if key.startswith("grad/"):
        d *= 2
        if not key.startswith(("grad/x", "grad/h0", "grad/c0")):
            n = max(n, seq_len * batch)
    return math.sqrt(n * d) * spec.cell_def.error_growth(spec.hidden_size)


def tolerance(dtype: str, spec, seq_len: int, batch: int, key: str, magnitude: float) -> float:
    """The bound on the max abs error of array `key` (reference values up to `magnitude`)."""
    u = UNIT_ROUNDOFF[precision(dtype).compute]  # mixed precision: the arithmetic's dtype
    return LAMBDA * u * growth(spec, seq_len, batch, key) * max(1.0, float(magnitude))


def bounds(expected: Mapping[str, np.ndarray], dtype: str, spec, seq_len: int, batch: int) -> dict[str, float]:
    """The bound of every array of a case's expected results."""
    return {key: tolerance(dtype, spec, seq_len, batch, key, float(np.max(np.abs(want))) if np.size(want) else 0.0)
            for key, want in expected.items()}


def case_sizes(spec, x) -> tuple[int, int]:
    """(T, B) of a case's input x in the spec's layout (2-D x: unbatched, B = 1)."""
    shape = np.shape(x)
    if len(shape) == 2:
        return shape[0], 1
    return (shape[1], shape[0]) if spec.batch_first else (shape[0], shape[1])


def max_errors(expected: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Max absolute error per key of `expected`; a missing key or wrong shape raises."""
    errors = {}
    for key, want in expected.items():
        if key not in got:
            raise KeyError(f"result has no {key!r} (has: {', '.join(sorted(got))})")
        have = np.asarray(got[key], dtype=np.float64)
        want = np.asarray(want, dtype=np.float64)
        if have.shape != want.shape:
            raise ValueError(f"{key}: shape {have.shape}, expected {want.shape}")
        errors[key] = float(np.max(np.abs(have - want))) if want.size else 0.0
    return errors


def assert_close(expected: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray], dtype: str, context: str = "",
                 *, spec, x) -> dict[str, float]:
    """Raise AssertionError naming every key whose error exceeds its bound; return the errors.

    `spec` and `x` (the case's input, for T and B) size the bound.
    """
    seq_len, batch = case_sizes(spec, x)
    limits = bounds(expected, dtype, spec, seq_len, batch)
    errors = max_errors(expected, got)
    bad = {k: e for k, e in errors.items() if not e <= limits[k]}
    if bad:
        worst = ", ".join(f"{k}: {e:.3g} > {limits[k]:.3g}" for k, e in sorted(bad.items(), key=lambda kv: -kv[1]))
        raise AssertionError(f"{context} exceeds the {dtype} bound: {worst}")
    return errors

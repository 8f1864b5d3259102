"""The tolerance policy, in one place: the same for every implementation of a dtype.

Every implementation's outputs, final states and gradients are compared with the
float64 NumPy reference by maximum absolute error.  float64 runs must agree to 1e-9
(they differ from the reference only by summation order); float32 runs to 2e-5 (the
vectors are small, values O(1), so float32 rounding stays well below that).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

ATOL = {"float64": 1e-9, "float32": 2e-5}
DTYPES = tuple(ATOL)


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


def assert_close(expected: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray], dtype: str,
                 context: str = "") -> dict[str, float]:
    """Raise AssertionError naming every key whose error exceeds the dtype's tolerance."""
    atol = ATOL[dtype]
    errors = max_errors(expected, got)
    bad = {k: e for k, e in errors.items() if not e <= atol}
    if bad:
        worst = ", ".join(f"{k}: {e:.3g}" for k, e in sorted(bad.items(), key=lambda kv: -kv[1]))
        raise AssertionError(f"{context} exceeds {dtype} tolerance {atol:g}: {worst}")
    return errors

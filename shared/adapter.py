"""What every implementation offers to the tests and the benchmarks.

Each registry entry points at an *adapter*: a small object that runs one implementation
on canonical NumPy inputs (for parity) and builds a timed workload (for benchmarks).
Tests and benchmarks only ever talk to adapters, so adding an implementation means
adding one registry row, not copying tests.

Conventions for `run_case` (the same as the shared vectors):
- `x` is in the spec's layout: (T, B, I), or (B, T, I) when `spec.batch_first`.
- `h0` is (L*D, B, H_out), `c0` is (L*D, B, H) (LSTM). Both None: no initial state is
  passed (zeros). For an LSTM, h0 and c0 are given together or not at all.
- `lengths` is an int64 array (B,) (1 <= length <= T, any order) or None. With lengths
  the implementation follows packed-sequence semantics and returns `output` padded back
  to the full T with zeros past each length.
- `cotangents` maps "output", "h_n" and (LSTM) "c_n" to arrays shaped like those outputs.
  With it, the adapter back-propagates L = sum(cot_output*output) + sum(cot_h_n*h_n)
  + sum(cot_c_n*c_n) and returns the gradients.
- The computation runs in `dtype` ("float32"/"float64") on `device`; the results come
  back as float64 NumPy arrays under the keys "output", "h_n", "c_n" and, with
  cotangents, "grad/x", "grad/h0", "grad/c0" (when h0/c0 were given) and
  "grad/<param name>" for every canonical parameter.
"""

from __future__ import annotations

from typing import Mapping, Protocol, runtime_checkable

import numpy as np

from .spec import RNNSpec


@runtime_checkable
class Workload(Protocol):
    """A model and inputs built once; each call runs and synchronizes (device-complete)."""

    def forward(self) -> None:
        """One inference forward pass (no gradient bookkeeping)."""

    def train_step(self) -> None:
        """One forward + backward pass (gradients for inputs and parameters)."""


@runtime_checkable
class Adapter(Protocol):
    framework: str  # "torch" or "jax"
    key: str  # the backend / impl name inside its framework, e.g. "eager", "scan"

    def unavailable_reason(self, device: str = "cpu") -> str | None:
        """None when this implementation runs on `device` here, else the reason it cannot."""

    def unsupported_reason(self, spec: RNNSpec, *, lengths: bool = False, dtype: str = "float64") -> str | None:
        """None when the implementation supports this configuration, else why not."""

    def run_case(self, spec: RNNSpec, params: Mapping[str, np.ndarray], x: np.ndarray,
                 h0: np.ndarray | None = None, c0: np.ndarray | None = None,
                 lengths: np.ndarray | None = None,
                 cotangents: Mapping[str, np.ndarray] | None = None, *,
                 dtype: str = "float64", device: str = "cpu") -> dict[str, np.ndarray]:
        """Run forward (and backward with cotangents); see the module docstring."""

    def make_workload(self, spec: RNNSpec, *, seq_len: int, batch: int, dtype: str = "float32",
                      device: str = "cpu", seed: int = 0) -> Workload:
        """Build a timed workload: random inputs and canonical parameters from `seed`."""

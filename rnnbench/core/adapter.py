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

from .capabilities import BackendUnavailableError, UnsupportedConfigError
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

    def unsupported_reason(self, spec: RNNSpec, *, lengths: bool = False, dtype: str = "float64",
                           device: str | None = None) -> str | None:
        """None when the implementation supports this configuration (on `device`, when given), else why not.

        `dtype` is a precision name of `rnnbench.core.precision` (float32, bfloat16, amp_bfloat16, ...)."""

    def run_case(self, spec: RNNSpec, params: Mapping[str, np.ndarray], x: np.ndarray,
                 h0: np.ndarray | None = None, c0: np.ndarray | None = None,
                 lengths: np.ndarray | None = None,
                 cotangents: Mapping[str, np.ndarray] | None = None, *,
                 dtype: str = "float64", device: str = "cpu") -> dict[str, np.ndarray]:
        """Run forward (and backward with cotangents); see the module docstring."""

    def make_workload(self, spec: RNNSpec, *, seq_len: int, batch: int, dtype: str = "float32",
                      device: str = "cpu", seed: int = 0, lengths=None, checked: bool = False) -> Workload:
        """Build a timed workload: random inputs and canonical parameters from `seed` (`lengths`:
        a packed batch of those lengths).  It asks the capability check first and raises its
        refusal (`BackendAdapter.check`), unless `checked`: the caller asked already, once, and
        recorded a refusal itself (the study's worker, `rnnbench.measure.measurement.refusal`; asv)."""


class BackendAdapter:
    """The capability questions of an `Adapter`, answered the same way in both frameworks: a
    framework's adapter class sets `framework` and `backends` (its `backends` package, whose
    functions have the same names in both) and adds `run_case` and `make_workload`."""

    framework: str
    backends = None  # the framework's backends package (rnnbench.torch.backends, rnnbench.jax.backends)

    def __init__(self, key: str):
        self.key = self.backends.check_backend_name(key)  # unknown -> UnknownBackendError naming the valid ones
        self.capabilities = self.backends.capabilities(self.key)

    @property
    def name(self) -> str:
        return f"{self.framework}.{self.key}"

    def unavailable_reason(self, device: str = "cpu") -> str | None:
        return self.backends.unavailable_reason(self.key, device)

    def unsupported_reason(self, spec: RNNSpec, *, lengths: bool = False, dtype: str = "float64",
                           device: str | None = None) -> str | None:
        """The declaration's verdict, with the caveat of a rung that runs a configuration but
        cannot give all its gradients (the parity matrix and the study check every gradient)."""
        return (self.backends.unsupported_reason(self.key, spec, lengths=lengths, dtype=dtype, device=device)
                or self.backends.gradient_reason(self.key, spec))

    def check(self, spec: RNNSpec, *, lengths: bool, dtype: str, device: str, gradients: bool = False) -> None:
        """A measurement's one ask (`run_case`, `make_workload` unless its caller asked already):
        `BackendUnavailableError` or `UnsupportedConfigError` (a ValueError) with the reason, or
        nothing.  With `gradients` (a workload's train step) the gradient caveat counts too;
        `run_case` leaves it to its caller (`unsupported_reason`), so that a rung is still
        compared where it runs."""
        reason = self.unavailable_reason(device)
        if reason is not None:
            raise BackendUnavailableError(f"{self.name} cannot run on {device}: {reason}")
        reason = self.backends.unsupported_reason(self.key, spec, lengths=lengths, dtype=dtype, device=device)
        if reason is None and gradients:
            reason = self.backends.gradient_reason(self.key, spec)
        if reason is not None:
            raise UnsupportedConfigError(reason)


@runtime_checkable
class FrameworkAdapter(Protocol):
    """What the harness needs from a framework as a whole: the module-level functions of
    `rnnbench.torch.adapter` and `rnnbench.jax.adapter` (named by `rnnbench.core.registry.FRAMEWORKS`).

    With these, nothing in `shared/` imports torch, jax or the framework packages: the
    study, the parity matrix and training parity call them.
    """

    def get_adapter(self, key: str) -> Adapter:
        """The adapter of rung `key` (a backend name; old names are accepted as aliases)."""

    def available_backends(self, device: str = "cpu") -> tuple[str, ...]:
        """The rungs that run on `device` here, in ladder order."""

    def set_threads(self, threads: int) -> None:
        """Size the framework's intra-op thread pool (call after the env is pinned)."""

    def reset_peak_memory(self, device: str) -> None:
        """Start a peak-device-memory window (no-op where the framework has none)."""

    def peak_memory_bytes(self, device: str) -> int | None:
        """Peak device memory since `reset_peak_memory`, or None (CPU: the study uses RSS)."""

    def gemm_gflops(self, m: int, k: int, n: int, *, timer, device: str, dtype: str = "float32",
                    min_time: float = 0.1, steps: int | None = None) -> dict[str, float | None]:
        """GFLOP/s of an (m, k) x (k, n) GEMM, each call timed by `timer(fn, sync, min_time)` (the
        measurement core's `best_call_seconds`), with each GEMM library the framework's rungs
        can use, by library name (torch: "torch.mm", "onednn"; jax: "xla"); None where a
        library cannot run here.  With `steps` (n a multiple of k), also "chain": `steps`
        dependent GEMMs in one compiled loop, the recurrent step without per-call dispatch."""

    def trainer(self):
        """The framework's training module: `train(config, key, dtype, **kw)`,
        `hidden_grad_norms(config, key, steps, **kw)`, `evaluate_mse(...)`."""

    def versions(self) -> dict[str, str]:
        """Versions of the framework's packages (e.g. torch; jax, jaxlib, flax)."""

    def kernel_choices(self) -> dict:
        """Machine-dependent kernel choices this process made so far (torch: the bptt rung's
        GEMM policy and, per GEMM shape, the library it runs), for the study's records."""

"""GEMMs for the hand-written RNN kernels: oneDNN where it runs, BLAS everywhere else.

`nn.LSTM` uses oneDNN on the CPU, whose prepacked inner-product primitive runs the RNN step
shapes at two to three times the GFLOP/s of `torch.mm` (MKL) here (docs/torch.md has the
figures), so a custom LSTM whose GEMMs go through `torch.mm` cannot catch up however well
it fuses the rest.  This module gives the custom kernels one small object, `Gemm`, that
computes

    y = x @ W^T (+ bias) (+ add)

with `torch.ops.mkldnn._linear_pointwise` and a weight prepacked once by
`torch.ops.mkldnn._reorder_linear_weight` when that is possible (CPU, float32, oneDNN
built in, the ops present), and with `torch.addmm`/`torch.mm` on a once-transposed weight
otherwise (float64, CUDA (cuBLAS), a torch without the ops).  Nothing here records
autograd history: it is meant for the inside of custom `autograd.Function`s.

Which library runs is a policy (`use_gemm_policy`, or the environment variable
RNNBENCH_GEMM for the process): "blas" (the default), "onednn", or "auto" (time both on
the first call of each shape, keep the faster for the rest of the process).  The default
is BLAS because that is what won end to end on the shared 2-core machines where it was
measured (oneDNN splits the small step GEMM over both threads and every step waits for the
slower one); on an idle machine oneDNN can win: measure before choosing (docs/torch.md).
`use_onednn(True/False)` sets policy "onednn"/"blas" in a `with` block.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time

import torch

_state = threading.local()

POLICIES = ("auto", "onednn", "blas")
_ENV = "RNNBENCH_GEMM"  # default policy for the process: auto | onednn | blas


def _ops_present() -> bool:
    mkldnn = getattr(torch.ops, "mkldnn", None)
    try:
        return (torch.backends.mkldnn.is_available()
                and hasattr(mkldnn, "_linear_pointwise") and hasattr(mkldnn, "_reorder_linear_weight"))
    except (AttributeError, RuntimeError):  # torch.ops raises on unknown namespaces/ops
        return False


_OPS_PRESENT = _ops_present()


def _default_policy() -> str:
    policy = os.environ.get(_ENV, "blas").strip().lower() or "blas"
    if policy not in POLICIES:
        raise ValueError(f"{_ENV} must be one of {POLICIES}, got {policy!r}")
    return policy


def gemm_policy() -> str:
    """The GEMM path policy in this thread: "blas" (default), "onednn" (whenever it can
    run) or "auto" (time both once per shape, keep the faster)."""
    return getattr(_state, "policy", None) or _default_policy()


@contextlib.contextmanager
def use_gemm_policy(policy: str):
    """Temporarily set the GEMM path policy ("auto", "onednn" or "blas") in this thread."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    previous = getattr(_state, "policy", None)
    _state.policy = policy
    try:
        yield
    finally:
        _state.policy = previous


def onednn_enabled() -> bool:
    """Whether the oneDNN path may be used (not under `use_onednn(False)` / policy "blas")."""
    return gemm_policy() != "blas"


@contextlib.contextmanager
def use_onednn(enabled: bool):
    """`use_onednn(False)`: BLAS only (policy "blas"); `use_onednn(True)`: oneDNN wherever
    it can run (policy "onednn")."""
    with use_gemm_policy("onednn" if enabled else "blas"):
        yield


def onednn_unavailable_reason(device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> str | None:
    """None when `Gemm` would use oneDNN for tensors of this device and dtype, else why not."""
    device = torch.device(device)
    if not _OPS_PRESENT:
        return "this torch build has no oneDNN linear ops (torch.ops.mkldnn._linear_pointwise)"
    if device.type != "cpu":
        return f"oneDNN linear runs on the CPU only (device is {device})"
    if dtype != torch.float32:
        return f"oneDNN linear does not take {dtype} (float32 only here)"
    if not onednn_enabled():
        return "switched off (use_onednn(False) or GEMM policy 'blas')"
    return None


# Winner of the "auto" policy per (rows, in, out, dtype, threads, bias?, add?), per process.
_TUNED: dict[tuple, str] = {}


def tuned_choices() -> dict[tuple, str]:
    """What the "auto" policy chose so far: key (rows, in, out, dtype, threads, bias, add)."""
    return dict(_TUNED)


class Gemm:
    """`y = x @ weight^T (+ bias) (+ add)` for a fixed `weight` (N, K), prepared once.

    Which library runs it follows `gemm_policy()` at construction.  Under "auto" the first
    call of each shape times both libraries on the real operands (interleaved samples)
    and every later call of that shape in the process uses the faster.  (Caveat,
    measured: timed in isolation oneDNN can win a shape that loses inside the RNN loop
    under load, so "auto" is not the default.)  `batch_size` is the expected number of rows of `x`, for oneDNN's weight
    layout (any row count still works).  Calls never record autograd history.
    """

    TUNE_ROUNDS = 7  # rounds of interleaved samples; the median round decides
    TUNE_CALLS = 2  # calls per sample

    def __init__(self, weight: torch.Tensor, batch_size: int | None = None, tune: bool = True):
        """`tune=False`: under "auto", use oneDNN without timing (for a GEMM run once per
        call, where timing both would cost more than it can save)."""
        if weight.dim() != 2:
            raise ValueError(f"Gemm weight must be 2-D (N, K), got shape {tuple(weight.shape)}")
        self.out_features, self.in_features = weight.shape
        self._weight = weight.detach()
        self._batch_size = batch_size
        self._packed = self._weight_t = None
        policy = gemm_policy()
        if onednn_unavailable_reason(weight.device, weight.dtype) is not None:
            self.path = "blas"
        else:
            self.path = policy if policy != "auto" else (None if tune else "onednn")  # None: at the first call

    @property
    def onednn(self) -> bool:
        """True when this Gemm runs (or, undecided under "auto", may run) on oneDNN."""
        return self.path != "blas"

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None, add: torch.Tensor | None = None,
                 out: torch.Tensor | None = None) -> torch.Tensor:
        """x (M, K) -> (M, N).  `add` (M, N) is added; `out`, if given, receives the result
        (BLAS writes it directly; oneDNN allocates its result, so `out` costs a copy)."""
        if self.path is None:
            self.path = self._choose(x, bias, add)
        if self.path == "onednn":
            return self._onednn(x, bias, add, out)
        return self._blas(x, bias, add, out)

    def _onednn(self, x, bias, add, out):
        if self._packed is None:
            with torch.no_grad():
                self._packed = torch.ops.mkldnn._reorder_linear_weight(self._weight.contiguous(), self._batch_size)
        if add is not None:
            y = torch.ops.mkldnn._linear_pointwise.binary(x, add, self._packed, bias, "add")
        else:
            y = torch.ops.mkldnn._linear_pointwise(x, self._packed, bias, "none", [], "")
        if out is not None:
            out.copy_(y)
            return out
        return y

    def _blas(self, x, bias, add, out):
        if self._weight_t is None:
            # BLAS is fastest with the right operand contiguous (measured: mm(x, W^T
            # contiguous) beats mm(x, W.t()) by about 10% on the step shape).
            self._weight_t = self._weight.t().contiguous()
        if add is not None:
            if bias is not None:
                add = add + bias
            return torch.addmm(add, x, self._weight_t, out=out) if out is not None else torch.addmm(add, x, self._weight_t)
        if bias is not None:
            return torch.addmm(bias, x, self._weight_t, out=out) if out is not None else torch.addmm(bias, x, self._weight_t)
        return torch.mm(x, self._weight_t, out=out) if out is not None else torch.mm(x, self._weight_t)

    def _choose(self, x, bias, add) -> str:
        key = (x.shape[0], self.in_features, self.out_features, x.dtype, torch.get_num_threads(),
               bias is not None, add is not None)
        if key not in _TUNED:
            times = {"onednn": [], "blas": []}
            with torch.no_grad():
                for _ in range(self.TUNE_ROUNDS):  # interleaved, so a burst of load hits both
                    for path, run in (("onednn", self._onednn), ("blas", self._blas)):
                        run(x, bias, add, None)  # warm (first oneDNN call creates the primitive)
                        start = time.perf_counter()
                        for _ in range(self.TUNE_CALLS):
                            run(x, bias, add, None)
                        times[path].append(time.perf_counter() - start)
            _TUNED[key] = min(times, key=lambda p: statistics.median(times[p]))
        return _TUNED[key]

    def __repr__(self) -> str:
        path = {"onednn": "oneDNN", "blas": "BLAS", None: "auto: undecided"}[self.path]
        return f"Gemm({self.in_features} -> {self.out_features}, {path})"

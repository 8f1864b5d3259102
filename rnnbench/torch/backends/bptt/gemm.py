"""GEMMs for the hand-written RNN kernels: oneDNN where it runs, BLAS everywhere else.

`nn.LSTM` uses oneDNN on the CPU, whose prepacked inner-product primitive can run the RNN
step shapes at a higher GFLOP/s than `torch.mm` (MKL) (docs/torch.md has the figures, from
the committed study), so a custom LSTM whose GEMMs go through `torch.mm` may not catch up
however well it fuses the rest.  This module gives the custom kernels one small object, `Gemm`, that
computes

    y = x @ W^T (+ bias) (+ add)

with `torch.ops.mkldnn._linear_pointwise` and a weight prepacked once by
`torch.ops.mkldnn._reorder_linear_weight` when that is possible (CPU, float32, oneDNN
built in, the ops present), and with `torch.addmm`/`torch.mm` on a once-transposed weight
otherwise (float64, CUDA (cuBLAS), a torch without the ops).  Nothing here records
autograd history: it is meant for the inside of custom `autograd.Function`s.

Which library runs is a policy (`use_gemm_policy`, or the environment variable
RNNBENCH_GEMM for the process): "auto" (the default: decided on the machine that runs the
code, per GEMM shape), "onednn" or "blas".  Which library wins differs between machines
and between shapes (oneDNN splits a small step GEMM over every thread, MKL may not; AMX and
AVX-512 machines differ), so no fixed default can be right everywhere: "auto" times both
libraries on the first call of each shape, in chains of back-to-back calls like the RNN
loop's, interleaved over several rounds, and takes oneDNN only when it wins by a clear
margin in the median round (a tie stays on BLAS, which needs no prepacked weight).  The
decision is cached per machine (CPU model and flags, torch version, thread count) in
`$RNNBENCH_CACHE_DIR/gemm-choices.json` (default `~/.cache/rnnbench`), so one noisy process
cannot flip it for the next ones; delete the file to decide again.
`use_onednn(True/False)` sets policy "onednn"/"blas" in a `with` block.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import statistics
import threading
import time
from pathlib import Path

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
    policy = os.environ.get(_ENV, "auto").strip().lower() or "auto"
    if policy not in POLICIES:
        raise ValueError(f"{_ENV} must be one of {POLICIES}, got {policy!r}")
    return policy


def gemm_policy() -> str:
    """The GEMM path policy in this thread: "auto" (default: decided on this machine per
    shape, cached), "onednn" (whenever it can run) or "blas"."""
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


# Winner of the "auto" policy per (rows, in, out, dtype, threads, bias?, add?, out=?): this process's
# view of the per-machine cache file.
_TUNED: dict[tuple, str] = {}
TUNE_MARGIN = 0.05  # oneDNN must be this much faster in the median round to be chosen


def tuned_choices() -> dict[tuple, str]:
    """What the "auto" policy chose so far: key (rows, in, out, dtype, threads, bias?, add?, out=?)."""
    return dict(_TUNED)


def cache_path() -> Path:
    """Where "auto" keeps its decisions for this machine (RNNBENCH_CACHE_DIR, else
    $XDG_CACHE_HOME/rnnbench, else ~/.cache/rnnbench)."""
    root = os.environ.get("RNNBENCH_CACHE_DIR") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rnnbench"
    return Path(root) / "gemm-choices.json"


def machine_fingerprint() -> str:
    """What a GEMM decision depends on besides the shape: CPU model and flags, torch build."""
    info = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            info.setdefault(name.strip(), value.strip())  # the first processor's lines
    except OSError:
        pass
    model, flags = info.get("model name") or platform.processor() or platform.machine(), info.get("flags", "")
    digest = hashlib.sha256(" ".join(sorted(flags.split())).encode()).hexdigest()[:12]
    return f"{model} | flags {digest} | cpus {os.cpu_count()} | torch {torch.__version__}"


def choice_key_text(key: tuple) -> str:
    """A decision's key as the cache file and the study's records write it."""
    rows, k, n, dtype, threads, bias, add, out = key
    return (f"{rows}x{k}x{n} {str(dtype).replace('torch.', '')} threads={threads} "
            f"bias={int(bias)} add={int(add)} out={int(out)}")


def _read_cache() -> dict:
    try:
        data = json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _cached_choice(key: tuple) -> str | None:
    choice = _read_cache().get(machine_fingerprint(), {}).get(choice_key_text(key))
    return choice if choice in ("onednn", "blas") else None


def _store_choice(key: tuple, choice: str) -> None:
    """Merge one decision into the cache file (written atomically; a failure only costs a re-tune)."""
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _read_cache()
        data.setdefault(machine_fingerprint(), {})[choice_key_text(key)] = choice
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass


def decide(times: dict[str, list[float]], margin: float = TUNE_MARGIN) -> str:
    """oneDNN if its median paired time ratio to BLAS (round by round) is below 1 - margin, else BLAS."""
    ratios = [o / b for o, b in zip(times["onednn"], times["blas"]) if b > 0]
    return "onednn" if ratios and statistics.median(ratios) < 1 - margin else "blas"


class Gemm:
    """`y = x @ weight^T (+ bias) (+ add)` for a fixed `weight` (N, K), prepared once.

    Which library runs it follows `gemm_policy()` at construction.  Under "auto" the first
    call of each shape takes this machine's cached decision, or makes it (module docstring)
    on the real operands.  `batch_size` is the expected number of rows of `x`, for oneDNN's
    weight layout (any row count still works).  Calls never record autograd history.
    """

    TUNE_ROUNDS = 9  # rounds of interleaved samples; the median round's ratio decides
    TUNE_MIN_S = 0.002  # each sample is a chain of back-to-back calls at least this long

    def __init__(self, weight: torch.Tensor, batch_size: int | None = None):
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
            self.path = policy if policy != "auto" else None  # None: decided at the first call

    @property
    def onednn(self) -> bool:
        """True when this Gemm runs (or, undecided under "auto", may run) on oneDNN."""
        return self.path != "blas"

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None, add: torch.Tensor | None = None,
                 out: torch.Tensor | None = None) -> torch.Tensor:
        """x (M, K) -> (M, N).  `add` (M, N) is added; `out`, if given, receives the result
        (BLAS writes it directly; oneDNN allocates its result, so `out` costs a copy)."""
        if self.path is None:
            self.path = self._choose(x, bias, add, out)
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
            # BLAS runs the step shape faster with the right operand contiguous (W^T made
            # contiguous once) than with the transposed view W.t().
            self._weight_t = self._weight.t().contiguous()
        if add is not None:
            if bias is not None:
                add = add + bias
            return torch.addmm(add, x, self._weight_t, out=out) if out is not None else torch.addmm(add, x, self._weight_t)
        if bias is not None:
            return torch.addmm(bias, x, self._weight_t, out=out) if out is not None else torch.addmm(bias, x, self._weight_t)
        return torch.mm(x, self._weight_t, out=out) if out is not None else torch.mm(x, self._weight_t)

    def _choose(self, x, bias, add, out) -> str:
        key = (x.shape[0], self.in_features, self.out_features, x.dtype, torch.get_num_threads(),
               bias is not None, add is not None, out is not None)
        if key not in _TUNED:
            choice = _cached_choice(key)
            if choice is None:
                choice = decide(self._time_both(x, bias, add, out))
                _store_choice(key, choice)
            _TUNED[key] = choice
        return _TUNED[key]

    def _time_both(self, x, bias, add, out) -> dict[str, list[float]]:
        """Seconds per call of each library, in interleaved rounds of back-to-back chains."""
        runs = {"onednn": self._onednn, "blas": self._blas}
        with torch.no_grad():
            calls = {}
            for path, run in runs.items():  # warm (the first oneDNN call creates the primitive), size the chain
                run(x, bias, add, out)
                start = time.perf_counter()
                run(x, bias, add, out)
                calls[path] = max(1, min(64, int(self.TUNE_MIN_S / max(time.perf_counter() - start, 1e-7))))
            chain = max(calls.values())
            times = {path: [] for path in runs}
            for _ in range(self.TUNE_ROUNDS):  # interleaved, so a burst of load hits both
                for path, run in runs.items():
                    start = time.perf_counter()
                    for _ in range(chain):
                        run(x, bias, add, out)
                    times[path].append((time.perf_counter() - start) / chain)
        return times

    def __repr__(self) -> str:
        path = {"onednn": "oneDNN", "blas": "BLAS", None: "auto: undecided"}[self.path]
        return f"Gemm({self.in_features} -> {self.out_features}, {path})"

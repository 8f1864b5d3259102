"""One measurement, the worker's `measure` command: a rung's times, memory and parity on one workload.

`measure`: ask once whether the rung runs the configuration (`refusal`: a refused one is
recorded "skipped" with the reason, and the build does not ask again); build the workload;
time the first forward and the first train step (trace + compile) separately; warm up; record
peak RSS (the rung alone: one process per measurement) and, on CUDA, peak device memory; then,
with a `baseline` job (float32 nn.LSTM / nn.GRU of the same workload), build it too and time
both alternately, pair by pair (`timing.time_pairs`: at least 5 pairs, on until `budget_s`),
keeping every pair so that the study can pool processes (`rnnbench.measure.stats`); without one,
time up to `repeats` calls (`timing.time_calls`: stopping early, after at least 3, once
`budget_s` is spent).  A job's `phases` may name only one: the study's custom-cell rows are
["train"], its one-thread rows ["forward"].  Median and IQR of the rung's own times; GFLOP/s
from `RNNSpec.flops` (train step = 3x forward FLOPs: each GEMM has two in backward); and, if
asked, the parity error of the rung against the float64 reference on a few small shared
vectors (`parity_check`).

The record is saved after every phase (`isolated.write_json`), so a crash, hang or
out-of-memory kill still leaves what was measured before it, and the phase it was in.
"""

from __future__ import annotations

import importlib
import os
import resource
import time
import traceback

from .isolated import write_json
from .parity_check import parity
from .timing import MIN_PAIRS, summarize, time_calls, time_pairs, timed
from .workloads import Workload


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def current_rss_bytes() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def load_adapter(job: dict):
    """The adapter the job names (`adapter_path`, "module:factory", and `adapter_key`)."""
    from rnnbench.core.registry import _load_adapter

    return _load_adapter(job["adapter_path"], job["adapter_key"])


class _NoFramework:
    """What the harness asks of a framework, for adapters whose module offers none (tests' fakes)."""

    def set_threads(self, threads):
        pass

    def reset_peak_memory(self, device):
        pass

    def peak_memory_bytes(self, device):
        return None

    def versions(self):
        return {}

    def kernel_isa(self, device):
        return None

    def kernel_choices(self):
        return {}


def framework_of(job: dict):
    """The FrameworkAdapter functions (`rnnbench.core.adapter`) of the job's adapter: its module."""
    module = importlib.import_module(job["adapter_path"].partition(":")[0])
    fallback = _NoFramework()
    return type("Framework", (), {name: staticmethod(getattr(module, name, getattr(fallback, name)))
                                  for name in ("set_threads", "reset_peak_memory", "peak_memory_bytes", "versions",
                                               "kernel_isa", "kernel_choices")})


def refusal(adapter, spec, *, lengths: bool, dtype: str, device: str) -> str | None:
    """A measurement's one capability ask: why the rung cannot run this configuration here (it
    cannot run on `device`; or the declaration, with the gradient caveat, refuses it), the
    reason a skipped record carries; None when it runs.  The build that follows does not ask
    again (`make_workload(..., checked=True)`)."""
    return adapter.unavailable_reason(device) or adapter.unsupported_reason(spec, lengths=lengths, dtype=dtype,
                                                                           device=device)


def _make(adapter, spec, w: dict, dtype: str, device: str, seed: int, lengths, *, checked: bool = False):
    return adapter.make_workload(spec, seq_len=w["seq_len"], batch=w["batch"], dtype=dtype, device=device,
                                 seed=seed, **({} if lengths is None else {"lengths": lengths}),
                                 **({"checked": True} if checked else {}))


def measure(job: dict, result_path: str) -> dict:
    """Measure one job; see the module docstring.  With `job["baseline"]` (the float32 nn.LSTM /
    nn.GRU of the same workload), the timed phases are paired samples of the rung and the
    baseline, alternated in this process (`time_pairs`); the record keeps every pair."""
    rec: dict = {"status": "running", "phase": "import", "pid": os.getpid()}

    def save(**updates):
        rec.update(updates)
        write_json(result_path, rec)

    save()
    w = job["workload"]
    device, dtype = job["device"], job["dtype"]
    try:
        adapter = load_adapter(job)
        fw = framework_of(job)
        fw.set_threads(job["threads"])  # the env pinned the pools before import; this sizes the rest
        workload = Workload.from_dict(w)
        spec = workload.spec(job["cell"])
        lengths = workload.lengths(job.get("seed", 0))
        reason = refusal(adapter, spec, lengths=lengths is not None, dtype=dtype, device=device)
        if reason:
            save(status="skipped", reason=reason, phase="check")
            return rec
        save(phase="build", versions=fw.versions(), baseline_rss_bytes=current_rss_bytes(),
             kernel_isa=fw.kernel_isa(device))
        fw.reset_peak_memory(device)
        t0 = time.perf_counter()
        wl = _make(adapter, spec, w, dtype, device, job.get("seed", 0), lengths, checked=True)
        phases = job.get("phases", ("forward", "train"))
        forward, train = "forward" in phases, "train" in phases
        save(build_s=time.perf_counter() - t0, phase="first_forward" if forward else "first_train_step")
        if forward:
            save(first_forward_s=timed(wl.forward), phase="first_train_step" if train else "warmup")
        if train:
            save(first_train_s=timed(wl.train_step), phase="warmup")
        warmup = job.get("warmup", 1)
        for _ in range(warmup):
            if forward:
                wl.forward()
            if train:
                wl.train_step()
        # the rung's own memory, before a baseline shares the process
        save(peak_rss_bytes=peak_rss_bytes(), peak_device_bytes=fw.peak_memory_bytes(device))
        repeats, budget, min_time = job["repeats"], job["budget_s"], job.get("min_time_s", 0.0)
        flops = spec.flops(w["seq_len"], w["batch"])
        base_job = job.get("baseline")
        base = None
        if base_job:
            save(phase="baseline_build")
            base_adapter = load_adapter(base_job)
            framework_of(base_job).set_threads(job["threads"])
            base_spec = workload.spec(base_job["cell"])
            base = _make(base_adapter, base_spec, w, base_job["dtype"], device, job.get("seed", 0), lengths)
            for _ in range(1 + warmup):
                if forward:
                    base.forward()
                if train:
                    base.train_step()
        # the per-process estimate is the study's (its records carry it); stats imports nothing of rnnbench
        from .stats import process_ratio
        for phase, on, call, mult in (("forward", forward, "forward", 1), ("train", train, "train_step", 3)):
            if not on:
                continue
            save(phase=phase)
            if base is None:
                own = time_calls(getattr(wl, call), repeats, budget, min_time_s=min_time)
                pairs = None
            else:
                pairs = time_pairs(getattr(wl, call), getattr(base, call), budget,
                                   min_pairs=min(MIN_PAIRS, repeats), min_time_s=min_time)
                own = [c for c, _ in pairs]
            st = summarize(own)
            extra = {}
            if pairs is not None:
                extra = {f"{phase}_pairs": pairs, f"{phase}_base_s": summarize([b for _, b in pairs])["median"],
                         f"{phase}_ratio": process_ratio(pairs)}
            save(**{f"{phase}_s": st["median"], f"{phase}_iqr_s": st["iqr"], f"{phase}_n": st["n"],
                    f"gflops_{phase}": mult * flops / st["median"] / 1e9}, **extra)
        save(kernel_choices=fw.kernel_choices(), phase="parity")
        del wl, base
        if job.get("parity"):
            save(**parity(adapter, job["impl"], job["cell"], dtype, device, job.get("parity_cases", 2)))
        save(status="ok", phase="done")
    except Exception as e:  # the record says what failed and where; the study goes on
        save(status="failed", reason=f"{type(e).__name__} in {rec['phase']}: {e}",
             traceback=traceback.format_exc(limit=20), peak_rss_bytes=rec.get("peak_rss_bytes") or peak_rss_bytes())
    return rec

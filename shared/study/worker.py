"""One measurement, in its own process: `python -m shared.study.worker {measure,roof,probe}`.

The runner writes a job (JSON) to a file and starts this module with `--job FILE
--result FILE`.  The worker pins its thread count before importing any framework, runs
the job and writes its record (JSON) to the result file after every phase, so a crash,
hang or out-of-memory kill still leaves what was measured before it.

`measure`: build the workload; time the first forward and the first train step (trace +
compile) separately; warm up; record peak RSS (the rung alone: one process per measurement)
and, on CUDA, peak device memory; then, with a `baseline` job (float32 nn.LSTM / nn.GRU of
the same workload), build it too and time both alternately, pair by pair (`time_pairs`: at
least 5 pairs, on until `budget_s`), keeping every pair so that the study can pool processes
(`shared.study.stats`); without one, time up to `repeats` calls (stopping early, after at
least 3, once `budget_s` is spent).  A job's `phases` may name only one: the study's
custom-cell rows are ["train"], its one-thread rows ["forward"].  Median and IQR of the rung's
own times; GFLOP/s from `RNNSpec.flops` (train step = 3x forward FLOPs: each GEMM has two in
backward); and, if asked, the parity error of the implementation against the float64
reference on a few small shared vectors.

`roof`: GEMM rates at the workloads' GEMM shapes (the roof is derived from them), with `torch.mm` (MKL on
CPU, cuBLAS on CUDA) and with oneDNN (`torch.ops.mkldnn._linear_pointwise` on a weight
prepacked by `torch.ops.mkldnn._reorder_linear_weight`), XLA's dot, and each framework's
chain of T step GEMMs in one compiled loop.

`probe`: for each implementation of one framework, why it cannot run here (or None).

Before any job, the worker imports the modules named in RNNBENCH_CELL_MODULES
(`shared.cell_modules`): users' own cells, registered at their import, exist in this
process too.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
import traceback
from pathlib import Path

from .threads import pin_threads


# ---- small helpers -------------------------------------------------------------------
def write_json(path: str | os.PathLike, data: dict) -> None:
    """Write atomically, so the runner never reads half a record."""
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def summarize(samples: list[float]) -> dict:
    """Median and interquartile range of timing samples (seconds)."""
    ordered = sorted(samples)
    if len(ordered) >= 2:
        q = statistics.quantiles(ordered, n=4, method="inclusive")
        iqr = q[2] - q[0]
    else:
        iqr = 0.0
    return {"median": statistics.median(ordered), "iqr": iqr, "min": ordered[0], "n": len(ordered)}


MAX_TIMED_CALLS = 1000  # per phase, however fast the call and however long --min-time


def time_calls(fn, repeats: int, budget_s: float, min_samples: int = 3, min_time_s: float = 0.0,
               max_samples: int = MAX_TIMED_CALLS) -> list[float]:
    """Time `fn()` `repeats` times; stop early (after `min_samples`) past `budget_s`.

    Calls faster than `min_time_s / repeats` are timed on until the phase has run
    `min_time_s` (at most `max_samples` calls): ten calls of a 2 ms step are one 20 ms
    window, too short to see past the machine's jitter.
    """
    samples: list[float] = []
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - start
        if len(samples) >= min(min_samples, repeats) and elapsed > budget_s:
            break
        if len(samples) >= repeats and (elapsed >= min_time_s or len(samples) >= max_samples):
            break
    return samples


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def current_rss_bytes() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def load_adapter(job: dict):
    from ..registry import _load_adapter

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
    """The FrameworkAdapter functions (`shared.adapter`) of the job's adapter: its module."""
    import importlib

    module = importlib.import_module(job["adapter_path"].partition(":")[0])
    fallback = _NoFramework()
    return type("Framework", (), {name: staticmethod(getattr(module, name, getattr(fallback, name)))
                                  for name in ("set_threads", "reset_peak_memory", "peak_memory_bytes", "versions",
                                               "kernel_isa", "kernel_choices")})


# ---- measure ---------------------------------------------------------------------------
PAIR_ORDER_SETTLE_S = 0.001  # idle before every paired call: the other side's threads stop spinning
MIN_PAIRS = 5
MAX_PAIRS = 200


def time_pairs(candidate, baseline, budget_s: float, min_pairs: int = MIN_PAIRS, max_pairs: int = MAX_PAIRS,
               min_time_s: float = 0.0) -> list[tuple[float, float]]:
    """(candidate_s, baseline_s) of adjacent calls, alternating which side goes first.

    At least `min_pairs`; then on while under `budget_s` or under `min_time_s` (fast calls:
    a short window sees only the machine's jitter), at most `max_pairs`.  A short sleep
    before each call lets the previous call's thread pool go idle (torch's OpenMP threads
    spin a while after a parallel region), so neither side runs beside the other's spinners.
    """
    pairs: list[tuple[float, float]] = []
    start = time.perf_counter()
    while True:
        times = {}
        for side in (("baseline", "candidate") if len(pairs) % 2 == 0 else ("candidate", "baseline")):
            time.sleep(PAIR_ORDER_SETTLE_S)
            t0 = time.perf_counter()
            (candidate if side == "candidate" else baseline)()
            times[side] = time.perf_counter() - t0
        pairs.append((times["candidate"], times["baseline"]))
        elapsed = time.perf_counter() - start
        if len(pairs) >= max_pairs:
            break
        if len(pairs) >= min_pairs and elapsed >= budget_s and elapsed >= min_time_s:
            break
    return pairs


def _make(adapter, spec, w: dict, dtype: str, device: str, seed: int, lengths):
    return adapter.make_workload(spec, seq_len=w["seq_len"], batch=w["batch"], dtype=dtype, device=device,
                                 seed=seed, **({} if lengths is None else {"lengths": lengths}))


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
        from .workloads import Workload
        workload = Workload.from_dict(w)
        spec = workload.spec(job["cell"])
        lengths = workload.lengths(job.get("seed", 0))
        reason = adapter.unavailable_reason(device) or adapter.unsupported_reason(
            spec, lengths=lengths is not None, dtype=dtype, device=device)
        if reason:
            save(status="skipped", reason=reason, phase="check")
            return rec
        save(phase="build", versions=fw.versions(), baseline_rss_bytes=current_rss_bytes(),
             kernel_isa=fw.kernel_isa(device))
        fw.reset_peak_memory(device)
        t0 = time.perf_counter()
        wl = _make(adapter, spec, w, dtype, device, job.get("seed", 0), lengths)
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


# ---- parity ----------------------------------------------------------------------------
def _generated_cases(cell: str):
    """Two small cases computed by the float64 reference (a cell without shared vectors: a user's own)."""
    import numpy as np

    from .. import reference
    from ..params import init_params
    from ..spec import RNNSpec

    cases = []
    for i, (T, B, I, H) in enumerate([(5, 3, 4, 6), (7, 2, 3, 5)]):
        spec = RNNSpec(cell, I, H)
        rng = np.random.default_rng(100 + i)
        params = init_params(spec, rng)
        x = rng.standard_normal((T, B, I))
        states = spec.state_shapes(B)
        h0 = rng.standard_normal(states["h"])
        c0 = rng.standard_normal(states["c"]) if spec.family == "lstm" else None
        fwd = reference.run_case(spec, params, x, h0, c0)
        cot = {k: rng.standard_normal(np.shape(fwd[k])) for k in ("output", "h_n", "c_n") if k in fwd}
        expected = reference.run_case(spec, params, x, h0, c0, cotangents=cot)
        cases.append(dict(name=f"generated-{cell}-{i}", spec=spec, params=params, x=x, h0=h0, c0=c0,
                          lengths=None, cotangents=cot, expected=expected))
    return cases


PARITY_CASES = ("default", "lengths_unsorted", "initial_state")


def _vector_cases(cell: str, impl: str, dtype: str, adapter, limit: int):
    from ..registry import REGISTRY
    from ..vectors import load_cases

    row = REGISTRY.get(impl)
    picked = []
    for case in load_cases():
        if case.spec.cell != cell:
            continue
        has_lengths = case.lengths is not None
        if (row.unsupported_reason(case.spec, lengths=has_lengths, dtype=dtype) if row is not None
                else adapter.unsupported_reason(case.spec, lengths=has_lengths, dtype=dtype)):
            continue
        picked.append(case)
    # A plain case and one with unsorted variable lengths when supported; the parity
    # suite covers every vector, this column is a summary measured with the timings.
    preferred = [f"{cell}_{suffix}" for suffix in PARITY_CASES]
    picked.sort(key=lambda c: (preferred.index(c.name) if c.name in preferred else len(preferred), c.x.size))
    return [dict(name=c.name, spec=c.spec, params=c.params, x=c.x, h0=c.h0, c0=c.c0, lengths=c.lengths,
                 cotangents=c.cotangents, expected={**c.expected, **c.grads}) for c in picked[:limit]]


def _has_vectors(cell: str) -> bool:
    try:
        from ..vectors import load_cases
    except ImportError:
        return False
    return any(c.spec.cell == cell for c in load_cases())


def parity(adapter, impl: str, cell: str, dtype: str, device: str, limit: int = 2) -> dict:
    """Max abs error against the float64 reference over a few small cases (outputs and
    gradients), and the largest error / bound of the tolerance rule (`shared.tolerances`)."""
    from ..tolerances import bounds, case_sizes, max_errors

    try:
        cases, source = _vector_cases(cell, impl, dtype, adapter, limit), "shared vectors"
    except ImportError:
        cases, source = _generated_cases(cell), "generated by shared.reference (no shared vectors yet)"
    if not cases and not _has_vectors(cell):  # a user's own cell: no shared vector can hold it
        cases, source = _generated_cases(cell), f"generated by shared.reference ({cell} has no shared vectors)"
    if not cases:
        return {"parity_max_error": None, "parity_note": f"no {cell} vector this implementation supports"}
    worst, worst_key, worst_case, worst_ratio = 0.0, None, None, 0.0
    for case in cases:
        got = adapter.run_case(case["spec"], case["params"], case["x"], case["h0"], case["c0"],
                               case["lengths"], case["cotangents"], dtype=dtype, device=device)
        limits = bounds(case["expected"], dtype, case["spec"], *case_sizes(case["spec"], case["x"]))
        for key, err in max_errors(case["expected"], got).items():
            ratio = err / limits[key]
            if not ratio <= worst_ratio:  # also catches NaN
                worst_ratio = ratio
            if not err <= worst:
                worst, worst_key, worst_case = err, key, case["name"]
    return {"parity_max_error": worst, "parity_worst": f"{worst_case}: {worst_key}" if worst_key else None,
            "parity_bound_ratio": worst_ratio, "parity_ok": bool(worst_ratio <= 1.0),
            "parity_cases": [c["name"] for c in cases], "parity_source": source}


# ---- GEMM roof -------------------------------------------------------------------------
ROOF_WINDOWS = 5


def best_call_seconds(fn, sync, min_time: float) -> float:
    """Best (over ROOF_WINDOWS batches) mean time of one call: the roof is an upper bound.

    Calls run in chunks that double until a batch lasts `min_time`; the device is
    synchronized at the end of each chunk, not after every call.
    """
    for _ in range(3):
        fn()
    sync()
    best = float("inf")
    for _ in range(ROOF_WINDOWS):
        n, chunk, t0 = 0, 1, time.perf_counter()
        while True:
            for _ in range(chunk):
                fn()
            n += chunk
            sync()
            elapsed = time.perf_counter() - t0
            if elapsed >= min_time:
                break
            chunk = min(2 * chunk, 1024)
        best = min(best, elapsed / n)
    return best


def roof_rows(items: list[dict], device: str, min_time: float = 0.1, frameworks=("torch", "jax"), on_row=None):
    """GEMM rates of each item's (cell, workload) shapes with the GEMM libraries of
    `frameworks` (those installed); one row per item, with what `table.derive_roof` needs.
    Libraries: torch's `mm` and oneDNN, XLA's dot; at the step shape also each framework's
    "chain" (T dependent step GEMMs in one compiled loop, no per-call dispatch)."""
    from ..registry import framework
    from .workloads import Workload

    fws = {name: framework(name) for name in frameworks}

    def gemm_gflops(m, k, n, steps):
        out = {}
        if "torch" in fws:
            rates = fws["torch"].gemm_gflops(m, k, n, device=device, min_time=min_time, steps=steps)
            out.update(mm=rates["torch.mm"], onednn=rates["onednn"])
            if steps:
                out["chain_torch"] = rates["chain"]
        if "jax" in fws:
            rates = fws["jax"].gemm_gflops(m, k, n, device=device, min_time=min_time, steps=steps)
            out["xla"] = rates["xla"]
            if steps:
                out["chain_xla"] = rates["chain"]
        return out

    cache: dict[tuple, dict] = {}
    rows = []
    for item in items:
        wl, cell = Workload.from_dict(item["workload"]), item["cell"]
        shapes = {"step": (*wl.step_gemm(cell), wl.seq_len), "input": (*wl.input_gemm(cell), None)}
        row = {"cell": cell, "workload": wl.name, "step_shape": list(shapes["step"][:3]),
               "input_shape": list(shapes["input"][:3]), "seq_len": wl.seq_len, "flops_forward": wl.flops(cell)}
        for part, shape in shapes.items():
            if shape not in cache:
                cache[shape] = gemm_gflops(*shape)
            for lib, g in cache[shape].items():
                row[f"{part}_{lib}_gflops"] = g
        rows.append(row)
        if on_row:
            on_row(row)
    return rows


def roof(job: dict, result_path: str) -> dict:
    """For each (cell, workload): GEMM GFLOP/s at its step and input shapes, per library
    (`roof_rows`).  The roofs are derived from these rates when the report is made
    (`shared.study.table.derive_roof`), so that a roof measured again at the end of the run
    can raise them."""
    from ..registry import framework

    torch_fw = framework("torch")
    torch_fw.set_threads(job["threads"])
    rec = {"status": "running", "versions": torch_fw.versions(), "rows": []}
    frameworks = ["torch"]
    try:
        jax_fw = framework("jax")
        jax_fw.set_threads(job["threads"])
        rec["versions"].update(jax_fw.versions())
        frameworks.append("jax")
    except ImportError as e:  # a torch-only install: no XLA roof, said in the record
        rec["xla_roof"] = f"no XLA roof: {e}"
    write_json(result_path, rec)

    def on_row(row):
        rec["rows"].append(row)
        write_json(result_path, rec)

    roof_rows(job["items"], job["device"], job.get("min_time", 0.1), frameworks, on_row)
    rec["status"] = "ok"
    rec["torch_threads"] = job["threads"]
    write_json(result_path, rec)
    return rec


# ---- probe -----------------------------------------------------------------------------
def probe(job: dict, result_path: str) -> dict:
    """For implementations of one framework: why each cannot run here (or None), and, for
    each cell and dtype of the study, why it cannot compute it (or None).  The runner asks
    here, in a worker, so that its own process never imports a framework."""
    from ..capabilities import Capabilities
    from ..registry import _load_adapter
    from ..spec import RNNSpec

    reasons: dict[str, str | None] = {}
    unsupported: dict[str, dict[str, str | None]] = {}
    for item in job["impls"]:
        name = item["name"]
        declared = Capabilities(**item["capabilities"]) if item.get("capabilities") else None
        try:
            adapter = _load_adapter(item["adapter_path"], item["adapter_key"])
            caps = declared or adapter.capabilities
            reasons[name] = caps.device_reason(name, job["device"]) or adapter.unavailable_reason(job["device"])
            for cell in job.get("cells", ()):
                spec = RNNSpec(cell, 4, 4)
                for dtype in job.get("dtypes", ()):
                    device = job.get("device")
                    why = declared.unsupported_reason(name, spec, dtype=dtype, device=device) if declared else None
                    unsupported.setdefault(name, {})[f"{cell}|{dtype}"] = \
                        why or adapter.unsupported_reason(spec, dtype=dtype, device=device)
        except Exception as e:
            reasons[name] = f"{name}: cannot load its adapter ({type(e).__name__}: {e})"
        write_json(result_path, {"status": "running", "reasons": reasons, "unsupported": unsupported})
    rec = {"status": "ok", "reasons": reasons, "unsupported": unsupported}
    write_json(result_path, rec)
    return rec


COMMANDS = {"measure": measure, "roof": roof, "probe": probe}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shared.study.worker", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=sorted(COMMANDS))
    parser.add_argument("--job", required=True, help="JSON file with the job")
    parser.add_argument("--result", required=True, help="where to write the result record (JSON)")
    args = parser.parse_args(argv)
    job = json.loads(Path(args.job).read_text())
    pin_threads(int(job.get("threads", 2)))  # before torch / jax are imported
    if job.get("device", "cpu") == "cpu":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")  # don't let jax look for accelerators
    try:  # after pinning threads: a cell module may import torch or jax
        from ..cell_modules import import_cell_modules
        import_cell_modules()
    except Exception as e:
        write_json(args.result, {"status": "failed", "phase": "cell modules", "reason": str(e)})
        return 1
    COMMANDS[args.command](job, args.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""asv suites: every implementation x cell x workload, the study's workloads and harness.

Suites (parametrized over implementation x cell x workload x dtype):
- `RNN.time_forward`, `RNN.time_train_step` (forward + backward), `RNN.track_gflops`
  (fwd+bwd GFLOP/s, train step = 3x forward FLOPs);
- `Memory.peakmem_train_step`: peak RSS of a process that built the workload and ran a
  train step;
- `RatioToNative.track_train_ratio`: fwd+bwd time over float32 nn.LSTM / nn.GRU of the same
  workload, both timed side by side in one process (robust to machine noise), many paired
  samples per process that asv's statistics compare;
- `PairedRatio.track_train_ratio`: the regression gate's benchmark (`make bench-compare`):
  the same samples on the gate's own workloads, whatever the profile: the quick one (Python
  overhead is nearly all of a step) and M50 (T=50,B=32,I=H=256, where the GEMMs dominate);
- `RoofFraction.track_train_roof_fraction`: the same process's fwd+bwd time against its own
  framework's GEMM roof (torch's libraries for torch rungs, XLA's for JAX rungs), the GEMM
  rates measured in setup (`rnnbench.measure.roof.roof_rows`, `rnnbench.measure.roof.derive_roof`);
  float32, the single-layer workloads (the roof needs one step GEMM);
- `FirstCall.track_first_call_seconds`: first forward + first train step (trace +
  compile) in a fresh process (`rnnbench.measure.worker`), so no cache of this process helps.

The workloads, the thread settings, the roof and the worker process are the measurement core's
(`rnnbench.measure`), as in the study.  asv runs this suite against the project's history too
(tools/asv_history.py): in an older commit each module is imported from its place then
(`_first`: the `shared`, `torch_impl` and `jax_impl` packages before the one package
`rnnbench`, and the study's modules before the measurement core left them).

Environment:
- RNNBENCH_PROFILE = quick | cpu (default) | gpu: the workloads (`rnnbench.measure.workloads`);
- RNNBENCH_DEVICE = cpu | cuda (default cuda for the gpu profile, else cpu);
- RNNBENCH_DTYPES: comma-separated precisions of `rnnbench.core.precision` (default
  float32,bfloat16,amp_bfloat16; quick: float32,amp_bfloat16; gpu: adds float16, amp_float16);
- RNNBENCH_THREADS (default 2): the same intra-op thread count for torch and XLA, set
  before either is imported;
- RNNBENCH_OPTIONS: rungs with options measured besides the registry's rows, comma-separated
  names such as `torch.scan[freezing]` or `jax.scan[unroll=4]` (`all`: the registry's
  MEASURED_OPTIONS, the compile modes of the torch.compile rungs); none by default;
- RNNBENCH_CELL_MODULES: comma-separated modules that register your own cells when
  imported (`rnnbench.core.cell_modules`); imported here, so their cells join the cell parameter.
  asv drops PYTHONPATH: make the modules importable with ASV_PYTHONPATH.

Cells: every cell of the catalogue (lstm, gru, ln_lstm, peephole_lstm, gru_reset_before,
and the ones RNNBENCH_CELL_MODULES registers); the combinations an implementation does not
run are skipped.

An implementation that cannot run here, or does not support the cell, raises
NotImplementedError in setup: asv's documented way to skip.  Workloads are built and
warmed up (first calls, compile) in setup; asv re-runs setup before every sample, so the
built workload is cached for the life of the benchmark process.  Every workload call
synchronizes the device (the Workload protocol), so times are device-complete.
"""

from __future__ import annotations

import gc
import importlib
import json
import math
import os
import statistics
import time
from functools import lru_cache



def _first(*names: str):
    """The first of the modules `names` that imports: this commit's place of a module, then its
    places in older commits (asv runs this suite against the project's history)."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name is None or not name.startswith(e.name):  # a missing dependency, not a missing place
                raise
    raise ModuleNotFoundError(f"none of {', '.join(names)}")


registry = _first("rnnbench.core.registry", "shared.registry")
try:
    import_cell_modules = _first("rnnbench.core.cell_modules", "shared.cell_modules").import_cell_modules
except ModuleNotFoundError:  # an older commit: no own cells then
    def import_cell_modules():
        return []
_catalogue = _first("rnnbench.core.catalogue", "shared.cells")
CELL_DEFS, STANDARD_CELLS, get_cell = _catalogue.CELL_DEFS, _catalogue.STANDARD_CELLS, _catalogue.get_cell
_threads = _first("rnnbench.measure.threads", "shared.measure.threads", "shared.study.threads")
_workloads = _first("rnnbench.measure.workloads", "shared.measure.workloads", "shared.study.workloads")
DEFAULT_THREADS, pin_threads = _threads.DEFAULT_THREADS, _threads.pin_threads
QUICK, Workload, profile_from_env = _workloads.QUICK, _workloads.Workload, _workloads.profile_from_env
# the adapters' modules by framework (older commits: `torch_impl.adapter`, `jax_impl.adapter`)
FRAMEWORKS = getattr(registry, "FRAMEWORKS", {"torch": "torch_impl.adapter", "jax": "jax_impl.adapter"})

PROFILE, WORKLOADS = profile_from_env()
DEVICE = os.environ.get("RNNBENCH_DEVICE") or ("cuda" if PROFILE == "gpu" else "cpu")
THREADS = int(os.environ.get("RNNBENCH_THREADS", DEFAULT_THREADS))
# The precisions (rnnbench.core.precision) asv measures: RNNBENCH_DTYPES, comma-separated; a device
# without the arithmetic (float16 on most CPUs) skips them with the reason.
DEFAULT_DTYPES = {"quick": "float32,amp_bfloat16", "gpu": "float32,bfloat16,amp_bfloat16,float16,amp_float16"}
DTYPES = [d.strip() for d in os.environ.get("RNNBENCH_DTYPES", DEFAULT_DTYPES.get(PROFILE,
                                                                                  "float32,bfloat16,amp_bfloat16"))
          .split(",") if d.strip()]
pin_threads(THREADS)  # before torch / jax are imported (they are, lazily, in setup)
import_cell_modules()  # users' own cells (after pinning: a cell module may import a framework)

# The regression gate's workloads (PairedRatio), whatever the profile: the quick one (Python
# overhead is nearly all of a step) and a mid-size one whose GEMMs dominate the step, so a
# slower GEMM path shows too.
GATE_WORKLOADS = [QUICK[0], Workload("M50", seq_len=50, batch=32, input_size=256, hidden_size=256)]
_BY_NAME = {w.name: w for w in WORKLOADS}
_BUILDABLE = {**{w.name: w for w in GATE_WORKLOADS}, **_BY_NAME}  # what _build accepts
_OPTIONS = os.environ.get("RNNBENCH_OPTIONS", "").strip()
# (no options asked: no call, so that the suite still imports older commits' registries, which had none)
OPTION_NAMES = [] if not _OPTIONS else list(registry.MEASURED_OPTIONS) if _OPTIONS == "all" else [
    registry.get(n).name for n in registry.split_names(_OPTIONS)]  # a malformed or unknown name fails here
# Names a rung had in older commits (asv runs this suite against the project's history): the
# parameters carry today's name at every commit, so that one history line follows one rung.
PREVIOUS_NAMES = {"torch.bptt": "torch.autograd"}
_TODAYS = {old: new for new, old in PREVIOUS_NAMES.items()}
IMPLS = [_TODAYS.get(n, n) for n in registry.names()]


def _pinned(suite: str, params: list[list[str]]) -> list[list[str]]:
    """`params`, or the lists RNNBENCH_ASV_PARAMS pins for `suite`.

    asv names a result after the parameter lists it discovered (at one commit), but a benchmark
    process picks its combination by *index* into the lists this module computes when it runs, at
    the commit being measured. Where the lists differ between commits (a rung, a cell or a workload
    added), an older commit would measure one combination under another's name. The targets that
    run several commits (make bench-history, make bench-compare, tools/asv_history.py) therefore
    pin every suite's lists to the working tree's (`python benchmarks/rnn.py --params`); a name the
    measured commit lacks is then skipped (NotImplementedError), never confused with another."""
    pinned = os.environ.get("RNNBENCH_ASV_PARAMS")
    return json.loads(pinned)[suite] if pinned else params


PARAMS = [IMPLS + OPTION_NAMES, list(CELL_DEFS), list(_BY_NAME), DTYPES]
PARAM_NAMES = ["impl", "cell", "workload", "dtype"]


def _older_api(fn, *args, **options):
    """fn(*args, **options) without the options an older commit's fn does not take (float32 and the
    CPU were all it had then, so dropping dtype/device asks the same question)."""
    import inspect

    params = inspect.signature(fn).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        options = {k: v for k, v in options.items() if k in params}
    return fn(*args, **options)



def _row(impl: str):
    try:
        return registry.get(impl)
    except KeyError:  # UnknownImplementationError
        if impl not in PREVIOUS_NAMES:
            raise NotImplementedError(f"{impl} is not in this commit's registry") from None
        return registry.get(PREVIOUS_NAMES[impl])


def _check(impl: str, cell: str, workload: str, dtype: str):
    """The adapter, or NotImplementedError (asv: skipped) saying why it cannot run."""
    row = _row(impl)
    if cell not in CELL_DEFS:
        raise NotImplementedError(f"cell {cell} is not in this commit's catalogue")
    if workload not in _BUILDABLE:
        raise NotImplementedError(f"workload {workload} is not in this commit's profile")
    w = _BUILDABLE[workload]
    spec = w.spec(cell)
    # asv runs this suite against the project's history too: older commits' workloads had no packed
    # ones and their checks took fewer options (_older_api)
    reason = (_older_api(row.unsupported_reason, spec, lengths=getattr(w, "packed", False), dtype=dtype,
                         device=DEVICE)
              or row.unavailable_reason(DEVICE))
    if reason:
        raise NotImplementedError(reason)
    if hasattr(registry, "framework"):  # older commits: the pinned environment was all there was
        registry.framework(row.framework).set_threads(THREADS)
    return row.adapter(), w, spec


def _build(impl: str, cell: str, workload: str, dtype: str):
    adapter, w, spec = _check(impl, cell, workload, dtype)
    lengths = w.lengths(0) if hasattr(w, "lengths") else None
    # _check asked: the build does not ask again (an older commit's make_workload asks itself)
    wl = _older_api(adapter.make_workload, spec, seq_len=w.seq_len, batch=w.batch, dtype=dtype, device=DEVICE,
                    seed=0, checked=True, **({} if lengths is None else {"lengths": lengths}))
    for _ in range(2):  # first calls trace / compile; the second settles caches
        wl.forward()
        wl.train_step()
    return wl


def _median_train_seconds(workload, calls: int) -> float:
    """Median wall time of `calls` train steps (each call synchronizes the device)."""
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter()
        workload.train_step()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def paired_ratio_samples(rung, native, *, samples: int = 40, min_samples: int = 10, seconds: float = 2.0,
                         block_s: float = 0.02, settle_s: float = 0.002) -> list[float]:
    """Ratios rung / native of train-step times taken side by side.

    Each sample times a block of k calls of one side and then k calls of the other, the
    order alternating from sample to sample (so a drift within a sample favours neither);
    k makes a block of the faster side last about `block_s` (1 for steps longer than that).
    Before each block the process sleeps `settle_s`, untimed, so the other framework's
    intra-op threads, which spin for a while after their work, are asleep before this
    side's block starts (a jax rung and nn.LSTM run in one process).  `samples` samples, or
    fewer (at least `min_samples`) once `seconds` have passed.  Python's garbage collector
    is off while timing, as in asv's timing benchmarks."""

    def block(wl, k):
        time.sleep(settle_s)
        t0 = time.perf_counter()
        for _ in range(k):
            wl.train_step()
        return time.perf_counter() - t0

    fastest = min(min(block(rung, 1), block(native, 1)) for _ in range(3))
    k = max(1, math.ceil(block_s / max(fastest, 1e-6)))
    out: list[float] = []
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        while len(out) < samples and (len(out) < min_samples or time.perf_counter() - start < seconds):
            if len(out) % 2:
                t_rung, t_native = block(rung, k), block(native, k)
            else:
                t_native, t_rung = block(native, k), block(rung, k)
            out.append(t_rung / t_native)
    finally:
        if was_enabled:
            gc.enable()
    return out


@lru_cache(maxsize=1)  # one parameter combination per benchmark process
def _warm_workload(impl: str, cell: str, workload: str, dtype: str):
    return _build(impl, cell, workload, dtype)


class RNN:
    params = _pinned("RNN", PARAMS)
    param_names = PARAM_NAMES
    number = 1  # one call per sample: calls are milliseconds to seconds long
    repeat = (3, 10, 20.0)  # min samples, max samples, max seconds
    rounds = 1  # each round is a new process that rebuilds (and recompiles) the workload
    warmup_time = 0  # setup warmed up already
    timeout = 600

    def setup(self, impl, cell, workload, dtype):
        self.workload = _warm_workload(impl, cell, workload, dtype)
        self.flops = _BY_NAME[workload].flops(cell)

    def time_forward(self, impl, cell, workload, dtype):
        self.workload.forward()

    def time_train_step(self, impl, cell, workload, dtype):
        self.workload.train_step()

    def track_gflops(self, impl, cell, workload, dtype):
        return 3 * self.flops / _median_train_seconds(self.workload, 3) / 1e9

    track_gflops.unit = "GFLOP/s"


class RatioToNative:
    """Forward+backward time over float32 `torch.native` (nn.LSTM / nn.GRU, the cell's family)
    on the same workload, both built in this process and timed side by side
    (`paired_ratio_samples`): machine noise that moves absolute times by tens of percent
    between runs moves both sides together.

    Each process returns its paired ratios as timing samples (``{"samples": [...],
    "number": 1}``, the form asv 0.6's runner reads from a time_ benchmark): asv appends the
    samples of every round (a fresh process each), records their median with a 99%
    confidence interval, and `asv compare` / `asv continuous` call a change only when a
    Mann-Whitney U test on the two commits' samples finds them different and the medians
    differ by more than the factor."""

    params = _pinned("RatioToNative", PARAMS)
    param_names = PARAM_NAMES
    timeout = 600

    def setup(self, impl, cell, workload, dtype):
        if impl == "torch.native" and dtype == "float32" and cell in STANDARD_CELLS:
            raise NotImplementedError("the baseline itself: its ratio is 1 by definition")
        self.rung = _build(impl, cell, workload, dtype)
        self.native = _build("torch.native", get_cell(cell).family, workload, "float32")

    def track_train_ratio(self, impl, cell, workload, dtype):
        return {"samples": paired_ratio_samples(self.rung, self.native), "number": 1}

    track_train_ratio.unit = "x float32 nn.LSTM/nn.GRU"


class PairedRatio(RatioToNative):
    """The regression gate's benchmark (`make bench-compare`): `RatioToNative`'s paired
    samples on the gate's own workloads (`GATE_WORKLOADS`), whatever the profile; the gate
    runs it in several processes per commit (asv rounds, interleaved between the two
    commits).  docs/asv.md, "The regression gate", says why."""

    params = _pinned("PairedRatio", [IMPLS, list(CELL_DEFS), [w.name for w in GATE_WORKLOADS], DTYPES])
    rounds = 1  # tools/bench_compare.sh runs ROUNDS of them


class RoofFraction:
    """Forward+backward time of a rung against its own framework's GEMM roof (the time its
    GEMMs alone would take at the best rates torch's libraries, or XLA's, reach at these
    shapes), rates and times taken in one process: higher is better, 1.0 is the bound."""

    # getattr: older commits' workloads (asv runs this suite against the project's history) all had a roof
    params = _pinned("RoofFraction", [IMPLS, list(STANDARD_CELLS),
                                      [n for n, w in _BY_NAME.items() if getattr(w, "has_roof", True)], ["float32"]])
    param_names = PARAM_NAMES
    timeout = 600
    repeat = 1
    number = 1

    def setup(self, impl, cell, workload, dtype):
        try:
            roof = _first("rnnbench.measure.roof", "shared.measure.roof")
            derive_roof, roof_framework, roof_rows = roof.derive_roof, roof.roof_framework, roof.roof_rows
        except ModuleNotFoundError:  # an older commit: in the study
            table, worker = _first("shared.study.table"), _first("shared.study.worker")
            derive_roof, roof_framework, roof_rows = table.derive_roof, table.roof_framework, worker.roof_rows

        self.rung = _build(impl, cell, workload, dtype)
        fw = _row(impl).framework
        w = _BY_NAME[workload]
        row = derive_roof(roof_rows([dict(cell=cell, workload=w.to_dict())], DEVICE, min_time=0.05,
                                    frameworks=(fw,))[0])
        self.roof_s = 3 * w.flops(cell) / (row[f"roof_{roof_framework(fw)}_gflops"] * 1e9)

    def track_train_roof_fraction(self, impl, cell, workload, dtype):
        return self.roof_s / _median_train_seconds(self.rung, 7)

    track_train_roof_fraction.unit = "fraction of own GEMM roof"


class Memory:
    params = _pinned("Memory", PARAMS)
    param_names = PARAM_NAMES
    timeout = 600

    def setup(self, impl, cell, workload, dtype):
        self.workload = _warm_workload(impl, cell, workload, dtype)

    def peakmem_train_step(self, impl, cell, workload, dtype):
        self.workload.train_step()


class FirstCall:
    params = _pinned("FirstCall", PARAMS)
    param_names = PARAM_NAMES
    timeout = 600
    repeat = 1
    number = 1

    def setup(self, impl, cell, workload, dtype):
        row = _row(impl)
        if cell not in CELL_DEFS or workload not in _BY_NAME:
            raise NotImplementedError(f"{cell} on {workload} is not in this commit's catalogue and profile")
        reason = (row.unsupported_reason(_BY_NAME[workload].spec(cell), dtype=dtype, device=DEVICE)
                  or row.unavailable_reason(DEVICE))
        if reason:
            raise NotImplementedError(reason)

    def track_first_call_seconds(self, impl, cell, workload, dtype):
        run_worker = _first("rnnbench.measure.isolated", "shared.measure.isolated", "shared.study.runner").run_worker

        row = _row(impl)
        w = _BY_NAME[workload]
        job = dict(impl=impl, adapter_key=row.key, cell=cell, workload=w.to_dict(), device=DEVICE, dtype=dtype,
                   threads=THREADS, repeats=1, budget_s=0.0, warmup=0, parity=False, seed=0,
                   adapter_path=row.adapter_path or f"{FRAMEWORKS[row.framework]}:get_adapter")
        rec = run_worker("measure", job, timeout=self.timeout - 30)
        if rec.get("status") == "skipped":  # the worker's own check refused it: asv's skip, not a failure
            raise NotImplementedError(rec.get("reason"))
        if rec.get("first_train_s") is None:
            raise RuntimeError(f"{impl} {cell} {workload}: {rec.get('reason', 'no first-call time')}")
        return rec["first_forward_s"] + rec["first_train_s"]

    track_first_call_seconds.unit = "seconds"


if __name__ == "__main__":  # `python benchmarks/rnn.py --params`: every suite's lists, for RNNBENCH_ASV_PARAMS
    import sys

    if sys.argv[1:] != ["--params"]:
        sys.exit("usage: python benchmarks/rnn.py --params")
    print(json.dumps({name: cls.params for name, cls in sorted(globals().items())
                      if isinstance(cls, type) and isinstance(getattr(cls, "params", None), list)}))

"""Run jobs in subprocesses with a timeout, and the study loop that appends JSON lines.

Every measurement runs in its own `python -m shared.study.worker` process, in its own
session (process group), so that a crash, a hang (timeout) or a process tree that grows
past the memory limit is killed with everything it started (torch.compile's workers
included) and recorded as a failure with its reason; the study goes on.  Records are
appended to `results.jsonl` and flushed as soon as they exist, so Ctrl-C or a crash of
the study itself loses nothing, and `--resume` skips the keys already recorded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from .. import registry
from .threads import DEFAULT_THREADS, thread_env
from .workloads import Workload, sweep

PROJECT_ROOT = Path(__file__).resolve().parents[2]
FINAL_STATUSES = ("ok", "failed", "skipped")


# ---- one subprocess --------------------------------------------------------------------
def _tree_rss(proc) -> int:
    """Resident memory of a process and all its descendants (bytes)."""
    import psutil

    try:
        root = psutil.Process(proc.pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def _kill_group(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _exit_description(rc: int) -> str:
    if rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
        hint = " (likely the kernel's out-of-memory killer)" if -rc == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exit code {rc}"


def _last_lines(path: Path, n: int = 3, limit: int = 600) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])[-limit:]


def run_worker(command: str, job: dict, *, timeout: float, max_rss_bytes: int | None = None,
               poll_s: float = 0.1, env: dict | None = None, preexec_fn=None) -> dict:
    """Run `python -m shared.study.worker COMMAND` on `job`; always return a record.

    The record's "status" is the worker's ("ok", "skipped", "failed") or "failed" with a
    "reason" when the process timed out, outgrew `max_rss_bytes`, or died without
    finishing; what the worker had saved before that (its phases) is kept.  `preexec_fn` runs
    in the child before the worker starts (the cluster runner pins a slot's cores with it).
    """
    with tempfile.TemporaryDirectory(prefix="rnnbench-") as tmp:
        tmp = Path(tmp)
        job_path, result_path = tmp / "job.json", tmp / "result.json"
        job_path.write_text(json.dumps(job))
        env = {**os.environ, **(env or {})}
        env.update(thread_env(int(job.get("threads", DEFAULT_THREADS))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH")) if p)
        with open(tmp / "stdout", "wb") as out, open(tmp / "stderr", "wb") as err:
            t0 = time.monotonic()
            proc = subprocess.Popen(
                [sys.executable, "-m", "shared.study.worker", command, "--job", str(job_path),
                 "--result", str(result_path)],
                cwd=PROJECT_ROOT, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=preexec_fn)
            killed_for = None
            peak_tree = 0
            try:
                while proc.poll() is None:
                    elapsed = time.monotonic() - t0
                    if elapsed > timeout:
                        killed_for = f"timeout: still running after {timeout:g} s"
                        break
                    if max_rss_bytes:
                        rss = _tree_rss(proc)
                        peak_tree = max(peak_tree, rss)
                        if rss > max_rss_bytes:
                            killed_for = (f"out of memory: the process tree reached {rss / 2**30:.2f} GiB, "
                                          f"over the limit of {max_rss_bytes / 2**30:.2f} GiB")
                            break
                    time.sleep(poll_s)
            finally:
                _kill_group(proc)  # also reaps leftovers of a finished worker (compile pools)
                proc.wait()
            wall = time.monotonic() - t0
        rec: dict = {}
        if result_path.exists():
            try:
                rec = json.loads(result_path.read_text())
            except json.JSONDecodeError:
                rec = {}
        phase = rec.get("phase", "startup")
        if killed_for:
            rec.update(status="failed", reason=f"{killed_for} (in phase {phase})")
        elif rec.get("status") not in FINAL_STATUSES:
            tail = _last_lines(tmp / "stderr")
            rec.update(status="failed",
                       reason=f"crashed: {_exit_description(proc.returncode)} in phase {phase}"
                              + (f": {tail}" if tail else ""))
        elif rec["status"] == "failed" and proc.returncode not in (0, None):
            rec["reason"] = f"{rec.get('reason')} ({_exit_description(proc.returncode)})"
        rec["wall_s"] = wall
        if rec.get("status") == "failed" and "stderr_tail" not in rec:
            rec["stderr_tail"] = _last_lines(tmp / "stderr", n=15, limit=3000)
        return rec


# ---- results file ----------------------------------------------------------------------
def append_record(path: Path, record: dict) -> None:
    """Append one JSON line and make it durable before going on."""
    with open(path, "a") as f:
        f.write(json.dumps(record, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_records(path: Path) -> list[dict]:
    """All records of a results file; a line cut short by a kill mid-write is skipped."""
    records = []
    if not Path(path).exists():
        return records
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def measurement_key(impl: str, cell: str, workload: str, device: str, dtype: str) -> str:
    return f"{impl}|{cell}|{workload}|{device}|{dtype}"


def roof_key(cell: str, workload: str, device: str, when: str = "start") -> str:
    return f"roof|{cell}|{workload}|{device}|{when}"


def _roof_key(item: dict, config, when: str) -> str:
    return roof_key(item["cell"], item["workload"]["name"], config.device, when)


# ---- the study -------------------------------------------------------------------------
DEFAULT_SWEEP_IMPLS = ("torch.bptt", "torch.native", "jax.scan")
ONE_THREAD_IMPLS = ("torch.native", "torch.bptt", "jax.scan", "jax.bptt")
ONE_THREAD_SUFFIX = "@1t"
# The first-call group: the compiled rungs' first calls at T=100 and T=1000 (same B, I, H), cold
# (the first process, an empty compile cache) and warm (the later processes): compile time vs T.
FIRST_CALL_IMPLS = ("torch.compile", "torch.scan", "jax.scan", "jax.bptt")


@dataclass
class StudyConfig:
    out: Path
    impls: list[str] | None = None  # None: every registered implementation available here
    cells: list[str] = field(default_factory=lambda: ["lstm", "gru"])
    workloads: list[Workload] = field(default_factory=list)
    device: str = "cpu"
    dtype: str = "float32"
    # Reduced precisions (shared.precision) measured besides `dtype` on the first workload,
    # every main cell and implementation: the report's precision table.
    precisions: list[str] = field(default_factory=list)
    threads: int = DEFAULT_THREADS
    repeats: int = 10
    budget_s: float = 1.0  # per timed phase; at least 3 calls (5 pairs) are timed even past it
    # Each measurement runs in `processes` fresh processes (rounds over the whole plan, so a slow
    # spell of the machine hits different rungs), then in more, up to `max_processes`, while
    # its interval is wider than +-target_half_width (shared.study.stats).
    processes: int = 3
    max_processes: int = 5
    target_half_width: float = 0.03
    min_time_s: float = 0.25  # fast calls are timed on past `repeats` until the phase has run this long
    warmup: int = 1
    timeout: float = 240.0
    max_memory_gb: float | None = None  # None: 80% of this machine's memory
    parity: bool = True
    sweeps: str = "none"
    sweep_impls: tuple[str, ...] = DEFAULT_SWEEP_IMPLS
    sweep_cells: tuple[str, ...] = ("lstm",)
    # Custom cells (ln_lstm, peephole_lstm, gru_reset_before, users' own): forward+backward only,
    # on `custom_workloads` (default: the first of `workloads`), against the plain cells of the
    # main group (what `rnnbench compare` runs by default without blowing up its time).
    custom_cells: list[str] = field(default_factory=list)
    custom_workloads: list[Workload] = field(default_factory=list)
    # Workloads measured forward again on one thread (LSTM, ONE_THREAD_IMPLS), named with
    # ONE_THREAD_SUFFIX, with their own roof at one thread: the report's threads section.
    one_thread_workloads: list[Workload] = field(default_factory=list)
    # Workloads of the first-call group (LSTM, FIRST_CALL_IMPLS), e.g. sweep T100 and T1000.
    first_call_workloads: list[Workload] = field(default_factory=list)
    resume: bool = False
    retry_failed: bool = False
    roof: bool = True
    argv: list[str] | None = None
    # A Ray cluster's address (or "auto"): measurements run as tasks there (shared.study.cluster);
    # None: here, one subprocess after another.
    cluster: str | None = None

    def max_rss_bytes(self) -> int:
        if self.max_memory_gb:
            return int(self.max_memory_gb * 2**30)
        import psutil

        return int(0.8 * psutil.virtual_memory().total)


def probe_items(impls: list[str]) -> dict[str, list[dict]]:
    """framework -> what its probe worker needs of each implementation (adapter paths, declarations)."""
    by_framework: dict[str, list[dict]] = {}
    for name in impls:
        row = registry.get(name)
        by_framework.setdefault(row.framework, []).append(dict(
            name=name, adapter_key=row.key, capabilities=row.capabilities.to_dict() if row.capabilities else None,
            adapter_path=row.adapter_path or f"{registry.FRAMEWORKS.get(row.framework)}:get_adapter"))
    return by_framework


def run_probe(by_framework: dict[str, list[dict]], device: str, timeout: float, cells=(), dtypes=()):
    """`probe_availability` on `probe_items`' answer, in one subprocess per framework."""
    reasons: dict[str, str | None] = {}
    unsupported: dict[tuple, str | None] = {}
    for framework, items in by_framework.items():
        rec = run_worker("probe", {"device": device, "impls": items, "threads": 1, "cells": list(cells),
                                   "dtypes": list(dtypes)}, timeout=timeout)
        got = rec.get("reasons", {})
        for item in items:
            if item["name"] in got:
                reasons[item["name"]] = got[item["name"]]
            else:
                reasons[item["name"]] = f"probing {framework} failed: {rec.get('reason', 'no answer')}"
            for key, why in rec.get("unsupported", {}).get(item["name"], {}).items():
                cell, dtype = key.split("|")
                unsupported[(item["name"], cell, dtype)] = why
    return reasons, unsupported


def probe_availability(impls: list[str], device: str, timeout: float, cells=(), dtypes=()):
    """(name -> None or why it cannot run, (name, cell, dtype) -> None or why it cannot
    compute it), probed in one subprocess per framework (this process imports none)."""
    return run_probe(probe_items(impls), device, timeout, cells, dtypes)


def plan(config: StudyConfig, impls: list[str]) -> list[dict]:
    """The measurement jobs, impl innermost so that one cell+workload is measured together.

    Groups: "main" (cells x workloads, forward and forward+backward), "custom" (custom cells
    on custom_workloads, forward+backward only), the sweeps.  Each main cell's custom cells
    (its family: ln_lstm after lstm) come right after it, so that a custom cell and the plain
    cell it is compared with are measured close in time.  A key already planned in an
    earlier group is not planned again.
    """
    from ..cells import get_cell

    jobs, seen, parity_done = [], set(), set()
    groups = []
    custom, custom_workloads = list(config.custom_cells), config.custom_workloads or config.workloads[:1]
    for cell in config.cells:
        groups.append(("main", [cell], config.workloads, impls))
        family = [c for c in custom if get_cell(c).family == cell]
        if family:
            groups.append(("custom", family, custom_workloads, impls))
            custom = [c for c in custom if c not in family]
    if custom:  # custom cells whose plain cell is not among the main cells
        groups.append(("custom", custom, custom_workloads, impls))
    groups = [(g, c, w, n, config.dtype) for g, c, w, n in groups]
    if config.one_thread_workloads:
        one = [replace(w, name=w.name + ONE_THREAD_SUFFIX) for w in config.one_thread_workloads]
        groups.append(("threads", ["lstm"], one, [i for i in impls if i in ONE_THREAD_IMPLS], config.dtype))
    if config.first_call_workloads:
        groups.append(("first-call", ["lstm"], config.first_call_workloads,
                       [i for i in impls if i in FIRST_CALL_IMPLS], config.dtype))
    for dtype in config.precisions:
        if dtype != config.dtype:
            groups.append(("precision", list(config.cells), config.workloads[:1], impls, dtype))
    if config.sweeps != "none":
        sweep_impls = [i for i in impls if i in config.sweep_impls]
        cells = [c for c in config.sweep_cells if c in config.cells] or list(config.sweep_cells)
        for kind in ("seq_len", "batch"):
            groups.append((f"sweep-{kind}", cells, sweep(kind, config.sweeps), sweep_impls, config.dtype))
    for group, cells, workloads, names, dtype in groups:
        for cell in cells:
            for w in workloads:
                for name in names:
                    key = measurement_key(name, cell, w.name, config.device, dtype)
                    if key in seen:
                        continue
                    seen.add(key)
                    row = registry.get(name)
                    baseline = _baseline(name, cell, dtype, impls)
                    parity = (config.parity and group in ("main", "custom", "precision")
                              and (name, cell, dtype) not in parity_done)
                    if parity:
                        parity_done.add((name, cell, dtype))
                    jobs.append(dict(
                        kind="measurement", key=key, group=group, impl=name, framework=row.framework,
                        rung=row.rung, adapter_key=row.key, cell=cell, workload=w.to_dict(),
                        workload_name=w.name, device=config.device, dtype=dtype,
                        threads=1 if group == "threads" else config.threads, repeats=config.repeats, budget_s=config.budget_s,
                        min_time_s=config.min_time_s, warmup=config.warmup, parity=parity, seed=0,
                        phases={"custom": ["train"], "threads": ["forward"]}.get(group, ["forward", "train"]),
                        flops_forward=w.flops(cell), baseline=baseline,
                        adapter_path=row.adapter_path or f"{registry.FRAMEWORKS.get(row.framework)}:get_adapter"))
    return jobs


BASELINE = "torch.native"


def _baseline(impl: str, cell: str, dtype: str, impls: list[str]) -> dict | None:
    """The job that a measurement is paired with: float32 nn.LSTM / nn.GRU of the cell's family
    (None for that baseline itself, or where it is not available)."""
    from ..cells import get_cell

    family = get_cell(cell).family if cell in _cell_names() else cell
    if BASELINE not in impls or (impl == BASELINE and dtype == "float32" and cell == family):
        return None
    row = registry.get(BASELINE)
    return dict(impl=BASELINE, cell=family, dtype="float32", adapter_key=row.key,
                adapter_path=row.adapter_path or f"{registry.FRAMEWORKS.get(row.framework)}:get_adapter")


def _cell_names():
    from ..cells import CELL_DEFS
    return CELL_DEFS


PROCESS_SEP = "#p"


def process_key(key: str, index: int) -> str:
    """The record key of one process of a measurement (`key` alone for the first, as before)."""
    return key if index == 0 else f"{key}{PROCESS_SEP}{index}"


def base_key(key: str) -> str:
    return key.split(PROCESS_SEP)[0]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def progress_bar(enabled: bool, total: int):
    """A rich progress bar with ETA (a no-op object when disabled)."""
    if not enabled:
        class _Null:
            def __enter__(self):
                return self

            def __exit__(self, *a):
                return False

            def add_task(self, *a, **k):
                return 0

            def update(self, *a, **k):
                pass

            def advance(self, *a, **k):
                pass

        return _Null()
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), transient=False)


def _tight(results: Path, key: str, target: float) -> bool:
    """Whether every timed phase of a measurement has an interval within +-target (or cannot get one)."""
    from .stats import is_tight, pooled_ratio

    recs = [r for r in read_records(results) if r.get("kind") == "measurement" and base_key(r.get("key", "")) == key
            and r.get("status") == "ok"]
    for phase in ("forward", "train"):
        processes = [r[f"{phase}_pairs"] for r in recs if r.get(f"{phase}_pairs")]
        if processes and not is_tight(pooled_ratio(processes), target):
            return False
    return True


def open_results(config: StudyConfig) -> tuple[Path, list[dict]]:
    """`config.out`/results.jsonl and, with --resume, its records; an existing file is never overwritten."""
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    previous = read_records(results) if config.resume else []
    if results.exists() and not config.resume:
        raise FileExistsError(f"{results} exists: pass --resume to continue it or choose another --out")
    return results, previous


def is_done(record: dict, config: StudyConfig) -> bool:
    """Whether a recorded key needs no measuring again: a final status, unless --retry-failed
    and it failed, or it failed because its node was lost (the cluster runner: nothing to do
    with the rung, so --resume measures it again)."""
    if not record.get("key") or record.get("status") not in FINAL_STATUSES:
        return False
    if record.get("status") == "failed" and (config.retry_failed or record.get("node_lost")):
        return False
    return True


def study_names(config: StudyConfig) -> list[str]:
    names = config.impls or registry.default_study_names()
    for n in names:
        registry.get(n)  # a typo fails here, naming the valid names
    return names


def meta_record(config: StudyConfig, run_id: str, resumed: bool) -> dict:
    """The run's settings (the caller adds the machine)."""
    return dict(kind="meta", run_id=run_id, started=_now(), argv=config.argv, device=config.device,
                dtype=config.dtype, threads=config.threads, repeats=config.repeats, budget_s=config.budget_s,
                min_time_s=config.min_time_s, timeout=config.timeout, resumed=resumed, processes=config.processes,
                max_processes=config.max_processes, target_half_width=config.target_half_width)


def roof_pairs(config: StudyConfig, planned: list[dict]) -> list[dict]:
    """(cell, workload, threads) whose GEMM roof the run measures: the plain cells' (a custom
    cell's GEMMs are its family's) on workloads with a single-GEMM roof."""
    if not config.roof:
        return []
    from .workloads import Workload  # multi-layer / bidirectional workloads have no single-GEMM roof
    pairs = {(j["cell"], j["workload_name"]): (j["workload"], j["threads"]) for j in planned
             if j["group"] != "custom" and Workload.from_dict(j["workload"]).has_roof}
    return [dict(cell=c, workload=w, threads=t) for (c, _), (w, t) in pairs.items()]


def roof_job(config: StudyConfig, items: list[dict], threads: int) -> dict:
    return dict(device=config.device, threads=threads,
                items=[dict(cell=i["cell"], workload=i["workload"]) for i in items if i["threads"] == threads])


def roof_timeout(config: StudyConfig, job: dict) -> float:
    return max(config.timeout, 60 + 20 * len(job["items"]))


def roof_records(rec: dict, items: list[dict], threads: int, config: StudyConfig, run_id: str, when: str) -> list[dict]:
    """The records of one roof worker's answer: a row per (cell, workload), a failure if it failed."""
    out = []
    for row in rec.get("rows", []):
        item = next(i for i in items if i["cell"] == row["cell"] and i["workload"]["name"] == row["workload"]
                    and i["threads"] == threads)
        out.append(dict(kind="roof", run_id=run_id, time=_now(), device=config.device, threads=threads, status="ok",
                        roof_pass=when, key=_roof_key(item, config, when), versions=rec.get("versions"), **row))
    if rec.get("status") != "ok":
        out.append(dict(kind="roof_failure", run_id=run_id, time=_now(), reason=rec.get("reason"),
                        device=config.device, roof_pass=when))
    return out


def measurement_record(job: dict, index: int, rec: dict, run_id: str) -> dict:
    """A measurement's record: the job (less what only the worker needs) and the worker's answer."""
    record = {k: v for k, v in job.items() if k not in ("adapter_key", "adapter_path", "baseline")}
    record.update(rec)
    record.update(kind="measurement", key=process_key(job["key"], index), process=index, run_id=run_id,
                  time=_now(), compile_cache="cold" if index == 0 else "warm",
                  baseline=(job.get("baseline") or {}).get("impl"))
    return record


def run_local_study(config: StudyConfig, *, progress: bool = True, log=print) -> Path:
    """Run (or resume) the study into `config.out` here, one subprocess after another; return the
    path of results.jsonl.  `shared.study.run_study` chooses between this and the cluster."""
    from .machine import cpu_account, load_average, machine_info

    out = Path(config.out)
    results, previous = open_results(config)
    done = {r["key"] for r in previous if is_done(r, config)}
    run_id = uuid.uuid4().hex[:8]
    names = study_names(config)
    append_record(results, dict(meta_record(config, run_id, bool(previous)),
                                machine=machine_info(config.device, config.threads), cpu=cpu_account()))
    log(f"probing {len(names)} implementations on {config.device} ...")
    planned = plan(config, names)
    reasons, unsupported = probe_availability(names, config.device, timeout=max(config.timeout, 120),
                                               cells=sorted({j["cell"] for j in planned}),
                                               dtypes=sorted({j["dtype"] for j in planned}))
    available = [n for n in names if reasons.get(n) is None]
    for n in names:
        if reasons.get(n) is not None:
            append_record(results, dict(kind="unavailable", run_id=run_id, impl=n, device=config.device,
                                        reason=reasons[n]))
    planned = plan(config, available)
    jobs = [(j, i) for i in range(config.processes) for j in planned if process_key(j["key"], i) not in done]
    pairs = roof_pairs(config, planned)
    # measured at the start and again at the end (each rate the better of the two): a roof
    # taken once, while the machine was busy, bounds nothing
    start_roof = [i for i in pairs if _roof_key(i, config, "start") not in done]
    end_roof = [i for i in pairs if jobs or _roof_key(i, config, "end") not in done]
    log(f"{len(available)} available, {len(planned)} measurements x {config.processes} processes: "
        f"{len(jobs)} to run"
        + (f" ({len(done)} already done)" if done else "") + f", results -> {results}")
    max_rss = config.max_rss_bytes()
    steps = len(jobs) + bool(start_roof) + bool(end_roof)

    def measure_roof(items, when):
        bar.update(task, description=f"GEMM roof ({when})")
        for threads in sorted({i["threads"] for i in items}):
            job = roof_job(config, items, threads)
            rec = run_worker("roof", job, timeout=roof_timeout(config, job), max_rss_bytes=max_rss)
            for record in roof_records(rec, items, threads, config, run_id, when):
                append_record(results, record)
        bar.advance(task)

    cache_env = {"TORCHINDUCTOR_CACHE_DIR": str((out / "compile-cache").resolve())}

    def measure_job(job, index):
        bar.update(task, description=f"{job['impl']} {job['cell']} {job['workload_name']} "
                                     f"(process {index + 1})")
        reason = unsupported.get((job["impl"], job["cell"], job["dtype"]))
        if reason:
            rec = {"status": "skipped", "reason": reason, "wall_s": 0.0}
        else:
            # parity once per measurement; the first process finds the compile cache empty
            rec = run_worker("measure", dict(job, parity=job["parity"] and index == 0), timeout=config.timeout,
                             max_rss_bytes=max_rss, env=cache_env)
        append_record(results, measurement_record(job, index, rec, run_id))
        if rec.get("status") == "failed":
            log(f"  {job['impl']} {job['cell']} {job['workload_name']}: FAILED: {rec.get('reason')}")
        bar.advance(task)
        return rec

    with progress_bar(progress, steps) as bar:
        task = bar.add_task("study", total=steps)
        if start_roof:
            measure_roof(start_roof, "start")
        # rounds over the plan: process k of every measurement before process k+1 of any
        for index in range(config.processes):
            for job in planned:
                if process_key(job["key"], index) in done:
                    continue
                rec = measure_job(job, index)
                if rec.get("status") == "skipped" or (index == 0 and rec.get("status") == "failed"):
                    done.update(process_key(job["key"], i) for i in range(config.max_processes))
        for index in range(config.processes, config.max_processes):
            loose = [j for j in planned if process_key(j["key"], index) not in done
                     and not _tight(results, j["key"], config.target_half_width)]
            if not loose:
                break
            bar.update(task, total=steps + len(loose))
            steps += len(loose)
            for job in loose:
                measure_job(job, index)
        if end_roof:
            measure_roof(end_roof, "end")
    append_record(results, dict(kind="end", run_id=run_id, finished=_now(), load_average=load_average(),
                                cpu=cpu_account()))
    return results

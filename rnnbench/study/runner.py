"""The study here: one measurement after another, each in its own worker process.

Every measurement runs in its own `python -m rnnbench.measure.worker` process
(`rnnbench.measure.isolated.run_worker`), so that a crash, a hang (timeout) or a process tree
that grows past the memory limit is recorded as a failure with its reason and the study goes
on.  The plan (`planning.plan`) runs in rounds of processes; its records are appended to
`results.jsonl` as soon as they exist (`records`), so Ctrl-C or a crash of the study itself
loses nothing, and `--resume` skips the keys already recorded.  `rnnbench.study.run_study`
chooses between this and the cluster (`cluster`).
"""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

from rnnbench.measure.forkserver import ForkServers
from rnnbench.measure.isolated import run_worker
from .planning import StudyConfig, plan, probe_items, roof_job, roof_pairs, roof_timeout, study_names
from .table import flagged_keys
from .records import (
    append_record, base_key, is_done, item_roof_key, measurement_record, meta_record, now, open_results,
    process_key, read_records, roof_records)


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
    from rnnbench.measure.stats import is_tight, pooled_ratio

    recs = [r for r in read_records(results) if r.get("kind") == "measurement" and base_key(r.get("key", "")) == key
            and r.get("status") == "ok"]
    for phase in ("forward", "train"):
        processes = [r[f"{phase}_pairs"] for r in recs if r.get(f"{phase}_pairs")]
        if processes and not is_tight(pooled_ratio(processes), target):
            return False
    return True


def run_local_study(config: StudyConfig, *, progress: bool = True, log=print) -> Path:
    """Run (or resume) the study into `config.out` here, one subprocess after another; return the
    path of results.jsonl.  `rnnbench.study.run_study` chooses between this and the cluster."""
    from .machine import cpu_account, load_average, machine_info

    out = Path(config.out)
    results, previous = open_results(config)
    flagged = flagged_keys(previous) if config.retry_flagged else frozenset()
    done = {r["key"] for r in previous if is_done(r, config, flagged)}
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
    start_roof = [i for i in pairs if item_roof_key(i, config, "start") not in done]
    end_roof = [i for i in pairs if jobs or item_roof_key(i, config, "end") not in done]
    log(f"{len(available)} available, {len(planned)} measurements x {config.processes} processes: "
        f"{len(jobs)} to run"
        + (f" ({len(done)} already done)" if done else "") + f", results -> {results}")
    max_rss = config.max_rss_bytes()
    steps = len(jobs) + bool(start_roof) + bool(end_roof)

    def measure_roof(items, when):
        bar.update(task, description=f"GEMM roof ({when})")
        for threads in sorted({i["threads"] for i in items}):
            job = roof_job(config, items, threads)
            rec = run_worker("roof", job, timeout=roof_timeout(config, job), max_rss_bytes=max_rss, servers=servers)
            for record in roof_records(rec, items, threads, config, run_id, when):
                append_record(results, record)
        bar.advance(task)

    cache_env = {"TORCHINDUCTOR_CACHE_DIR": str((out / "compile-cache").resolve())}
    servers = ForkServers() if config.started_by() == "forkserver" else None

    def measure_job(job, index):
        bar.update(task, description=f"{job['impl']} {job['cell']} {job['workload_name']} "
                                     f"(process {index + 1})")
        reason = unsupported.get((job["impl"], job["cell"], job["dtype"]))
        if reason:
            rec = {"status": "skipped", "reason": reason, "wall_s": 0.0}
        else:
            # parity once per measurement; the first process finds the compile cache empty
            rec = run_worker("measure", dict(job, parity=job["parity"] and index == 0), timeout=config.timeout,
                             max_rss_bytes=max_rss, env=cache_env, servers=servers)
        append_record(results, measurement_record(job, index, rec, run_id))
        if rec.get("status") == "failed":
            log(f"  {job['impl']} {job['cell']} {job['workload_name']}: FAILED: {rec.get('reason')}")
        bar.advance(task)
        return rec

    with progress_bar(progress, steps) as bar, (servers or contextlib.nullcontext()):
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
    append_record(results, dict(kind="end", run_id=run_id, finished=now(), load_average=load_average(),
                                cpu=cpu_account()))
    return results

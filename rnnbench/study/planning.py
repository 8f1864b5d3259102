"""The study's plan: its configuration and the measurement jobs it makes.

`StudyConfig` holds what `rnnbench compare` asks for; `plan` makes the measurement jobs (cells x
workloads x implementations, in groups: main, custom cells, one thread, first calls,
precisions, sweeps), each paired with its baseline (`BASELINE`: float32 nn.LSTM / nn.GRU);
`roof_pairs` and `roof_job` the GEMM roof's.  The local runner (`runner`) and the cluster
(`cluster`) run the same plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from rnnbench.core import registry
from rnnbench.measure.threads import DEFAULT_THREADS
from rnnbench.measure.workloads import Workload, sweep
from .records import measurement_key

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
    # Reduced precisions (rnnbench.core.precision) measured besides `dtype` on the first workload,
    # every main cell and implementation: the report's precision table.
    precisions: list[str] = field(default_factory=list)
    threads: int = DEFAULT_THREADS
    repeats: int = 10
    budget_s: float = 1.0  # per timed phase; at least 3 calls (5 pairs) are timed even past it
    # Each measurement runs in `processes` fresh processes (rounds over the whole plan, so a slow
    # spell of the machine hits different rungs), then in more, up to `max_processes`, while
    # its interval is wider than +-target_half_width (rnnbench.measure.stats).
    processes: int = 3
    max_processes: int = 5
    target_half_width: float = 0.03
    # "forkserver": each process forked from a server that imported the frameworks once
    # (rnnbench.measure.forkserver; CPU jobs here); "spawn": a new interpreter per process.
    start_method: str = "forkserver"
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
    retry_flagged: bool = False  # with resume: measure again the rows flagged under Sanity
    roof: bool = True
    argv: list[str] | None = None
    # A Ray cluster's address (or "auto"): measurements run as tasks there (rnnbench.study.cluster);
    # None: here, one subprocess after another.
    cluster: str | None = None

    def started_by(self) -> str:
        """How this run starts its measurement processes: the fork server only for CPU runs here
        (a CUDA process and a cluster node's, pinned to its cores, start a new interpreter)."""
        import os

        fork = self.start_method == "forkserver" and self.device == "cpu" and not self.cluster and hasattr(os, "fork")
        return "forkserver" if fork else "spawn"

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


def plan(config: StudyConfig, impls: list[str]) -> list[dict]:
    """The measurement jobs, impl innermost so that one cell+workload is measured together.

    Groups: "main" (cells x workloads, forward and forward+backward), "custom" (custom cells
    on custom_workloads, forward+backward only), the sweeps.  Each main cell's custom cells
    (its family: ln_lstm after lstm) come right after it, so that a custom cell and the plain
    cell it is compared with are measured close in time.  A key already planned in an
    earlier group is not planned again.
    """
    from rnnbench.core.catalogue import get_cell

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
    from rnnbench.core.catalogue import get_cell

    family = get_cell(cell).family if cell in _cell_names() else cell
    if BASELINE not in impls or (impl == BASELINE and dtype == "float32" and cell == family):
        return None
    row = registry.get(BASELINE)
    return dict(impl=BASELINE, cell=family, dtype="float32", adapter_key=row.key,
                adapter_path=row.adapter_path or f"{registry.FRAMEWORKS.get(row.framework)}:get_adapter")


def _cell_names():
    from rnnbench.core.catalogue import CELL_DEFS
    return CELL_DEFS


def study_names(config: StudyConfig) -> list[str]:
    names = config.impls or registry.default_study_names()
    for n in names:
        registry.get(n)  # a typo fails here, naming the valid names
    return names


def roof_pairs(config: StudyConfig, planned: list[dict]) -> list[dict]:
    """(cell, workload, threads) whose GEMM roof the run measures: the plain cells' (a custom
    cell's GEMMs are its family's) on workloads with a single-GEMM roof."""
    if not config.roof:
        return []
    # multi-layer / bidirectional workloads have no single-GEMM roof
    pairs = {(j["cell"], j["workload_name"]): (j["workload"], j["threads"]) for j in planned
             if j["group"] != "custom" and Workload.from_dict(j["workload"]).has_roof}
    return [dict(cell=c, workload=w, threads=t) for (c, _), (w, t) in pairs.items()]


def roof_job(config: StudyConfig, items: list[dict], threads: int) -> dict:
    return dict(device=config.device, threads=threads,
                items=[dict(cell=i["cell"], workload=i["workload"]) for i in items if i["threads"] == threads])


def roof_timeout(config: StudyConfig, job: dict) -> float:
    return max(config.timeout, 60 + 20 * len(job["items"]))

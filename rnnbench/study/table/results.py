"""The records of a results file, collected: the latest record per key, processes pooled.

`collect` reads a results file's records into `Results`: one pooled record per measurement
(`pool_processes`: the processes of a measurement, `records.process_key`, become one, with
the pooled ratio and its interval, `rnnbench.measure.stats`), the GEMM roofs (both passes merged
and derived, `rnnbench.measure.roof`), the latest run's unavailable implementations, the runs'
settings and ends, and how much the baseline itself moved between the run's processes
(`baseline_spreads`).  When a key was measured more than once (a resumed study retrying
failures), the last record wins.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rnnbench.measure.roof import derive_roof, merge_roof
from ..records import base_key


@dataclass
class Results:
    measurements: list[dict]  # latest record per key, in first-measured order
    roofs: dict[tuple[str, str, str], dict]  # (cell, workload, device) -> roof row
    unavailable: dict[str, str]  # impl -> reason (latest run)
    metas: list[dict]
    ends: list[dict] = field(default_factory=list)  # one per finished run: its end time and load
    # (cell, workload, device, phase) -> the baseline's spread over every process of the run
    baselines: dict[tuple[str, str, str, str], dict] = field(default_factory=dict)

    def find(self, impl: str, cell: str, workload: str, device: str, dtype: str) -> dict | None:
        for m in self.measurements:
            if (m["impl"], m["cell"], m["workload_name"], m["device"], m["dtype"]) == (impl, cell, workload,
                                                                                        device, dtype):
                return m
        return None


def collect(records: list[dict]) -> Results:
    latest: dict[str, dict] = {}
    order: list[str] = []
    roofs: dict[tuple[str, str, str], dict] = {}
    unavailable: dict[str, str] = {}
    metas: list[dict] = []
    ends: list[dict] = []
    last_run = None
    for r in records:
        kind = r.get("kind")
        if kind == "meta":
            metas.append(r)
            last_run = r.get("run_id")
            unavailable = {}  # the latest run's probe is the one that holds now
        elif kind == "measurement":
            if r["key"] not in latest:
                order.append(r["key"])
            latest[r["key"]] = r
        elif kind == "roof":
            key = (r["cell"], r["workload"], r["device"])
            roofs[key] = merge_roof(roofs.get(key), r)
        elif kind == "unavailable" and r.get("run_id") in (last_run, None):
            unavailable[r["impl"]] = r["reason"]
        elif kind == "end":
            ends.append(r)
    return Results(pool_processes([latest[k] for k in order]), {k: derive_roof(r) for k, r in roofs.items()},
                   unavailable, metas, ends, baseline_spreads([latest[k] for k in order]))


def baseline_spreads(records: list[dict]) -> dict[tuple[str, str, str, str], dict]:
    """How far the float32 baseline (nn.LSTM / nn.GRU) moved between the processes of a run.

    Every paired process of the main group times the same baseline workload beside its rung, so a
    run holds one baseline time per process for each cell, workload and phase.  Their upper over
    lower quartile is the spread: a load spike moves one process and not the quartiles, a baseline
    that lands in one of two states for a share of the run moves them.  A ratio over a baseline
    with a wide spread moves between runs with the share of slow processes each run draws.
    Returns {(cell, workload, device, phase): {"spread", "q25_s", "q75_s", "processes"}} for
    entries with at least four processes.
    """
    import statistics

    from rnnbench.core.catalogue import family_of

    times: dict[tuple[str, str, str, str], list[float]] = {}
    for r in records:
        if r.get("status") != "ok" or r.get("dtype") != "float32" or r.get("group", "main") != "main":
            continue
        cell = family_of(r["cell"])  # the baseline's cell
        for phase in ("forward", "train"):
            if r.get(f"{phase}_base_s"):
                times.setdefault((cell, r["workload_name"], r["device"], phase), []).append(r[f"{phase}_base_s"])
    out = {}
    for key, values in times.items():
        if len(values) >= 4:
            q25, _, q75 = statistics.quantiles(values, n=4, method="inclusive")  # linear interpolation
            out[key] = dict(spread=q75 / q25, q25_s=q25, q75_s=q75, processes=len(values))
    return out


def pool_processes(records: list[dict]) -> list[dict]:
    """One record per measurement from the records of its processes (`runner.process_key`).

    Times are the median over every process's own median; each phase measured in pairs gets
    its pooled ratio to the baseline with the interval (`rnnbench.measure.stats.pooled_ratio`):
    `{phase}_ratio`, `_ratio_lo`, `_ratio_hi`, `_processes`, `_pairs_n`, `_tight`.  First-call
    times are the first process's (cold compile cache) and the median of the others' (warm).
    Memory is the largest peak of any process, and also net of the framework's baseline RSS.
    """
    import statistics

    from rnnbench.measure.stats import TARGET_HALF_WIDTH, pooled_ratio

    groups: dict[str, list[dict]] = {}
    for r in records:
        groups.setdefault(base_key(r["key"]), []).append(r)
    out = []
    for key, recs in groups.items():
        recs = sorted(recs, key=lambda r: r.get("process", 0))
        ok = [r for r in recs if r.get("status") == "ok"]
        if not ok:
            out.append(dict(recs[-1], key=key, processes=len(recs)))
            continue
        merged = dict(ok[-1], key=key, processes=len(ok), failed_processes=len(recs) - len(ok))
        for phase in ("forward", "train"):
            times = [r[f"{phase}_s"] for r in ok if r.get(f"{phase}_s") is not None]
            if times:
                merged[f"{phase}_s"] = statistics.median(times)
                merged[f"{phase}_n"] = sum(r.get(f"{phase}_n") or 0 for r in ok)
                merged[f"{phase}_process_spread"] = max(times) / min(times) if min(times) > 0 else None
                rates = [r[f"gflops_{phase}"] for r in ok if r.get(f"gflops_{phase}")]
                merged[f"gflops_{phase}"] = statistics.median(rates) if rates else None
            pairs = [r[f"{phase}_pairs"] for r in ok if r.get(f"{phase}_pairs")]
            summary = pooled_ratio(pairs) if pairs else None
            if summary:
                merged.update({f"{phase}_ratio": summary["ratio"], f"{phase}_ratio_lo": summary["lo"],
                               f"{phase}_ratio_hi": summary["hi"], f"{phase}_processes": summary["processes"],
                               f"{phase}_pairs_n": summary["pairs"],
                               f"{phase}_tight": summary["processes"] >= 2
                               and summary["half_width"] <= TARGET_HALF_WIDTH})
            merged.pop(f"{phase}_pairs", None)
        first = recs[0]
        for phase in ("forward", "train"):
            merged[f"first_{phase}_s"] = first.get(f"first_{phase}_s")
            warm = [r[f"first_{phase}_s"] for r in ok[1:] if r.get(f"first_{phase}_s") is not None
                    and r.get("process", 0) > 0]
            merged[f"first_{phase}_warm_s"] = statistics.median(warm) if warm else None
        peaks = [r["peak_rss_bytes"] for r in ok if r.get("peak_rss_bytes")]
        merged["peak_rss_bytes"] = max(peaks) if peaks else None
        nets = [r["peak_rss_bytes"] - r["baseline_rss_bytes"] for r in ok
                if r.get("peak_rss_bytes") and r.get("baseline_rss_bytes")]
        merged["net_rss_bytes"] = max(nets) if nets else None
        for k in ("parity_max_error", "parity_worst", "parity_bound_ratio", "parity_ok", "parity_cases",
                  "parity_source", "parity_note"):
            if k in first:
                merged[k] = first[k]
        out.append(merged)
    return out

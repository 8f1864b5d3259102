"""What to use: per cell, workload and mode, the fastest rung, or a tie within noise."""

from __future__ import annotations

from ..formatting import fmt, format_ratio
from rnnbench.measure.stats import compare
from .results import Results
from .rows import NATIVE, UNSTABLE_BASELINE, ratio_or_none, table_rows

MODES = (("training", "train", "first_train_s"), ("inference", "forward", "first_forward_s"))


def native_interval(r: dict, phase: str) -> dict:
    """A row's ratio to native as an interval for `stats.compare` (native itself: exactly 1)."""
    x = r[f"{phase}_x_native"]
    lo, hi = r.get(f"{phase}_ratio_lo"), r.get(f"{phase}_ratio_hi")
    if r["impl"] == NATIVE and lo is None:
        lo = hi = x
    return {"ratio": x, "lo": lo, "hi": hi}


def what_to_use(res: Results) -> tuple[list[dict], list[str]]:
    """Computed from the main group: per cell, workload and mode, the fastest rung (lowest ratio to
    native, with its interval) and whether it beats the runner-up beyond noise (their intervals do
    not overlap; otherwise "tie": every rung whose interval overlaps the fastest one's is named);
    the best per framework, the best JAX over the best torch, the winner's first-call cost and
    memory; and the workloads that flip the answer, counted only between clear winners.

    Rows whose times `sanity_flags` impeaches (noise, a forward slower than its forward+backward)
    are left out: a suspect figure does not pick a rung.
    """
    rows = [r for r in table_rows(res) if r["group"] == "main" and r["status"] == "ok" and not r["time_suspect"]]
    out = []
    for cell in dict.fromkeys(r["cell"] for r in rows):
        for wl in dict.fromkeys(r["workload"] for r in rows if r["cell"] == cell):
            here = [r for r in rows if r["cell"] == cell and r["workload"] == wl]
            for mode, phase, first in MODES:
                timed = sorted((r for r in here if r[f"{phase}_x_native"] is not None),
                               key=lambda r: r[f"{phase}_x_native"])
                if not timed:
                    continue
                best = timed[0]
                tied = [r for r in timed[1:]
                        if compare(native_interval(best, phase), native_interval(r, phase)) == "="]
                per_fw = {fw: next((r for r in timed if r["framework"] == fw), None) for fw in ("torch", "jax")}
                t, j = per_fw["torch"], per_fw["jax"]
                out.append(dict(cell=cell, workload=wl, mode=mode, best=best["impl"], tied=[r["impl"] for r in tied],
                                best_ratio=best[f"{phase}_x_native"], best_lo=native_interval(best, phase)["lo"],
                                best_hi=native_interval(best, phase)["hi"], best_ms=best[f"{phase}_ms"],
                                best_torch=t and t["impl"], best_jax=j and j["impl"],
                                jax_over_torch=ratio_or_none(j and j[f"{phase}_x_native"], t and t[f"{phase}_x_native"]),
                                jax_vs_torch=compare(native_interval(j, phase), native_interval(t, phase)) if j and t else None,
                                first_call_s=best.get(first), peak_rss_mib=best.get("peak_rss_mib"),
                                net_rss_mib=best.get("net_rss_mib"), phase=phase,
                                baseline_spread=best.get(f"{phase}_baseline_spread")))
    flips = []
    for cell in dict.fromkeys(r["cell"] for r in out):
        for mode, _, _ in MODES:
            winners = {r["workload"]: r["best"] for r in out if r["cell"] == cell and r["mode"] == mode
                       and not r["tied"]}
            if len(set(winners.values())) > 1:
                flips.append(f"{cell} {mode}: " + ", ".join(f"{impl} on {wl}" for wl, impl in winners.items()))
    return out, flips


def unstable_baseline(r: dict) -> bool:
    """Whether a "what to use" row's ratios rest on a baseline that moved between the run's processes."""
    return (r.get("baseline_spread") or 0) > UNSTABLE_BASELINE


def winner_text(r: dict) -> str:
    """`jax.bptt`, or `tie within noise: jax.bptt ≈ torch.bptt` when intervals overlap."""
    return f"tie within noise: {' ≈ '.join([r['best'], *r['tied']])}" if r["tied"] else r["best"]


def what_to_use_markdown(rows: list[dict]) -> str:
    lines = ["| cell | workload | mode | use | ×native [95% CI] | ms | best torch | best JAX | JAX / torch | "
             "its first call s | its peak RSS MiB (net) |", "|---|---|---|---|---:|---:|---|---|---:|---:|---:|"]
    for r in rows:
        jt = fmt(r["jax_over_torch"], "x") + {"=": " (tie)"}.get(r["jax_vs_torch"], "")
        ratio = (format_ratio(r['best_ratio'], r['best_lo'], r['best_hi']) if r['best_lo'] != r['best_hi']
                 else fmt(r['best_ratio'], 'x'))
        if unstable_baseline(r):
            ratio += " †"  # explained under the table (`unstable_baselines`)
        lines.append(f"| {r['cell']} | {r['workload']} | {r['mode']} | {winner_text(r)} | {ratio} | "
                     f"{fmt(r['best_ms'], 'ms')} | {r['best_torch'] or 'n/a'} | {r['best_jax'] or 'n/a'} | {jt} | "
                     f"{fmt(r['first_call_s'], 's')} | {fmt(r['peak_rss_mib'], 'mib')} ({fmt(r['net_rss_mib'], 'mib')}) |")
    return "\n".join(lines)

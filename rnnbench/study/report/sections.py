"""The report's sections on the study's groups and verdicts: first calls, threads, custom cells,
precision, what to use, sanity, skipped."""

from __future__ import annotations

from rnnbench.measure.roof import ROOF_LIBS
from ..planning import ONE_THREAD_SUFFIX
from ..table import (
    PLAIN_NATIVE, Results, custom_cell_rows, custom_cell_skips, custom_markdown, fmt, precision_markdown,
    precision_rows, plain_family, table_rows, unstable_baseline, what_to_use, what_to_use_markdown)


def first_call_section(res: Results) -> list[str]:
    """The first-call group: each compiled rung's first forward and forward+backward at the
    group's workloads (T=100 and T=1000 by default), cold and warm compile cache."""
    rows = [r for r in table_rows(res) if r["group"] == "first-call" and r["status"] == "ok"]
    if not rows:
        return []
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    lines = ["## First call: compile time against T", "",
             "LSTM, seconds of the first call (trace + compile + one run): `cold` in the first process (an empty "
             "compile cache), `warm` the median of the later processes (the cache the first one wrote). "
             f"Workloads: {', '.join(workloads)}; `last/first` is the cold time at the last over the first "
             "(1.00x: compile time flat in T).", ""]
    for phase, label in (("forward", "fwd"), ("train", "fwd+bwd")):
        head = [f"{w} {label} {c}" for w in workloads for c in ("cold", "warm")]
        lines += ["| rung | " + " | ".join(head) + " | last/first |", "|---|" + "---:|" * (len(head) + 1)]
        for impl in dict.fromkeys(r["impl"] for r in rows):
            by_w = {r["workload"]: r for r in rows if r["impl"] == impl}
            cells = [fmt((by_w.get(w) or {}).get(f"first_{phase}{'' if c == 'cold' else '_warm'}_s"), "s")
                     for w in workloads for c in ("cold", "warm")]
            a, b = (by_w.get(workloads[0]) or {}).get(f"first_{phase}_s"), (by_w.get(workloads[-1]) or {}).get(
                f"first_{phase}_s")
            lines.append(f"| {impl} | " + " | ".join(cells) + f" | {fmt(a and b and b / a, 'x')} |")
        lines.append("")
    return lines


def threads_section(res: Results) -> list[str]:
    """The one-thread group: forward at 1 thread beside the same rung's forward at the run's
    threads, and the step GEMM's best rate at both, which is the reason for the difference."""
    rows = table_rows(res)
    one = [r for r in rows if r["group"] == "threads" and r["status"] == "ok"]
    if not one:
        return []
    meta_threads = res.metas[-1].get("threads") if res.metas else None
    lines = [f"## Threads: forward on 1 and {meta_threads} threads", ""]
    for wl1 in dict.fromkeys(r["workload"] for r in one):
        wl = wl1.removesuffix(ONE_THREAD_SUFFIX)
        lines += [f"{wl} forward (LSTM), median ms; `speed-up` is the 1-thread time over the {meta_threads}-thread "
                  "time of the same rung (above 1x: the second thread helps).", "",
                  f"| rung | 1 thread | {meta_threads} threads | speed-up |", "|---|---:|---:|---:|"]
        for r in (r for r in one if r["workload"] == wl1):
            many = next((m for m in rows if m["group"] == "main" and m["impl"] == r["impl"] and m["cell"] == r["cell"]
                         and m["workload"] == wl and m["dtype"] == r["dtype"]), None)
            t_many = many and many.get("forward_ms")
            lines.append(f"| {r['impl']} | {fmt(r['forward_ms'], 'ms')} | {fmt(t_many, 'ms')} | "
                         f"{fmt(t_many and r['forward_ms'] / t_many, 'x')} |")
        lines.append("")
        roof1 = next((v for k, v in res.roofs.items() if k[0] == "lstm" and k[1] == wl1), None)
        roofn = next((v for k, v in res.roofs.items() if k[0] == "lstm" and k[1] == wl), None)
        if roof1 and roofn:
            shape = "x".join(map(str, roofn["step_shape"]))
            m, k, n = roofn["step_shape"]
            parts = []
            for fw, label in (("torch", "torch"), ("xla", "XLA")):
                r1 = max((roof1.get(f"step_{lib}_gflops") or 0) for lib in ROOF_LIBS[fw])
                rn = max((roofn.get(f"step_{lib}_gflops") or 0) for lib in ROOF_LIBS[fw])
                if r1 and rn:
                    us = 2.0 * m * k * n / (r1 * 1e9) * 1e6
                    parts.append(f"{label} {r1:.1f} GFLOP/s on 1 thread, {rn:.1f} on {meta_threads} "
                                 f"({rn / r1:.2f}x; one step GEMM lasts {us:.1f} µs on 1 thread)")
            if parts:
                lines += [f"Why: the forward is a chain of {roofn.get('seq_len')} dependent step GEMMs of "
                          f"{shape} (M x K x N), and each must finish before the next starts, so a second thread "
                          "can only split one small GEMM at a time and must meet the first at every step. The "
                          f"best step-GEMM rate: " + "; ".join(parts) + ". Where that ratio is near 1x the "
                          "per-step synchronisation eats what the second thread adds; the input projection "
                          "(one large GEMM) is the part that scales.", ""]
    return lines


def custom_section(res: Results) -> list[str]:
    """The custom cells (ln_lstm, peephole_lstm, gru_reset_before, users' own) against the plain cells."""
    rows = custom_cell_rows(res)
    skips = custom_cell_skips(res)
    if not rows and not skips:
        return []
    lines = ["## Custom cells", "",
             "Forward+backward median times of the catalogue's other cells. `×plain native` is the time over "
             "torch.native's plain cell of the same family (nn.LSTM for LSTM-family cells, nn.GRU for GRU-family "
             "ones: a custom cell has no native kernel), measured in this run on the same workload; `cost of the "
             "cell` is the time over the same implementation running the plain cell: what the cell's extra "
             "arithmetic costs there. Parity: max abs error of outputs and gradients against the float64 "
             "reference.", ""]
    if rows:
        lines += [custom_markdown(rows), ""]
        native = {(r["workload"], r["family"]): r["native_train_ms"] for r in rows}
        for wl in dict.fromkeys(r["workload"] for r in rows):
            base = [f"{PLAIN_NATIVE.get(f, f)} {fmt(ms, 'ms')} ms" for (w, f), ms in native.items() if w == wl]
            lines += [f"Plain native on {wl} (fwd+bwd): {', '.join(base)}.", ""]
    if skips:
        lines += ["Not measured (the implementation does not run the cell; reasons under Skipped): "
                  + "; ".join(f"{impl} ({', '.join(cells)})" for impl, cells in skips.items()) + ".", ""]
    return lines


def unstable_baselines_note(res: Results, rows: list[dict]) -> list[str]:
    """The † of "what to use": the baselines that moved between the run's processes, with their quartiles."""
    marked = [r for r in rows if unstable_baseline(r)]
    if not marked:
        return []
    parts = []
    for cell, wl, phase in dict.fromkeys((r["cell"], r["workload"], r["phase"]) for r in marked):
        family = plain_family(cell)
        b = next(v for (c, w, _, ph), v in res.baselines.items() if (c, w, ph) == (family, wl, phase))
        parts.append(f"{PLAIN_NATIVE.get(family, family)} {wl} {'fwd+bwd' if phase == 'train' else 'forward'} "
                     f"{fmt(b['q25_s'] * 1e3, 'ms')} ms at the lower quartile of {b['processes']} processes, "
                     f"{fmt(b['q75_s'] * 1e3, 'ms')} ms at the upper ({fmt(b['spread'], 'x')})")
    return ["† The baseline moved between this run's processes: " + "; ".join(parts) + ". A ratio over such a "
            "baseline moves between runs with the share of slow processes each run draws, by up to that much: "
            "compare those ratios within this run, not with another run's (docs/study.md, reproducibility).", ""]


def what_to_use_section(res: Results) -> list[str]:
    rows, flips = what_to_use(res)
    if not rows:
        return []
    lines = ["## What to use (computed from this run)", "",
             "Per cell, workload and mode, the fastest rung of this run (lowest time over nn.LSTM / nn.GRU, "
             "with its 95% interval) — or, when the runner-up's interval overlaps the winner's, a tie within "
             "noise naming every rung in it — the fastest of each framework and their ratio, and what the "
             "winner costs on its first call and in memory (peak RSS, and net of the framework's own). Rows "
             "whose times are flagged under Sanity (noise, a forward slower than its forward+backward) do not "
             "compete.", "", what_to_use_markdown(rows), ""]
    lines += unstable_baselines_note(res, rows)
    intervals = any(r["best_lo"] is not None and r["best_lo"] != r["best_hi"] for r in rows)
    if not intervals:
        lines += ["These records carry no intervals (measured before the paired protocol): a winner by a few "
                  "percent may be noise, and no tie can be called.", ""]
    if flips:
        lines += ["The answer changes with the workload" + (" (clear winners only):" if intervals else ":"), ""] \
            + [f"- {f}" for f in flips] + [""]
    else:
        lines += ["No clear winner changes between the workloads of this run, in either mode.", ""]
    return lines


def sanity_section(rows: list[dict]) -> list[str]:
    """The rows whose figures are impossible or suspect (marked ⚠ in the tables): not results."""
    flagged = [r for r in rows if r.get("flags")]
    if not flagged:
        return []
    return (["## Sanity", "",
             "These rows (⚠) are not results as they stand: re-measure them on a quiet machine "
             "(`rnnbench compare --out SAME_FOLDER --resume --retry-flagged` measures these rows again, "
             "`--retry-failed` the failed ones).", ""]
            + [f"- {r['impl']} {r['cell']} {r['workload']} {r['dtype']}: {r['flags']}" for r in flagged] + [""])


def precision_section(res) -> list[str]:
    """Per rung and dtype on the precision workload: times over float32 nn.LSTM / nn.GRU, error / bound."""
    rows = precision_rows(res)
    if not any(r["group"] == "precision" for r in rows):
        return []
    from rnnbench.core.precision import isa_summary
    return ["## Precision", "",
            "Median times per dtype (`rnnbench.core.precision`: bfloat16 / float16 are pure, parameters and "
            "arithmetic in that dtype; amp_* keep float32 parameters and compute in the reduced dtype: "
            "`torch.autocast`, Flax `dtype=`), over float32 `torch.native` (nn.LSTM / nn.GRU) of the same "
            "cell and workload in this run. `error / bound`: the largest error against the float64 "
            "reference over the parity cases, divided by the derived bound of the tolerance rule for "
            "that dtype (<= 1 passes). `kernels`: the CPU ISA torch dispatched to "
            "(`torch.backends.cpu.get_cpu_capability()`).", "",
            f"CPU reduced-precision features: {isa_summary()}.", "", precision_markdown(rows), ""]


def skipped_section(rows: list[dict]) -> list[str]:
    """One line per implementation and reason, naming the cells and workloads it covers."""
    groups: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        what = groups.setdefault((r["impl"], r["reason"]), [])
        item = f"{r['cell']} {r['workload']}"
        if item not in what:
            what.append(item)
    return ["## Skipped", ""] + [f"- {impl} ({', '.join(items)}): {reason}"
                                 for (impl, reason), items in groups.items()] + [""]

"""The report directory: report.md (machine, roof, table, failures, ladders, plots) + CSV."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

from . import plots
from .records import read_records
from ..measure.roof import ROOF_LIBS
from .table import (
    PLAIN_NATIVE,
    Results,
    collect,
    custom_cell_rows,
    custom_cell_skips,
    custom_markdown,
    fmt,
    ladder,
    ladder_markdown,
    markdown_table,
    parity_note,
    precision_markdown,
    precision_rows,
    table_rows,
    what_to_use,
    what_to_use_markdown,
    write_csv,
)
from .machine import others_cpu
from ..measure.timing import MAX_TIMED_CALLS

QUIET_OTHERS_SHARE = 0.1  # other processes using more than a tenth of a CPU: the machine was not quiet


def quiet_verdict(res: Results) -> tuple[str, bool]:
    """(one line on what else ran during the run, whether the machine was busy)."""
    meta = res.metas[-1] if res.metas else {}
    m = meta.get("machine", {})
    end_rec = next((e for e in reversed(res.ends) if e.get("run_id") == meta.get("run_id")), {})
    start, end = m.get("load_average"), end_rec.get("load_average")
    cpus = m.get("usable_cpus") or 1
    others = others_cpu(meta.get("cpu"), end_rec.get("cpu"))
    if others and others["wall_s"] > 0:
        # the verdict from other processes' CPU time (the load average counts the study's own threads)
        share = others["others_s"] / others["wall_s"]
        busy = share > QUIET_OTHERS_SHARE
        line = (f"Other processes: {others['others_s']:.0f} CPU-s during the run's {others['wall_s']:.0f} s "
                f"({share:.0%} of one CPU; the hypervisor stole {others['steal_s']:.0f} s); load average "
                f"(1/5/15 min) {start} at the start, {end} at the end")
    elif start or end:
        busy = any(load and load[0] > 0.5 * cpus + 1 for load in (start, end))
        line = f"Load average (1/5/15 min): {start} at the start, {end} at the end"
    else:
        return "", False
    if busy:
        line += (" -- **the machine was not quiet**: treat absolute times with suspicion; same-run ratios "
                 "hold better")
    else:
        line += " -- quiet"
    return line, busy


def _protocol(meta: dict) -> str:
    if meta.get("processes"):
        return (f"each rung paired with float32 nn.LSTM / nn.GRU in one process, calls alternated (at least 5 "
                f"pairs, on for {meta.get('budget_s')} s a phase), in {meta['processes']} to "
                f"{meta.get('max_processes')} fresh processes per measurement (more while the interval is wider "
                f"than ±{100 * meta.get('target_half_width', 0.03):.0f}%); ratio: geometric mean over processes of "
                f"each process's median pairwise ratio, [95% CI] Student's t over the processes' log ratios "
                f"(shared/study/stats.py); first call (trace + compile) timed apart, in the first process with an "
                f"empty torch compile cache; timeout {meta.get('timeout')} s a process")
    return (f"first call (trace + compile) timed apart; then {meta.get('repeats')} timed calls "
            f"per phase (at least 3; fewer past {meta.get('budget_s')} s; fast calls timed on for "
            f"{meta.get('min_time_s', 0)} s, at most {MAX_TIMED_CALLS}), medians reported; "
            f"one subprocess per measurement, timeout {meta.get('timeout')} s")


def _answer_section(res: Results) -> list[str]:
    """The first screen: what to use, on which machine, and whether the machine was quiet."""
    meta = res.metas[-1] if res.metas else {}
    m = meta.get("machine", {})
    feats = [f for f, on in (("AVX-512", m.get("avx512")), ("AMX", m.get("amx"))) if on]
    verdict, _ = quiet_verdict(res)
    versions = ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items() if k in ("torch", "jax"))
    lines = ["## The answer", "",
             f"On {m.get('cpu', 'an unknown CPU')}" + (f" ({', '.join(feats)})" if feats else "")
             + f", {meta.get('threads')} threads, {meta.get('device')}" + (f", {versions}" if versions else "") + ".",
             ""]
    if verdict:
        lines += [verdict + ".", ""]
    return lines + _what_to_use_section(res)[2:]


def answer_markdown(res: Results) -> str:
    """The answer section alone (what `rnnbench compare` prints last)."""
    return "\n".join(_answer_section(res))


def _machine_section(res: Results) -> list[str]:
    meta = res.metas[-1] if res.metas else {}
    m = meta.get("machine", {})
    versions = ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items())
    lines = ["## Machine", ""]
    cpu = m.get("cpu", "unknown")
    feats = [f for f, on in (("AVX-512", m.get("avx512")), ("AMX", m.get("amx"))) if on]
    lines.append(f"- CPU: {cpu}" + (f" ({', '.join(feats)})" if feats else "")
                 + f"; {m.get('usable_cpus')} usable of {m.get('logical_cpus')} logical CPUs"
                 + (f"; {m['memory_gib']:.0f} GiB memory" if m.get("memory_gib") else ""))
    if m.get("isa"):
        lines.append(f"- ISA extensions the kernels can use: {', '.join(m['isa'])}")
    if m.get("gpu"):
        lines.append(f"- GPU: {m['gpu']}" + (f" x{m['gpus']}" if (m.get("gpus") or 1) > 1 else "")
                     + (f", driver {m['gpu_driver']}" if m.get("gpu_driver") else ""))
    if meta.get("cluster"):
        nodes = meta["cluster"].get("nodes", [])
        lines.append(f"- Ray cluster `{meta['cluster'].get('address')}`: {len(nodes)} node(s) of this machine ("
                     + ", ".join(f"{n.get('host')} `{n.get('node_id', '')[:8]}` {n.get('slots')} slot(s)" for n in nodes)
                     + "); each measurement had a slot to itself (a CPU node, or one GPU and its share of the cores)")
    lines.append(f"- Threads: {meta.get('threads')} for both frameworks (torch.set_num_threads, OMP/MKL_NUM_THREADS, "
                 f"XLA_FLAGS intra-op threads, CPU affinity where the machine has more cores)")
    lines.append(f"- Device: {meta.get('device')}, dtype {meta.get('dtype')}")
    if m.get("xla_options"):
        lines.append(f"- JAX: compiled by `jax_impl.jit` with RNNBENCH_XLA={m['xla_options']} "
                     f"({'XLA defaults' if m['xla_options'] == 'default' else 'jax_impl/xla_options.py CPU_OPTIONS: YNNPACK dot fusion'})")
    lines.append(f"- Libraries: {versions}; Python {m.get('python')}; {m.get('os')}")
    if m.get("git_commit"):
        lines.append(f"- rnnbench commit: {m['git_commit']}")
    commits = sorted({r["machine"]["git_commit"] for r in res.measurements
                      if isinstance(r.get("machine"), dict) and r["machine"].get("git_commit")})
    if len(commits) > 1:  # a cluster's nodes should all run one checkout
        lines.append(f"- ⚠ the measurements ran at {len(commits)} commits ({', '.join(commits)}): the nodes' checkouts "
                     "differ, so rows may compare different code")
    if meta.get("argv") is not None:
        lines.append(f"- Command: `rnnbench {' '.join(meta['argv'])}`")
    verdict, busy = quiet_verdict(res)
    if verdict:
        lines.append(f"- {verdict}")
    lines.append(f"- Timing: {_protocol(meta)}")
    if len(res.metas) > 1:
        lines.append(f"- Measured over {len(res.metas)} sessions (resumed); ratios still pair rows of this file")
    return lines + [""]


def _workloads_section(res: Results) -> list[str]:
    """The sizes of every workload measured (sweeps aside), a user's own specs among them."""
    from ..measure.workloads import Workload

    seen: dict[str, Workload] = {}
    for m in res.measurements:
        if isinstance(m.get("workload"), dict) and not str(m.get("group", "")).startswith("sweep"):
            seen.setdefault(m["workload_name"], Workload.from_dict(m["workload"]))
    if not seen:
        return []
    lines = ["## Workloads", "", "| workload | T | B | I | H | layers | directions | lengths |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, w in seen.items():
        lines.append(f"| {name} | {w.seq_len} | {w.batch} | {w.input_size} | {w.hidden_size} | {w.num_layers} | "
                     f"{2 if w.bidirectional else 1} | {f'{w.shortest}..{w.seq_len} (packed)' if w.packed else 'all T'} |")
    return lines + [""]


def _roof_section(res: Results) -> list[str]:
    if not res.roofs:
        return ["## GEMM roof", "", "Not measured in this run.", ""]
    lines = ["## Best GEMM rates measured in this run (the \"roof\")", "",
             "GFLOP/s of the GEMMs each workload needs: the recurrent step GEMM (B x H) x (H x G*H) and the "
             "input projection over all steps (T*B x I) x (I x G*H), with `torch.mm` (MKL / cuBLAS), oneDNN on "
             "a prepacked weight (`torch.ops.mkldnn._linear_pointwise`) and XLA's dot (jitted, same threads), "
             "each the best of five timing windows; `loop`: T dependent step GEMMs inside one compiled loop "
             "(TorchScript, `lax.fori_loop`), the step without per-call dispatch.", "",
             "The roof is the best rate any of the workload's GEMM shapes (forward and backward) reached in "
             "this run: a measured rate, not a proven bound; a rung above 100% of it ran faster than any GEMM "
             "measured here, which the Sanity section flags (the results' GFLOP/s count a forward+backward step "
             "as 3x the forward FLOPs). `roof` takes every library of both "
             "frameworks and judges every rung; `torch roof` and `XLA roof` take each framework's own, split "
             "the JAX-vs-torch gap and set the JAX targets. A tighter roof (the recurrent FLOPs at the step "
             "shape's rate) would say more about batch 1, but a fused RNN kernel (nn.LSTM's oneDNN primitive) "
             "can beat it: the step columns show how far below the roof a small step GEMM "
             "runs. The rates were measured at the start of the run and again at the end, each the better of "
             "the two (`drift`: the largest change of a rate between them).", "",
             "| cell | workload | threads | step GEMM | mm | oneDNN | torch loop | XLA | XLA loop | input GEMM | "
             "mm | oneDNN | XLA | roof | torch roof | XLA roof | roof from | drift |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    for (cell, wl, _), r in res.roofs.items():
        g = [fmt(r.get(k), "g") for k in ("step_mm_gflops", "step_onednn_gflops", "step_chain_torch_gflops",
                                          "step_xla_gflops", "step_chain_xla_gflops")]
        i = [fmt(r.get(k), "g") for k in ("input_mm_gflops", "input_onednn_gflops", "input_xla_gflops")]
        roofs = [fmt(r.get(f"roof_{fw}_gflops"), "g") for fw in ("machine", "torch", "xla")]
        drift = (f"{r['roof_drift']:.0%}" + (" ⚠" if r["roof_drift"] > ROOF_DRIFT else "")
                 if r.get("roof_passes", 1) > 1 else "once")
        lines.append(f"| {cell} | {wl} | {r.get('threads', '')} | {'x'.join(map(str, r['step_shape']))} | "
                     + " | ".join(g) + f" | {'x'.join(map(str, r['input_shape']))} | " + " | ".join(i) + " | "
                     + " | ".join(roofs) + f" | {r.get('roof_machine_from') or ''} | {drift} |")
    lines += ["", "(shapes M x K x N; GFLOP/s)", ""]
    if any(r.get("roof_drift", 0) > ROOF_DRIFT for r in res.roofs.values()):
        lines += [f"⚠ Some GEMM rates moved by more than {ROOF_DRIFT:.0%} between the start and the end of the "
                  "run: the machine was not in the same state throughout; the roof keeps the better rate.", ""]
    return lines + _gap_lines(res)


ROOF_DRIFT = 0.25  # a GEMM rate that moves more than this between start and end: the machine changed


def _best(rows: list[dict], cell: str, workload: str, framework: str, phase: str = "train") -> dict | None:
    """The fastest trusted main-group row of a framework (float32, ok, time not suspect)."""
    cands = [r for r in rows if r["group"] == "main" and r["cell"] == cell and r["workload"] == workload
             and r["framework"] == framework and r["status"] == "ok" and r["dtype"] == "float32"
             and r.get(f"{phase}_ms") is not None and not r.get("time_suspect")]
    return min(cands, key=lambda r: r[f"{phase}_ms"]) if cands else None


def _gap_lines(res: Results) -> list[str]:
    """Per cell and workload: the best JAX rung's fwd+bwd time over the best torch rung's, split
    into the GEMM libraries' part (torch roof / XLA roof) and the rest (loop, autodiff, fusion)."""
    rows = table_rows(res)
    out = []
    for (cell, wl, _), roof in res.roofs.items():
        if not roof.get("roof_xla_gflops") or not roof.get("roof_torch_gflops"):
            continue
        best = {fw: _best(rows, cell, wl, fw) for fw in ("torch", "jax")}
        if None in best.values():
            continue
        ratio = best["jax"]["train_ms"] / best["torch"]["train_ms"]
        library = roof["roof_torch_gflops"] / roof["roof_xla_gflops"]
        out.append(f"| {cell} | {wl} | {best['torch']['impl']} | {best['jax']['impl']} | {ratio:.2f}x | "
                   f"{library:.2f}x | {ratio / library:.2f}x |")
    if not out:
        return []
    return ["Where the JAX-vs-torch gap comes from (forward+backward, best rung of each): the gap is the "
            "product of the GEMM libraries' part (torch's roof over XLA's) and the rest (the "
            "rungs' loops, autodiff and fusion around their GEMMs). Below 1x: JAX is faster.", "",
            "| cell | workload | best torch | best JAX | JAX / torch | GEMM library | the rest |",
            "|---|---|---|---|---:|---:|---:|"] + out + [""]


# The JAX targets at the first workload's forward+backward (docs/study.md).
JAX_TARGET_X_NATIVE = 1.1
JAX_TARGET_ROOF = 0.8


def _jax_targets_section(res: Results) -> list[str]:
    """At the first roofed main workload (S1), forward+backward: is the best JAX rung within
    1.1x of nn.LSTM / nn.GRU and at 80% of XLA's roof, and jax.scan's fraction of that roof;
    where a target is missed, which part is responsible (XLA's GEMMs or the rung's structure)."""
    rows = table_rows(res)
    main = [r for r in rows if r["group"] == "main"]
    workloads = [w for w in dict.fromkeys(r["workload"] for r in main)
                 if any(k[1] == w and v.get("roof_xla_gflops") for k, v in res.roofs.items())]
    if not workloads:
        return []
    wl = workloads[0]
    lines = [f"## The JAX targets ({wl}, forward+backward)", "",
             f"Targets: the best JAX rung at most {JAX_TARGET_X_NATIVE}x torch.native (nn.LSTM / nn.GRU) and at "
             f"least {JAX_TARGET_ROOF:.0%} of XLA's own roof; `jax.scan`'s fraction of that roof (moonshot "
             f"{JAX_TARGET_ROOF:.0%}). The ratio to nn.LSTM factors into the rung's structure (its fraction of "
             "XLA's roof), XLA's GEMMs (XLA's roof over the machine roof) and nn.LSTM's own fraction of the "
             "machine roof: JAX / native = native fraction / (JAX fraction of XLA roof x XLA roof / machine "
             "roof). `responsible` names the larger loss where a target is missed.", "",
             "| cell | rung | ×native | target | of XLA roof | target | XLA roof / roof | native of roof | "
             "responsible |", "|---|---|---:|---|---:|---|---:|---:|---|"]
    for cell in dict.fromkeys(r["cell"] for r in main if r["workload"] == wl):
        best = _best(rows, cell, wl, "jax")
        roof = res.roofs.get((cell, wl, best["device"]), {}) if best else {}
        if not roof.get("roof_machine_gflops") or not roof.get("roof_xla_gflops"):
            continue
        scan, native = (next((r for r in main if r["impl"] == impl and r["cell"] == cell and r["workload"] == wl
                              and r["dtype"] == "float32" and r["status"] == "ok"), None)
                        for impl in ("jax.scan", "torch.native"))
        library = roof["roof_xla_gflops"] / roof["roof_machine_gflops"]
        for r, label in ((best, "best JAX"), (scan, "jax.scan")):
            if r is None or (label == "jax.scan" and r is best):
                continue
            x, frac = r.get("train_x_native"), r.get("own_roof_fraction_train")
            met_x = x is not None and x <= JAX_TARGET_X_NATIVE
            met_f = frac is not None and frac >= JAX_TARGET_ROOF
            if met_x and met_f:
                why = "both met"
            elif frac is None:
                why = "n/a"
            else:
                structure, gemms = 1 / frac, 1 / library
                why = (f"structure ({structure:.2f}x lost to its own roof)" if structure >= gemms
                       else f"XLA's GEMMs ({gemms:.2f}x below the best library)")
            lines.append(f"| {cell} | {r['impl']} ({label}) | {fmt(x, 'x')} | "
                         f"{'met' if met_x else 'missed'} (<= {JAX_TARGET_X_NATIVE}x) | {fmt(frac, '%')} | "
                         f"{'met' if met_f else 'missed'} (>= {JAX_TARGET_ROOF:.0%}) | {library:.2f}x | "
                         f"{fmt(native and native.get('roof_fraction_train'), '%')} | {why} |")
    return lines + [""]


def _first_call_section(res: Results) -> list[str]:
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


def _threads_section(res: Results) -> list[str]:
    """The one-thread group: forward at 1 thread beside the same rung's forward at the run's
    threads, and the step GEMM's best rate at both, which is the reason for the difference."""
    from .planning import ONE_THREAD_SUFFIX

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


def _custom_section(res: Results) -> list[str]:
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


def _what_to_use_section(res: Results) -> list[str]:
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


def _sanity_section(rows: list[dict]) -> list[str]:
    """The rows whose figures are impossible or suspect (marked ⚠ in the tables): not results."""
    flagged = [r for r in rows if r.get("flags")]
    if not flagged:
        return []
    return (["## Sanity", "",
             "These rows (⚠) are not results as they stand: re-measure them on a quiet machine "
             "(`rnnbench compare --resume --retry-failed` re-runs failures; delete a row's record to re-run it).", ""]
            + [f"- {r['impl']} {r['cell']} {r['workload']} {r['dtype']}: {r['flags']}" for r in flagged] + [""])


def _precision_section(res) -> list[str]:
    """Per rung and dtype on the precision workload: times over float32 nn.LSTM / nn.GRU, error / bound."""
    rows = precision_rows(res)
    if not any(r["group"] == "precision" for r in rows):
        return []
    from ..precision import isa_summary
    return ["## Precision", "",
            "Median times per dtype (`shared.precision`: bfloat16 / float16 are pure, parameters and "
            "arithmetic in that dtype; amp_* keep float32 parameters and compute in the reduced dtype: "
            "`torch.autocast`, Flax `dtype=`), over float32 `torch.native` (nn.LSTM / nn.GRU) of the same "
            "cell and workload in this run. `error / bound`: the largest error against the float64 "
            "reference over the parity cases, divided by the derived bound of the tolerance rule for "
            "that dtype (<= 1 passes). `kernels`: the CPU ISA torch dispatched to "
            "(`torch.backends.cpu.get_cpu_capability()`).", "",
            f"CPU reduced-precision features: {isa_summary()}.", "", precision_markdown(rows), ""]


def _skipped_section(rows: list[dict]) -> list[str]:
    """One line per implementation and reason, naming the cells and workloads it covers."""
    groups: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        what = groups.setdefault((r["impl"], r["reason"]), [])
        item = f"{r['cell']} {r['workload']}"
        if item not in what:
            what.append(item)
    return ["## Skipped", ""] + [f"- {impl} ({', '.join(items)}): {reason}"
                                 for (impl, reason), items in groups.items()] + [""]


def write_report(results_path, out_dir: Path | None = None, *, command: str | None = None) -> Path:
    """Write report.md, results.csv and the plots next to `results_path` (or into `out_dir`); return
    report.md's path.  `results_path` may be several results files (`rnnbench report RUN_DIR...`):
    records of one machine give the one-machine report; of several, a report across machines with
    each machine's own report in `machines/<name>/` (`shared.study.merge`)."""
    from .merge import machine_groups

    paths = [Path(results_path)] if isinstance(results_path, (str, Path)) else [Path(p) for p in results_path]
    out = Path(out_dir) if out_dir else paths[0].parent
    out.mkdir(parents=True, exist_ok=True)
    records = [r for p in paths for r in read_records(p)]
    groups = machine_groups(records)
    if len(groups) > 1:
        lines = _across_machines(groups, out, command)
    else:
        lines = _report(next(iter(groups.values())).records if groups else records, out, command=command)
    report = out / "report.md"
    report.write_text("\n".join(lines))
    return report


def _across_machines(groups: dict, out: Path, command: str | None) -> list[str]:
    """The cross-machine summary, then each machine's report (headings one level down); each
    machine's report, plots and CSV also in machines/<name>/; one CSV of every row with its machine."""
    from .merge import cross_machine_markdown

    names = {cls: f"M{i + 1}" for i, cls in enumerate(groups)}
    results = {cls: collect(g.records) for cls, g in groups.items()}
    lines = ["# rnnbench study across machines", "", f"Written {datetime.now(timezone.utc).isoformat(timespec='seconds')}"
             + (f" by `{command}`" if command else "") + ".", ""]
    lines += cross_machine_markdown(groups, results, names)
    rows = []
    for cls, g in groups.items():
        folder = f"machines/{names[cls]}-{cls}"
        sub = _report(g.records, out / folder, command=command, title=f"# {names[cls]}: {g.label}", files=False)
        (out / folder / "report.md").write_text("\n".join(sub))
        lines += [sub[0].replace("# ", "## ", 1), "", f"Its own report: [{folder}/report.md]({folder}/report.md).", ""]
        for line in sub[4:]:  # below the title and the "Written" line
            if line.startswith("#"):
                line = "#" + line
            lines.append(re.sub(r"\]\((?!https?:|#|/)([^)]+\.png)\)", rf"]({folder}/\1)", line))
        rows += [dict(r, machine=names[cls], machine_class=cls) for r in table_rows(results[cls])]
    write_csv(rows, out / "results.csv", first=("machine", "machine_class"))
    return lines + ["## Files", "", "- `results.csv`: every machine's table, one row per measurement and machine",
                    "- `machines/<name>/`: each machine's report, table and plots", ""]


def _report(records: list[dict], out: Path, *, command: str | None = None, title: str = "# rnnbench study",
            files: bool = True) -> list[str]:
    """One machine's report.md lines; writes its results.csv and plots into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    res = collect(records)
    rows = table_rows(res)
    write_csv(rows, out / "results.csv")
    main_rows = [r for r in rows if r["group"] == "main"]
    sweep_rows = [r for r in rows if r["group"].startswith("sweep")]

    figures = {
        "ratio_to_native.png": plots.plot_ratio_to_native(res, out / "ratio_to_native.png"),
        "time_vs_seq_len.png": plots.plot_time_vs_seq_len(res, out / "time_vs_seq_len.png"),
        "time_vs_batch.png": plots.plot_time_vs_batch(res, out / "time_vs_batch.png"),
    }
    cells = list(dict.fromkeys(r["cell"] for r in main_rows))
    for cell in cells:
        figures[f"ladder_{cell}.png"] = plots.plot_ladder(res, cell, out / f"ladder_{cell}.png")

    lines = [title, "", f"Written {datetime.now(timezone.utc).isoformat(timespec='seconds')}"
             + (f" by `{command}`" if command else "") + ".", ""]
    lines += _answer_section(res)
    lines += _machine_section(res)
    lines += _workloads_section(res)
    lines += _roof_section(res)
    lines += ["## Results", "",
              "Median times; `×native` is the ratio to `torch.native` (float32 nn.LSTM / nn.GRU) of the same cell "
              "and workload, measured in pairs in the same processes, with its 95% interval in brackets (lower is "
              "faster; records without pairs: the ratio of the two medians). GFLOP/s from `RNNSpec.flops` (fwd+bwd counts 3x the forward FLOPs). "
              "`of best GEMM` is the fraction of the best GEMM rate above. `net MiB`: peak RSS less the process's RSS "
              "after importing the framework. `1st` columns: the first call, trace + compile "
              "included. Parity: max abs error of outputs and gradients against the float64 reference "
              "(it passes when every error is within the derived bound of the tolerance rule, docs/parity.md).", "", markdown_table(main_rows), ""]
    notes = {parity_note(res, r["impl"], r["cell"]) for r in main_rows} - {None}
    if notes:
        lines += [f"Parity cases: {'; '.join(sorted(notes))}.", ""]
    lines += _jax_targets_section(res)
    lines += _threads_section(res)
    lines += _first_call_section(res)
    lines += _sanity_section(main_rows + [r for r in rows if r["group"] != "main"])
    lines += _custom_section(res)
    lines += _precision_section(res)
    failed = [r for r in rows if r["status"] == "failed"]
    skipped = [r for r in rows if r["status"] == "skipped"]
    if failed:
        lines += ["## Failures", ""] + [f"- {r['impl']} {r['cell']} {r['workload']}: {r['reason']}" for r in failed] + [""]
    if skipped:
        lines += _skipped_section(skipped)
    if res.unavailable:
        lines += ["## Unavailable here", ""] + [f"- {n}: {why}" for n, why in res.unavailable.items()] + [""]
    if figures["ratio_to_native.png"]:
        lines += ["## Ratio to native", "", "![time relative to torch.native](ratio_to_native.png)", ""]
    for cell in cells:
        workload, lrows = ladder(res, cell)
        if not lrows:
            continue
        lines += [f"## The {cell.upper()} ladder ({workload})", "",
                  "Each rung's fwd+bwd time and the speedup it buys over the rung below it (same framework).", "",
                  ladder_markdown(lrows), ""]
        if figures.get(f"ladder_{cell}.png"):
            lines += [f"![{cell} ladder](ladder_{cell}.png)", ""]
    lines += ["## Time against sequence length and batch size", ""]
    for name, what in (("time_vs_seq_len.png", "T"), ("time_vs_batch.png", "B")):
        if figures[name]:
            lines += [f"![time against {what}]({name})", ""]
        else:
            lines += [f"No {what} sweep in these results (run `rnnbench compare --sweeps small`).", ""]
    if sweep_rows:
        lines += ["<details><summary>Sweep measurements</summary>", "", markdown_table(sweep_rows), "",
                  "</details>", ""]
    if files:
        lines += ["## Files", "", "- `results.jsonl`: every record as measured (append-only; `--resume` continues it)",
                  "- `results.csv`: the table above, one row per measurement", ""]
    return lines

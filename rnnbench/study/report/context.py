"""The report's first screen and its context: the answer, the machine, how it was measured, the workloads."""

from __future__ import annotations

from collections import Counter

from rnnbench.measure.timing import MAX_TIMED_CALLS
from rnnbench.measure.workloads import Workload
from ..machine import others_cpu
from ..table import Results, table_rows
from .sections import what_to_use_section


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


def _processes(meta: dict) -> str:
    least, most = meta["processes"], meta.get("max_processes") or meta["processes"]
    # runs before the fork server started every process as a new interpreter
    forked = (" (each forked from a server that had imported its framework, as multiprocessing's forkserver "
              "does: rnnbench/measure/forkserver.py)" if meta.get("start_method") == "forkserver" else "")
    if most <= least:
        return f"in {least} fresh processes per measurement{forked}"
    return (f"in {least} to {most} fresh processes per measurement{forked} (more while the interval is wider "
            f"than ±{100 * meta.get('target_half_width', 0.03):.0f}%)")


def protocol(meta: dict) -> str:
    if meta.get("processes"):
        return (f"each rung paired with float32 nn.LSTM / nn.GRU in one process, calls alternated (at least 5 "
                f"pairs, on for {meta.get('budget_s')} s a phase), {_processes(meta)}; ratio: geometric mean over processes of "
                f"each process's median pairwise ratio, [95% CI] Student's t over the processes' log ratios "
                f"(rnnbench/measure/stats.py); first call (trace + compile) timed apart, in the first process with an "
                f"empty torch compile cache; timeout {meta.get('timeout')} s a process")
    return (f"first call (trace + compile) timed apart; then {meta.get('repeats')} timed calls "
            f"per phase (at least 3; fewer past {meta.get('budget_s')} s; fast calls timed on for "
            f"{meta.get('min_time_s', 0)} s, at most {MAX_TIMED_CALLS}), medians reported; "
            f"one subprocess per measurement, timeout {meta.get('timeout')} s")


def answer_section(res: Results) -> list[str]:
    """The first screen: what to use, on which machine, and whether the machine was quiet."""
    meta = res.metas[-1] if res.metas else {}
    m = meta.get("machine", {})
    feats = [f for f, on in (("AVX-512", m.get("avx512")), ("AMX", m.get("amx"))) if on]
    verdict, _ = quiet_verdict(res)
    versions = ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items() if k in ("torch", "jax"))
    lines = ["## The answer", "",
             f"On {m.get('cpu', 'an unknown CPU')}" + (f" ({', '.join(feats)})" if feats else "")
             + f", {meta.get('threads')} thread{'' if meta.get('threads') == 1 else 's'}, {meta.get('device')}" + (f", {versions}" if versions else "") + ".",
             ""]
    if verdict:
        lines += [verdict + ".", ""]
    choice = what_to_use_section(res)[2:]
    return lines + (choice or why_no_answer(res))


def why_no_answer(res: Results) -> list[str]:
    """What "The answer" says when no row competes: why, with the commonest reason, and what to do."""
    rows = [r for r in table_rows(res) if r.get("status") == "ok"]
    if not rows:
        return ["No measurement of this run completed (see Skipped and Failed below), so there is nothing to "
                "compare: fix what they name and run again with --resume.", ""]
    reasons = Counter(" ".join(flag.split()[:2]) for r in rows for flag in r.get("flags") or [])
    common = reasons.most_common(1)[0][0] if reasons else "no ratio to nn.LSTM / nn.GRU"
    return [f"No row competes: every measured row is flagged under Sanity (the commonest reason: {common}), so "
            "this run names no fastest rung. Measure those rows again on a quiet machine: `rnnbench compare --out "
            "SAME_FOLDER --resume --retry-flagged`.", ""]


def answer_markdown(res: Results) -> str:
    """The answer section alone (what `rnnbench compare` prints last)."""
    return "\n".join(answer_section(res))


def machine_section(res: Results) -> list[str]:
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
        lines.append(f"- JAX: compiled by `rnnbench.jax.jit` with RNNBENCH_XLA={m['xla_options']} "
                     f"({'XLA defaults' if m['xla_options'] == 'default' else 'rnnbench/jax/xla_options.py CPU_OPTIONS: YNNPACK dot fusion'})")
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
    lines.append(f"- Timing: {protocol(meta)}")
    if len(res.metas) > 1:
        lines.append(f"- Measured over {len(res.metas)} sessions (resumed); ratios still pair rows of this file")
    return lines + [""]


def workloads_section(res: Results) -> list[str]:
    """The sizes of every workload measured (sweeps aside), a user's own specs among them."""
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

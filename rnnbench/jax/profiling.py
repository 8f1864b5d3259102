"""Where a compiled JAX function spends its time: XLA's own per-op times from `jax.profiler`.

    from rnnbench.jax.profiling import op_times, summarize
    profile = op_times(jax.jit(train_step), params, x)   # runs the function a few times under a trace
    print(summarize(profile))

Each row is one HLO instruction of the compiled program (a fusion, a dot, a copy): its
time per call, how many times it ran per call (100 for an op in the body of a 100-step
`lax.scan`, 1 for one outside it) and whether it is a GEMM (a `dot`, or a fusion or
library call -- YNNPACK, oneDNN -- that contains one).  The torch side has
`torch.profiler` for this; for XLA on the CPU the trace is the one place that shows, for
example, that the autodiff of a `lax.scan` adds a per-step accumulation of the recurrent
weight's gradient (`tools/profile_jax.py`).

Times are the trace's event durations summed per instruction: with several threads,
ops that run concurrently both count, so the sum can exceed the wall time (which is
reported beside it).  Some work is not in the trace: the while loops' own overhead, and
an op XLA runs asynchronously -- a large Eigen `dot` on its thread pool -- may show only
its launch (`jax.bptt`'s one-GEMM weight gradients can look far cheaper than they are); a
sum of op times well below the wall time is the sign.  Control-flow
instructions (while, call, conditional) are left out: their events span their bodies'.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import re
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass

import jax

_CONTROL_FLOW = ("while", "call", "conditional")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=\s*(.*?)\s([a-z][\w\-]*)\(")
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%([\w.\-]+)\s.*\{\s*$")
_CALLS = re.compile(r"(?:calls|to_apply|body|condition)=%([\w.\-]+)")


@dataclass(frozen=True)
class OpTime:
    name: str  # the HLO instruction
    opcode: str  # fusion, dot, copy, ...
    shape: str  # its result, e.g. f32[64,2048]
    ms_per_call: float
    count_per_call: float  # executions per call of the function (the trip count inside a loop)
    gemm: bool


@dataclass(frozen=True)
class Profile:
    rows: list[OpTime]  # slowest first
    wall_ms_per_call: float  # of the traced calls, profiler overhead included


def parse_hlo(hlo_text: str) -> dict[str, tuple[str, str, bool]]:
    """{instruction name: (opcode, result shape, contains a dot)} for every instruction of an HLO module's text."""
    computations: dict[str, list[tuple[str, str, str, list[str]]]] = {}
    current = None
    for line in hlo_text.splitlines():
        m = _COMPUTATION.match(line)
        if m:
            current = computations.setdefault(m.group(1), [])
            continue
        m = _INSTRUCTION.match(line)
        if m and current is not None:
            shape = re.sub(r"\{[^}]*\}", "", m.group(2))  # drop the layout: f32[64,2048]{1,0}
            current.append((m.group(1), m.group(3), shape, _CALLS.findall(line)))
    has_dot: dict[str, bool] = {}

    def computation_has_dot(name: str) -> bool:  # HLO's call graph is acyclic
        if name not in has_dot:
            has_dot[name] = any(op == "dot" or any(computation_has_dot(c) for c in called)
                                for _, op, _, called in computations.get(name, ()))
        return has_dot[name]

    return {name: (op, shape, op == "dot" or (op not in _CONTROL_FLOW and any(computation_has_dot(c) for c in called)))
            for instructions in computations.values() for name, op, shape, called in instructions}


def _trace_events(log_dir: str) -> list[dict]:
    files = sorted(glob.glob(os.path.join(log_dir, "**", "*.trace.json.gz"), recursive=True))
    if not files:
        raise RuntimeError(f"jax.profiler wrote no trace under {log_dir}")
    with gzip.open(files[-1]) as f:
        return [e for e in json.load(f).get("traceEvents", []) if e.get("ph") == "X"]


def op_times(compiled_fn, *args, calls: int = 3, warmup: int = 2) -> Profile:
    """Per-op times of `compiled_fn(*args)` (a `jax.jit`-ed function), averaged over `calls` traced calls.

    Raises when the trace holds no op of the compiled program (a backend whose profiler
    does not report XLA ops).
    """
    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls}")
    # compile once and run that executable: the profiled program is the parsed one
    executable = compiled_fn.lower(*args).compile()
    ops = parse_hlo(executable.as_text())
    for _ in range(warmup):
        jax.block_until_ready(executable(*args))
    with tempfile.TemporaryDirectory(prefix="rnnbench-trace-") as log_dir:
        jax.profiler.start_trace(log_dir)
        try:
            start = time.perf_counter()
            for _ in range(calls):
                jax.block_until_ready(executable(*args))
            wall_ms = (time.perf_counter() - start) / calls * 1e3
        finally:
            jax.profiler.stop_trace()
        events = _trace_events(log_dir)
    total_us: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for e in events:
        name = e.get("name")
        if name in ops and ops[name][0] not in _CONTROL_FLOW:
            total_us[name] += float(e.get("dur", 0.0))
            count[name] += 1
    if not total_us:
        raise RuntimeError("the profiler trace holds no op of the compiled program "
                           f"(backend {jax.default_backend()!r} may not report XLA ops)")
    rows = [OpTime(name, ops[name][0], ops[name][1], total_us[name] / calls / 1e3, count[name] / calls,
                   ops[name][2]) for name in total_us]
    return Profile(sorted(rows, key=lambda r: -r.ms_per_call), wall_ms)


def summarize(profile: Profile, top: int = 12) -> str:
    """A markdown table of the `top` slowest ops, then the GEMM / other totals and the wall time."""
    rows = profile.rows
    total = sum(r.ms_per_call for r in rows)
    gemm = sum(r.ms_per_call for r in rows if r.gemm)
    lines = ["| op | kind | result | ms per call | runs per call | share |", "|---|---|---|---:|---:|---:|"]
    for r in rows[:top]:
        kind = f"{r.opcode}, GEMM" if r.gemm else r.opcode
        lines.append(f"| {r.name} | {kind} | {r.shape} | {r.ms_per_call:.1f} | {r.count_per_call:g} | "
                     f"{r.ms_per_call / total:.0%} |")
    lines.append(f"\nsum of op times {total:.1f} ms per call: GEMMs {gemm:.1f} ms ({gemm / total:.0%}), "
                 f"everything else {total - gemm:.1f} ms ({len(rows)} ops); wall {profile.wall_ms_per_call:.1f} ms "
                 f"per call")
    return "\n".join(lines)

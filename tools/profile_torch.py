"""Where the time goes in each rnnbench.torch backend at S1, and how far each is from native.

    python -m tools.profile_torch time      [--cell lstm] [--rounds 7] [--backends ...]
    python -m tools.profile_torch time --cell ln_lstm --threads 1 --clock process
        (a catalogue cell: its backends, and the plain cell of its family on eager and native)
    python -m tools.profile_torch profile   [--cell lstm] [--backends ...]
    python -m tools.profile_torch compile-time [--cell lstm] [--seq-lens 100 1000]

`time`: forward+backward (and no-grad forward) at S1 (T=100, B=64, I=256, H=512,
float32, 2 threads), every backend once per round, interleaved, so each round sees the
same machine load; the figure is the median over rounds of (backend time / native time
in the same round).  `profile`: one torch.profiler pass of forward+backward per backend,
self CPU time split into GEMM ops (mm/addmm/bmm/linear/oneDNN) and everything else.
`compile-time`: the first forward+backward call of the `compile` backend in a fresh
process with an empty inductor cache, minus a steady-state call, at each T.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rnnbench.core.catalogue import CUSTOM_CELLS, STANDARD_CELLS  # noqa: E402
from rnnbench.measure.workloads import all_named  # noqa: E402

_S1 = all_named()["S1"]
S1 = dict(seq_len=_S1.seq_len, batch=_S1.batch, input_size=_S1.input_size, hidden_size=_S1.hidden_size)
GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
            "mkldnn", "onednn", "aten::_addmm_activation")


def build(cell, backend, seq_len, batch, input_size, hidden_size, dtype="float32"):
    from rnnbench.core.spec import RNNSpec
    from rnnbench.torch.adapter import get_adapter
    spec = RNNSpec(cell, input_size, hidden_size)
    return get_adapter(backend).make_workload(spec, seq_len=seq_len, batch=batch, dtype=dtype)


def _time_entries(args) -> list[tuple[str, str, str]]:
    """(label, cell, backend) to time.  For a catalogue cell beyond lstm/gru: its backends plus
    the plain cell of its family on `native` (the ratio's denominator) and `eager` (what the
    custom cell costs over the plain one, same loop)."""
    if args.cell in STANDARD_CELLS:
        return [(b, args.cell, b) for b in args.backends]
    from rnnbench.core.catalogue import get_cell
    plain = get_cell(args.cell).family
    entries = [(f"{args.cell} {b}", args.cell, b) for b in args.backends if b != "native"]
    return entries + [(f"{plain} eager", plain, "eager"), ("native", plain, "native")]


def cmd_time(args) -> None:
    import torch
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "process" else time.perf_counter
    works, first = {}, {}
    for label, cell, b in _time_entries(args):
        works[label] = build(cell, b, **S1)
        t0 = clock()
        works[label].train_step()
        first[label] = clock() - t0
        works[label].train_step()
        works[label].forward()
    train = {b: [] for b in works}
    fwd = {b: [] for b in works}
    for _ in range(args.rounds):
        for b, w in works.items():
            t0 = clock()
            w.train_step()
            train[b].append(clock() - t0)
            t0 = clock()
            w.forward()
            fwd[b].append(clock() - t0)

    def ratio(times, b, base="native"):
        return statistics.median(t / n for t, n in zip(times[b], times[base]))

    custom = args.cell not in STANDARD_CELLS
    print(f"S1 {args.cell} float32, {args.threads} threads, {args.clock} clock, {args.rounds} interleaved rounds, torch "
          f"{torch.__version__}; ratio = median over rounds of time / native time in the same round"
          + ("; native = the plain cell of the family (nn.LSTM / nn.GRU)" if custom else ""))
    extra = " fwd+bwd / plain eager |" if custom else ""
    print(f"| backend | fwd+bwd ms (median) | fwd+bwd / native |{extra} forward ms | forward / native | first call s |")
    print("|---|---|---|---|---|---|" + ("---|" if custom else ""))
    plain_eager = next((label for label in works if label.endswith(" eager") and not label.startswith(args.cell)),
                       None)
    for b in works:
        vs_plain = f" {ratio(train, b, plain_eager):.2f} |" if custom else ""
        print(f"| {b} | {statistics.median(train[b]) * 1e3:.1f} | {ratio(train, b):.2f} |{vs_plain} "
              f"{statistics.median(fwd[b]) * 1e3:.1f} | {ratio(fwd, b):.2f} | {first[b]:.1f} |")


def cmd_profile(args) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.set_num_threads(args.threads)
    print(f"S1 {args.cell} float32 forward+backward, {args.threads} threads: self CPU time by op kind")
    print("| backend | total ms | GEMM ms | other ms | GEMM share | top non-GEMM ops (self ms) |")
    print("|---|---|---|---|---|---|")
    for b in args.backends:
        w = build(args.cell, b, **S1)
        for _ in range(2):
            w.train_step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            w.train_step()
        events = prof.key_averages()
        gemm = other = 0.0
        others = []
        for e in events:
            self_ms = e.self_cpu_time_total / 1e3
            if any(k in e.key for k in GEMM_OPS):
                gemm += self_ms
            else:
                other += self_ms
                others.append((self_ms, e.key, e.count))
        others.sort(reverse=True)
        top = ", ".join(f"{k} {ms:.1f} ({n}x)" for ms, k, n in others[:4])
        total = gemm + other
        print(f"| {b} | {total:.1f} | {gemm:.1f} | {other:.1f} | {gemm / total:.0%} | {top} |")


_COMPILE_CHILD = """
import resource, time, torch
torch.set_num_threads({threads})
from tools.profile_torch import build

def cpu():  # this process and its reaped children (g++), all threads
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime

w = build({cell!r}, "compile", seq_len={T}, batch=64, input_size=256, hidden_size=512)
t0, c0 = time.perf_counter(), cpu(); w.train_step(); first, first_cpu = time.perf_counter() - t0, cpu() - c0
times, cpus = [], []
for _ in range(3):
    t0, c0 = time.perf_counter(), cpu(); w.train_step(); times.append(time.perf_counter() - t0); cpus.append(cpu() - c0)
print(first, min(times), first_cpu, min(cpus))
"""


def cmd_compile_time(args) -> None:
    root = str(Path(__file__).resolve().parents[1])
    print(f"compile backend, {args.cell}, B=64 I=256 H=512 float32, {args.threads} threads, fresh process + "
          "empty inductor cache per T, TORCHINDUCTOR_COMPILE_THREADS=1 (so g++ runs as reaped children "
          "and its CPU time is counted); CPU = user+sys of the process and its children")
    print("| T | first call wall s | steady wall s | compile wall s | first call CPU s | steady CPU s | compile CPU s |")
    print("|---|---|---|---|---|---|---|")
    for T in args.seq_lens:
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, PYTHONWARNINGS="ignore",
                       TORCHINDUCTOR_COMPILE_THREADS="1")
            code = _COMPILE_CHILD.format(root=root, threads=args.threads, cell=args.cell, T=T)
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            first, steady, first_cpu, steady_cpu = map(float, out.stdout.split()[-4:])
            print(f"| {T} | {first:.1f} | {steady:.2f} | {first - steady:.1f} | {first_cpu:.1f} | "
                  f"{steady_cpu:.2f} | {first_cpu - steady_cpu:.1f} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["time", "profile", "compile-time"])
    parser.add_argument("--cell", default="lstm",
                        choices=STANDARD_CELLS + CUSTOM_CELLS)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--clock", choices=["wall", "process"], default="wall",
                        help="wall: perf_counter; process: CPU time of the process (all threads), "
                             "robust to other processes on a shared machine")
    parser.add_argument("--backends", nargs="+", default=None)
    parser.add_argument("--seq-lens", nargs="+", type=int, default=[100, 1000])
    args = parser.parse_args(argv)
    if args.backends is None:
        import rnnbench.torch
        args.backends = [b for b in rnnbench.torch.available_backends("cpu")
                         if rnnbench.torch.unsupported_cell_reason(b, args.cell) is None]
    if args.command == "time" and "native" not in args.backends:
        args.backends.append("native")
    {"time": cmd_time, "profile": cmd_profile, "compile-time": cmd_compile_time}[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

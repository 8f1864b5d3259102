"""Side-by-side timing of the `autograd` rung against `nn.LSTM`/`nn.GRU` (one layer).

    .venv/bin/python scripts/bench_autograd.py                 # S1, LSTM and GRU, 2 threads
    .venv/bin/python scripts/bench_autograd.py --cell lstm --repeats 9 --profile

Variants, timed interleaved (one call of each per round, in a rotating order, so load
from other processes hits them alike) and reported as medians and as ratios to `native` of the same round:
  native           nn.LSTM / nn.GRU (oneDNN RNN primitive for the float32 CPU LSTM)
  autograd         torch_impl.backends.bptt.lstm_gru.run_kernel with the process's GEMM policy
                   (RNNBENCH_GEMM: blas by default, onednn, auto)
  autograd-onednn  (--no-onednn) policy "onednn": step GEMMs and dx on oneDNN
  autograd-mm      (--no-onednn) policy "blas": every GEMM on torch.mm/addmm (MKL)
for forward without gradients ("fwd") and forward + backward w.r.t. x and all parameters
("fwd+bwd").  --profile prints where the autograd variant's time goes (GEMM vs the rest).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from torch_impl.backends.bptt.lstm_gru import KERNELS  # noqa: E402
from torch_impl.backends.bptt.lstm_gru import run_kernel as run_direction  # noqa: E402
from torch_impl.backends.bptt.gemm import gemm_policy, onednn_unavailable_reason, tuned_choices, use_onednn  # noqa: E402

GEMM_OPS = ("mkldnn::_linear_pointwise", "aten::mm", "aten::addmm", "aten::addmm_", "mkldnn::_reorder_linear_weight")


def build(cell, T, B, I, H, seed=0):
    torch.manual_seed(seed)
    module = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(I, H)
    x = torch.randn(T, B, I, requires_grad=True)
    return module, x


def make_variants(cell, module, x, with_mm):
    p = dict(module.named_parameters())
    args = (p["weight_ih_l0"], p["weight_hh_l0"], p["bias_ih_l0"], p["bias_hh_l0"], None, None)
    B, H = x.shape[1], module.hidden_size
    h0 = torch.zeros(B, H)
    c0 = torch.zeros(B, H) if cell == "lstm" else None

    def native_fwd():
        with torch.no_grad():
            module(x)

    def native_train():
        out, _ = module(x)
        out.sum().backward()

    def ours_fwd():
        with torch.no_grad():
            run_direction(cell, x, h0, c0, *args)

    def ours_train():
        out, _, _ = run_direction(cell, x, h0, c0, *args)
        out.sum().backward()

    def forced(fn, onednn):
        def wrapped():
            with use_onednn(onednn):
                fn()
        return wrapped

    variants = {"fwd": {"native": native_fwd, "autograd": ours_fwd},
                "fwd+bwd": {"native": native_train, "autograd": ours_train}}
    if with_mm:
        for mode, fn in (("fwd", ours_fwd), ("fwd+bwd", ours_train)):
            variants[mode]["autograd-onednn"] = forced(fn, True)
            variants[mode]["autograd-mm"] = forced(fn, False)
    return variants


def interleaved(fns, repeats, warmup, zero_grad, clock=time.perf_counter):
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times = {k: [] for k in fns}
    ratios = {k: [] for k in fns}
    names = list(fns)
    for r in range(repeats):
        round_times = {}
        # rotate the order each round so no variant always runs right after another
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn = fns[name]
            zero_grad()
            start = clock()
            fn()
            round_times[name] = clock() - start
        for name, t in round_times.items():
            times[name].append(t)
            ratios[name].append(t / round_times["native"])
    return times, ratios


def profile(cell, fn, zero_grad, label):
    from torch.profiler import ProfilerActivity, profile as torch_profile
    fn()
    zero_grad()
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    gemm = sum(e.self_cpu_time_total for e in events if e.key in GEMM_OPS)
    print(f"\nprofile {cell} {label}: total self CPU {total / 1e3:.1f} ms, "
          f"GEMM {gemm / 1e3:.1f} ms ({100 * gemm / total:.0f}%), rest {(total - gemm) / 1e3:.1f} ms")
    rows = sorted(events, key=lambda e: -e.self_cpu_time_total)[:12]
    for e in rows:
        print(f"  {e.key:40s} calls {e.count:6d}  self {e.self_cpu_time_total / 1e3:8.1f} ms "
              f"({100 * e.self_cpu_time_total / total:4.1f}%)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cell", choices=(*KERNELS, "both"), default="both")
    ap.add_argument("-T", type=int, default=100)
    ap.add_argument("-B", type=int, default=64)
    ap.add_argument("-I", type=int, default=256)
    ap.add_argument("-H", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--no-onednn", dest="with_mm", action="store_true",
                    help="also time the autograd rung with the GEMM path forced: oneDNN, and BLAS (torch.mm)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall: time.perf_counter (the figure that counts); cpu: this process's CPU "
                         "time (steadier on a shared machine; with --threads 1 it measures work)")
    ap.add_argument("--mode", choices=("fwd", "fwd+bwd", "both"), default="both")
    ap.add_argument("--profile", action="store_true", help="profile one autograd call per cell and mode")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    cells = tuple(KERNELS) if args.cell == "both" else (args.cell,)
    modes = ("fwd", "fwd+bwd") if args.mode == "both" else (args.mode,)
    reason = onednn_unavailable_reason("cpu", torch.float32)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, T={args.T} B={args.B} "
          f"I={args.I} H={args.H}, float32 CPU, GEMM policy {gemm_policy()!r} (oneDNN: {reason or 'available'}); "
          f"{args.repeats} interleaved rounds after {args.warmup} warm-up, {args.clock} clock")
    for cell in cells:
        module, x = build(cell, args.T, args.B, args.I, args.H)

        def zero_grad():
            x.grad = None
            module.zero_grad(set_to_none=True)

        variants = make_variants(cell, module, x, args.with_mm)
        G = 4 if cell == "lstm" else 3
        flops = 2 * args.T * args.B * G * args.H * (args.I + args.H)
        for mode in modes:
            clock = time.perf_counter if args.clock == "wall" else time.process_time
            times, ratios = interleaved(variants[mode], args.repeats, args.warmup, zero_grad, clock)
            for name in variants[mode]:
                med = statistics.median(times[name])
                rate = (flops if mode == "fwd" else 3 * flops) / med / 1e9
                print(f"{cell:4s} {mode:8s} {name:15s} median {med * 1e3:8.1f} ms  "
                      f"ratio to native {statistics.median(ratios[name]):5.2f}  ({rate:5.0f} GFLOP/s)")
        choices = {k: v for k, v in tuned_choices().items() if k[0] == args.B}
        if choices:
            print(f"{cell}: GEMM policy 'auto' chose " + ", ".join(
                f"{k[0]}x{k[1]}x{k[2]}{' +add' if k[6] else ''}{' +bias' if k[5] else ''}: {v}"
                for k, v in choices.items()))
        if args.profile:
            for mode in modes:
                profile(cell, variants[mode]["autograd"], zero_grad, f"autograd {mode}")
                profile(cell, variants[mode]["native"], zero_grad, f"native {mode}")


if __name__ == "__main__":
    main()

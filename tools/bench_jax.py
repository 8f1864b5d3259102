"""Quick side-by-side timing: rnnbench.jax impls vs torch `nn.LSTM` (native) on the CPU.

    .venv/bin/python -m tools.bench_jax                 # the S1/S2/S3 table + remat memory
    .venv/bin/python -m tools.bench_jax --unroll-sweep  # scan's unroll on S3 forward
    .venv/bin/python -m tools.bench_jax --xla both      # XLA's defaults vs rnnbench.jax.xla_options' dot fusion
    .venv/bin/python -m tools.bench_jax --impls scan,flax_linen --workloads S1 --modes train
    .venv/bin/python -m tools.bench_jax --workloads S1 --modes train --threads 1 \
        --cell lstm,ln_lstm,peephole_lstm,gru_reset_before      # catalogue cells vs plain nn.LSTM
    .venv/bin/python -m tools.bench_jax --impls scan,bptt --workloads S1 --modes train --threads 1 --rounds 3

Each measurement runs in its own subprocess (no thread-pool fight between torch and
XLA, clean peak RSS), with the same thread count for both frameworks (`--threads`,
default 2: `torch.set_num_threads`, and XLA's CPU client is held to the same cores by
`os.sched_setaffinity`).  Measurements of one workload are interleaved across rounds,
and the figures are ratios to torch native measured in the same run: on a shared,
noisy machine only the ratios mean much.  Per measurement: the first call (JAX: trace +
compile + run) timed on its own, then the median of repeated calls after warm-up.
"train" is forward + backward (gradients for the params and x, loss <output, g>),
"forward" is inference (torch under `no_grad`).  Memory: XLA's buffer assignment of the
compiled train step (`memory_analysis()`: temporaries), with and without `remat`.
`--cell` (comma-separated catalogue cells, default lstm) runs each jax impl once per
cell; the torch baseline stays plain `nn.LSTM`, and "vs jax lstm" is each cell's time
over the same impl's plain lstm in the same run (what the cell costs over the plain one).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from rnnbench.measure.workloads import all_named  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = {name: (w.seq_len, w.batch, w.input_size, w.hidden_size)  # name: (T, B, I, H)
             for name, w in all_named().items() if name in ("S1", "S2", "S3")}
TARGETS = {("S1", "train"): 1.2, ("S2", "forward"): 1.0, ("S3", "forward"): 2.0}
# issue 7: a catalogue cell's S1 forward+backward over plain torch nn.LSTM
CELL_TARGETS = {("ln_lstm", "S1", "train"): 1.5, ("peephole_lstm", "S1", "train"): 1.3}


# ---------------------------------------------------------------------------------
# worker: one measurement, printed as one JSON line


def _time_calls(fn, budget_s: float, min_reps: int = 5, max_reps: int = 200) -> list[float]:
    times = []
    start = time.perf_counter()
    while len(times) < min_reps or (time.perf_counter() - start < budget_s and len(times) < max_reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return times


def jax_function(impl: str, cell: str, workload: str, mode: str, *, unroll: int = 1, remat: bool = False):
    """(compiled function, its arguments) for one rnnbench.jax measurement: "forward" runs the layer,
    "train" its value and gradients (params and x) of the loss <output, g>; float32, seeded inputs."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import rnnbench.jax
    from rnnbench.core.params import init_params
    from rnnbench.core.spec import RNNSpec

    T, B, I, H = WORKLOADS[workload]
    spec = RNNSpec(cell, I, H)
    rng = np.random.default_rng(0)
    params = {k: jnp.asarray(v, jnp.float32) for k, v in init_params(spec, rng).items()}
    x = jnp.asarray(rng.standard_normal((T, B, I)), jnp.float32)
    g = jnp.asarray(rng.standard_normal((T, B, H)), jnp.float32)
    options = dict(unroll=unroll, remat=remat) if impl == "scan" else {}

    def run(params, x):
        return rnnbench.jax.rnn(params, x, cell=cell, backend=impl, **options)[0]

    # rnnbench.jax.jit: jax.jit with rnnbench's XLA options (RNNBENCH_XLA, set by --xla)
    if mode == "forward":
        return rnnbench.jax.jit(run), (params, x)
    return rnnbench.jax.jit(jax.value_and_grad(lambda p, x, g: jnp.vdot(run(p, x), g), argnums=(0, 1))), (params, x, g)


def worker(args) -> dict:
    os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:args.threads]))
    T, B, I, H = WORKLOADS[args.workload]
    result = dict(framework=args.framework, impl=args.impl, workload=args.workload, mode=args.mode,
                  unroll=args.unroll, remat=args.remat, threads=args.threads, cell=args.cell)
    if args.framework == "torch":
        import torch
        torch.set_num_threads(args.threads)
        torch.manual_seed(0)
        model = torch.nn.LSTM(I, H)
        x = torch.randn(T, B, I, requires_grad=args.mode == "train")
        g = torch.randn(T, B, H)
        if args.mode == "forward":
            def call():
                with torch.no_grad():
                    model(x)
        else:
            def call():
                out, _ = model(x)
                (out * g).sum().backward()
                model.zero_grad(set_to_none=True)
                x.grad = None
    else:
        import jax
        compiled_fn, call_args = jax_function(args.impl, args.cell, args.workload, args.mode, unroll=args.unroll,
                                              remat=args.remat)
        if args.mode == "train":
            mem = compiled_fn.lower(*call_args).compile().memory_analysis()
            if mem is not None:
                result["temp_mib"] = mem.temp_size_in_bytes / 2 ** 20

        def call():
            jax.block_until_ready(compiled_fn(*call_args))

    t = time.perf_counter()
    call()
    result["first_call_s"] = time.perf_counter() - t
    for _ in range(2):
        call()
    times = _time_calls(call, args.budget)
    result.update(median_ms=1e3 * statistics.median(times), min_ms=1e3 * min(times), reps=len(times))
    import resource
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


# ---------------------------------------------------------------------------------
# driver: subprocesses, interleaved rounds, the table


def measure(framework, impl, workload, mode, *, unroll=1, remat=False, threads=2, budget=2.0, cell="lstm",
            xla="default") -> dict:
    cmd = [sys.executable, "-m", "tools.bench_jax", "--worker", framework, impl, workload, mode,
           "--unroll", str(unroll), "--threads", str(threads), "--budget", str(budget),
           "--cell", cell] + (["--remat"] if remat else [])
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), RNNBENCH_XLA=xla)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    if proc.returncode != 0:
        return dict(framework=framework, impl=impl, workload=workload, mode=mode, unroll=unroll, remat=remat,
                    error=proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"rc {proc.returncode}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]), xla=xla)


def main_table(args):
    rows = []
    jobs = [(w, m) for w in args.workloads for m in args.modes]
    for workload, mode in jobs:
        per = {}
        for rnd in range(args.rounds):  # interleave torch and jax within each round
            variants = [("torch", "native", {})] + [("jax", impl, {"unroll": args.unroll, "cell": cell, "xla": xla})
                                                    for xla in args.xla for cell in args.cells for impl in args.impls]
            if mode == "train" and "scan" in args.impls and args.remat:
                variants.append(("jax", "scan", {"unroll": args.unroll, "remat": True}))
            for framework, impl, opts in variants:
                r = measure(framework, impl, workload, mode, threads=args.threads, budget=args.budget, **opts)
                name = impl if framework == "torch" or opts.get("xla", "default") == "default" else f"{impl}[xla {opts['xla']}]"
                key = (framework, name, r.get("remat", False), opts.get("cell", "lstm"))
                per.setdefault(key, []).append(r)
                print("  ", json.dumps(r), file=sys.stderr, flush=True)
        torch_ms = statistics.median(r["median_ms"] for r in per[("torch", "native", False, "lstm")]
                                     if "median_ms" in r)
        medians = {key: statistics.median(r["median_ms"] for r in rs if "median_ms" in r)
                   for key, rs in per.items() if any("median_ms" in r for r in rs)}
        for (framework, impl, remat, cell), rs in per.items():
            ok = [r for r in rs if "median_ms" in r]
            if not ok:
                rows.append((workload, mode, f"{framework}.{impl}", cell, remat, None, None, None, None, None,
                             rs[0]["error"]))
                continue
            ms = medians[(framework, impl, remat, cell)]
            plain = medians.get((framework, impl, remat, "lstm")) if framework == "jax" else None
            first = statistics.median(r["first_call_s"] for r in ok)
            temp = ok[0].get("temp_mib")
            rows.append((workload, mode, f"{framework}.{impl}", cell, remat, ms, ms / torch_ms,
                         None if plain is None else ms / plain, first, temp, ""))
    print(f"\nthreads={args.threads}, rounds={args.rounds}, scan unroll={args.unroll}; ratio = time / torch.native "
          f"(plain nn.LSTM) time in the same run (median of per-round medians); vs jax lstm = time / the same "
          f"impl's plain lstm in the same run\n")
    print("| workload | mode | impl | cell | remat | ms | ratio vs torch.native | target | vs jax lstm | first call s "
          "| XLA temp MiB |")
    print("|---|---|---|---|---|---:|---:|---:|---:|---:|---:|")
    for w, m, name, cell, remat, ms, ratio, vs_plain, first, temp, err in rows:
        if ms is None:
            print(f"| {w} | {m} | {name} | {cell} | {remat} | error: {err} | | | | | |")
            continue
        target = None
        if name in ("jax.scan", "jax.bptt") and not remat:
            target = TARGETS.get((w, m)) if cell == "lstm" else CELL_TARGETS.get((cell, w, m))
        print(f"| {w} | {m} | {name} | {cell} | {'yes' if remat else ''} | {ms:.1f} | {ratio:.2f} | "
              f"{'<= ' + str(target) if target else ''} | {'' if vs_plain is None else f'{vs_plain:.2f}'} | "
              f"{first:.2f} | {'' if temp is None else f'{temp:.0f}'} |")


def unroll_sweep(args):
    print("| unroll | S3 forward ms | ratio vs torch.native | first call s |")
    print("|---:|---:|---:|---:|")
    torch_ms = statistics.median(measure("torch", "native", "S3", "forward", threads=args.threads,
                                         budget=args.budget)["median_ms"] for _ in range(args.rounds))
    for unroll in args.unrolls:
        rs = [measure("jax", "scan", "S3", "forward", unroll=unroll, threads=args.threads, budget=args.budget)
              for _ in range(args.rounds)]
        ms = statistics.median(r["median_ms"] for r in rs)
        print(f"| {unroll} | {ms:.1f} | {ms / torch_ms:.2f} | {statistics.median(r['first_call_s'] for r in rs):.2f} |",
              flush=True)
    print(f"\ntorch.native S3 forward: {torch_ms:.1f} ms (threads={args.threads})")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", nargs=4, metavar=("FRAMEWORK", "IMPL", "WORKLOAD", "MODE"))
    parser.add_argument("--impls", default="scan", help="comma-separated rnnbench.jax impls (default: scan)")
    parser.add_argument("--workloads", default="S1,S2,S3")
    parser.add_argument("--modes", default="forward,train")
    parser.add_argument("--unroll", type=int, default=1)
    parser.add_argument("--remat", action="store_true", help="worker: scan with remat; table: add a remat row")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--budget", type=float, default=2.0, help="seconds of timed calls per measurement")
    parser.add_argument("--cell", default="lstm",
                        help="catalogue cell(s) the jax impls run, comma-separated (worker: one); torch stays nn.LSTM")
    parser.add_argument("--xla", choices=("default", "fused", "both"), default="default",
                        help="XLA options of the jax impls (RNNBENCH_XLA): XLA's default, rnnbench.jax.xla_options' "
                             "YNNPACK dot fusion, or both side by side")
    parser.add_argument("--unroll-sweep", action="store_true")
    parser.add_argument("--unrolls", default="1,2,4,8,16,32")
    args = parser.parse_args(argv)
    if args.worker:
        args.framework, args.impl, args.workload, args.mode = args.worker
        print(json.dumps(worker(args)))
        return 0
    args.impls = [s for s in args.impls.split(",") if s]
    args.workloads = [s for s in args.workloads.split(",") if s]
    args.modes = [s for s in args.modes.split(",") if s]
    args.cells = [s for s in args.cell.split(",") if s]
    args.xla = ["default", "fused"] if args.xla == "both" else [args.xla]
    args.unrolls = [int(s) for s in args.unrolls.split(",")]
    if args.unroll_sweep:
        unroll_sweep(args)
    else:
        main_table(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""torch.compile's scan against lax.scan: what the compiled loop does per step, and the runs
that measure issue 24's targets.

    python -m tools.experiments.scan_profile structure [--workload S1] [--cell lstm] [--out FILE.json]
    python -m tools.experiments.scan_profile kernels   [--workload S2] [--impls ...] [--threads 2]
    python -m tools.experiments.scan_profile study     [--out DIR] [--processes 5]

`structure` (no timing; runs anywhere): compiles `torch.scan` at the workload's sizes (float32,
one layer) for the no-grad forward, the forward with `freezing`, and forward+backward, and
reads Inductor's generated code: whether the loop over time runs in the Python wrapper, what
each iteration of the forward and backward loops calls (kernels, ATen ops, allocations,
Python-level checks), whether the recurrent GEMM is prepacked, and what the training forward
stores per step (a copy of the recurrent weight per step is the scan backward's residual).
Prints a summary and writes the counts as JSON (commit it under docs/records to quote them).

`kernels` (a timing: run it alone): torch.profiler over warm calls of each rung's forward and
forward+backward, in one process per rung: self CPU time by op (GEMMs, Inductor's kernels,
everything else) and calls per time step, against `nn.LSTM` in the same process.

`study` (a timing: run it alone, about half an hour on 2 cores): the study, `rnnbench
compare`, on what issue 24 asks: LSTM and GRU, S1 and S2, forward and forward+backward, for
`torch.scan` (and its `freezing` and `cpp_wrapper` options), `torch.compile`, `torch.bptt`,
`jax.scan` and `jax.bptt`, every ratio paired with `nn.LSTM`/`nn.GRU` in the same processes over
several fresh processes, plus the first-call group (first calls at T=100 and T=1000, cold and
warm compile cache).  Its records are what the docs' figures of the comparison are rendered
from (commit DIR, e.g. docs/records/scan/run-0, and write `study@DIR:` keys).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

STUDY_IMPLS = ("torch.native,torch.compile,torch.compile[freezing],torch.scan,torch.scan[freezing],"
               "torch.scan[cpp_wrapper],torch.bptt,jax.scan,jax.bptt")


# ---- structure: what the generated code does per step ------------------------------------------

def _function(code: str, name: str) -> str:
    """The text of one top-level `def name(` of a generated module (up to the next top-level line)."""
    m = re.search(rf"^def {name}\(.*?(?=^\S)", code, re.DOTALL | re.MULTILINE)
    return m.group(0) if m else ""


def _kernel_sources(code: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(r"^(cpp_fused_\w+) = async_compile\.cpp_pybinding\("
                                                         r"\[.*?\], r'''(.*?)'''\)", code, re.DOTALL | re.MULTILINE)}


def loop_summary(code: str) -> dict:
    """What one generated module does in its while-loop body (one time step), by kind of call."""
    body = _function(code, "while_loop_body_graph_0_0")
    cond = _function(code, "while_loop_cond_graph_0_0")
    kernels = re.findall(r"^\s+(cpp_fused_\w+)\(", body, re.MULTILINE)
    extern = re.findall(r"extern_kernels\.(\w+)\(", body)
    aten = re.findall(r"^\s+\w+ = torch\.ops\.(\w+\.\w+)\.\w+\(", body, re.MULTILINE)
    sources = _kernel_sources(code)
    return {
        "loop_in_python": "while should_loop:" in code,
        "body_native_calls": len(kernels) + len(extern) + len(aten) + len(re.findall(r"^\s+cpp_fused_\w+\(", cond,
                                                                                       re.MULTILINE)),
        "body_fused_kernels": len(kernels),
        "body_cond_kernels": len(re.findall(r"^\s+cpp_fused_\w+\(", cond, re.MULTILINE)),
        "body_extern_gemms": extern,
        "body_aten_ops": aten,
        "body_allocations": len(re.findall(r"empty_strided_cpu\(", body)) + len(re.findall(r"empty_strided_cpu\(",
                                                                                           cond)),
        "body_item_calls": len(re.findall(r"\.item\(\)", body)),
        "body_python_asserts": len(re.findall(r"^\s+if not \(", body, re.MULTILINE)),
        "body_size_stride_checks": len(re.findall(r"assert_size_stride\(", body)),
        "prepacked_gemm_in_body": any(k in body for k in ("_mkl_linear", "mkldnn", "_linear_pointwise")),
        "prepacked_gemm_outside": any(k in code.replace(body, "") for k in ("_mkl_linear", "mkldnn._linear")),
        "frozen_params": len(set(re.findall(r"_frozen_param\d+", code))),
        "kernel_count": len(sources),
    }


def _weight_stacks(code: str, gates_h: int, hidden: int) -> int:
    """Buffers of shape (T, G*H, H) or (T, H, G*H) a module allocates: the recurrent weight stored
    once per step (and each copy of such a stack)."""
    shapes = re.findall(r"empty_strided_cpu\(\((\d+), (\d+), (\d+)\)", code)
    return sum(1 for t, a, b in shapes if {int(a), int(b)} == {gates_h, hidden})


def cmd_structure(args) -> dict:
    import torch

    from rnnbench.core.spec import RNNSpec
    from rnnbench.measure.workloads import resolve
    from torch._inductor.utils import run_and_get_code
    from rnnbench.torch.adapter import build_module
    from rnnbench.core.params import init_params

    torch.set_num_threads(args.threads)
    w = resolve(args.workload)[0]
    T = args.seq_len or w.seq_len
    spec = RNNSpec(args.cell, w.input_size, w.hidden_size)
    G = spec.num_gates
    params = init_params(spec)
    x = torch.randn(T, w.batch, w.input_size)
    out = {"workload": w.name, "cell": args.cell, "seq_len": T, "batch": w.batch, "input_size": w.input_size,
           "hidden_size": w.hidden_size, "torch": torch.__version__}
    for name, options, grad in (("forward", {}, False), ("forward_freezing", {"freezing": True}, False),
                                ("train", {}, True)):
        module = build_module(spec, "scan", params, backend_options=options)
        xi = x.clone().requires_grad_(grad)

        def call():
            with torch.set_grad_enabled(grad):
                o, hidden = module(xi)
                if grad:
                    o.sum().backward()

        _, codes = run_and_get_code(call)
        parts = ["forward_graph", "backward_graph"] if grad else ["graph"]
        out[name] = {}
        for part, code in zip(parts, codes):
            summary = loop_summary(code)
            summary["weight_sized_stacks"] = _weight_stacks(code, G * w.hidden_size, w.hidden_size)
            out[name][part] = summary
            if args.code_dir:
                Path(args.code_dir).mkdir(parents=True, exist_ok=True)
                (Path(args.code_dir) / f"{name}_{part}.py").write_text(code)
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return out


# ---- kernels: a profile of warm calls ----------------------------------------------------------------

_KERNELS_CHILD = r"""
import json
from rnnbench.measure.threads import pin_threads
pin_threads({threads})
import torch
from rnnbench.core import registry
from rnnbench.measure.workloads import resolve
from torch.profiler import ProfilerActivity, profile

w = resolve({workload!r})[0]
spec = w.spec({cell!r})
made = {{}}
for impl in ("torch.native", {impl!r}):
    row = registry.get(impl)
    registry.framework(row.framework).set_threads({threads})
    wl = row.adapter().make_workload(spec, seq_len=w.seq_len, batch=w.batch, dtype="float32", device="cpu", seed=0)
    for _ in range(3):
        wl.forward(); wl.train_step()
    made[impl] = wl
result = {{}}
for impl, wl in made.items():
    for phase in ("forward", "train_step"):
        fn = getattr(wl, phase)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range({calls}):
                fn()
        ops = {{}}
        for e in prof.key_averages():
            ops[e.key] = (e.self_cpu_time_total / {calls} / 1e3, e.count / {calls})
        result[f"{{impl}}/{{phase}}"] = ops
print(json.dumps(result))
"""


def _kind(op: str) -> str:
    if any(g in op for g in ("mm", "linear", "mkldnn", "mkl", "bmm", "gemm")):
        return "GEMM"
    if "CompiledFxGraph" in op or "cpp_fused" in op:  # the generated wrapper, its loop and kernels
        return "compiled graph (wrapper + Inductor kernels)"
    if "Dynamo" in op or "Compiled" in op or "_RecordedDirection" in op:
        return "guards and autograd nodes"
    return "other ATen / Python"


def cmd_kernels(args) -> None:
    for impl in args.impls.split(","):
        code = _KERNELS_CHILD.format(root=str(ROOT), threads=args.threads, workload=args.workload, cell=args.cell,
                                     impl=impl, calls=args.calls)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
        if proc.returncode:
            print(f"{impl}: failed: {proc.stderr[-800:]}")
            continue
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"\n## {impl} vs torch.native, {args.cell} {args.workload}, {args.threads} threads, "
              f"per call (self CPU ms; calls per call)")
        for key, ops in result.items():
            total = sum(ms for ms, _ in ops.values())
            by_kind: dict[str, float] = {}
            for op, (ms, _) in ops.items():
                by_kind[_kind(op)] = by_kind.get(_kind(op), 0.0) + ms
            print(f"{key}: {total:.2f} ms self CPU; " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(by_kind.items())))
            for op, (ms, n) in sorted(ops.items(), key=lambda kv: -kv[1][0])[:args.top]:
                print(f"    {op[:60]:60s} {ms:8.3f} ms  {n:8.1f} calls")


# ---- study: the runs issue 24's targets are read from -------------------------------------------

def cmd_study(args) -> None:
    cmd = [sys.executable, "-m", "rnnbench.cli", "compare", "--impls", args.impls, "--cells", "lstm,gru",
           "--custom-cells", "none", "--workloads", "S1,S2", "--first-call", "T100,T1000",
           "--precisions", "none", "--one-thread", "none", "--threads", str(args.threads), "--out", str(args.out),
           "--no-progress", *(["--processes", str(args.processes)] if args.processes else [])]
    print(" ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("structure", help="the generated code of torch.scan, per step (no timing)")
    p.add_argument("--workload", default="S1")
    p.add_argument("--seq-len", type=int, default=None, help="T (default the workload's; the structure does not "
                                                             "depend on it)")
    p.add_argument("--cell", default="lstm")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=None, help="write the counts here as JSON")
    p.add_argument("--code-dir", default=None, help="write the generated modules here")
    p.set_defaults(func=cmd_structure)
    p = sub.add_parser("kernels", help="torch.profiler of warm calls, each rung beside nn.LSTM (a timing)")
    p.add_argument("--workload", default="S2")
    p.add_argument("--cell", default="lstm")
    p.add_argument("--impls", default="torch.scan,torch.scan[cpp_wrapper],torch.compile,torch.bptt")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--top", type=int, default=8)
    p.set_defaults(func=cmd_kernels)
    p = sub.add_parser("study", help="the study on issue 24's targets (a timing: run it alone)")
    p.add_argument("--impls", default=STUDY_IMPLS)
    p.add_argument("--processes", type=int, default=None, help="default the study's (3, up to 4 for a wide interval)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("docs/records/scan/run-0"))
    p.set_defaults(func=cmd_study)
    args = parser.parse_args(argv)
    args.func(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

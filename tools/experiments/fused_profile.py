"""Where torch.fused's LSTM S1 forward time goes, against nn.LSTM's (the record docs/torch.md quotes).

    python -m tools.experiments.fused_profile --out docs/records/fused-profile/amd-epyc-avx512.json

Alone on the machine: in one process, rounds interleave the parts, each timed as the median of
its calls; the record keeps every round's medians and their median over the rounds:
- `native`: `nn.LSTM` forward (no grad), the bar;
- `fused`: `rnnbench.torch.LSTM(backend="fused")` forward (no grad);
- `kernel`: the custom op alone on a precomputed input projection (the C++ time loop);
- `step_gemms`: T of the kernel's step GEMMs alone, NumPy's OpenBLAS (the library the kernel calls);
- `projection`: the input projection over all steps as the rung runs it (`torch.mm` plus the bias).
`kernel - step_gemms` is the kernel's own work around its GEMMs (the pass over the gates, copies).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from rnnbench import kernels
from rnnbench.core.precision import isa_summary
from rnnbench.torch import LSTM
from rnnbench.torch.backends import fused

T, B, I, H = 100, 64, 256, 512  # S1


def _median_ms(fn, calls: int) -> float:
    fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def parts(threads: int):
    torch.manual_seed(0)
    native, rung = torch.nn.LSTM(I, H), LSTM(I, H, backend="fused")
    rung.load_state_dict(native.state_dict())
    x = torch.randn(T, B, I)
    w_ih, w_hh = native.weight_ih_l0.detach(), native.weight_hh_l0.detach()
    bias = (native.bias_ih_l0 + native.bias_hh_l0).detach()
    xg = (x.flatten(0, 1) @ w_ih.t() + bias).unflatten(0, (T, B))
    h0 = torch.zeros(B, H)
    a = np.random.default_rng(0).standard_normal((B, H)).astype(np.float32)
    w = w_hh.numpy()
    out = np.empty((B, 4 * H), np.float32)

    def step_gemms():
        for _ in range(T):
            np.dot(a, w.T, out=out)

    with torch.no_grad():
        return {"native": lambda: native(x), "fused": lambda: rung(x),
                "kernel": lambda: fused.fused_lstm(xg, w_hh, h0, h0, None), "step_gemms": step_gemms,
                "projection": lambda: (x.flatten(0, 1) @ w_ih.t() + bias)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.experiments.fused_profile", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    kernels.set_threads(args.threads)
    fns = parts(args.threads)
    rounds = []
    with torch.no_grad():
        for r in range(args.rounds):
            order = list(fns) if r % 2 == 0 else list(reversed(fns))
            rounds.append({name: _median_ms(fns[name], args.calls) for name in order})
    median = {name: statistics.median(r[name] for r in rounds) for name in fns}
    record = dict(command="python -m tools.experiments.fused_profile " + " ".join(sys.argv[1:] if argv is None else argv),
                  date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  machine=f"{isa_summary()}; {torch.get_num_threads()} threads",
                  workload=dict(T=T, B=B, I=I, H=H), threads=args.threads, rounds=rounds, median_ms=median,
                  kernel_own_ms=median["kernel"] - median["step_gemms"],
                  fused_over_native=median["fused"] / median["native"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: round(v, 2) for k, v in median.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

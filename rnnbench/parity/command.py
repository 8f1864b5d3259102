"""`rnnbench parity`: the command line of the parity matrix."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rnnbench.core import registry
from rnnbench.core.precision import ALL as DTYPES
from rnnbench.core.precision import device_reason as precision_device_reason
from .report import render, to_json, to_markdown, training_parity
from .runner import covering_cases, is_slow, run_matrix, supported_in_any_dtype


def _select(all_names: Sequence[str], wanted: Sequence[str] | None, what: str) -> list[str]:
    """Names from `all_names` matching `wanted` (exact names or prefixes like "torch.")."""
    if not wanted:
        return list(all_names)
    chosen = []
    for w in wanted:
        hits = [n for n in all_names if n == w or (w.endswith(".") and n.startswith(w))
                or (w in ("torch", "jax") and n.startswith(w + "."))]
        if not hits:
            raise ValueError(f"unknown {what} {w!r}; valid: {', '.join(all_names)}")
        chosen += [h for h in hits if h not in chosen]
    return chosen


def _split(values: Sequence[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v for item in values for v in item.split(",") if v]


def select_cases(cases: Sequence, wanted: Sequence[str]) -> list:
    """Cases named in `wanted`: an exact name selects that case; otherwise a substring
    ("lengths", "gru_") selects every case whose name contains it."""
    names = [c.name for c in cases]
    chosen = set()
    for w in wanted:
        hits = [w] if w in names else [n for n in names if w in n]
        if not hits:
            raise SystemExit(f"rnnbench parity: no vector case matches {w!r}; valid names: {', '.join(names)}")
        chosen.update(hits)
    return [c for c in cases if c.name in chosen]


def cmd_parity(args) -> int:
    from rich.console import Console

    from rnnbench.vectors import load_cases
    console = Console()
    impls = _select(registry.names(), _split(args.impls), "implementation")
    if args.threads:  # tiny cases: spare threads only spin on a busy CPU
        for fw in sorted({registry.get(n).framework for n in impls}):
            registry.framework(fw).set_threads(args.threads)
    wanted = _split(args.dtypes)
    dtypes = _select(list(DTYPES), wanted, "dtype") if wanted else \
        [d for d in DTYPES if precision_device_reason(d, args.device) is None]
    all_cases = list(load_cases())
    wanted_cases = _split(args.cases)
    cases = select_cases(all_cases, wanted_cases) if wanted_cases else all_cases
    subsets = {}
    if args.quick:
        subsets = {n: [c.name for c in covering_cases(cases, supported_in_any_dtype(n, dtypes))]
                   for n in impls if is_slow(n)}
    with console.status("running the parity matrix ...") as status:
        done = [0]

        def progress(cell):
            done[0] += 1
            line = f"{done[0]} cells, last {cell.impl} {cell.case} {cell.dtype}: {cell.status}"
            status.update(f"parity matrix: {line}")
            if not console.is_terminal:  # a log keeps every cell, so a run cut short still says how far it got
                console.print(line, highlight=False, soft_wrap=True)

        report = run_matrix(impls, cases, dtypes, device=args.device, subsets=subsets, progress=progress)
    training = None
    if args.training:
        with console.status("identical training runs (torch.optim vs optax) ..."):
            training = training_parity(impls=impls, steps=args.training_steps)
    render(report, console, training)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "parity.json").write_text(json.dumps(to_json(report, training), indent=1, default=float) + "\n")
    (out / "parity.md").write_text(to_markdown(report, training))
    console.print(f"wrote {out / 'parity.json'} and {out / 'parity.md'}")
    ok = report.ok and (training is None or training.get("ok", False))
    return 0 if ok else 1


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "parity", help="run every implementation on every shared vector and print the parity matrix",
        description="Run every available implementation on every shared vector in each dtype, compare "
                    "outputs, states and gradients with the float64 reference (rnnbench.core.tolerances), print "
                    "the matrix and write it as JSON and Markdown.  Exits 1 on any failure.")
    p.add_argument("--impls", action="append",
                   help="implementations to run (comma-separated names, or 'torch'/'jax'); default all")
    p.add_argument("--dtypes", action="append",
                   help="precisions (rnnbench.core.precision: float64, float32, bfloat16, float16, amp_bfloat16, "
                        "amp_float16; default: every one the device has arithmetic for)")
    p.add_argument("--cases", action="append",
                   help="vector cases to run (comma-separated; a name or a substring such as 'lengths')")
    p.add_argument("--out", default="reports/parity", help="directory for parity.json and parity.md")
    p.add_argument("--device", default="cpu")
    p.add_argument("--quick", action="store_true",
                   help="run the compiled implementations (torch.compile, jax.*) only on a few cases that "
                        "together carry every feature tag (what the test suite does)")
    p.add_argument("--training", action="store_true",
                   help="also train the same model in torch.optim and optax and compare loss curves")
    p.add_argument("--training-steps", type=int, default=100)
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads (default 1: the cases are tiny; 0 keeps torch's default)")
    p.set_defaults(func=cmd_parity)

"""Cross-framework parity: every implementation x every shared vector x dtype, one matrix.

`run_matrix` runs each available registered implementation (`shared.registry`) on each
shared vector (`shared.vectors`) through its adapter and compares outputs, final states
and every gradient with the float64 reference values stored in the vector, using the
one tolerance policy (`shared.tolerances`).  A cell is

- "pass"  every compared array's max error is within its derived bound (`shared.tolerances`),
- "fail"  some array exceeds it (the cell names the worst one),
- "error" the adapter raised (the cell keeps the exception text),
- "n/s"   the configuration is not supported by that implementation (with the reason).

Implementations that cannot run on this machine are listed with their reason.

`rnnbench parity` prints the matrix (rich), rows implementations, one table per feature
group, and writes the same as JSON and Markdown (default under reports/parity/); it exits
non-zero when any cell failed or errored.  `rnnbench parity --training` adds the
identical-training report (torch.optim vs optax, see `training_parity`).

This module imports neither torch nor jax at import time: adapters load lazily.
"""

from __future__ import annotations

import json
import platform
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import registry
from .precision import ALL as DTYPES
from .precision import device_reason as precision_device_reason
from .tolerances import LAMBDA, bounds, case_sizes, max_errors

__all__ = ["CellResult", "ParityReport", "FEATURE_GROUPS", "feature_group", "expected_results",
           "case_inputs", "unsupported_reason", "run_cell", "run_matrix", "covering_cases", "SLOW_IMPLS",
           "to_json", "to_markdown", "render", "training_parity", "register"]

# Column groups, in display order.  A case goes to the first group whose tag it has
# (so "lstm_lengths_bidirectional" is shown with the lengths cases); cases with none of
# these tags (default, batch_first, no_bias, initial_state) are "options".
FEATURE_GROUPS = (
    ("edge", "edge shapes"),
    ("proj_size", "proj_size"),
    ("lengths", "variable lengths"),
    ("bidirectional", "bidirectional"),
    ("layers", "stacked layers"),
)
OPTIONS_GROUP = "options (default, batch_first, no_bias, initial_state)"
GROUP_ORDER = (OPTIONS_GROUP, "stacked layers", "bidirectional", "variable lengths", "proj_size", "edge shapes")


def feature_group(tags: Sequence[str]) -> str:
    """The display group of a case with these tags (see FEATURE_GROUPS)."""
    for tag, group in FEATURE_GROUPS:
        if tag in tags:
            return group
    return OPTIONS_GROUP


_ABBREVIATIONS = (("bidirectional", "bi"), ("initial_state", "h0"), ("batch_first", "bf"), ("lengths", "len"),
                  ("proj_size", "proj"), ("layers", "L"), ("all_options", "all"), ("no_bias", "nobias"),
                  ("unsorted", "unsort"), ("all_equal", "eq"), ("all_length1", "all1"), ("all_ones", "ones"))


def short_name(case_name: str) -> str:
    """A compact column label: "lstm_lengths_bidirectional" -> "lstm_len_bi"."""
    out = case_name
    for long, short in _ABBREVIATIONS:
        out = out.replace(long, short)
    return out


TOLERANCE_RULE = (f"{LAMBDA:g} * u(dtype) * sqrt(n * d) * max(1, |reference|) (shared/tolerances.py: n the "
                  "longest per-step sum, d the steps that feed the value)")
ABBREVIATION_LEGEND = ", ".join(f"{short}={long}" for long, short in _ABBREVIATIONS[:7])


def _cell_of(case) -> str:
    return case.spec.cell


def expected_results(case) -> dict[str, np.ndarray]:
    """Every array a run must reproduce: outputs, final states and all gradients."""
    return {**case.expected, **case.grads}


def case_inputs(case) -> dict:
    """x, h0, c0, lengths of a case, as keyword arguments for `run_case`."""
    if hasattr(case, "inputs"):
        return dict(case.inputs())
    return {"x": case.x, "h0": case.h0, "c0": case.c0, "lengths": case.lengths}


def unsupported_reason(impl_name: str, case, dtype: str, device: str | None = None) -> str | None:
    """Why `impl_name` does not support this case in `dtype` on `device` (its declaration, its adapter), or None."""
    return registry.get(impl_name).unsupported_reason(case.spec, lengths=case.lengths is not None, dtype=dtype,
                                                      device=device)


@dataclass
class CellResult:
    impl: str
    case: str
    dtype: str
    status: str  # "pass" | "fail" | "error" | "n/s"
    ratio: float | None = None  # the largest error / bound over the arrays (pass: <= 1)
    max_error: float | None = None
    worst: str | None = None  # the key with the largest error
    errors: dict[str, float] = field(default_factory=dict)
    reason: str | None = None  # why n/s, or the exception of an error
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status in ("pass", "n/s")


def run_cell(impl_name: str, case, dtype: str, device: str = "cpu") -> CellResult:
    """Run one implementation on one vector in one dtype and compare with the reference."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    reason = unsupported_reason(impl_name, case, dtype, device)
    if reason is not None:
        return CellResult(impl_name, case.name, dtype, "n/s", reason=reason)
    adapter = registry.get(impl_name).adapter()
    start = time.perf_counter()
    try:
        got = adapter.run_case(case.spec, case.params, **case_inputs(case), cotangents=case.cotangents,
                               dtype=dtype, device=device)
        expected = expected_results(case)
        errors = max_errors(expected, got)
    except Exception as e:  # a crash is a red cell that says what happened, not a lost matrix
        return CellResult(impl_name, case.name, dtype, "error", reason=f"{type(e).__name__}: {e}",
                          seconds=time.perf_counter() - start)
    seconds = time.perf_counter() - start
    worst = max(errors, key=lambda k: errors[k]) if errors else None
    max_error = errors[worst] if worst else 0.0
    limits = bounds(expected, dtype, case.spec, *case_sizes(case.spec, case.x))
    ratios = {k: e / limits[k] for k, e in errors.items()}
    ratio = max(ratios.values(), default=0.0)
    status = "pass" if all(r <= 1.0 for r in ratios.values()) else "fail"  # (NaN fails)
    if status == "fail":
        worst = max(ratios, key=lambda k: ratios[k] if ratios[k] == ratios[k] else math.inf)
    return CellResult(impl_name, case.name, dtype, status, ratio, max_error, worst, errors, seconds=seconds)


def _cost(case) -> int:
    """Rough compile/run cost of a case: layer-directions times time steps."""
    return case.spec.num_layers * case.spec.num_directions * int(np.shape(case.x)[1 if case.spec.batch_first else 0])


def covering_cases(cases: Iterable, supported: Callable[[object], bool] | None = None) -> list:
    """A few cases that together carry every feature tag, per cell type.

    Greedy set cover, per cell: repeatedly take the `supported` case with the most
    still-uncovered tags (the cheapest on ties), until every tag that some supported case
    of that cell carries is covered.  With the shared vectors this is about three cases
    per cell (the default case, the all-options case and an edge case).  Used for the
    implementations whose every new configuration compiles (SLOW_IMPLS), so that they
    still meet every feature in the test suite.
    """
    cases = list(cases)
    chosen = []
    for cell in dict.fromkeys(_cell_of(c) for c in cases):
        pool = [c for c in cases if _cell_of(c) == cell and (supported is None or supported(c))]
        uncovered = {tag for c in pool for tag in c.tags}
        while uncovered:
            best = max(pool, key=lambda c: (len(uncovered & set(c.tags)), -_cost(c)))
            chosen.append(best)
            uncovered -= set(best.tags)
    return chosen


@dataclass
class ParityReport:
    dtypes: list[str]
    cases: list[dict]  # name, cell, group, tags, spec
    implementations: list[str]  # the rows: available implementations that were run
    unavailable: dict[str, str]  # name -> reason, for registered implementations not run
    cells: list[CellResult]
    seconds: float
    subsets: dict[str, list[str]] = field(default_factory=dict)  # impl -> case names, when restricted

    def counts(self) -> dict[str, int]:
        out = {"pass": 0, "fail": 0, "error": 0, "n/s": 0}
        for cell in self.cells:
            out[cell.status] += 1
        return out

    @property
    def ok(self) -> bool:
        return all(cell.ok for cell in self.cells)

    def cell(self, impl: str, case: str, dtype: str) -> CellResult | None:
        for c in self.cells:
            if c.impl == impl and c.case == case and c.dtype == dtype:
                return c
        return None

    def groups(self) -> list[tuple[str, list[dict]]]:
        """(group, cases) in GROUP_ORDER, LSTM cases before GRU within each group."""
        out = []
        for group in GROUP_ORDER:
            members = [c for c in self.cases if c["group"] == group]
            members.sort(key=lambda c: c["cell"] != "lstm")  # stable: vector order otherwise
            if members:
                out.append((group, members))
        return out


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


def run_matrix(impls: Sequence[str] | None = None, cases: Sequence | None = None,
               dtypes: Sequence[str] = DTYPES, device: str = "cpu",
               subsets: dict[str, Sequence[str]] | None = None,
               progress: Callable[[CellResult], None] | None = None) -> ParityReport:
    """Run the matrix.  `impls` defaults to every registered name; `cases` to every vector.

    `subsets` maps an implementation to the case names it runs (others are not run for
    it and do not appear as cells).  Unavailable implementations are not run; they are
    reported in `ParityReport.unavailable` with their reason.
    """
    from .vectors import load_cases
    start = time.perf_counter()
    names = list(impls) if impls is not None else registry.names()
    for n in names:
        registry.get(n)  # raises on an unknown name, listing the valid ones
    for d in dtypes:
        if d not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {d!r}")
    cases = list(cases) if cases is not None else list(load_cases())
    unavailable = {}
    rows = []
    for n in names:
        reason = registry.get(n).unavailable_reason(device)
        if reason is None:
            rows.append(n)
        else:
            unavailable[n] = reason
    subsets = {k: list(v) for k, v in (subsets or {}).items() if k in rows}
    cells = []
    for n in rows:
        for case in cases:
            if n in subsets and case.name not in subsets[n]:
                continue
            for d in dtypes:
                cell = run_cell(n, case, d, device)
                cells.append(cell)
                if progress is not None:
                    progress(cell)
    case_meta = [{"name": c.name, "cell": _cell_of(c), "group": feature_group(c.tags), "tags": list(c.tags),
                  "spec": c.spec.to_dict()} for c in cases]
    return ParityReport(list(dtypes), case_meta, rows, unavailable, cells, time.perf_counter() - start, subsets)


# ---- report writers ------------------------------------------------------------------------

def _environment() -> dict:
    env = {"python": platform.python_version(), "machine": platform.machine(), "numpy": np.__version__}
    import importlib.util
    for mod in ("torch", "jax", "flax", "optax"):
        if importlib.util.find_spec(mod) is not None:
            try:
                env[mod] = __import__(mod).__version__
            except Exception as e:  # a broken install is worth reporting, not crashing on
                env[mod] = f"unimportable: {e}"
    return env


def to_json(report: ParityReport, training: dict | None = None) -> dict:
    out = {
        "tolerance_rule": TOLERANCE_RULE,
        "dtypes": report.dtypes,
        "implementations": report.implementations,
        "unavailable": report.unavailable,
        "subsets": report.subsets,
        "cases": report.cases,
        "cells": [asdict(c) for c in report.cells],
        "counts": report.counts(),
        "ok": report.ok,
        "seconds": report.seconds,
        "environment": _environment(),
    }
    if training is not None:
        out["training"] = training
    return out


def _short(x: float) -> str:
    return "0" if x == 0 else f"{x:.1e}"


def _footnotes(report: ParityReport) -> dict[str, int]:
    """Distinct n/s and error reasons, numbered in order of appearance."""
    notes: dict[str, int] = {}
    for cell in report.cells:
        if cell.status in ("n/s", "error") and cell.reason not in notes:
            notes[cell.reason] = len(notes) + 1
    return notes


def _cell_text_md(cell: CellResult | None, notes: dict[str, int]) -> str:
    if cell is None:
        return "—"
    if cell.status == "pass":
        return f"✅ {_short(cell.max_error)}"
    if cell.status == "fail":
        return f"❌ {_short(cell.max_error)} ({cell.worst})"
    if cell.status == "error":
        return f"💥 error[^{notes[cell.reason]}]"
    return f"n/s[^{notes[cell.reason]}]"


def to_markdown(report: ParityReport, training: dict | None = None) -> str:
    notes = _footnotes(report)
    counts = report.counts()
    lines = ["# Parity matrix", "",
             f"Max absolute error over outputs, final states and every gradient, against the float64 "
             f"reference stored in the shared vectors; each array within its bound {TOLERANCE_RULE}.  "
             f"{counts['pass']} pass, {counts['fail']} fail, {counts['error']} error, {counts['n/s']} not "
             f"supported; {report.seconds:.0f} s.  Columns abbreviate: {ABBREVIATION_LEGEND}.", ""]
    for impl, subset in report.subsets.items():
        lines += [f"{impl} ran on {len(subset)} cases that together carry every feature tag: "
                  f"{', '.join(subset)}.", ""]
    for group, members in report.groups():
        lines += [f"## {group}", ""]
        for dtype in report.dtypes:
            header = [f"{dtype}"] + [short_name(m["name"]) for m in members]
            lines.append("| " + " | ".join(header) + " |")
            lines.append("|" + "---|" * len(header))
            for impl in report.implementations:
                row = [impl] + [_cell_text_md(report.cell(impl, m["name"], dtype), notes) for m in members]
                lines.append("| " + " | ".join(row) + " |")
            lines.append("")
    if report.unavailable:
        lines += ["## Not run here", ""]
        lines += [f"- `{name}`: {reason}" for name, reason in report.unavailable.items()]
        lines.append("")
    if training is not None:
        lines += training_markdown(training)
    if notes:
        lines += [f"[^{n}]: {reason}" for reason, n in notes.items()]
        lines.append("")
    return "\n".join(lines)


def render(report: ParityReport, console=None, training: dict | None = None) -> None:
    """Print the matrix with rich: one table per feature group, one line per dtype in a cell."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    notes = _footnotes(report)
    styles = {"pass": "green", "fail": "bold red", "error": "bold red", "n/s": "grey50"}
    console.print(f"[bold]Parity matrix[/bold]: max |error| over outputs, final states and every gradient against "
                  f"the float64 reference.  One line per dtype in each cell ({', '.join(report.dtypes)}); "
                  f"bound {TOLERANCE_RULE}: [green]within[/green], [bold red]over[/bold red] (the worst array named), "
                  f"[grey50]n/s\\[k][/grey50] not supported (reason \\[k] below).  Columns: {ABBREVIATION_LEGEND}.")
    tables = [(f"{group} · {cell}", [m for m in members if m["cell"] == cell])
              for group, members in report.groups() for cell in dict.fromkeys(m["cell"] for m in members)]
    for title, members in tables:
        table = Table(title=title, title_justify="left", show_lines=True)
        table.add_column("implementation", no_wrap=True)
        for m in members:
            table.add_column(short_name(m["name"]).split("_", 1)[-1], overflow="fold")
        for impl in report.implementations:
            row = [impl]
            for m in members:
                text = Text()
                for i, dtype in enumerate(report.dtypes):
                    cell = report.cell(impl, m["name"], dtype)
                    if i:
                        text.append("\n")
                    if cell is None:
                        text.append("—", style="grey50")
                    elif cell.status in ("pass", "fail"):
                        text.append("0" if cell.max_error == 0 else f"{cell.max_error:.0e}", style=styles[cell.status])
                        if cell.status == "fail":
                            text.append(f" {cell.worst}", style="red")
                    else:
                        label = "n/s" if cell.status == "n/s" else "error"
                        text.append(f"{label}[{notes[cell.reason]}]", style=styles[cell.status])  # Text: no markup
                row.append(text)
            table.add_row(*row)
        console.print(table)
    for reason, n in notes.items():
        console.print(f"[grey50][{n}] {reason}[/grey50]")
    for impl, subset in report.subsets.items():
        console.print(f"{impl}: ran on {len(subset)} cases covering every feature tag ({', '.join(subset)})")
    for name, reason in report.unavailable.items():
        console.print(f"[yellow]not run here[/yellow] {name}: {reason}")
    if training is not None:
        render_training(training, console)
    c = report.counts()
    verdict = "[bold green]all supported cells pass[/bold green]" if report.ok else "[bold red]FAILURES[/bold red]"
    console.print(f"{verdict}: {c['pass']} pass, {c['fail']} fail, {c['error']} error, {c['n/s']} n/s "
                  f"in {report.seconds:.1f} s")


# ---- identical training (torch.optim vs optax) ----------------------------------------------

def training_parity(*args, **kwargs) -> dict:
    """Identical-training report; see `shared.training_parity.run` (imports torch and jax)."""
    from .training_parity import run
    return run(*args, **kwargs)


def training_markdown(training: dict) -> list[str]:
    from .training_parity import markdown
    return markdown(training)


def render_training(training: dict, console) -> None:
    from .training_parity import render
    render(training, console)


# ---- command line ----------------------------------------------------------------------------

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

    from .vectors import load_cases
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
        subsets = {n: [c.name for c in covering_cases(cases, _supported_in_any_dtype(n, dtypes))]
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


# Implementations whose every new configuration (and dtype) compiles: torch.compile
# (inductor) and every JAX impl (XLA).  On the 2-core development CPU a JAX cell costs
# 2-40 s, so the test suite and `--quick` run them on `covering_cases` only.
SLOW_IMPLS = ("torch.compile", "torch.scan", "jax.")


def is_slow(impl: str) -> bool:
    return any(impl == s or (s.endswith(".") and impl.startswith(s)) for s in SLOW_IMPLS)


def _supported_in_any_dtype(impl: str, dtypes: Sequence[str]) -> Callable[[object], bool]:
    return lambda case: any(unsupported_reason(impl, case, d) is None for d in dtypes)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "parity", help="run every implementation on every shared vector and print the parity matrix",
        description="Run every available implementation on every shared vector in each dtype, compare "
                    "outputs, states and gradients with the float64 reference (shared.tolerances), print "
                    "the matrix and write it as JSON and Markdown.  Exits 1 on any failure.")
    p.add_argument("--impls", action="append",
                   help="implementations to run (comma-separated names, or 'torch'/'jax'); default all")
    p.add_argument("--dtypes", action="append",
                   help="precisions (shared.precision: float64, float32, bfloat16, float16, amp_bfloat16, "
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

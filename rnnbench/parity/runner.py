"""The parity matrix's runner: every implementation x every shared vector x dtype, each cell judged.

`run_cell` runs one registered implementation (`rnnbench.core.registry`) on one shared vector
(`rnnbench.vectors`) through its adapter and compares outputs, final states and every
gradient with the float64 reference values stored in the vector, using the one tolerance
policy (`rnnbench.core.tolerances`); `run_matrix` runs them all into a `ParityReport`.
`covering_cases` picks the few cases that carry every feature tag, for the implementations
whose every configuration compiles (`SLOW_IMPLS`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from rnnbench.core import registry
from rnnbench.core.precision import ALL as DTYPES
from rnnbench.core.tolerances import bounds, case_sizes, max_errors

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


def case_cost(case) -> int:
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
            best = max(pool, key=lambda c: (len(uncovered & set(c.tags)), -case_cost(c)))
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

def run_matrix(impls: Sequence[str] | None = None, cases: Sequence | None = None,
               dtypes: Sequence[str] = DTYPES, device: str = "cpu",
               subsets: dict[str, Sequence[str]] | None = None,
               progress: Callable[[CellResult], None] | None = None) -> ParityReport:
    """Run the matrix.  `impls` defaults to every registered name; `cases` to every vector.

    `subsets` maps an implementation to the case names it runs (others are not run for
    it and do not appear as cells).  Unavailable implementations are not run; they are
    reported in `ParityReport.unavailable` with their reason.
    """
    from rnnbench.vectors import load_cases
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


# Implementations whose every new configuration (and dtype) compiles: torch.compile
# (inductor) and every JAX rung (XLA).  A JAX cell costs seconds of compiling on a small
# CPU, so the test suite and `--quick` run them on `covering_cases` only.
SLOW_IMPLS = ("torch.compile", "torch.scan", "jax.")


def is_slow(impl: str) -> bool:
    return any(impl == s or (s.endswith(".") and impl.startswith(s)) for s in SLOW_IMPLS)


def supported_in_any_dtype(impl: str, dtypes: Sequence[str]) -> Callable[[object], bool]:
    """Whether `impl` supports a case in one of `dtypes` (a `covering_cases` filter)."""
    return lambda case: any(unsupported_reason(impl, case, d) is None for d in dtypes)

"""The parity matrix: every available implementation x every shared vector x dtype.

One parametrized test per cell, id "<implementation>-<case>-<dtype>" (for example
"torch.eager-lstm_lengths_bidirectional-float64"), so a red cell names what broke.
Outputs, final states and every gradient are compared with the float64 reference
stored in the vector, with the tolerance of `shared.tolerances` (the only place
tolerances live).  Unsupported configurations are skipped with the implementation's
reason; implementations that cannot run here are skipped once each, with theirs.

Compiled implementations (`shared.parity.SLOW_IMPLS`: torch.compile and every JAX impl)
compile anew for every configuration and dtype: 2-40 s per cell on the shared 2-core CPU
(the whole matrix, 71 vectors, had not finished after 38 min under load).  Here each of them runs on
`shared.parity.covering_cases`: per cell type, the few vectors that together carry every
feature tag it supports (default, all options, an edge case) in float64, and the cheapest
of them in float32; the other cells are skipped with that reason.  Measured on the
shared 2-core machine (load 7-10): this module takes 3 min wall / 75 s CPU (575 cells
run, the rest skipped with their reason); with both dtypes on the covering cases it took
7 min wall / 2 min CPU.
"""

from __future__ import annotations

import os

import pytest

from shared import parity, precision, registry
from shared.precision import ALL as DTYPES
from shared.tolerances import assert_close

vectors = pytest.importorskip("shared.vectors", reason="shared vectors have not landed in this checkout")

CASES = list(vectors.load_cases())
AVAILABLE = registry.available("cpu")
UNAVAILABLE = registry.unavailable("cpu")
FULL = os.environ.get("RNNBENCH_FULL_MATRIX", "") not in ("", "0")


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see tests/conftest.py


def _slow_subset(impl: str) -> dict[str, set[str]]:
    """dtype -> the case names a compiled implementation runs in tests.

    float64: the covering cases (every feature tag of each cell type); float32: the
    cheapest of them per cell type (the dtype plumbing; float32 precision is exercised
    on every case by the eager implementations); the reduced precisions: the cheapest lstm
    and gru ones.
    """
    cover = parity.covering_cases(CASES, parity._supported_in_any_dtype(impl, DTYPES))
    cheapest = {}
    for case in cover:
        cell = case.spec.cell
        if cell not in cheapest or parity._cost(case) < parity._cost(cheapest[cell]):
            cheapest[cell] = case
    cheap = {c.name for c in cheapest.values()}
    # reduced precisions: the cheapest lstm and gru vectors (every cell runs them on the eager rungs)
    plain = {c.name for c in cheapest.values() if c.spec.cell in ("lstm", "gru")}
    return {d: {c.name for c in cover} if d == "float64" else cheap if d == "float32" else plain for d in DTYPES}


SUBSET_ONLY = {} if FULL else {name: _slow_subset(name) for name in AVAILABLE if parity.is_slow(name)}


# the dtypes some implementation here declares and this CPU has arithmetic for (the others
# would be all n/s; `test_float16_on_this_cpu_is_refused_or_runs` covers float16)
MATRIX_DTYPES = [d for d in DTYPES if any(d in registry.get(n).declared().dtypes for n in AVAILABLE)
                 and precision.device_reason(d, "cpu") is None]


def _matrix():
    for impl in AVAILABLE:
        for case in CASES:
            for dtype in MATRIX_DTYPES:
                marks = []
                if impl in SUBSET_ONLY and case.name not in SUBSET_ONLY[impl][dtype]:
                    marks.append(pytest.mark.skip(
                        reason=f"{impl} compiles per case and dtype: tests run it on "
                               f"{len(SUBSET_ONLY[impl][dtype])} cases in {dtype} (covering every feature tag in "
                               "float64); RNNBENCH_FULL_MATRIX=1 or `rnnbench parity` runs all"))
                yield pytest.param(impl, case, dtype, id=f"{impl}-{case.name}-{dtype}", marks=marks)


@pytest.mark.parametrize("impl,case,dtype", list(_matrix()))
def test_matches_reference(impl, case, dtype):
    reason = parity.unsupported_reason(impl, case, dtype, "cpu")
    if reason is not None:
        pytest.skip(f"unsupported: {reason}")
    adapter = registry.get(impl).adapter()
    got = adapter.run_case(case.spec, case.params, **parity.case_inputs(case), cotangents=case.cotangents,
                           dtype=dtype)
    expected = parity.expected_results(case)
    missing = sorted(set(expected) - set(got))
    assert not missing, f"{impl} returned no {missing}"
    assert_close(expected, got, dtype, context=f"{impl} on {case.name} in {dtype}", spec=case.spec, x=case.x)


@pytest.mark.parametrize("impl", sorted(UNAVAILABLE) or ["<none>"])
def test_unavailable_implementations_have_a_reason(impl):
    if impl == "<none>":
        pytest.skip("every registered implementation is available here")
    reason = UNAVAILABLE[impl]
    assert isinstance(reason, str) and reason.strip(), f"{impl} is unavailable without a reason"
    pytest.skip(f"{impl} not available here: {reason}")


def test_every_registered_implementation_is_accounted_for():
    """Nothing is silently dropped: each registered name is either run or listed with a reason."""
    assert set(AVAILABLE) | set(UNAVAILABLE) == set(registry.names())
    assert not set(AVAILABLE) & set(UNAVAILABLE)
    assert all(isinstance(r, str) and r for r in UNAVAILABLE.values())


def test_expected_results_cover_outputs_states_and_every_gradient():
    """The matrix compares everything a vector holds, for every parameter."""
    for case in CASES:
        keys = set(parity.expected_results(case))
        assert {"output", "h_n"} <= keys
        assert ("c_n" in keys) == ("c" in case.spec.state_shapes(1))  # LSTM-family cells carry c
        assert {f"grad/{p}" for p in case.spec.param_names()} <= keys
        assert "grad/x" in keys
        assert ("grad/h0" in keys) == (case.h0 is not None)


def test_covering_subset_carries_every_tag_of_each_cell():
    for cell in {c.spec.cell for c in CASES}:
        tags = {t for c in CASES if c.spec.cell == cell for t in c.tags}
        chosen = [c for c in parity.covering_cases(CASES) if c.spec.cell == cell]
        assert {t for c in chosen for t in c.tags} == tags
        assert len(chosen) <= 4, [c.name for c in chosen]  # the point is to be small


def test_run_cell_reports_a_failure_with_the_worst_key(monkeypatch):
    """A wrong implementation turns its cell red and names the array that broke."""
    impl = next((n for n in AVAILABLE if n not in SUBSET_ONLY), None)
    if impl is None:
        pytest.skip("no implementation available here")
    case = next(c for c in CASES if parity.unsupported_reason(impl, c, "float64") is None)
    real_adapter = registry.get(impl).adapter()

    class OffByALittle:
        """The real adapter, with h_n shifted by 1e-6 (a bug the float64 tolerance must catch)."""

        def __getattr__(self, name):
            return getattr(real_adapter, name)

        def run_case(self, *args, **kwargs):
            result = dict(real_adapter.run_case(*args, **kwargs))
            result["h_n"] = result["h_n"] + 1e-6
            return result

    monkeypatch.setattr(registry, "_load_adapter", lambda path, key: OffByALittle())
    cell = parity.run_cell(impl, case, "float64")
    assert cell.status == "fail" and cell.worst == "h_n" and cell.max_error == pytest.approx(1e-6, rel=1e-3)


def _cli_impl():
    return next((n for n in ("torch.eager", "torch.native") if n in AVAILABLE), None)


def test_cli_writes_json_and_markdown_and_exits_zero_when_green(tmp_path, capsys):
    import json

    from shared.cli import main
    impl = _cli_impl()
    if impl is None:
        pytest.skip("no torch implementation available here")
    rc = main(["parity", "--impls", impl, "--cases", "lstm_default,gru_lengths_unsorted", "--out", str(tmp_path)])
    assert rc == 0
    report = json.loads((tmp_path / "parity.json").read_text())
    assert report["ok"] and report["implementations"] == [impl]
    assert {c["case"] for c in report["cells"]} == {"lstm_default", "gru_lengths_unsorted"}
    dtypes = [d for d in precision.ALL if precision.device_reason(d, "cpu") is None]  # the default
    assert {c["dtype"] for c in report["cells"]} == set(dtypes)
    assert all(c["status"] == "pass" for c in report["cells"]) and len(report["cells"]) == 2 * len(dtypes)
    md = (tmp_path / "parity.md").read_text()
    assert impl in md and "variable lengths" in md
    assert "all supported cells pass" in capsys.readouterr().out


def test_cli_exits_nonzero_on_a_failure(tmp_path, monkeypatch):
    from shared.cli import main
    impl = _cli_impl()
    if impl is None:
        pytest.skip("no torch implementation available here")
    real_adapter = registry.get(impl).adapter()

    class Broken:
        def __getattr__(self, name):
            return getattr(real_adapter, name)

        def run_case(self, *args, **kwargs):
            result = dict(real_adapter.run_case(*args, **kwargs))
            result["grad/x"] = result["grad/x"] * 1.01
            return result

    monkeypatch.setattr(registry, "_load_adapter", lambda path, key: Broken())
    assert main(["parity", "--impls", impl, "--cases", "lstm_default", "--dtypes", "float64",
                 "--out", str(tmp_path)]) == 1
    assert "grad/x" in (tmp_path / "parity.md").read_text()

"""The parity matrix: every available implementation x every shared vector x dtype.

One parametrized test per cell, id "<implementation>-<case>-<dtype>" (for example
"torch.eager-lstm_lengths_bidirectional-float64"), so a red cell names what broke.
Outputs, final states and every gradient are compared with the float64 reference
stored in the vector, with the tolerance of `rnnbench.core.tolerances` (the only place
tolerances live).  A configuration an implementation does not support is skipped with
its declared reason (a missing capability); implementations that cannot run here are
not generated: `test_unavailable_implementations_are_reported_with_their_reason` checks
how the matrix reports them.

What is collected.  Compiled implementations (`rnnbench.parity.SLOW_IMPLS`: torch.compile
and every JAX impl) compile anew for every configuration and dtype (seconds per cell on
the shared 2-core CPU), so by default each of them is collected only on
`rnnbench.parity.covering_cases`: per cell type, the few vectors that together carry every
feature tag it supports in float64; the cheapest of them per cell type in float32; the
cheapest lstm and gru ones in the reduced precisions, and in the mixed ones (autocast) the
cheapest projected LSTM as well.  torch.scan, whose compile of a
forward and backward scan costs the most per configuration, runs leaner still (`LEAN`): in
float64 each cell type's one richest vector (the most feature tags), in every other dtype the
cheapest lstm and gru ones (and the projected LSTM in the mixed ones).  The other cells are not generated at all (no skips stand for them).  The eager implementations run every vector
in every dtype.

The full matrix: `RNNBENCH_FULL_MATRIX=1` generates every cell for every implementation
(`make parity-matrix`, a job for a schedule rather than for every push);
`RNNBENCH_FULL_MATRIX=jax.scan,torch.compile` does so for the named implementations only,
so that a scheduled job can be split by implementation (`make parity-matrix
IMPLS=jax.scan`).  `make parity` (`rnnbench parity`) runs the same full matrix outside
pytest and writes it as a report.

Beyond pass/fail, the module checks that the bounds can fail: each derived bound is
within a small factor of the error a correct implementation makes (`TIGHTNESS_FLOOR`), and
a planted wrong gate (sigmoid in place of tanh on the candidate gate) fails its bfloat16
bound on every implementation.  Results are computed once per cell and shared by those
tests (`_run`).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from rnnbench import parity, reference
from rnnbench.core import precision, registry
from rnnbench.core.precision import ALL as DTYPES
from rnnbench.core.tolerances import assert_close, bounds, case_sizes, max_errors
from rnnbench.core.spec import RNNSpec

vectors = pytest.importorskip("rnnbench.vectors", reason="shared vectors have not landed in this checkout")

CASES = list(vectors.load_cases())
CASES_BY_NAME = {c.name: c for c in CASES}
AVAILABLE = registry.available("cpu")
UNAVAILABLE = registry.unavailable("cpu")


def full_matrix_impls(value: str) -> set[str]:
    """The implementations RNNBENCH_FULL_MATRIX asks the whole matrix of ("" / "0": none; "1" / "all": all)."""
    value = value.strip()
    if value in ("", "0"):
        return set()
    if value.lower() in ("1", "all", "true", "yes"):
        return set(registry.names())
    return {registry.get(name.strip()).name for name in value.split(",") if name.strip()}  # a typo raises


FULL = full_matrix_impls(os.environ.get("RNNBENCH_FULL_MATRIX", ""))


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see tests/conftest.py


LEAN = {"torch.scan"}


def _slow_subset(impl: str) -> dict[str, set[str]]:
    """dtype -> the case names a compiled implementation runs in tests.

    float64: the covering cases (every feature tag of each cell type); float32: the
    cheapest of them per cell type (the dtype plumbing; float32 precision is exercised
    on every case by the eager implementations); the reduced precisions: the cheapest lstm
    and gru ones.  `LEAN` implementations: in float64 each cell type's richest covering case,
    in float32 the cheapest lstm and gru ones too.
    """
    supported = parity.supported_in_any_dtype(impl, DTYPES)
    cover = parity.covering_cases(CASES, supported)
    cheapest, richest = {}, {}
    for case in cover:
        cell = case.spec.cell
        if cell not in cheapest or parity.case_cost(case) < parity.case_cost(cheapest[cell]):
            cheapest[cell] = case
        if cell not in richest or len(case.tags) > len(richest[cell].tags):
            richest[cell] = case
    cheap = {c.name for c in cheapest.values()}
    # reduced precisions: the cheapest lstm and gru vectors (every cell runs them on the eager rungs)
    plain = {c.name for c in cheapest.values() if c.spec.cell in ("lstm", "gru")}
    # mixed precisions also the cheapest projected LSTM: autocast's projection GEMM returns h in the
    # compute dtype, which a scan's fixed-dtype carry must absorb (the eager loops never see it)
    projected = [c for c in CASES if c.spec.cell == "lstm" and "proj_size" in c.tags and supported(c)]
    mixed = plain | ({min(projected, key=parity.case_cost).name} if projected else set())

    def reduced(d: str) -> set[str]:
        return mixed if precision.precision(d).mixed else plain

    if impl in LEAN:
        return {d: {c.name for c in richest.values()} if d == "float64" else reduced(d) for d in DTYPES}
    return {d: {c.name for c in cover} if d == "float64" else cheap if d == "float32" else reduced(d)
            for d in DTYPES}


SUBSET_ONLY = {name: _slow_subset(name) for name in AVAILABLE if parity.is_slow(name) and name not in FULL}


# the dtypes some implementation here declares and this CPU has arithmetic for (the others
# would be all n/s; `test_float16_on_this_cpu_is_refused_or_runs` covers float16)
MATRIX_DTYPES = [d for d in DTYPES if any(d in registry.get(n).declared().dtypes for n in AVAILABLE)
                 and precision.device_reason(d, "cpu") is None]


def matrix_cases(impl: str, dtype: str) -> list:
    """The vectors the matrix runs `impl` on in `dtype` (all of them, or its covering subset)."""
    if impl in SUBSET_ONLY:
        return [c for c in CASES if c.name in SUBSET_ONLY[impl][dtype]]
    return list(CASES)


def _matrix():
    for impl in AVAILABLE:
        for case in CASES:
            for dtype in MATRIX_DTYPES:
                if impl in SUBSET_ONLY and case.name not in SUBSET_ONLY[impl][dtype]:
                    continue  # not generated: the full matrix is RNNBENCH_FULL_MATRIX=1 / `make parity`
                yield pytest.param(impl, case, dtype, id=f"{impl}-{case.name}-{dtype}")


# One run per (implementation, case, dtype) in this process, shared by the tests below
# (the compiled implementations would compile again for every re-run).
_RESULTS: dict[tuple[str, str, str], dict[str, np.ndarray]] = {}


def _run(impl: str, case, dtype: str) -> dict[str, np.ndarray]:
    key = (impl, case.name, dtype)
    if key not in _RESULTS:
        adapter = registry.get(impl).adapter()
        _RESULTS[key] = adapter.run_case(case.spec, case.params, **parity.case_inputs(case),
                                         cotangents=case.cotangents, dtype=dtype)
    return _RESULTS[key]


@pytest.mark.parametrize("impl,case,dtype", list(_matrix()))
def test_matches_reference(impl, case, dtype):
    reason = parity.unsupported_reason(impl, case, dtype, "cpu")
    if reason is not None:
        pytest.skip(f"unsupported: {reason}")
    got = _run(impl, case, dtype)
    expected = parity.expected_results(case)
    missing = sorted(set(expected) - set(got))
    assert not missing, f"{impl} returned no {missing}"
    assert_close(expected, got, dtype, context=f"{impl} on {case.name} in {dtype}", spec=case.spec, x=case.x)


def test_unavailable_implementations_are_reported_with_their_reason(monkeypatch):
    """An implementation that cannot run here is listed with its reason and runs no cell.

    Checked on this machine's unavailable implementations and on a planted one that runs
    only on CUDA, so that the check runs even where every registered implementation is
    available.
    """
    from rnnbench.core.capabilities import Capabilities

    planted = registry.Implementation("jax.cuda_only_planted", "test", 99,
                                      capabilities=Capabilities(devices=("cuda",)))
    monkeypatch.setitem(registry.REGISTRY, planted.name, planted)
    expected = {**UNAVAILABLE, planted.name: planted.unavailable_reason("cpu")}
    for name, reason in expected.items():
        assert isinstance(reason, str) and reason.strip(), f"{name} is unavailable without a reason"
    assert "cuda" in expected[planted.name] and "cpu" in expected[planted.name]
    report = parity.run_matrix(sorted(expected), CASES[:1], ["float64"])
    assert report.unavailable == expected
    assert report.implementations == [] and report.cells == []
    md = parity.to_markdown(report)
    assert "## Not run here" in md
    for name, reason in expected.items():
        assert f"- `{name}`: {reason}" in md


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

    from rnnbench.cli import main
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
    from rnnbench.cli import main
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


# ---- what is collected ------------------------------------------------------------------------

def test_the_matrix_collects_only_cells_it_runs():
    """No cell is generated to be skipped: a compiled implementation's cells are its covering subset."""
    params = list(_matrix())
    assert all(not p.marks for p in params)
    generated = {}
    for p in params:
        impl, case, dtype = p.values
        generated.setdefault((impl, dtype), set()).add(case.name)
    for impl in AVAILABLE:
        for dtype in MATRIX_DTYPES:
            assert generated.get((impl, dtype), set()) == {c.name for c in matrix_cases(impl, dtype)}
    for impl, subsets in SUBSET_ONLY.items():
        assert subsets["float64"] and all(len(names) < len(CASES) for names in subsets.values())


@pytest.mark.parametrize("value,expected", [("", set()), ("0", set()), ("1", set(registry.names())),
                                            ("all", set(registry.names())),
                                            ("jax.scan, torch.compile", {"jax.scan", "torch.compile"})])
def test_full_matrix_setting(value, expected):
    assert full_matrix_impls(value) == expected


def test_full_matrix_setting_refuses_an_unknown_name():
    with pytest.raises(registry.UnknownImplementationError, match="valid names"):
        full_matrix_impls("jax.scna")


# ---- the bounds can fail ---------------------------------------------------------------------------

# The worst error / bound ratio a correct implementation must reach, per dtype, separately
# for the forward arrays (output and final states) and the gradients (the two derivations
# of `rnnbench.core.tolerances`: d doubles and n grows to T * B for a gradient).
#
# Why 1/50.  The bound is LAMBDA = 8 standard deviations of the rule's random-walk model;
# the largest of a vector's few hundred errors is about 2-3 of them, so if the model's n and
# d were exact the worst ratio would sit near 1/3.  The rule also charges every sum its
# full length and every value the scale max(1, |reference|), which real sums (weights of
# size 1/sqrt(H), gates in (0, 1)) do not reach: the slack that leaves is a small factor,
# largest on long vectors and smallest on the T = 1 edge vectors, which every
# implementation runs in every dtype here.  A floor of 1/50 sits below the worst ratio
# every correct implementation reaches in every dtype (the failure message lists them), so
# it passes with margin; a bound 100x too loose would put the same errors at a few
# thousandths of it, an order of magnitude under the floor, and fails.
TIGHTNESS_FLOOR = 1 / 50
FORWARD_KEYS = ("output", "h_n", "c_n")


def _worst_ratios(impl: str, dtype: str) -> dict[str, tuple[float, str]]:
    """"forward" / "gradients" -> (the worst error / bound over the matrix's vectors, where)."""
    worst = {"forward": (0.0, ""), "gradients": (0.0, "")}
    for case in matrix_cases(impl, dtype):
        if parity.unsupported_reason(impl, case, dtype, "cpu") is not None:
            continue
        expected = parity.expected_results(case)
        errors = max_errors(expected, _run(impl, case, dtype))
        limits = bounds(expected, dtype, case.spec, *case_sizes(case.spec, case.x))
        for key, error in errors.items():
            kind = "forward" if key in FORWARD_KEYS else "gradients"
            ratio = error / limits[key]
            assert ratio <= 1.0, f"{impl} on {case.name} in {dtype}: {key} exceeds its bound ({ratio:.3g})"
            if ratio > worst[kind][0]:
                worst[kind] = (ratio, f"{case.name} {key}")
    return worst


def _tightness_params():
    for impl in AVAILABLE:
        for dtype in MATRIX_DTYPES:
            if any(parity.unsupported_reason(impl, c, dtype, "cpu") is None for c in matrix_cases(impl, dtype)):
                yield pytest.param(impl, dtype, id=f"{impl}-{dtype}")


@pytest.mark.parametrize("impl,dtype", list(_tightness_params()))
def test_bounds_are_within_a_small_factor_of_a_correct_rungs_error(impl, dtype):
    """Each derived bound (forward, gradients) is reached to within 1/TIGHTNESS_FLOOR by a correct rung."""
    worst = _worst_ratios(impl, dtype)
    for kind, (ratio, where) in worst.items():
        assert ratio >= TIGHTNESS_FLOOR, (
            f"{impl} in {dtype}: the worst {kind} error is {ratio:.3g} of its bound (at {where}), under the floor "
            f"{TIGHTNESS_FLOOR:.3g}: the bound is far looser than the errors a correct rung makes "
            f"(all: {', '.join(f'{k} {r:.3g} at {w}' for k, (r, w) in worst.items())})")


def test_a_loose_bound_fails_the_tightness_check(monkeypatch):
    """The check can fail: with the rule 100x looser, the same errors fall under the floor."""
    from rnnbench.core import tolerances
    impl = next((n for n in AVAILABLE if n not in SUBSET_ONLY), None)
    if impl is None:
        pytest.skip("no eager implementation available here")
    assert min(r for r, _ in _worst_ratios(impl, "float32").values()) >= TIGHTNESS_FLOOR
    monkeypatch.setattr(tolerances, "LAMBDA", tolerances.LAMBDA * 100)
    assert max(r for r, _ in _worst_ratios(impl, "float32").values()) < TIGHTNESS_FLOOR


# A planted wrong gate: sigmoid in place of tanh on the candidate gate (the LSTM's g, the
# GRU's n).  Its float64 results come from the reference with that step; what an
# implementation with that bug returns is those values plus the implementation's own
# rounding error (measured on the correct model, same vector and dtype), so the test is
# whether the bfloat16 bound, at that implementation's noise, tells the bug from rounding.
def _lstm_step(x, state, p, candidate):
    h, c = state
    a = x @ p["weight_ih"].T + h @ p["weight_hh"].T + p["bias_ih"] + p["bias_hh"]
    a_i, a_f, a_g, a_o = np.split(a, 4, axis=-1)
    c_new = reference.sigmoid(a_f) * c + reference.sigmoid(a_i) * candidate(a_g)
    m = reference.sigmoid(a_o) * np.tanh(c_new)
    w_hr = p.get("weight_hr")
    return (m @ w_hr.T if w_hr is not None else m), c_new


def _gru_step(x, state, p, candidate):
    (h,) = state
    gi = x @ p["weight_ih"].T + p["bias_ih"]
    gh = h @ p["weight_hh"].T + p["bias_hh"]
    gi_r, gi_z, gi_n = np.split(gi, 3, axis=-1)
    gh_r, gh_z, gh_n = np.split(gh, 3, axis=-1)
    r, z = reference.sigmoid(gi_r + gh_r), reference.sigmoid(gi_z + gh_z)
    n = candidate(gi_n + r * gh_n)
    return ((1.0 - z) * n + z * h,)


STEPS = {"lstm": _lstm_step, "gru": _gru_step}  # the reference's math with the candidate's activation as a parameter


def _reference_with_candidate(case, candidate, monkeypatch) -> dict[str, np.ndarray]:
    """Output and final states of `case` in float64, the candidate gate computed with `candidate`."""
    def plain(x, state, p):
        return STEPS[case.spec.cell](x, state, p, candidate)

    step = reference.CellStep(lambda x, state, p: (tuple(plain(x, state, p)), None),
                              reference.complex_step_backward(plain), hand_written=False)
    with monkeypatch.context() as m:
        m.setitem(reference.CELLS.cells, case.spec.cell, step)
        return reference.run_case(case.spec, case.params, **parity.case_inputs(case))


@pytest.mark.parametrize("cell", sorted(STEPS))
def test_the_planted_step_is_the_reference_but_for_the_candidate_activation(cell, monkeypatch):
    """With tanh as the candidate's activation the planted step gives the vector's values; with sigmoid not."""
    for case in [c for c in CASES if c.spec.cell == cell][:8]:
        right = _reference_with_candidate(case, np.tanh, monkeypatch)
        for key, value in right.items():
            np.testing.assert_allclose(value, case.expected[key], rtol=0, atol=1e-12, err_msg=f"{case.name} {key}")
        planted = _reference_with_candidate(case, reference.sigmoid, monkeypatch)
        assert max(np.max(np.abs(planted[k] - case.expected[k])) for k in planted) > 1e-2, case.name


def _planted_params():
    for impl in AVAILABLE:
        for dtype in MATRIX_DTYPES:
            if precision.precision(dtype).compute != "bfloat16":
                continue
            if _planted_cases(impl, dtype):
                yield pytest.param(impl, dtype, id=f"{impl}-{dtype}")


def _planted_cases(impl: str, dtype: str) -> list:
    """The lstm and gru vectors every implementation runs in this dtype (the cheapest of
    each cell's covering cases), plus lstm_default and gru_default where the matrix runs them."""
    names = _slow_subset(impl)["bfloat16"] | {"lstm_default", "gru_default"}
    ran = {c.name for c in matrix_cases(impl, dtype)}
    return [c for c in CASES if c.name in names & ran and c.spec.cell in STEPS
            and parity.unsupported_reason(impl, c, dtype, "cpu") is None]


def _machine_refuses(impl: str, dtype: str) -> set[str]:
    """The cells this machine cannot compute in `dtype` on `impl` (its `Capabilities.machine`
    answer: oneDNN's bfloat16 LSTM needs AVX-512, docs/capabilities.md)."""
    adapter = registry.get(impl).adapter()
    refusals = {cell: adapter.backends.refusal(adapter.key, RNNSpec(cell, 4, 4), dtype=dtype, device="cpu")
                for cell in STEPS}
    return {cell for cell, refused in refusals.items() if refused is not None and refused.what == "machine"}


@pytest.mark.parametrize("impl,dtype", list(_planted_params()))
def test_planted_wrong_candidate_gate_fails_in_bfloat16(impl, dtype, monkeypatch):
    cases = _planted_cases(impl, dtype)
    assert {c.spec.cell for c in cases} == set(STEPS) - _machine_refuses(impl, dtype), [c.name for c in cases]
    for case in cases:
        expected = parity.expected_results(case)
        got = _run(impl, case, dtype)
        assert_close(expected, got, dtype, spec=case.spec, x=case.x)  # the real rung passes ...
        planted = dict(got)
        for key, value in _reference_with_candidate(case, reference.sigmoid, monkeypatch).items():
            planted[key] = got[key] + (value - expected[key])  # ... the same rung with the bug:
        with pytest.raises(AssertionError, match=f"exceeds the {dtype} bound") as failure:
            assert_close(expected, planted, dtype, context=f"{impl} with a planted gate on {case.name}",
                         spec=case.spec, x=case.x)
        assert any(k in str(failure.value) for k in FORWARD_KEYS)


# ---- flax_nnx: a GRU with biases, compared where it can be (b_hn = 0) -----------------------------

def _nnx_gru_cases():
    return parity.covering_cases([c for c in CASES if c.spec.cell == "gru" and c.spec.bias])


@pytest.mark.parametrize("case", _nnx_gru_cases(), ids=lambda c: c.name)
def test_flax_nnx_gru_with_biases_matches_the_reference_when_b_hn_is_zero(case):
    """Flax NNX's GRUCell has no b_hn, so the matrix reports a GRU with biases n/s there.  With
    b_hn = 0 the same model is exact: forward and every gradient match the reference, except
    the b_hn slice of bias_hh's gradient, which NNX cannot have (it returns zeros)."""
    if "jax.flax_nnx" not in AVAILABLE:
        pytest.skip(f"jax.flax_nnx not available here: {UNAVAILABLE.get('jax.flax_nnx')}")
    H = case.spec.hidden_size
    params = {k: np.array(v) for k, v in case.params.items()}
    for name in params:
        if name.startswith("bias_hh"):
            params[name][2 * H:] = 0.0
    inputs = parity.case_inputs(case)
    expected = reference.run_case(case.spec, params, **inputs, cotangents=case.cotangents)
    assert not np.allclose(expected["grad/bias_hh_l0"][2 * H:], 0.0)  # there is a b_hn gradient to miss
    got = registry.get("jax.flax_nnx").adapter().run_case(case.spec, params, **inputs,
                                                           cotangents=case.cotangents, dtype="float64")
    b_hn_grads = {k: got[k][2 * H:] for k in got if k.startswith("grad/bias_hh")}
    assert all(np.all(g == 0.0) for g in b_hn_grads.values()), "NNX now has a b_hn gradient: compare it too"
    compared = {k: (v[:2 * H] if k in b_hn_grads else v) for k, v in expected.items()}
    assert_close(compared, {k: (v[:2 * H] if k in b_hn_grads else v) for k, v in got.items()}, "float64",
                 context=f"jax.flax_nnx on {case.name} with b_hn = 0", spec=case.spec, x=case.x)


def test_rnnbench_parity_is_the_full_matrix_and_quick_the_covering_one(tmp_path, monkeypatch):
    """`make parity` (no --quick): every registered rung, every vector, every dtype the CPU has arithmetic
    for, no subsets; `--quick`: the compiled rungs on covering cases."""
    from rnnbench.cli import main
    calls = []

    def fake_run_matrix(impls, cases, dtypes, device="cpu", subsets=None, progress=None):
        calls.append((list(impls), [c.name for c in cases], list(dtypes), dict(subsets or {})))
        return parity.ParityReport(list(dtypes), [], [], {}, [], 0.0)

    monkeypatch.setattr(parity.command, "run_matrix", fake_run_matrix)
    assert main(["parity", "--out", str(tmp_path / "full")]) == 0
    assert main(["parity", "--quick", "--out", str(tmp_path / "quick")]) == 0
    (impls, cases, dtypes, subsets), (_, _, _, quick) = calls
    assert impls == registry.names() and cases == [c.name for c in CASES] and subsets == {}
    assert dtypes == [d for d in DTYPES if precision.device_reason(d, "cpu") is None]
    assert set(quick) == {n for n in registry.names() if parity.is_slow(n)}

"""The shared test vectors: they load and verify, regenerate identically, match the
reference and PyTorch, cover every option, and a corrupt or missing file is caught."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from rnnbench import reference
from rnnbench.core.catalogue import CUSTOM_CELLS
from rnnbench.core.spec import RNNSpec
from rnnbench.core.tolerances import DTYPES, bounds
from rnnbench.vectors.generate import TOLERANCE_RULE
from rnnbench.vectors import (
    VECTORS_DIR, UnknownCaseError, VectorsError, case_names, load_case, load_cases, load_manifest, read_arrays)
from rnnbench.vectors.__main__ import main as vectors_main
from rnnbench.vectors.generate import CASES, build_arrays, compare_arrays, compare_entries, generate, npz_bytes

ALL_CASES = load_cases()
CASE_IDS = [c.name for c in ALL_CASES]


def test_every_case_in_the_table_is_committed_and_loads():
    manifest = load_manifest()
    assert list(manifest["cases"]) == [c.name for c in CASES] == CASE_IDS == case_names()
    assert manifest["tolerance_rule"] == TOLERANCE_RULE
    for case in ALL_CASES:
        entry = manifest["cases"][case.name]
        assert sorted(entry["tolerances"]) == sorted(DTYPES)
        for dtype, per_key in entry["tolerances"].items():  # the rule of rnnbench.core.tolerances, written out
            assert per_key == pytest.approx(bounds(case.results, dtype, case.spec, entry["seq_len"], entry["batch"]))
        assert len(entry["sha256"]) == 64
    total = sum((VECTORS_DIR / e["file"]).stat().st_size for e in manifest["cases"].values())
    assert total < 2_000_000, f"vectors take {total} bytes; keep them under 2 MB"


@pytest.mark.parametrize("case", ALL_CASES, ids=CASE_IDS)
def test_case_arrays_have_the_contract_shapes_and_dtypes(case):
    spec, B = case.spec, case.x.shape[0 if case.spec.batch_first else 1]
    T = case.x.shape[1 if spec.batch_first else 0]
    assert case.x.dtype == np.float64 and case.x.shape[2] == spec.input_size
    assert T <= 7 and B <= 4 and spec.input_size <= 6 and spec.hidden_size <= 6
    shapes = spec.state_shapes(B)
    assert case.expected["h_n"].shape == shapes["h"]
    assert case.expected["output"].shape == case.x.shape[:2] + (spec.output_size,)
    assert set(case.expected) == set(case.cotangents) == ({"output", "h_n", "c_n"} if spec.family == "lstm"
                                                          else {"output", "h_n"})
    assert (case.h0 is None) == ("grad/h0" not in case.grads)
    assert (case.c0 is None) == ("grad/c0" not in case.grads)
    if case.h0 is not None:
        assert case.h0.shape == shapes["h"]
    if case.lengths is not None:
        assert case.lengths.dtype == np.int64 and case.lengths.shape == (B,)
        assert "lengths" in case.tags
    assert set(case.grads) == {"grad/x", *(k for k in ("grad/h0", "grad/c0") if k in case.grads),
                               *(f"grad/{p}" for p in spec.param_shapes())}
    for arrays in (case.params, case.cotangents, case.expected, case.grads):
        assert all(a.dtype == np.float64 for a in arrays.values())
    assert case.inputs() == dict(x=case.x, h0=case.h0, c0=case.c0, lengths=case.lengths)
    assert case.spec.cell in case.tags


def test_cases_cover_every_option_and_edge():
    for cell in ("lstm", "gru"):
        cases = load_cases(cell=cell)
        assert all(c.spec.cell == cell for c in cases)
        tags = {t for c in cases for t in c.tags}
        assert {"default", "layers", "bidirectional", "batch_first", "no_bias", "initial_state", "lengths",
                "edge"} <= tags
        specs = [c.spec for c in cases]
        assert {2, 3} <= {s.num_layers for s in specs}
        assert any(not s.bias for s in specs) and any(s.batch_first for s in specs)
        shapes = [(c.x.shape[1 if c.spec.batch_first else 0], c.x.shape[0 if c.spec.batch_first else 1])
                  for c in cases]
        assert 1 in {T for T, _ in shapes} and 1 in {B for _, B in shapes}
        assert 1 in {s.hidden_size for s in specs} and 1 in {s.input_size for s in specs}
        lengths = [c.lengths for c in cases if c.lengths is not None]
        assert any(1 in ls and list(ls) != sorted(ls, reverse=True) for ls in lengths)  # unsorted, with a 1
        assert any(len(set(ls)) == 1 and ls[0] == c.x.shape[1 if c.spec.batch_first else 0]
                   for c in cases if (ls := c.lengths) is not None)  # all lengths equal (to T)
        # Every option combined in one case.
        assert any(s.num_layers > 1 and s.bidirectional and s.batch_first and not s.bias
                   and c.h0 is not None and c.lengths is not None for c, s in zip(cases, specs))
    lstm = load_cases(cell="lstm", tags=["proj_size", "layers", "bidirectional", "lengths"])
    assert any(c.spec.num_layers == 3 for c in lstm)
    assert load_cases(cell="gru", tags="proj_size") == []


@pytest.mark.parametrize("cell", CUSTOM_CELLS)
def test_custom_cells_cover_every_option_with_perturbed_extras(cell):
    cases = load_cases(cell=cell)
    assert cases and all(c.spec.cell == cell and {cell, "custom_cell"} <= set(c.tags) for c in cases)
    assert {c.name for c in cases} == {c.name for c in load_cases(tags=[cell, "custom_cell"])}
    tags = {t for c in cases for t in c.tags}
    assert {"default", "layers", "bidirectional", "batch_first", "no_bias", "initial_state", "lengths"} <= tags
    lengths = [c.lengths for c in cases if c.lengths is not None]
    assert any(1 in ls and list(ls) != sorted(ls, reverse=True) for ls in lengths)  # unsorted, with a 1
    assert any(c.spec.num_layers == 2 and c.spec.bidirectional and c.lengths is not None and c.h0 is not None
               for c in cases)  # the options combined
    extras = [e.prefix for e in cases[0].spec.cell_def.extra_params]
    for case in cases:
        for prefix in extras:
            for name, value in case.params.items():
                if name.startswith(prefix + "_l"):
                    init = {"ones": 1.0, "zeros": 0.0}.get(next(e.init for e in case.spec.cell_def.extra_params
                                                               if e.prefix == prefix))
                    k = 1 / np.sqrt(case.spec.hidden_size)
                    if init is not None:  # LayerNorm gain/bias moved off 1/0
                        assert np.all(value != init) and np.max(np.abs(value - init)) > 0.1, name
                    else:  # peepholes: U(-k, k) moved by 0.3 N(0, 1), so some leave [-k, k]
                        assert np.any(np.abs(value) > k), name
                    assert np.any(case.grads[f"grad/{name}"] != 0), name


def test_custom_cell_vectors_left_the_standard_ones_unchanged():
    """The standard cells' cases come first, in their original order and seeds."""
    names = case_names()
    standard = [n for n in names if load_manifest()["cases"][n]["config"]["cell"] in ("lstm", "gru")]
    assert names[:len(standard)] == standard


def test_tag_filter_selects_cases_with_all_tags():
    chosen = load_cases(cell="gru", tags=["lengths", "bidirectional"])
    assert chosen and all({"gru", "lengths", "bidirectional"} <= set(c.tags) for c in chosen)
    assert len(load_cases(tags="gru")) == len(load_cases(cell="gru"))
    with pytest.raises(ValueError, match="unknown tags.*known tags"):
        load_cases(tags="no_such_tag")
    with pytest.raises(ValueError, match="cell must be"):
        load_cases(cell="rnn")


@pytest.mark.parametrize("case", ALL_CASES, ids=CASE_IDS)
def test_reference_reproduces_stored_results(case):
    got = reference.run_case(case.spec, case.params, **case.inputs(), cotangents=case.cotangents)
    assert sorted(got) == sorted(case.results)
    for key, want in case.results.items():
        np.testing.assert_allclose(got[key], want, rtol=0, atol=1e-14, err_msg=key)


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_torch_reproduces_stored_results(dtype):
    """PyTorch's own nn.LSTM/nn.GRU (and torch.nn-built custom cells) agree with every vector
    within the derived bound, in float64 and float32."""
    pytest.importorskip("torch")
    from reference_cases import run_torch  # the torch.nn.LSTM/GRU runner, shared

    bad = {}
    for case in ALL_CASES:
        got = run_torch(case.spec, case.params, **case.inputs(), cotangents=case.cotangents, dtype=dtype)
        assert sorted(got) == sorted(case.results), case.name
        limit = case.tolerances[dtype]
        over = {k: float(np.max(np.abs(got[k] - v))) / limit[k] for k, v in case.results.items()}
        if not max(over.values()) <= 1.0:
            bad[case.name] = max(over.items(), key=lambda kv: kv[1])
    assert not bad, f"{dtype}: cases beyond the bound (array, error / bound): {bad}"


def test_regenerating_gives_the_same_arrays_and_manifest(tmp_path):
    manifest = generate(tmp_path)
    committed = load_manifest()
    for name, entry in committed["cases"].items():
        fresh = dict(manifest["cases"][name])
        # sha256 and the bounds' last bits may differ across CPUs (BLAS order); arrays decide.
        assert compare_entries(name, entry, fresh) == []
        stored = read_arrays(VECTORS_DIR, name, entry)
        regenerated = read_arrays(tmp_path, name, fresh)
        assert compare_arrays(name, stored, regenerated) == []
    # The regenerated directory loads and verifies like the committed one.
    assert [c.name for c in load_cases(directory=tmp_path)] == CASE_IDS


def test_generation_is_byte_deterministic():
    case = CASES[-1]
    assert npz_bytes(build_arrays(case)) == npz_bytes(build_arrays(case))


def test_compare_arrays_reports_differences():
    case = CASES[0]
    arrays = build_arrays(case)
    changed = {k: v.copy() for k, v in arrays.items()}
    changed["x"][0, 0, 0] += 1e-15
    changed["out/output"][0, 0, 0] += 1e-10
    problems = compare_arrays(case.name, arrays, changed)
    assert any("/x: input differs" in p for p in problems)
    assert any("/out/output: differs by" in p for p in problems)
    assert len(problems) == 2


def test_compare_entries_allows_last_bits_and_nothing_more():
    entry = load_manifest()["cases"]["lstm_layers2"]
    bound = entry["tolerances"]["float32"]["grad/bias_ih_l0"]
    last_bit = json.loads(json.dumps(entry))
    last_bit["sha256"] = "0" * 64
    last_bit["tolerances"]["float32"]["grad/bias_ih_l0"] = float(np.nextafter(bound, 1.0))
    assert compare_entries("lstm_layers2", entry, last_bit) == []
    wrong = json.loads(json.dumps(entry))
    wrong["tolerances"]["float32"]["grad/bias_ih_l0"] = bound * (1 + 1e-9)
    assert "float32 bound of grad/bias_ih_l0" in compare_entries("lstm_layers2", entry, wrong)[0]
    wrong = json.loads(json.dumps(entry))
    wrong["seed"] += 1
    assert "manifest entry differs" in compare_entries("lstm_layers2", entry, wrong)[0]


def test_check_command_passes_on_the_committed_vectors(capsys):
    assert vectors_main(["--check"]) == 0
    assert "verify and regenerate identically" in capsys.readouterr().out


@pytest.fixture
def vectors_copy(tmp_path):
    target = tmp_path / "vectors"
    shutil.copytree(VECTORS_DIR, target, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return target


def test_corrupt_file_raises_naming_the_file(vectors_copy, capsys):
    name = "lstm_default"
    path = vectors_copy / f"{name}.npz"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit inside an array
    path.write_bytes(bytes(data))
    for load in (lambda: load_case(name, directory=vectors_copy),
                 lambda: load_cases(cell="lstm", directory=vectors_copy)):
        with pytest.raises(VectorsError, match=rf"{name}\.npz.*corrupt.*sha256"):
            load()
    assert load_case("gru_default", directory=vectors_copy).name == "gru_default"  # others still load
    assert vectors_main(["--check", "--out", str(vectors_copy)]) == 1
    assert f"{name}.npz" in capsys.readouterr().err


def test_missing_file_or_manifest_raises_naming_it(vectors_copy):
    (vectors_copy / "gru_edge_T1.npz").unlink()
    with pytest.raises(VectorsError, match=r"gru_edge_T1\.npz.*missing"):
        load_case("gru_edge_T1", directory=vectors_copy)
    with pytest.raises(VectorsError, match=r"gru_edge_T1\.npz.*missing"):
        load_cases(directory=vectors_copy)
    (vectors_copy / "manifest.json").unlink()
    with pytest.raises(VectorsError, match=r"manifest\.json is missing"):
        load_cases(directory=vectors_copy)


def test_manifest_that_lies_about_a_file_is_caught(vectors_copy):
    manifest = json.loads((vectors_copy / "manifest.json").read_text())
    manifest["cases"]["lstm_default"]["sha256"] = "0" * 64
    (vectors_copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(VectorsError, match=r"lstm_default\.npz.*corrupt"):
        load_case("lstm_default", directory=vectors_copy)


def test_unknown_case_name_lists_valid_names():
    with pytest.raises(UnknownCaseError, match=r"no vector case named 'lstm_nope'; valid names: .*lstm_default"):
        load_case("lstm_nope")


def test_case_spec_round_trips_through_the_manifest():
    case = load_case("lstm_layers3_bidirectional_proj_size_lengths")
    assert case.spec == RNNSpec("lstm", 5, 6, num_layers=3, bidirectional=True, proj_size=3)
    assert case.lengths.tolist() == [4, 7, 1, 6] and case.h0 is not None and case.c0 is not None
    assert "name='lstm_layers3_bidirectional_proj_size_lengths'" in repr(case)
    assert "array" not in repr(case)  # arrays stay out of the repr

"""A user's own model as a workload: `T=..,B=..,I=..,H=..[,layers][,bidirectional][,lengths][,name]`.

Parsed into the same `Workload` as the built-in ones (so the worker, the report and the
cluster runner need nothing else); bad input is refused naming the field.  Imports no framework.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rnnbench.measure import workloads
from rnnbench.measure.workloads import Workload, WorkloadSpecError, parse_spec, resolve

from tests.support import ROOT  # noqa: E402


def test_the_issue_example_is_a_two_layer_bidirectional_packed_workload():
    w = parse_spec("T=200,B=32,I=512,H=768,layers=2,bidirectional,lengths=T/4..T")
    assert (w.seq_len, w.batch, w.input_size, w.hidden_size, w.num_layers) == (200, 32, 512, 768, 2)
    assert w.bidirectional and w.packed and not w.has_roof
    assert w.name == "T200-B32-I512-H768-L2-bi-len50"
    lengths = w.lengths(0)
    assert lengths.min() >= 50 and lengths.max() == 200 and len(lengths) == 32
    assert w.flops("lstm") == w.spec("lstm").flops(200, 32)


def test_a_spec_of_r1s_sizes_is_r1_but_for_its_name():
    r1 = resolve("R1")[0]
    w = parse_spec("T=100,B=32,I=128,H=256,layers=2,bidirectional,lengths=T/4..T,name=mine")
    assert w == Workload("mine", 100, 32, 128, 256, 2, True, True)
    assert (w.lengths(0) == r1.lengths(0)).all()
    # the built-in workloads' records do not change: no min_length key
    assert "min_length" not in r1.to_dict() and Workload.from_dict(r1.to_dict()) == r1


def test_lengths_take_an_integer_or_a_fraction_of_t():
    assert parse_spec("T=10,B=4,I=2,H=3,lengths=3..T").shortest == 3
    assert parse_spec("T=10,B=4,I=2,H=3,lengths=T/2..T").shortest == 5
    # ".." makes a packed batch (PackedSequence / lengths=), even of equal lengths; "T" a plain one
    assert parse_spec("T=10,B=4,I=2,H=3,lengths=T/1..10").packed is True
    assert parse_spec("T=10,B=4,I=2,H=3,lengths=T..T").shortest == 10
    assert parse_spec("T=10,B=4,I=2,H=3,lengths=T").packed is False
    w = parse_spec("T=10,B=64,I=2,H=3,lengths=7..T")
    assert w.lengths(0).min() >= 7 and Workload.from_dict(w.to_dict()) == w


def test_specs_names_and_files_mix(tmp_path):
    f = tmp_path / "models.txt"
    f.write_text("# our two models\nT=50,B=8,I=16,H=32,name=small   # the small one\n\nS2\n"
                 "T=400,B=16,I=64,H=128,layers=3\n")
    got = resolve(f"S1;T=20,B=2,I=4,H=8,bidirectional;@{f}")
    assert [w.name for w in got] == ["S1", "T20-B2-I4-H8-bi", "small", "S2", "T400-B16-I64-H128-L3"]
    assert resolve(["S1", "T=20,B=2,I=4,H=8"])[1].name == "T20-B2-I4-H8"
    assert resolve("S1;S1")[0].name == "S1" and len(resolve("S1;S1")) == 1


@pytest.mark.parametrize("spec, message", [
    ("T=200,B=32,I=512", "missing H"),
    ("T=200,B=32,I=512,H=768,X=1", "unknown field 'X'; valid: T, B, I, H, layers"),
    ("S1,T=200,B=32,I=512,H=768", "separate names and specs with ';'"),
    ("T=200,B=0,I=512,H=768", "B=0 is out of range 1..65536"),
    ("T=200,B=-3,I=512,H=768", "B must be a positive integer"),
    ("T=2e2,B=3,I=512,H=768", "T must be a positive integer"),
    ("T=200,B=32,I=512,H=768,layers=0", "layers=0 is out of range"),
    ("T=200,B=32,I=512,H=768,layers", "layers needs a value"),
    ("T=200,B=32,I=512,H=768,T=100", "T is given twice"),
    ("T=200,B=32,I=512,H=768,bidirectional=maybe", "bidirectional is a flag"),
    ("T=200,B=32,I=512,H=768,lengths=T/4..T/2", "lengths: the upper end must be T"),
    ("T=200,B=32,I=512,H=768,lengths=300..T", "lengths: the lower end must lie in 1..T (200), got 300"),
    ("T=200,B=32,I=512,H=768,lengths=0..T", "lengths: the lower end must lie in 1..T"),
    ("T=200,B=32,I=512,H=768,lengths=T/0..T", "T/k needs k >= 1"),
    ("T=200,B=32,I=512,H=768,lengths=half..T", "the lower end must be an integer or T/k"),
    ("T=200,B=32,I=512,H=768,lengths=50", "lengths must be LO..T"),
    ("T=200,B=32,I=512,H=768,name=a|b", "name 'a|b' must be"),
    ("T=200,B=32,I=512,H=768,name=S1", "name=S1 is the built-in workload"),
    ("T=200,,B=32,I=512,H=768", "an empty field"),
    ("T=200,B=32,I=512,H=768,", "an empty field"),
])
def test_bad_specs_are_refused_naming_the_field(spec, message):
    with pytest.raises(WorkloadSpecError) as e:
        resolve(spec)
    assert message in str(e.value) and repr(spec.strip()) in str(e.value)


def test_bad_files_and_clashing_names_are_refused(tmp_path):
    with pytest.raises(WorkloadSpecError, match="no-such.txt"):
        resolve(f"@{tmp_path}/no-such.txt")
    bad = tmp_path / "bad.txt"
    bad.write_text("S1\nT=10,B=1,I=1,H=1,layers=x\n")
    with pytest.raises(WorkloadSpecError, match=r"bad.txt:2: .*layers must be a positive integer"):
        resolve(f"@{bad}")
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(WorkloadSpecError, match="holds no workload"):
        resolve(f"@{tmp_path}/empty.txt")
    with pytest.raises(WorkloadSpecError, match="two workloads are named 'm'"):
        resolve("T=10,B=1,I=1,H=1,name=m;T=20,B=1,I=1,H=1,name=m")
    with pytest.raises(ValueError, match="unknown workload 'S9'.*a spec such as"):
        resolve("S1,S9")


def test_the_cli_says_what_is_wrong_with_a_spec():
    proc = subprocess.run([sys.executable, "-m", "rnnbench.cli", "compare", "--workloads", "T=200,B=32,I=512,Q=768"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown field 'Q'" in proc.stderr, proc.stderr


sizes = st.integers(1, 4096)
spec_workloads = st.builds(
    lambda t, b, i, h, layers, bi, lo: Workload(
        "", t, b, i, h, layers, bi, lo is not None, None if lo is None or min(lo, t) == max(1, t // 4) else min(lo, t)),
    st.integers(1, 2000), sizes, sizes, sizes, st.integers(1, 8), st.booleans(), st.none() | st.integers(1, 2000))


@settings(max_examples=200, deadline=None)
@given(spec_workloads, st.none() | st.from_regex(r"[a-z][a-z0-9_.-]{0,20}", fullmatch=True))
def test_a_workload_reads_back_from_its_spec(w, name):
    w = replace(w, name=name or workloads.default_name(w))
    if w.name in workloads.all_named():
        return
    assert parse_spec(w.to_spec()) == w
    assert Workload.from_dict(w.to_dict()) == w


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="TBIHlayersbidrctonamgh=.,/0123456789-x ", max_size=60))
def test_any_text_is_a_workload_or_a_clear_error(text):
    try:
        w = parse_spec(text)
    except WorkloadSpecError as e:
        assert str(e).startswith(("workload ", )), e
    else:
        assert w.seq_len >= 1 and w.batch >= 1 and w.name

"""What a rung computes on this machine is asked of the machine, never declared.

`Capabilities.machine` (rnnbench/core/capabilities.py) is the hook; `torch.native`'s probe
(`rnnbench.torch.backends.native.machine_reason`) runs `nn.LSTM`/`nn.GRU` once in the precision
asked.  Each question is tested both ways: against the library itself on this CPU, and on a
CPU without oneDNN's bfloat16 RNN primitive, made here by capping oneDNN's instruction set
(`ONEDNN_MAX_CPU_ISA=AVX2`, which oneDNN reads when it starts: so in a fresh process).
docs/capabilities.md lists the questions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rnnbench.core.capabilities import Capabilities
from rnnbench.core.spec import RNNSpec

from tests.support import ROOT  # noqa: E402
AVX2 = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2")


def test_the_machine_is_asked_last_only_for_what_the_declaration_allows():
    asked = []

    def machine(cell, dtype, device):
        asked.append((cell, dtype, device))
        return "no such kernel here" if dtype == "bfloat16" else None

    caps = Capabilities(cells=("lstm",), dtypes=("float32", "bfloat16"), machine=machine)
    spec = RNNSpec("lstm", 4, 4)
    assert caps.refusal("x.rung", spec, dtype="float32", device="cpu") is None
    refused = caps.refusal("x.rung", spec, dtype="bfloat16", device="cpu")
    assert refused.what == "machine" and refused.reason == "x.rung cannot run bfloat16 on this cpu: no such kernel here"
    assert caps.refusal("x.rung", RNNSpec("gru", 4, 4), dtype="bfloat16", device="cpu").what == "cell"
    assert caps.refusal("x.rung", spec, dtype="float64", device="cpu").what == "dtype"
    assert caps.refusal("x.rung", spec, dtype="bfloat16") is None  # no device, nothing to ask
    assert asked == [("lstm", "float32", "cpu"), ("lstm", "bfloat16", "cpu")]
    assert "machine" not in caps.to_dict()  # records carry the declaration, the answer is asked anew


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "amp_bfloat16"])
def test_native_probe_agrees_with_nn_rnn_itself(cell, dtype):
    """Whatever this CPU is: the probe refuses exactly what nn.LSTM/nn.GRU fails to run."""
    torch = pytest.importorskip("torch")
    from rnnbench.torch.backends.native import machine_reason
    from rnnbench.torch.precision import compute_context, storage_dtype

    module = getattr(torch.nn, cell.upper())(8, 8).to(storage_dtype(dtype))
    x = torch.randn(5, 3, 8, dtype=storage_dtype(dtype), requires_grad=True)
    try:
        with compute_context(dtype, "cpu"):
            out, _ = module(x)
        out.float().sum().backward()
        raised = None
    except RuntimeError as e:
        raised = str(e)
    reason = machine_reason(cell, dtype, "cpu")
    assert (reason is None) == (raised is None), (reason, raised)
    if raised:
        assert raised.split(". ")[0] in reason


def test_the_probe_answers_the_same_whatever_the_callers_grad_and_autocast_modes():
    """Asked first under no_grad, inference_mode or autocast (a module's first forward), the answer is
    the machine's, not the caller's mode's."""
    torch = pytest.importorskip("torch")
    from rnnbench.torch.backends.native import machine_reason

    want = machine_reason("lstm", "float32", "cpu")
    for mode in (torch.no_grad, torch.inference_mode, lambda: torch.autocast("cpu", torch.bfloat16)):
        machine_reason.__wrapped__.cache_clear()
        with mode():
            assert machine_reason("lstm", "float32", "cpu") == want is None


_CAPPED = r"""
import json, torch
from rnnbench.core import registry
from rnnbench.core.capabilities import UnsupportedConfigError
from rnnbench.core.spec import RNNSpec
import rnnbench.torch

out = {}
try:
    with torch.autocast("cpu", torch.bfloat16):
        torch.nn.LSTM(4, 4)(torch.ones(2, 1, 4))
    out["nn_lstm"] = "ran"
except RuntimeError as e:
    out["nn_lstm"] = str(e)
native = registry.get("torch.native")
for cell in ("lstm", "gru"):
    for dtype in ("float32", "bfloat16", "amp_bfloat16"):
        out[f"{cell}|{dtype}"] = native.unsupported_reason(RNNSpec(cell, 4, 4), dtype=dtype, device="cpu")
out["bptt"] = registry.get("torch.bptt").unsupported_reason(RNNSpec("lstm", 4, 4), dtype="amp_bfloat16", device="cpu")
try:
    with torch.autocast("cpu", torch.bfloat16):
        rnnbench.torch.LSTM(4, 4, backend="native")(torch.ones(2, 1, 4))
    out["module"] = "ran"
except UnsupportedConfigError as e:
    out["module"] = f"{type(e).__mro__[1:3]}: {e}"
print(json.dumps(out))
"""


def test_with_onednn_capped_at_avx2_native_amp_bfloat16_is_refused_with_its_reason():
    """On a CPU without AVX-512 (made here by the cap) nn.LSTM fails under CPU autocast
    bfloat16; the capability check says so, the drop-in module raises the refusal (a
    RuntimeError, as nn.LSTM's own failure is), `rnnbench list` shows it, and the rest of
    torch.native, and the other rungs, still run."""
    proc = subprocess.run([sys.executable, "-c", _CAPPED], cwd=ROOT, env=AVX2, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "could not create a primitive descriptor" in got["nn_lstm"], "the cap no longer reproduces the failure"
    assert "no bfloat16 RNN primitive" in got["lstm|amp_bfloat16"] and "ONEDNN_MAX_CPU_ISA=AVX2" in got["lstm|amp_bfloat16"]
    assert got["lstm|float32"] is None and got["lstm|bfloat16"] is None  # ATen's kernel runs stored bfloat16
    assert got["gru|float32"] is None
    for cell in ("lstm", "gru"):  # whatever oneDNN does for the GRU, the probe matched it (the test above)
        assert got[f"{cell}|amp_bfloat16"] is None or "primitive" in got[f"{cell}|amp_bfloat16"]
    assert got["bptt"] is None
    assert "RuntimeError" in got["module"] and "no bfloat16 RNN primitive" in got["module"]

    listed = subprocess.run([sys.executable, "-m", "rnnbench.cli", "list"], cwd=ROOT, env=AVX2, capture_output=True,
                            text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr
    native = listed.stdout[listed.stdout.index("torch.native"):listed.stdout.index("jax.naive")]
    assert "available" in native and "not lstm in amp_bfloat16: nn.LSTM's oneDNN kernel has no bfloat16" in native


def test_with_onednn_capped_at_avx2_the_study_records_native_amp_bfloat16_as_skipped(tmp_path):
    from rnnbench.study.records import read_records

    proc = subprocess.run(
        [sys.executable, "-m", "rnnbench.cli", "compare", "--workloads", "quick", "--impls", "torch.native",
         "--cells", "lstm", "--sweeps", "none", "--precisions", "amp_bfloat16", "--repeats", "3",
         "--processes", "1", "--max-processes", "1", "--out", str(tmp_path), "--no-progress"],
        cwd=ROOT, env=AVX2, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["dtype"]: r for r in read_records(tmp_path / "results.jsonl") if r.get("kind") == "measurement"}
    assert rows["float32"]["status"] == "ok", rows["float32"]
    amp = rows["amp_bfloat16"]
    assert amp["status"] == "skipped" and "no bfloat16 RNN primitive" in amp["reason"], amp
    report = (tmp_path / "report.md").read_text()
    assert "## Skipped" in report and "no bfloat16 RNN primitive" in report

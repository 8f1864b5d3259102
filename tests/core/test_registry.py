"""The one table of implementations: names, errors, availability and capabilities."""

import pytest

from rnnbench.core import registry
from rnnbench.core.catalogue import CUSTOM_CELLS
from rnnbench.core.capabilities import Capabilities
from rnnbench.core.registry import Implementation, UnknownImplementationError
from rnnbench.core.spec import RNNSpec


def test_names_are_framework_dot_key_in_ladder_order():
    names = registry.names()
    assert names[0] == "torch.naive" and "torch.native" in names and "jax.scan" in names
    assert all(n.split(".")[0] in ("torch", "jax") for n in names)
    torch_rungs = [registry.get(n).rung for n in registry.names("torch")]
    assert torch_rungs == sorted(torch_rungs)


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(UnknownImplementationError, match=r"unknown implementation 'torch.nope'.*torch\.eager"):
        registry.get("torch.nope")


def test_an_adapter_that_fails_to_load_is_unavailable_with_its_reason():
    broken = Implementation("torch.broken", "test", 0, adapter_path="rnnbench.core.spec:no_such_factory")
    reason = broken.unavailable_reason("cpu")
    assert reason is not None and "torch.broken" in reason
    gpu_only = Implementation("jax.gpuonly", "test", 0, capabilities=Capabilities(devices=("cuda",)))
    assert "only on cuda" in gpu_only.unavailable_reason("cpu")


def test_capabilities_name_what_is_missing():
    naive = registry.get("torch.naive")
    reason = naive.unsupported_reason(RNNSpec("lstm", 3, 4, proj_size=2))
    assert "proj_size" in reason and "torch.native" in reason  # names the ones that do support it


def test_an_earlier_rung_name_is_unknown_and_its_records_read_under_the_name(tmp_path):
    """No alias before a first release: `torch.autograd` (bptt's earlier name) is not a rung, and
    the records written under it are read as `torch.bptt`'s."""
    from rnnbench.study.records import read_records

    with pytest.raises(registry.UnknownImplementationError, match="unknown implementation 'torch.autograd'"):
        registry.get("torch.autograd")
    path = tmp_path / "results.jsonl"
    path.write_text('{"kind": "measurement", "impl": "torch.autograd", "key": "torch.autograd|lstm|S1|cpu|float32"}\n'
                    '{"kind": "measurement", "impl": "torch.eager", "key": "torch.eager|lstm|S1|cpu|float32"}\n')
    assert [(r["impl"], r["key"]) for r in read_records(path)] == [
        ("torch.bptt", "torch.bptt|lstm|S1|cpu|float32"), ("torch.eager", "torch.eager|lstm|S1|cpu|float32")]
    assert registry.get("torch.native").unsupported_reason(RNNSpec("lstm", 3, 4, proj_size=2)) is None
    assert "float64" in registry.get("jax.cudnn").unsupported_reason(RNNSpec("lstm", 3, 4), dtype="float64")


@pytest.mark.parametrize("cell", CUSTOM_CELLS)
def test_native_kernels_cannot_run_custom_cells(cell):
    assert registry.get("torch.native").unsupported_reason(RNNSpec(cell, 3, 4)) is not None


def test_default_study_leaves_out_only_what_says_why():
    default = registry.default_study_names()
    assert "torch.native" in default and "jax.naive" not in default
    for name in set(registry.names()) - set(default):
        assert registry.get(name).not_in_default_study  # a reason, shown in --help and the README


def test_answer_profile_leaves_out_the_ladders_steps_and_nothing_else():
    full, answer = registry.default_study_names("full"), registry.default_study_names("answer")
    steps = {n for n in registry.names() if registry.get(n).ladder_step}
    assert steps == {"torch.naive", "torch.cell_loop", "torch.jit", "jax.flax_nnx"}
    assert set(full) - set(answer) == steps and set(answer) <= set(full)
    # every rung one would pick on the CPU stays in `make run`'s answer
    assert {"torch.native", "torch.eager", "torch.compile", "torch.scan", "torch.bptt",
            "jax.flax_linen", "jax.scan", "jax.bptt"} <= set(answer)

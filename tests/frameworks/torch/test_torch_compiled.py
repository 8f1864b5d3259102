"""The torch.compile rungs (`compile`, `scan`): many models in one process, and their options.

Many configurations.  TorchDynamo fails a `fullgraph=True` function once one code object
has been compiled more than `recompile_limit` times (8); PyTorch's own test_modules samples,
run one after another through `backend="compile"`, used to get there.  Here the limit is
patched to 1 (any second graph of any compiled function fails) and models are built and run
the way those samples run them: differently configured models one after another, forward and
backward, training and eval mode, with and without gradients, one parameter's gradient at a
time (gradcheck's partials), initial states given or not.  `compile` runs 12 configurations;
`scan` (its compile of a forward and backward scan costs several seconds each) 3, each asked
in the same 4 ways.

Options: `mode`, `cpp_wrapper` and `freezing` against nn.LSTM; with freezing the weights are compiled in as
constants (checked in the generated code), and a weight changed by load_state_dict, an
optimizer step or an in-place update is used by the next call.  Wrong options are refused
with nn-style errors.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import rnnbench.torch
from rnnbench.torch.backends import COMPILED_BACKENDS

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _compiled_backends():
    for backend in COMPILED_BACKENDS:
        reason = rnnbench.torch.unavailable_reason(backend, "cpu")
        marks = [pytest.mark.skip(reason=f"{backend} unavailable here: {reason}")] if reason else []
        yield pytest.param(backend, id=backend, marks=marks)


# (cell, constructor kwargs, hx given): 12 configurations that differ in what Dynamo guards on
CONFIGS = [
    ("lstm", dict(input_size=2, hidden_size=3, num_layers=2, proj_size=2, bidirectional=True), True),
    ("gru", dict(input_size=2, hidden_size=3, bias=False), False),
    ("lstm", dict(input_size=2, hidden_size=3, batch_first=True), True),
    ("lstm", dict(input_size=2, hidden_size=3, proj_size=1), False),
    ("lstm", dict(input_size=2, hidden_size=3, num_layers=2, proj_size=2, bias=False), True),
    ("gru", dict(input_size=2, hidden_size=4, bidirectional=True), True),
    ("lstm", dict(input_size=3, hidden_size=3), False),
    ("gru", dict(input_size=2, hidden_size=3, num_layers=2, batch_first=True), True),
    ("lstm", dict(input_size=2, hidden_size=4, proj_size=2, batch_first=True, bias=False), True),
    ("gru", dict(input_size=3, hidden_size=2), False),
    ("lstm", dict(input_size=2, hidden_size=2, bidirectional=True, bias=False), False),
    ("gru", dict(input_size=2, hidden_size=2, num_layers=2, bidirectional=True, bias=False), True),
]
CHOSEN = {"compile": CONFIGS, "scan": CONFIGS[1:3]}


def _run_the_ways_test_modules_does(backend, cell, kw, with_hx, seed):
    """Forward and backward of one configuration against nn, in the ways PyTorch's test_modules
    asks a module: train mode with every gradient, eval mode with one parameter's gradient,
    with the input's gradient only, and without gradients."""
    torch.manual_seed(seed)
    ref = (nn.LSTM if cell == "lstm" else nn.GRU)(**kw, dtype=torch.float64)
    ours = (rnnbench.torch.LSTM if cell == "lstm" else rnnbench.torch.GRU)(**kw, dtype=torch.float64, backend=backend)
    ours.load_state_dict(ref.state_dict())
    B, T = 3, 4
    x = torch.randn((B, T, kw["input_size"]) if kw.get("batch_first") else (T, B, kw["input_size"]),
                    dtype=torch.float64)
    hx = None
    if with_hx:
        D, L = 2 if kw.get("bidirectional") else 1, kw.get("num_layers", 1)
        h0 = torch.randn(D * L, B, kw.get("proj_size") or kw["hidden_size"], dtype=torch.float64)
        hx = (h0, torch.randn(D * L, B, kw["hidden_size"], dtype=torch.float64)) if cell == "lstm" else h0
    names = [n for n, _ in ref.named_parameters()]
    for mode, wrt in (("train", "all"), ("eval", names[-1]), ("eval", "x"), ("eval", None)):
        for m in (ref, ours):
            m.train(mode == "train")
            for n, p in m.named_parameters():
                p.requires_grad_(wrt == "all" or wrt == n)
        xs = [x.clone().requires_grad_(wrt in ("all", "x")) for _ in range(2)]
        with torch.set_grad_enabled(wrt is not None):
            (want, _), (got, _) = ref(xs[0], hx), ours(xs[1], hx)
        torch.testing.assert_close(got, want, atol=1e-10, rtol=0)
        if wrt is not None:
            leaves = [xs[0]] if wrt == "x" else [p for p in ref.parameters() if p.requires_grad]
            mine = [xs[1]] if wrt == "x" else [p for p in ours.parameters() if p.requires_grad]
            for a, b in zip(torch.autograd.grad(want.sum(), leaves), torch.autograd.grad(got.sum(), mine)):
                torch.testing.assert_close(b, a, atol=1e-10, rtol=0)


@pytest.mark.parametrize("backend", list(_compiled_backends()))
def test_many_configurations_in_one_process_never_recompile(backend):
    from torch._dynamo.utils import counters

    with torch._dynamo.config.patch(recompile_limit=1):  # any second graph of one function fails
        for k, (cell, kw, with_hx) in enumerate(CHOSEN[backend]):
            _run_the_ways_test_modules_does(backend, cell, kw, with_hx, seed=k)
        graphs = counters["stats"]["unique_graphs"]
        for k, (cell, kw, with_hx) in enumerate(CHOSEN[backend]):  # again: nothing compiles
            _run_the_ways_test_modules_does(backend, cell, kw, with_hx, seed=k)
        assert counters["stats"]["unique_graphs"] == graphs


# ---- options --------------------------------------------------------------------------------------

def _pair(backend, options, seed=0, **kw):
    torch.manual_seed(seed)
    kw = dict(input_size=3, hidden_size=4, **kw)
    ref = nn.LSTM(**kw)
    ours = rnnbench.torch.LSTM(**kw, backend=backend, backend_options=options)
    ours.load_state_dict(ref.state_dict())
    return ref, ours


@pytest.mark.parametrize("backend", list(_compiled_backends()))
def test_freezing_compiles_the_weights_in_and_follows_every_change(backend):
    from torch._inductor.utils import run_and_get_code

    ref, ours = _pair(backend, {"freezing": True})
    x = torch.randn(5, 2, 3)
    with torch.no_grad():
        (got, _), code = run_and_get_code(ours, x)
        assert any("_frozen_param" in c for c in code), "freezing compiled no weight in as a constant"
        torch.testing.assert_close(got, ref(x)[0], atol=1e-6, rtol=0)

        def check(what):
            torch.testing.assert_close(ours(x)[0], ref(x)[0], atol=1e-6, rtol=0, msg=what)

        other = nn.LSTM(3, 4)
        ref.load_state_dict(other.state_dict())
        ours.load_state_dict(other.state_dict())
        check("after load_state_dict")
        for m in (ref, ours):
            m.weight_hh_l0.mul_(0.5)
        check("after an in-place update")
    for m in (ref, ours):  # an optimizer step (a training call, gradients on: nothing frozen)
        opt = torch.optim.SGD(m.parameters(), lr=0.5)
        m(x)[0].sum().backward()
        opt.step()
    with torch.no_grad():
        check("after an optimizer step")
        _, other = _pair(backend, {"freezing": True}, seed=1)  # another model, the same configuration
        torch.testing.assert_close(other(x)[0], _pair("eager", {}, seed=1)[1](x)[0], atol=1e-6, rtol=0)
        check("after another model ran")


@pytest.mark.parametrize("options", [{"mode": "max-autotune-no-cudagraphs"}, {"cpp_wrapper": True}],
                         ids=["max-autotune-no-cudagraphs", "cpp_wrapper"])
@pytest.mark.parametrize("backend", list(_compiled_backends()))
def test_options_match_nn_forward_and_backward(backend, options):
    ref, ours = _pair(backend, options)
    x = torch.randn(4, 2, 3)
    with torch.no_grad():
        torch.testing.assert_close(ours(x)[0], ref(x)[0], atol=1e-6, rtol=0)
    want, got = ref(x)[0], ours(x)[0]
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    for a, b in zip(torch.autograd.grad(want.sum(), list(ref.parameters())),
                    torch.autograd.grad(got.sum(), list(ours.parameters()))):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=0)


@pytest.mark.parametrize("backend", COMPILED_BACKENDS)
def test_options_are_checked_with_nn_style_errors(backend):
    assert rnnbench.torch.backends.options(backend) == {"mode": "default", "freezing": False, "cpp_wrapper": False}
    with pytest.raises(TypeError, match=f"backend '{backend}' got unknown options \\['freezng'\\]"):
        rnnbench.torch.LSTM(3, 4, backend=backend, backend_options={"freezng": True})
    with pytest.raises(ValueError, match="mode must be one of"):
        rnnbench.torch.LSTM(3, 4, backend=backend, backend_options={"mode": "fast"})
    with pytest.raises(ValueError, match="freezing must be a bool"):
        rnnbench.torch.GRU(3, 4, backend=backend, backend_options={"freezing": "yes"})
    with pytest.raises(ValueError, match="cpp_wrapper must be a bool"):
        rnnbench.torch.GRU(3, 4, backend=backend, backend_options={"cpp_wrapper": 1})
    with pytest.raises(TypeError, match="backend 'eager' got unknown options"):
        rnnbench.torch.LSTM(3, 4, backend="eager", backend_options={"freezing": True})
    rnn = rnnbench.torch.LSTM(3, 4, backend=backend, backend_options={"freezing": True})
    assert "backend_options={'freezing': True}" in repr(rnn)
    with pytest.raises(TypeError, match="backend 'eager' got unknown options"):
        rnn.backend = "eager"  # the options were the compiled rung's
    rnn = rnnbench.torch.LSTM(3, 4, backend=backend, backend_options={"mode": "reduce-overhead"})
    with pytest.raises(ValueError, match="CUDA graphs, which need a CUDA device"):
        rnn(torch.randn(2, 1, 3))


def test_a_rung_with_options_is_named_with_them():
    from rnnbench.core import registry

    row = registry.get("torch.scan[mode=max-autotune-no-cudagraphs,freezing]")
    assert row.name == "torch.scan[freezing,mode=max-autotune-no-cudagraphs]" and row.rung == registry.get(
        "torch.scan").rung
    adapter = row.adapter()
    assert adapter.key == "scan" and adapter.options == {"freezing": True, "mode": "max-autotune-no-cudagraphs"}
    assert "unknown options" in registry.get("torch.scan[freezng]").unavailable_reason("cpu")
    assert registry.split_names("torch.scan[freezing,mode=default],jax.scan[unroll=4]") == [
        "torch.scan[freezing,mode=default]", "jax.scan[unroll=4]"]
    with pytest.raises(registry.UnknownImplementationError, match="malformed"):
        registry.get("torch.scan[freezing")
    for name in registry.MEASURED_OPTIONS:
        assert registry.get(name).name == name


@pytest.mark.parametrize("backend", list(_compiled_backends()))
def test_torch_func_transforms_run_the_eager_formulation_with_a_warning(backend):
    from rnnbench.torch.backends import _compiled

    _compiled._warn_func_transform.cache_clear()  # it warns once per backend and process
    ref, ours = _pair(backend, {})
    x = torch.randn(4, 2, 3)
    with pytest.warns(UserWarning, match=f"backend '{backend}': under a torch.func transform"):
        got = torch.func.grad(lambda x: ours(x)[0].sum())(x)
    torch.testing.assert_close(got, torch.func.grad(lambda x: ref(x)[0].sum())(x), atol=1e-6, rtol=0)

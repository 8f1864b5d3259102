"""torch.triton: the fused Triton kernels, run on this CPU through Triton's interpreter (the same kernel
functions as `triton.runtime.interpreter.InterpretedFunction`); the `gpu`-marked tests compile them
on CUDA.

What the interpreter cannot prove (the GPU tests do): it ignores `input_precision` (its float32 dot is
IEEE whatever is asked: hence the source check that every `tl.dot` asks for "ieee"), runs the
programs one after another (a race between programs of one launch would not show), has no register
or shared-memory limits, and computes exp with numpy, not the GPU's.
"""

from __future__ import annotations

import ast
import inspect

import numpy as np
import pytest
import torch

import rnnbench.torch as rt
from rnnbench import parity
from rnnbench.core.capabilities import BackendUnavailableError, UnsupportedConfigError
from rnnbench.core.params import LayerParams
from rnnbench.core.spec import RNNSpec
from rnnbench.core.tolerances import assert_close
from rnnbench.torch.adapter import build_module
from rnnbench.torch.backends import triton as tb
from rnnbench.torch.cells import CELLS

pytestmark = [pytest.mark.usefixtures("one_torch_thread"),
              pytest.mark.skipif(tb.unavailable_reason("cuda") is not None,
                                 reason=f"triton is not usable here: {tb.unavailable_reason('cuda')}")]

vectors = pytest.importorskip("rnnbench.vectors")

DTYPES = {"float64": torch.float64, "float32": torch.float32}
# vs the `bptt` rung in the same dtype: float64 rounding, and float32 rounding over a few steps
ATOL = {torch.float64: 1e-12, torch.float32: 2e-5}


def _runs_here(rnn):
    """The drop-in module, its device check skipped: on the CPU the rung runs only in `tb.interpreted()`
    (the check itself is `test_the_cpu_is_refused_with_the_interpreter_named`)."""
    rnn._check_backend = lambda device: None
    return rnn


def _loss(out, state, seed=1):
    """A loss whose gradient differs on every output and state element (random cotangents)."""
    g = torch.Generator().manual_seed(seed)
    parts = [out, *(state if isinstance(state, tuple) else (state,))]
    return sum((p * torch.randn(p.shape, generator=g, dtype=p.dtype)).sum() for p in parts)


def _run(rnn, x, hx, lengths):
    x = x.clone().requires_grad_()
    hx = None if hx is None else (tuple(h.clone().requires_grad_() for h in hx) if isinstance(hx, tuple)
                                  else hx.clone().requires_grad_())
    leaves = [x, *(hx if isinstance(hx, tuple) else () if hx is None else (hx,))]
    out, state = rnn(x, hx, lengths=lengths)
    grads = torch.autograd.grad(_loss(out, state), [*leaves, *rnn.parameters()])
    return [out, *(state if isinstance(state, tuple) else (state,)), *grads]


# ---- against the bptt rung: tiles, the K loop, ragged lengths, both directions, two layers ------------

@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("cls", [rt.LSTM, rt.GRU], ids=["lstm", "gru"])
def test_matches_bptt_outputs_states_and_every_gradient(cls, dtype):
    """B = 18 and H = 40: two batch tiles and two hidden tiles per step (BLOCK_B 16, BLOCK_H 32), a
    K loop of two blocks forward and four or five backward, masked rows and columns in both; ragged
    lengths (unsorted, with a 1 and a full one), initial states, two layers, both directions.  (Equal
    lengths and no lengths: the shared vectors.)"""
    T, B, H, I, ragged = 4, 18, 40, 7, True
    torch.manual_seed(0)
    kw = dict(input_size=I, hidden_size=H, num_layers=2, bidirectional=True, dtype=dtype)
    ref = cls(**kw, backend="bptt")
    ours = _runs_here(cls(**kw, backend="triton"))
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(T, B, I, dtype=dtype)
    h0 = torch.randn(4, B, H, dtype=dtype)
    hx = (h0, torch.randn_like(h0)) if cls is rt.LSTM else h0
    lengths = torch.randint(1, T + 1, (B,)) if ragged else None
    if ragged:
        lengths[:3] = torch.tensor([T, 1, 2])
    want = _run(ref, x, hx, lengths)
    with tb.interpreted():
        got = _run(ours, x, hx, lengths)
    n_states = 2 if cls is rt.LSTM else 1
    assert len(got) == len(want) == 1 + n_states + (1 + n_states) + 4 * 4  # out, states, dx, dstates, dparams
    for k, (a, b) in enumerate(zip(want, got)):
        torch.testing.assert_close(b, a, atol=ATOL[dtype], rtol=0, msg=lambda m: f"result {k}: {m}")
    if ragged:  # a row past its length outputs zeros
        assert torch.all(got[0][1:, 1] == 0) and torch.any(got[0][0, 1] != 0)


# ---- the shared vectors, with their bounds ---------------------------------------------------------

def _vector_cases():
    cases = [c for c in vectors.load_cases() if c.spec.cell in ("lstm", "gru") and not c.spec.proj_size]
    return cases, [c.name for c in parity.covering_cases(cases)]


CASES, COVERING = _vector_cases()


def _vector_params():
    for case in CASES:
        yield pytest.param(case, "float64", id=f"{case.name}-float64")
        if case.name in COVERING:
            yield pytest.param(case, "float32", id=f"{case.name}-float32")


@pytest.mark.parametrize("case,dtype", list(_vector_params()))
def test_shared_vectors_within_their_bounds(case, dtype):
    spec, tdtype = case.spec, DTYPES[dtype]
    rnn = _runs_here(build_module(spec, "triton", case.params, dtype=dtype))

    def tensor(a):
        return None if a is None else torch.tensor(np.asarray(a), dtype=tdtype, requires_grad=True)

    x, h0, c0 = tensor(case.x), tensor(case.h0), tensor(case.c0)
    hx = None if h0 is None else ((h0, c0) if c0 is not None else h0)
    lengths = None if case.lengths is None else torch.as_tensor(case.lengths)
    with tb.interpreted():
        out, state = rnn(x, hx, lengths=lengths)
        result = {"output": out, **dict(zip(("h_n", "c_n"), state if isinstance(state, tuple) else (state,)))}
        loss = sum((v * torch.as_tensor(case.cotangents[k], dtype=tdtype)).sum() for k, v in result.items())
        inputs = {"grad/x": x, **({"grad/h0": h0} if h0 is not None else {}), **({"grad/c0": c0} if c0 is not None
                                                                                  else {}),
                  **{f"grad/{n}": p for n, p in rnn.named_parameters()}}
        grads = dict(zip(inputs, torch.autograd.grad(loss, list(inputs.values()))))
    got = {k: v.detach().double().numpy() for k, v in {**result, **grads}.items()}
    assert_close(parity.expected_results(case), got, dtype, context=f"torch.triton on {case.name} in {dtype}",
                 spec=spec, x=case.x)


def test_the_vectors_cover_what_the_rung_claims():
    tags = {t for c in CASES for t in c.tags}
    assert {"lstm", "gru", "lengths", "bidirectional", "layers", "initial_state", "no_bias", "batch_first"} <= tags
    assert {c.spec.cell for c in CASES if c.name in COVERING} == {"lstm", "gru"}


# ---- the autograd functions ------------------------------------------------------------------------

def _fn_inputs(gates, T=3, B=3, H=2):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(T, B, gates * H, generator=g, dtype=torch.float64, requires_grad=True),
            torch.randn(gates * H, H, generator=g, dtype=torch.float64, requires_grad=True),
            torch.randn(B, H, generator=g, dtype=torch.float64, requires_grad=True))


@pytest.mark.parametrize("lengths", [None, [3, 1, 2]], ids=["full", "lengths"])
def test_the_functions_pass_gradcheck(lengths):
    lengths = None if lengths is None else torch.tensor(lengths)
    xg, w_hh, h0 = _fn_inputs(4)
    c0 = torch.randn_like(h0, requires_grad=True)
    with tb.interpreted():
        assert torch.autograd.gradcheck(lambda *a: tb.LSTMFunction.apply(*a, lengths), (xg, w_hh, h0, c0),
                                        fast_mode=True)
        xg, w_hh, h0 = _fn_inputs(3)
        b_hh = torch.randn(w_hh.shape[0], dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda *a: tb.GRUFunction.apply(*a, lengths), (xg, w_hh, b_hh, h0),
                                        fast_mode=True)


def test_double_backward_runs_the_recorded_recurrence():
    """create_graph=True: the backward is the recurrence recorded by autograd (the kernels' backward
    is not differentiable), the same function, so gradgradcheck passes."""
    lengths = torch.tensor([3, 1])
    xg, w_hh, h0 = _fn_inputs(4, T=3, B=2, H=2)
    c0 = torch.randn_like(h0, requires_grad=True)
    with tb.interpreted():
        assert torch.autograd.gradgradcheck(lambda *a: tb.LSTMFunction.apply(*a, lengths), (xg, w_hh, h0, c0),
                                            fast_mode=True)
        xg, w_hh, h0 = _fn_inputs(3, T=3, B=2, H=2)
        b_hh = torch.randn(w_hh.shape[0], dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradgradcheck(lambda *a: tb.GRUFunction.apply(*a, lengths),
                                            (xg, w_hh, b_hh, h0), fast_mode=True)


# ---- the kernel source -----------------------------------------------------------------------------

def _calls(fn, name):
    tree = ast.parse(inspect.getsource(fn))
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == name and isinstance(n.func.value, ast.Name) and n.func.value.id == "tl"]


def test_every_tl_dot_asks_for_ieee_float32():
    """The interpreter ignores input_precision (its float32 dot is always IEEE), and Triton's GPU default is
    TF32: only the source can show that the GPU will be asked for IEEE float32."""
    dots = [(fn.__name__, call) for fn in tb.KERNELS for call in _calls(fn, "dot")]
    assert {name for name, _ in dots} == {fn.__name__ for fn in tb.KERNELS}  # every kernel multiplies with it
    text = "".join(inspect.getsource(fn) for fn in tb.KERNELS)
    assert text.count("tl.dot(") == len(dots) == 9  # none hidden from the AST walk (an alias, a helper)
    for name, call in dots:
        kw = {k.arg: k.value for k in call.keywords}
        assert "input_precision" in kw and isinstance(kw["input_precision"], ast.Constant), \
            f"{name}: a tl.dot without input_precision"
        assert kw["input_precision"].value == "ieee", f"{name}: tl.dot(input_precision={kw['input_precision'].value!r})"


def test_the_kernels_call_no_jitted_helper():
    """tl.sigmoid, tl.sum, tl.zeros... are jitted functions the interpreter cannot call from a kernel of a
    Triton imported without TRITON_INTERPRET (and the GPU path needs none)."""
    for fn in tb.KERNELS:
        for call in (n for name in ("sigmoid", "sum", "max", "min", "zeros", "zeros_like", "cdiv", "softmax") for n in
                     _calls(fn, name)):
            pytest.fail(f"{fn.__name__} calls tl.{call.func.attr} (line {call.lineno})")


@pytest.mark.parametrize("fn", [tb._lstm_fwd_kernel, tb._lstm_bwd_kernel], ids=["forward", "backward"])
def test_the_kernels_compile_for_an_h100_with_no_tensor_core_float32(fn):
    """No GPU needed to compile: Triton's own LLVM and ptxas build the float32 kernel for sm_90 (an
    H100) here.  IEEE float32 has no tensor-core instruction, so the PTX must hold no mma (TF32 would
    be one) and its products must be float32 FMAs.  (Running it, and its float32 exp and division,
    which the GPU computes approximately, is for the gpu tests.)"""
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as e:
        pytest.skip(f"this triton cannot compile for CUDA here: {e}")
    names = list(inspect.signature(fn).parameters)
    consts = dict(H=40, HAS_LENGTHS=True, HAS_NEXT=True, BLOCK_B=16, BLOCK_H=32, BLOCK_K=32,
                  NUM_K=2 if fn is tb._lstm_fwd_kernel else 5)
    consts = {n: v for n, v in consts.items() if n in names}
    sig = {n: "constexpr" if n in consts else "*i64" if n == "len_ptr" else "*fp32" if n.endswith("_ptr") else "i32"
           for n in names}
    source = ASTSource(tb.triton.jit(fn), sig, {(names.index(n),): v for n, v in consts.items()})
    ptx = tb.triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm["ptx"]
    assert "fma.rn.f32" in ptx
    assert "mma" not in ptx and "tf32" not in ptx


# ---- what it does not compute ----------------------------------------------------------------------

def test_the_cpu_is_refused_with_the_interpreter_named():
    assert tb.CAPABILITIES.devices == ("cuda",)
    reason = rt.unavailable_reason("triton", "cpu")
    assert reason is not None and "interpreter" in reason
    rnn = rt.LSTM(3, 4, backend="triton")
    with pytest.raises(BackendUnavailableError, match="interpreter"):
        rnn(torch.randn(2, 1, 3))
    # the rung called directly, outside interpreted(): the same refusal, naming the way in
    p = LayerParams(*(t for t in (rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0, rnn.bias_hh_l0)), None)
    x, h = torch.randn(2, 1, 3), torch.zeros(1, 4)
    with pytest.raises(BackendUnavailableError, match=r"interpreted\(\)"):
        tb.run_direction(CELLS.get("lstm"), p, x, (h, h), None)


def test_what_the_kernels_do_not_compute_is_refused_with_the_reason():
    with pytest.raises(UnsupportedConfigError, match="no output projection"):
        rt.LSTM(3, 4, proj_size=2, backend="triton")
    spec = RNNSpec("lstm", 3, 4)
    reason = rt.unsupported_reason("triton", spec, dtype="bfloat16", device="cuda")
    assert reason is not None and "bfloat16" in reason and "interpreter" in reason
    assert rt.unsupported_reason("triton", spec, dtype="float32", device="cuda") is None
    assert rt.unsupported_reason("triton", RNNSpec("ln_lstm", 3, 4), dtype="float32", device="cuda") is not None
    rnn = rt.GRU(3, 4, backend="triton")  # the rung called directly in bfloat16: refused, not computed
    p = LayerParams(*(t.detach().bfloat16() for t in (rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0,
                                                       rnn.bias_hh_l0)), None)
    with tb.interpreted(), pytest.raises(UnsupportedConfigError, match="bfloat16 is not claimed"):
        tb.run_direction(CELLS.get("gru"), p, torch.randn(2, 1, 3, dtype=torch.bfloat16),
                         (torch.zeros(1, 4, dtype=torch.bfloat16),), None)


def test_without_triton_the_rung_says_why(monkeypatch):
    monkeypatch.setattr(tb, "_IMPORT_ERROR", "ModuleNotFoundError: No module named 'triton'")
    assert "triton cannot be imported" in tb.unavailable_reason("cuda")
    with pytest.raises(BackendUnavailableError, match="cannot be imported"):
        with tb.interpreted():
            pass


def test_an_empty_batch_and_torch_func_run_the_eager_rung():
    """Outside `interpreted()` a kernel launch on the CPU raises: these run, so no kernel was launched."""
    torch.manual_seed(0)
    rnn = _runs_here(rt.GRU(3, 4, backend="triton", dtype=torch.float64))
    out, h = rnn(torch.randn(3, 0, 3, dtype=torch.float64))
    assert out.shape == (3, 0, 4) and h.shape == (1, 0, 4)
    ref = rt.GRU(3, 4, backend="eager", dtype=torch.float64)
    ref.load_state_dict(rnn.state_dict())
    x = torch.randn(4, 2, 3, dtype=torch.float64)
    got = torch.func.grad(lambda x: rnn(x)[0].pow(2).sum())(x)
    torch.testing.assert_close(got, torch.func.grad(lambda x: ref(x)[0].pow(2).sum())(x), atol=1e-14, rtol=0)
    with pytest.raises(BackendUnavailableError, match=r"interpreted\(\)"):
        rnn(x)  # the same call without the transform launches the kernels


# ---- on a GPU --------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("cls", [rt.LSTM, rt.GRU], ids=["lstm", "gru"])
def test_cuda_matches_native_in_ieee_float32_and_float64(cls, dtype):
    """The compiled kernels against nn.LSTM / nn.GRU (cuDNN) on CUDA, both in IEEE float32 (no TF32 in
    cuDNN, cuBLAS or tl.dot) or float64: outputs, states and every gradient, ragged lengths."""
    from rnnbench.torch.precision import ieee_float32

    reason = rt.unavailable_reason("triton", "cuda")
    if reason is not None:
        pytest.skip(reason)
    T, B, H, I = 9, 20, 72, 10
    torch.manual_seed(0)
    kw = dict(input_size=I, hidden_size=H, num_layers=2, bidirectional=True, dtype=dtype, device="cuda")
    ref, ours = cls(**kw, backend="native"), cls(**kw, backend="triton")
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(T, B, I, dtype=dtype, device="cuda")
    h0 = torch.randn(4, B, H, dtype=dtype, device="cuda")
    hx = (h0, torch.randn_like(h0)) if cls is rt.LSTM else h0
    lengths = torch.randint(1, T + 1, (B,))
    lengths[0] = T
    atol = 2e-5 if dtype == torch.float32 else 1e-11
    with ieee_float32():
        for lens in (None, lengths):
            want, got = _run(ref, x, hx, lens), _run(ours, x, hx, lens)
            for k, (a, b) in enumerate(zip(want, got)):
                torch.testing.assert_close(b, a, atol=atol, rtol=0, msg=lambda m: f"result {k}: {m}")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_graph_replays_the_step_loops():
    """No host sync in the step loops: the forward and backward launches capture as a CUDA graph, and a
    replay on new inputs gives what a direct call gives."""
    if rt.unavailable_reason("triton", "cuda") is not None:
        pytest.skip(rt.unavailable_reason("triton", "cuda"))
    T, B, H = 6, 5, 48
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    xg = torch.randn(T, B, 4 * H, device=dev, generator=g)
    w = torch.randn(4 * H, H, device=dev, generator=g) / H ** 0.5
    h0, c0 = torch.randn(B, H, device=dev, generator=g), torch.randn(B, H, device=dev, generator=g)
    lengths = torch.tensor([6, 1, 3, 6, 2], device=dev)
    dout, dh_n, dc_n = torch.randn(T, B, H, device=dev), torch.randn(B, H, device=dev), torch.randn(B, H, device=dev)

    def step():
        out, hs, cs, acts = tb.lstm_forward(xg, w, h0, c0, lengths)
        return (out, hs, cs, *tb.lstm_backward(w, c0, lengths, acts, cs, dout, dh_n, dc_n))

    step()  # compile outside the capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    for t in (xg, h0, c0, dout):
        t.copy_(torch.randn_like(t))
    graph.replay()
    for a, b in zip(step(), captured):
        torch.testing.assert_close(b, a, atol=0, rtol=0)

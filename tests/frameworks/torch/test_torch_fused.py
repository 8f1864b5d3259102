"""torch.fused: the C++ kernel as torch.library custom ops (the parity matrix and PyTorch's own RNN
tests run it too; here what is particular to it)."""

from __future__ import annotations

import pytest
import torch

from rnnbench import kernels
from rnnbench.torch import GRU, LSTM, UnsupportedConfigError
from rnnbench.torch.backends import fused

pytestmark = [pytest.mark.usefixtures("one_torch_thread"),
              pytest.mark.skipif(kernels.unavailable_reason() is not None,
                                 reason=f"the fused kernels cannot be built here: {kernels.unavailable_reason()}")]


def _inputs(gates, T=5, B=3, H=4, dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(T, B, gates * H, generator=g, dtype=dtype, requires_grad=True),
            torch.randn(gates * H, H, generator=g, dtype=dtype, requires_grad=True),
            torch.randn(B, H, generator=g, dtype=dtype, requires_grad=True))


@pytest.mark.parametrize("lengths", [None, [5, 2, 4]])
def test_the_ops_pass_gradcheck(lengths):
    lengths = None if lengths is None else torch.tensor(lengths)
    xg, w_hh, h0 = _inputs(4)
    c0 = torch.randn_like(h0, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: tuple(fused.fused_lstm(*a, lengths)[i] for i in (0, 3, 4)),
                                    (xg, w_hh, h0, c0))
    xg, w_hh, h0 = _inputs(3)
    b_hh = torch.randn(w_hh.shape[0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: tuple(fused.fused_gru(*a, lengths)[i] for i in (0, 3)),
                                    (xg, w_hh, b_hh, h0))


def test_opcheck_schemas_fake_kernels_and_autograd_registration():
    xg, w_hh, h0 = _inputs(4)
    torch.library.opcheck(fused.fused_lstm, (xg, w_hh, h0, torch.randn_like(h0), torch.tensor([5, 1, 3])))
    xg, w_hh, h0 = _inputs(3)
    torch.library.opcheck(fused.fused_gru, (xg, w_hh, torch.randn(w_hh.shape[0], dtype=torch.float64), h0, None))


@pytest.mark.parametrize("lengths", [None, [5, 2, 4]])
def test_the_ops_pass_gradgradcheck(lengths):
    """Double backward runs the recurrence recorded by autograd (the kernel's backward is not
    differentiable): the same function, so its gradients are the kernel's."""
    lengths = None if lengths is None else torch.tensor(lengths)
    xg, w_hh, h0 = _inputs(4, T=4, B=3, H=3)
    c0 = torch.randn_like(h0, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda *a: tuple(fused.fused_lstm(*a, lengths)[i] for i in (0, 3, 4)),
                                        (xg, w_hh, h0, c0))
    xg, w_hh, h0 = _inputs(3, T=4, B=3, H=3)
    b_hh = torch.randn(w_hh.shape[0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda *a: tuple(fused.fused_gru(*a, lengths)[i] for i in (0, 3)),
                                        (xg, w_hh, b_hh, h0))


@pytest.mark.parametrize("cls", [LSTM, GRU])
def test_torch_compile_traces_through_the_custom_op(cls):
    torch.manual_seed(0)
    rnn = cls(3, 4, num_layers=2, bidirectional=True, backend="fused")
    x = torch.randn(6, 2, 3)
    want = rnn(x)[0]
    compiled = torch.compile(rnn, backend="aot_eager", fullgraph=True)
    got = compiled(x)[0]
    torch.testing.assert_close(got, want)
    got.sum().backward()  # the registered autograd formula under the compiled graph
    assert all(p.grad is not None for p in rnn.parameters())


def test_what_the_kernel_does_not_compute_is_refused_with_the_reason():
    with pytest.raises(UnsupportedConfigError, match="no output projection"):
        LSTM(3, 4, proj_size=2, backend="fused")
    rnn = LSTM(3, 4, backend="fused").to(torch.bfloat16)
    with pytest.raises(UnsupportedConfigError, match="float32 and float64"):
        rnn(torch.randn(2, 1, 3, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="does not match weight dtype"):  # nn.LSTM's own check and words
        LSTM(3, 4, backend="fused")(torch.randn(2, 1, 3, dtype=torch.float64))


def test_a_non_contiguous_input_gives_the_contiguous_result():
    torch.manual_seed(0)
    rnn = GRU(3, 4, backend="fused")
    x = torch.randn(2, 6, 3).transpose(0, 1)  # (T, B, I) view, not contiguous
    assert not x.is_contiguous()
    torch.testing.assert_close(rnn(x)[0], rnn(x.contiguous())[0])


# ---- the binding code around the ops (what mutation testing of fused.py asks of this file) ----------

def _nn_twin(cls, rnn):
    """nn.LSTM / nn.GRU with `rnn`'s weights (the drop-in modules keep nn's parameter names)."""
    twin = getattr(torch.nn, cls.__name__)(rnn.input_size, rnn.hidden_size, num_layers=rnn.num_layers,
                                           bias=rnn.bias, bidirectional=rnn.bidirectional, dtype=torch.float64)
    twin.load_state_dict(rnn.state_dict())
    return twin


def _grads(rnn, run, x, loss):
    x = x.detach().requires_grad_()
    loss(run(x)).backward()
    grads = [x.grad] + [p.grad for p in rnn.parameters()]
    rnn.zero_grad()
    return grads


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("cls", [LSTM, GRU])
def test_the_rung_is_nn_rnn_with_lengths_layers_directions_and_one_used_output(cls, bias):
    """Through the module: two layers, both directions, packed lengths; the loss on the output
    alone, on the final state alone and on both (an unused output's gradient arrives as None)."""
    torch.manual_seed(0)
    rnn = cls(3, 4, num_layers=2, bidirectional=True, bias=bias, backend="fused", dtype=torch.float64)
    twin = _nn_twin(cls, rnn)
    x = torch.randn(6, 3, 3, dtype=torch.float64)
    packed = lambda x: torch.nn.utils.rnn.pack_padded_sequence(x, torch.tensor([6, 2, 4]), enforce_sorted=False)  # noqa: E731
    final = (lambda s: s[0].sum() * 2 + s[1].sum()) if cls is LSTM else (lambda s: s.sum())  # noqa: E731
    losses = {"output": lambda r: (torch.nn.utils.rnn.pad_packed_sequence(r[0])[0] ** 2).sum(),
              "state": lambda r: final(r[1]),
              "both": lambda r: (torch.nn.utils.rnn.pad_packed_sequence(r[0])[0] ** 2).sum() + final(r[1])}
    for name, loss in losses.items():
        got = _grads(rnn, lambda x: rnn(packed(x)), x, loss)
        want = _grads(twin, lambda x: twin(packed(x)), x, loss)
        for i, (g, w) in enumerate(zip(got, want)):
            torch.testing.assert_close(g, w, msg=f"{name}: gradient {i}")


@pytest.mark.parametrize("lengths", [None, [5, 2, 4]])
def test_create_graph_gradients_are_the_kernels_gradients(lengths):
    """Under create_graph=True the backward is the recorded recurrence, not the kernel's: the
    two must give the same first derivatives (gradgradcheck alone would not see a wrong one)."""
    lengths = None if lengths is None else torch.tensor(lengths)
    xg, w_hh, h0 = _inputs(4)
    c0 = torch.randn_like(h0, requires_grad=True)
    g = torch.Generator().manual_seed(1)
    for op, args in ((fused.fused_lstm, (xg, w_hh, h0, c0)),
                     (fused.fused_gru, (*_inputs(3)[:2], torch.randn(12, dtype=torch.float64, requires_grad=True),
                                        _inputs(3)[2]))):
        outs = [o for i, o in enumerate(op(*args, lengths)) if i in ((0, 3, 4) if op is fused.fused_lstm else (0, 3))]
        cot = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in outs]
        kernel = torch.autograd.grad(outs, args, cot, retain_graph=True)
        recorded = torch.autograd.grad(outs, args, cot, create_graph=True)
        for i, (k, r) in enumerate(zip(kernel, recorded)):
            torch.testing.assert_close(r, k, msg=f"{op}: input {i}")


def test_int32_lengths_reach_the_kernel_as_int64():
    xg, w_hh, h0 = _inputs(4)
    c0 = torch.randn_like(h0)
    want = fused.fused_lstm(xg, w_hh, h0, c0, torch.tensor([5, 2, 4]))
    got = fused.fused_lstm(xg, w_hh, h0, c0, torch.tensor([5, 2, 4], dtype=torch.int32))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("cls", [LSTM, GRU])
def test_the_kernel_runs_a_batch_of_one_and_eager_an_empty_batch_and_torch_func(cls, monkeypatch):
    torch.manual_seed(0)
    rnn = cls(3, 4, backend="fused", dtype=torch.float64)
    twin = _nn_twin(cls, rnn)
    one = torch.randn(5, 1, 3, dtype=torch.float64)
    calls = []
    monkeypatch.setattr(fused.eager, "run_direction", lambda *a: calls.append(a) or eager_run(*a))
    torch.testing.assert_close(rnn(one)[0], twin(one)[0])
    assert calls == []  # a batch of one is the kernel's
    empty = torch.randn(5, 0, 3, dtype=torch.float64)
    assert rnn(empty)[0].shape == (5, 0, 4) and len(calls) == 1
    params = dict(rnn.named_parameters())
    jac = torch.func.jacrev(lambda x: torch.func.functional_call(rnn, params, (x,))[0].sum(0))(one)
    want = torch.func.jacrev(lambda x: twin(x)[0].sum(0))(one)
    torch.testing.assert_close(jac, want)
    assert len(calls) > 1


from rnnbench.torch.backends import eager as _eager  # noqa: E402

eager_run = _eager.run_direction


def test_under_torch_func_the_eager_rung_runs_with_the_lengths():
    from rnnbench.core.params import LayerParams
    from rnnbench.torch.cells import CELLS

    g = torch.Generator().manual_seed(0)
    T, B, I, H = 5, 3, 2, 4
    p = LayerParams(*(torch.randn(*s, generator=g, dtype=torch.float64) for s in ((4 * H, I), (4 * H, H), (4 * H,),
                                                                                  (4 * H,))), None)
    x = torch.randn(T, B, I, generator=g, dtype=torch.float64)
    state = tuple(torch.zeros(B, H, dtype=torch.float64) for _ in range(2))
    lengths = torch.tensor([5, 2, 4])
    want = torch.func.jacrev(lambda x: eager_run(CELLS.get("lstm"), p, x, state, lengths)[0])(x)
    got = torch.func.jacrev(lambda x: fused.run_direction(CELLS.get("lstm"), p, x, state, lengths)[0])(x)
    torch.testing.assert_close(got, want)
    assert got[3:, 1].abs().sum() == 0  # past its length a row's output is zero: the lengths were used

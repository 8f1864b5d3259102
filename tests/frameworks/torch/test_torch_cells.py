"""rnnbench.torch's catalogue cells (ln_lstm, peephole_lstm, gru_reset_before) vs the NumPy reference.

Every backend that runs a custom cell (`rnnbench.torch.CUSTOM_CELL_BACKENDS`: eager and
compile for all; `bptt` where `unsupported_cell_reason` is None: peephole_lstm, ln_lstm) against `rnnbench.reference` in float64 (1e-9,
forward and every gradient) on random configurations covering layers, bidirectional,
batch_first, bias=False, unsorted lengths and initial states, with the extra parameters
moved away from their init; float32 (2e-5) on the shared vectors.  `compile` runs one
configuration per cell (each costs a compile); `scan` (a longer compile) none here: the parity
matrix runs each custom cell's richest shared vector on it.  Then the module API: names, init,
load_state_dict, PackedSequence, batch_first, unbatched input, and the errors.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import rnnbench.torch
from rnnbench import reference
from rnnbench.core.catalogue import CELL_DEFS, CUSTOM_CELLS, CellDef, register_cell
from rnnbench.core.params import init_params
from rnnbench.core.spec import RNNSpec
from rnnbench.core.tolerances import assert_close
from rnnbench.vectors import load_case
from reference_cases import make_case
from rnnbench.torch.adapter import build_module, get_adapter


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models; idle intra-op threads only stall the shared CPU
    yield
    torch.set_num_threads(threads)


def _cell_backends():
    """(backend, cell) for every backend that implements the cell (skipped if unavailable here)."""
    for backend in rnnbench.torch.BACKENDS:
        reason = rnnbench.torch.unavailable_reason(backend, "cpu")
        marks = [pytest.mark.skip(reason=f"{backend} unavailable here: {reason}")] if reason else []
        for cell in CUSTOM_CELLS:
            if rnnbench.torch.unsupported_cell_reason(backend, cell) is None:
                yield pytest.param(backend, cell, id=f"{backend}-{cell}", marks=marks)


CELL_BACKENDS = list(_cell_backends())

# (spec kwargs, T, B, lengths, initial state)
CONFIGS = [
    (dict(input_size=3, hidden_size=4), 5, 3, None, False),
    (dict(input_size=4, hidden_size=3, bias=False), 4, 2, None, True),
    (dict(input_size=3, hidden_size=4, num_layers=2, bidirectional=True, batch_first=True), 5, 4, [3, 5, 1, 4], True),
]
# the torch.compile rungs: compile the one configuration that carries every option (a compile
# per configuration); scan none (see the module docstring)
COMPILED_CONFIGS = {"compile": [CONFIGS[2]], "scan": []}


def _config_id(c):
    kw, T, B, lengths, init = c
    opts = [k for k in ("bias", "num_layers", "bidirectional", "batch_first") if k in kw]
    return "-".join(opts + (["lengths"] if lengths else []) + (["h0"] if init else [])) or "default"


def _cases():
    for param in CELL_BACKENDS:
        backend, cell = param.values
        for config in COMPILED_CONFIGS.get(backend, CONFIGS):
            yield pytest.param(backend, cell, config, marks=param.marks, id=f"{param.id}-{_config_id(config)}")


@pytest.mark.parametrize("backend,cell,config", list(_cases()))
def test_float64_forward_and_gradients_match_the_reference(backend, cell, config):
    kwargs, T, B, lengths, init = config
    spec = RNNSpec(cell, **kwargs)
    inputs, cot = make_case(spec, T, B, seed=7, initial_state=init, lengths=lengths)
    want = reference.run_case(spec, **inputs, cotangents=cot)
    got = get_adapter(backend).run_case(spec, **inputs, cotangents=cot, dtype="float64")
    assert sorted(got) == sorted(want)
    assert_close(want, got, "float64", context=f"torch.{backend} {cell}", spec=spec, x=inputs["x"])


@pytest.mark.parametrize("backend,cell", [p for p in CELL_BACKENDS if p.values[0] not in COMPILED_CONFIGS])
def test_float32_matches_the_shared_vector(backend, cell):
    case = load_case(f"{cell}_bidirectional_layers2_lengths_initial_state")
    got = get_adapter(backend).run_case(case.spec, case.params, case.x, case.h0, case.c0, case.lengths,
                                        case.cotangents, dtype="float32")
    assert_close({**case.expected, **case.grads}, got, "float32", context=f"torch.{backend} {case.name}",
                 spec=case.spec, x=case.x)


# ---- the module API ----------------------------------------------------------------------------

MODULES = {"ln_lstm": rnnbench.torch.LayerNormLSTM, "peephole_lstm": rnnbench.torch.PeepholeLSTM,
           "gru_reset_before": rnnbench.torch.ResetBeforeGRU}


@pytest.mark.parametrize("cell", CUSTOM_CELLS)
def test_parameter_names_and_init_follow_the_catalogue(cell):
    torch.manual_seed(0)
    module = MODULES[cell](3, 5, num_layers=2, bidirectional=True)
    spec = RNNSpec(cell, 3, 5, num_layers=2, bidirectional=True)
    assert module.cell == cell and isinstance(module, rnnbench.torch.RNN)
    assert {k: tuple(v.shape) for k, v in module.state_dict().items()} == spec.param_shapes()
    assert list(module.state_dict()) == spec.param_names()
    bound = 1 / 5 ** 0.5
    inits = {f"{e.prefix}_{spec.suffix(l, d)}": e.init for e in spec.cell_def.extra_params
             for l, d in spec.layers_and_directions()}
    for name, value in module.state_dict().items():
        init = inits.get(name, "uniform")
        if init == "ones":
            assert torch.equal(value, torch.ones_like(value)), name
        elif init == "zeros":
            assert torch.equal(value, torch.zeros_like(value)), name
        else:
            assert value.abs().max() <= bound and value.std() > 0.2 * bound, name


def test_generic_rnn_equals_the_named_module():
    a = rnnbench.torch.RNN("peephole_lstm", 3, 4, batch_first=True)
    b = rnnbench.torch.PeepholeLSTM(3, 4, batch_first=True)
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 5, 3)
    (out_a, (h_a, c_a)), (out_b, (h_b, c_b)) = a(x), b(x)
    assert torch.equal(out_a, out_b) and torch.equal(h_a, h_b) and torch.equal(c_a, c_b)


@pytest.mark.parametrize("cell", CUSTOM_CELLS)
def test_packed_sequence_lengths_batch_first_and_unbatched_agree(cell):
    """PackedSequence (unsorted), padded + lengths=, per-sequence unbatched runs: one answer."""
    torch.manual_seed(1)
    module = MODULES[cell](3, 4, num_layers=2, bidirectional=True, batch_first=True, dtype=torch.float64)
    lengths = torch.tensor([2, 5, 3])
    x = torch.randn(3, 5, 3, dtype=torch.float64)
    packed_out, packed_hidden = module(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
    padded, _ = pad_packed_sequence(packed_out, batch_first=True, total_length=5)
    out, hidden = module(x, lengths=lengths)
    torch.testing.assert_close(out, padded, rtol=0, atol=1e-12)
    h_n = hidden[0] if isinstance(hidden, tuple) else hidden
    h_packed = packed_hidden[0] if isinstance(packed_hidden, tuple) else packed_hidden
    torch.testing.assert_close(h_n, h_packed, rtol=0, atol=1e-12)
    for b in range(3):
        single, single_hidden = module(x[b, :lengths[b]])  # unbatched 2-D (T, I) with batch_first
        torch.testing.assert_close(single, out[b, :lengths[b]], rtol=0, atol=1e-12)
        single_h = single_hidden[0] if isinstance(single_hidden, tuple) else single_hidden
        torch.testing.assert_close(single_h, h_n[:, b], rtol=0, atol=1e-12)
    assert torch.all(out[0, 2:] == 0)


def test_load_state_dict_round_trip_with_canonical_params():
    spec = RNNSpec("ln_lstm", 3, 4, num_layers=2)
    params = init_params(spec, 3)
    module = build_module(spec, "eager", params, dtype="float64")
    for name, value in params.items():
        assert np.array_equal(getattr(module, name).detach().numpy(), value), name
    fresh = rnnbench.torch.LayerNormLSTM(3, 4, num_layers=2, dtype=torch.float64)
    fresh.load_state_dict(module.state_dict())
    x = torch.randn(4, 2, 3, dtype=torch.float64)
    torch.testing.assert_close(fresh(x)[0], module(x)[0], rtol=0, atol=0)


def test_a_missing_layernorm_parameter_is_named():
    spec = RNNSpec("ln_lstm", 3, 4)
    params = init_params(spec)
    del params["layernorm_c_weight_l0"]
    with pytest.raises(ValueError, match="layernorm_c_weight_l0"):
        build_module(spec, "eager", params)
    state = rnnbench.torch.LayerNormLSTM(3, 4).state_dict()
    del state["layernorm_hh_bias_l0"]
    with pytest.raises(RuntimeError, match="layernorm_hh_bias_l0"):
        rnnbench.torch.LayerNormLSTM(3, 4).load_state_dict(state)


def test_cell_support_table():
    """eager and compile run every catalogue cell; bptt at least peephole_lstm; native none."""
    for cell in CUSTOM_CELLS:
        for backend in rnnbench.torch.CUSTOM_CELL_BACKENDS:
            assert rnnbench.torch.unsupported_cell_reason(backend, cell) is None
        assert "cuDNN" in rnnbench.torch.unsupported_cell_reason("native", cell)
    assert rnnbench.torch.unsupported_cell_reason("bptt", "peephole_lstm") is None
    assert rnnbench.torch.unsupported_cell_reason("bptt", "ln_lstm") is None
    for backend in ("lstm", "gru"):
        assert all(rnnbench.torch.unsupported_cell_reason(b, backend) is None for b in rnnbench.torch.BACKENDS)


@pytest.mark.parametrize("cls", [rnnbench.torch.PeepholeLSTM, rnnbench.torch.LayerNormLSTM])
def test_bptt_no_grad_forward_equals_the_training_forward(cls):
    module = cls(3, 4, num_layers=2, bidirectional=True, backend="bptt", dtype=torch.float64)
    x, lengths = torch.randn(5, 3, 3, dtype=torch.float64), torch.tensor([5, 2, 4])
    out, (h_n, c_n) = module(x, lengths=lengths)
    with torch.no_grad():
        out2, (h2, c2) = module(x, lengths=lengths)
    assert out.requires_grad and not out2.requires_grad
    assert torch.equal(out.detach(), out2) and torch.equal(h_n.detach(), h2) and torch.equal(c_n.detach(), c2)


@pytest.mark.parametrize("backend", ["native", "naive", "cell_loop", "jit"])
def test_backends_without_custom_cells_say_why(backend):
    with pytest.raises(ValueError, match="ln_lstm") as info:
        rnnbench.torch.LayerNormLSTM(3, 4, backend=backend)
    if backend == "native":
        assert "cuDNN" in str(info.value) and "eager" in str(info.value)
    module = rnnbench.torch.PeepholeLSTM(3, 4)
    with pytest.raises(ValueError, match="peephole_lstm"):
        module.backend = backend
    reason = get_adapter(backend).unsupported_reason(RNNSpec("gru_reset_before", 3, 4))
    assert reason and "gru_reset_before" in reason


def test_bad_inputs_are_named():
    module = rnnbench.torch.LayerNormLSTM(3, 4)
    with pytest.raises(rnnbench.torch.RNNInputError, match=r"input.size\(-1\) must be equal to input_size. Expected 3, got 5"):
        module(torch.randn(2, 1, 5))
    with pytest.raises(rnnbench.torch.RNNInputError, match=r"ln_lstm: hx must be a tuple \(h_0, c_0\)"):
        module(torch.randn(2, 1, 3), torch.zeros(1, 1, 4))
    with pytest.raises(rnnbench.torch.RNNInputError, match=r"Expected hidden\[1\] size"):
        module(torch.randn(2, 1, 3), (torch.zeros(1, 1, 4), torch.zeros(1, 1, 5)))
    with pytest.raises(rnnbench.torch.RNNInputError, match="ResetBeforeGRU|gru_reset_before"):
        rnnbench.torch.ResetBeforeGRU(3, 4)(torch.randn(2, 1, 3), (torch.zeros(1, 1, 4), torch.zeros(1, 1, 4)))
    with pytest.raises(ValueError, match="proj_size"):
        rnnbench.torch.RNN("ln_lstm", 3, 4, proj_size=2)


def test_a_cell_without_a_torch_step_says_how_to_add_one():
    lonely = CellDef("lonely_cell", "gru", ("r", "z", "n"), "no torch step", "h' = h")
    had = lonely.name in CELL_DEFS
    register_cell(lonely)
    try:
        with pytest.raises(ValueError, match=r"rnnbench.torch.register_cell\('lonely_cell', step\)"):
            rnnbench.torch.RNN("lonely_cell", 3, 4)
    finally:
        if not had:
            CELL_DEFS.pop(lonely.name, None)
    with pytest.raises(ValueError, match="cell must be one of"):
        rnnbench.torch.register_cell("not_in_catalogue", lambda x, s, p: s)
    with pytest.raises(ValueError, match="a different torch step"):
        rnnbench.torch.register_cell("ln_lstm", lambda x, s, p: s)


def test_training_mode_dropout_between_layers_only():
    torch.manual_seed(2)
    module = rnnbench.torch.LayerNormLSTM(3, 4, num_layers=2, dropout=0.5, dtype=torch.float64)
    x = torch.randn(4, 2, 3, dtype=torch.float64)
    module.eval()
    a, b = module(x)[0], module(x)[0]
    assert torch.equal(a, b)
    module.train()
    assert not torch.equal(module(x)[0], a)  # dropout on layer 0's output changes layer 1's input


@pytest.mark.parametrize("lengths", [None, [4, 1, 2]])
def test_time_loop_hands_a_step_that_masks_itself_each_steps_mask(lengths):
    """`time_loop(..., masks_inside=True)` (the `compile` rung's path): the step gets mask t (none
    without lengths) and masks itself; the result equals the loop that masks after the step."""
    from rnnbench.torch.cells import mask_step, time_loop, valid_steps

    torch.manual_seed(3)
    x, h0 = torch.randn(4, 3, 2, dtype=torch.float64), torch.randn(3, 2, dtype=torch.float64)
    lengths = None if lengths is None else torch.tensor(lengths)
    masks = []

    def plain(x_t, state, q):
        return (torch.tanh(state[0] * q["w"] + x_t),)

    def masking(x_t, state, q, *m):
        masks.append(m)
        new = plain(x_t, state, q)
        return mask_step(m[0], new, state) if m else (new, new[0])

    want_out, want_state = time_loop(plain, x, (h0,), {"w": 0.5}, lengths)
    out, state = time_loop(masking, x, (h0,), {"w": 0.5}, lengths, masks_inside=True)
    torch.testing.assert_close(out, want_out, rtol=0, atol=0)
    torch.testing.assert_close(state, want_state, rtol=0, atol=0)
    expected = [(m,) for m in valid_steps(lengths, 4)] if lengths is not None else [()] * 4
    assert len(masks) == 4 and all(len(a) == len(b) and all(torch.equal(u, v) for u, v in zip(a, b))
                                   for a, b in zip(masks, expected))
    if lengths is not None:  # past its length a sequence outputs zero and keeps its state
        assert (out[1:, 1] == 0).all() and (out[2:, 2] == 0).all() and out[0].abs().min() > 0


@pytest.mark.parametrize("lengths", [None, [4, 1, 2]], ids=["full", "lengths"])
def test_the_whole_loop_operator_equals_the_python_loop_run_eagerly(lengths):
    """`scan_loop` (the `scan` rung's loop, torch's scan operator) run eagerly, outside
    torch.compile, on a two-tensor state: outputs, final states and the gradients of x and of
    both initial states equal `time_loop`'s (past its length a sequence keeps its state and
    outputs zeros). The rung's own tests compile it; this one reaches the loop's code directly."""
    from rnnbench.torch.cells import lstm_step, scan_loop, time_loop

    torch.manual_seed(5)
    T, B, H = 4, 3, 5
    q = {"w_hh_t": torch.randn(H, 4 * H, dtype=torch.float64), "w_hr_t": None}
    x = torch.randn(T, B, 4 * H, dtype=torch.float64)
    state = (torch.randn(B, H, dtype=torch.float64), torch.randn(B, H, dtype=torch.float64))
    lengths = None if lengths is None else torch.tensor(lengths)
    cot = torch.randn(T, B, H, dtype=torch.float64), torch.randn(B, H, dtype=torch.float64)
    results = []
    for loop in (time_loop, scan_loop):
        args = [t.clone().requires_grad_() for t in (x, *state)]
        out, final = loop(lstm_step, args[0], (args[1], args[2]), q, lengths)
        assert len(final) == 2
        grads = torch.autograd.grad([out, final[0], final[1]], args, [cot[0], cot[1], cot[1]])
        results.append([out, *final, *grads])
    for name, got, want in zip(["out", "h_n", "c_n", "dx", "dh0", "dc0"], results[1], results[0], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, msg=name)


@pytest.mark.parametrize("cell", ["peephole_lstm", "ln_lstm"])
@pytest.mark.parametrize("lengths", [None, [4, 2]], ids=["full", "lengths"])
def test_bptt_double_backward_of_the_catalogue_cells(cell, lengths):
    """Under create_graph the bptt kernels of the catalogue cells hand over to the layers autograd
    records (`_peephole_recorded`, `_ln_lstm_recorded`): second derivatives of outputs and final
    states pass gradgradcheck, with biases, an initial state and, once, per-sequence lengths."""
    torch.manual_seed(3)
    module = MODULES[cell](2, 3, backend="bptt", dtype=torch.float64)
    with torch.no_grad():  # the extra parameters away from their init (gains 1, biases 0)
        for p in module.parameters():
            p.add_(0.3 * torch.randn_like(p))
    names = [n for n, _ in module.named_parameters()]
    x = torch.randn(4, 2, 2, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(1, 2, 3, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(1, 2, 3, dtype=torch.float64, requires_grad=True)
    lengths = None if lengths is None else torch.tensor(lengths)

    def fn(x, h0, c0, *weights):
        out, (h_n, c_n) = torch.func.functional_call(module, dict(zip(names, weights)), (x, (h0, c0)),
                                                     {"lengths": lengths})
        return out, h_n, c_n

    params = tuple(p.detach().clone().requires_grad_() for p in module.parameters())
    args = (x, h0, c0, *params)
    # the recorded layers' first derivatives are the kernel's (gradgradcheck alone would pass a
    # recorded recurrence that is wrong but differentiated consistently)
    outs = fn(*args)
    cot = [torch.randn_like(o) for o in outs]
    kernel = torch.autograd.grad(outs, args, cot)
    recorded = torch.autograd.grad(fn(*args), args, cot, create_graph=True)
    for name, k, r in zip(["x", "h0", "c0", *names], kernel, recorded):
        torch.testing.assert_close(r, k, rtol=0, atol=1e-12, msg=name)
    assert torch.autograd.gradgradcheck(fn, args, eps=1e-6, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("cell", ["peephole_lstm", "ln_lstm"])
@pytest.mark.parametrize("T,lengths", [(1, None), (2, None), (2, [2, 1, 2]), (5, [5, 2, 1])],
                         ids=["T1", "T2", "T2-lengths", "T5-lengths"])
def test_bptt_kernels_equal_eager_on_padded_input_at_edge_sizes(cell, T, lengths):
    """The kernels on the padded path (`module(x, lengths=...)`, which the shared-vector tests do
    not take: they pack, and packing drops the padded steps): outputs, final states and every
    gradient equal the eager rung's under cotangents on all of out, h_n and c_n, with T=1 and T=2
    (the backward's T > 1 branches), padded steps past a length, and H=5 (a 4H-wide gate split
    that no other chunking reproduces), with warnings as errors."""
    torch.manual_seed(11)
    kernel = MODULES[cell](3, 5, backend="bptt", dtype=torch.float64)
    with torch.no_grad():
        for p in kernel.parameters():
            p.add_(0.3 * torch.randn_like(p))
    eager = MODULES[cell](3, 5, backend="eager", dtype=torch.float64)
    eager.load_state_dict(kernel.state_dict())
    x = torch.randn(T, 3, 3, dtype=torch.float64)
    h0, c0 = torch.randn(2, 1, 3, 5, dtype=torch.float64)
    lengths = None if lengths is None else torch.tensor(lengths)
    cot = [torch.randn(T, 3, 5, dtype=torch.float64), torch.randn(1, 3, 5, dtype=torch.float64),
           torch.randn(1, 3, 5, dtype=torch.float64)]
    results = []
    for module in (kernel, eager):
        inputs = [t.clone().requires_grad_() for t in (x, h0, c0)]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # e.g. a scratch `out=` of the wrong shape, resized with a warning
            out, (h_n, c_n) = module(inputs[0], (inputs[1], inputs[2]), lengths=lengths)
            wrt = [*inputs, *module.parameters()]
            results.append([out, h_n, c_n, *torch.autograd.grad([out, h_n, c_n], wrt, cot)])
    names = ["out", "h_n", "c_n", "x", "h0", "c0", *(n for n, _ in kernel.named_parameters())]
    for name, got, want in zip(names, *results, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12, msg=name)
    if lengths is not None:
        past = torch.arange(T)[:, None] >= lengths[None, :]
        assert bool((results[0][0][past] == 0).all())  # nothing leaks past a length


def test_bptt_kernels_name_their_missing_extras():
    from rnnbench.core.params import LayerParams
    from rnnbench.torch.backends.bptt import steps as kernels

    x, state = torch.randn(2, 1, 3), (torch.zeros(1, 4), torch.zeros(1, 4))
    w_ih, w_hh = torch.randn(16, 3), torch.randn(16, 4)
    with pytest.raises(ValueError, match=r"^peephole_lstm needs its 'peephole' parameter \(3H,\) in extras$"):
        kernels.peephole_lstm(x, state, LayerParams(w_ih, w_hh, None, None, None, None), None)
    partial = {"layernorm_ih_weight": torch.ones(16), "layernorm_hh_weight": torch.ones(16),
               "layernorm_c_weight": torch.ones(4), "layernorm_c_bias": torch.zeros(4)}
    with pytest.raises(ValueError, match=r"^ln_lstm needs its parameters layernorm_ih_bias, layernorm_hh_bias "
                                         r"in extras$"):
        kernels.ln_lstm(x, state, LayerParams(w_ih, w_hh, None, None, None, partial), None)

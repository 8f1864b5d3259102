"""PyTorch's own ModuleInfo tests of nn.LSTM / nn.GRU, run on every rnnbench.torch backend.

Upstream: pytorch/pytorch `test/test_modules.py`, classes `TestModule` and
`TestModuleCPUOnly`, read at pytorch/pytorch@33263640046f558d38b8e4bc306b1ca6abbf0b1f and,
for the tests that (older) version does not have yet (`test_save_load`, `test_to`,
`test_to_empty`, `TestModuleCPUOnly.test_device_ctx_init`), at
cyyever/pytorch@3708c33c7424656640eac0ed4383b47d2e605214, a fork tracking upstream main
(the installed torch 2.13.0 is built from pytorch/pytorch@cf30153c, whose test file was not
available to read).  The sample inputs, the error inputs and their
expected exception types and regexes are not copied: they come at run time from the
INSTALLED torch's `torch.testing._internal.common_modules.module_db` (the ModuleInfo
entries of torch.nn.LSTM and torch.nn.GRU: `module_inputs_func`,
`module_error_inputs_func`, `dtypes`, `train_and_eval_differ`, `gradcheck_fast_mode`), so
they are exactly torch 2.13's.  Comparisons use upstream's own `TestCase.assertEqual`
(with `TestModule`'s `precision = rel_tol = 1e-5`), `freeze_rng_state`, and the
`gradcheck` / `gradgradcheck` wrappers of `common_utils` (check_batched_grad=True,
fast_mode=True, as upstream).  The test logic is re-implemented here in plain pytest.

The module class is substituted by `functools.partial(rnnbench.torch.LSTM, backend=b)` (GRU
alike) for every b in `rnnbench.torch.BACKENDS`, plus the control `b = "nn"` (plain
torch.nn.LSTM / torch.nn.GRU), which must pass 100%.  Parametrised as upstream's
`@modules` decorator does: every dtype of the ModuleInfo (float32, float64; float64 only
for test_grad / test_gradgrad; float32 only for test_to / test_to_empty) and both train and
eval modes (train only for test_if_train_and_eval_modes_differ).  A failing sample does not
stop the others: each test runs all its samples and fails listing every failing one.

The only relaxation: backends outside `rnnbench.torch.PROJ_BACKENDS` (naive, cell_loop) do
not support proj_size; for each proj_size>0 sample the test EXPECTS construction to raise
`ProjectionNotSupportedError` (a ValueError naming the backend) instead of running it.  Such
a sample counts as refused, not as run: a test whose every sample was refused (or that had
none) fails with "ran no check" (`Samples.check`), so no test passes having checked nothing.

Adapted (TestModule unless noted):
  test_forward, test_factory_kwargs, test_repr, test_save_load (its older name is
  test_pickle; test_save_load is test_pickle plus the state_dict save/load with
  weights_only=True), test_non_contiguous_tensors, test_grad, test_gradgrad,
  test_memory_format, test_if_train_and_eval_modes_differ, test_errors, test_to,
  test_to_empty, TestModuleCPUOnly.test_device_ctx_init.
Not adapted:
  test_multiple_device_transfer, test_cpu_gpu_parity (accelerator-only: @onlyAccelerator /
  @onlyCUDA); test_check_inplace (only modules with an `inplace` argument: not LSTM/GRU).

Runtime (2 cores; upstream's full lists take well over 10 minutes here): which samples a test
runs (see `select`):
  * forward / construction tests (test_forward, test_factory_kwargs, test_repr,
    test_save_load, test_if_train_and_eval_modes_differ, test_errors, test_to,
    test_to_empty, test_device_ctx_init): the full sample list (on naive and cell_loop the
    proj_size samples check the refusal);
  * tests that run backward passes (test_non_contiguous_tensors, test_memory_format,
    test_grad: up to 21 gradchecks per sample, the total derivative and one partial per
    parameter): a pairwise-covering subset of the samples the backend runs, i.e. every pair
    of values of any two of bias, batch_first, bidirectional, proj_size>0 (where the backend
    has it), hx-given and train/eval mode appears in some sample, the train and the eval test
    of a module sharing one cover (7 of the 2x32 LSTM rows, 7 of the 2x16 GRU rows); a
    refused sample is never selected there, so it never takes the place of one that runs;
  * test_gradgrad (gradgradcheck, same partials, ~5x dearer): a strength-1 cover (every
    value of every factor appears) in which, in addition, bias and no bias each appear in
    both train and eval mode (two samples per mode);
  * the torch.compile backends (`compile`, `scan`: each new configuration costs a compile;
    the first one in a process ~20 s; `scan`, whose compile is the longest, in float64 only)
    run, in every test, the one sample with the most
    features on (LSTM: bias, batch_first, bidirectional, proj_size=2, hx given; GRU: the same
    without proj_size), and in test_gradgrad also the richest one without biases, so that
    their few configurations compile once and are reused.
The nn control runs what the backends with proj_size run.  Set RNNBENCH_PEER_FULL=1 to run
the full sample lists everywhere (upstream's coverage).

Run: .venv/bin/python -m pytest tests/peer/test_pytorch_modules.py -q
"""

from __future__ import annotations

import contextlib
import tempfile
from copy import deepcopy
from inspect import isgenerator
from itertools import chain, combinations, product
from operator import methodcaller
from unittest.mock import patch

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_leaves, tree_unflatten

import rnnbench.torch
from rnnbench.torch.backends import ProjectionNotSupportedError

from pytorch_testing import FULL, COMPILED, asserts, backend_params, common_modules, common_utils  # noqa: E402
from pytorch_testing import module_class as module_cls, upstream_seed  # noqa: E402,F401
from torch._subclasses.meta_utils import assert_metadata_eq  # noqa: E402

ModuleErrorEnum = common_modules.ModuleErrorEnum
freeze_rng_state = common_utils.freeze_rng_state
gradcheck = common_utils.gradcheck
gradgradcheck = common_utils.gradgradcheck
mock_wrapper = common_utils.mock_wrapper
get_tensors_from = common_utils.get_tensors_from

MODULE_INFOS = {info.module_cls.__name__: info for info in common_modules.module_db
                if info.module_cls in (torch.nn.LSTM, torch.nn.GRU)}
assert sorted(MODULE_INFOS) == ["GRU", "LSTM"], MODULE_INFOS


# upstream TestModule's assertEqual: default dtype tolerances, at least 1e-5 atol and rtol
_asserts = asserts(precision=1e-5, rel_tol=1e-5)
assertEqual = _asserts.assertEqual

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(autouse=True)
def _scan_in_float64_only(request):
    """`scan` compiles a forward and a backward loop per configuration (seconds each): it runs the
    float64 instances here (float32 on it is the parity matrix's), all of them under RNNBENCH_PEER_FULL=1."""
    params = getattr(request.node, "callspec", None)
    params = params.params if params else {}
    if params.get("backend") == "scan" and params.get("dtype") == torch.float32 and not FULL:
        pytest.skip("scan runs the float64 instances of this suite (RNNBENCH_PEER_FULL=1: float32 too)")


# ---- parametrisation --------------------------------------------------------------------

BACKEND = pytest.mark.parametrize("backend", list(backend_params()))
MODULE = pytest.mark.parametrize("name", sorted(MODULE_INFOS))


def _modules(allowed_dtypes=None, train_only=False):
    """upstream's @modules(module_db, allowed_dtypes=..., train_eval_mode=...) for LSTM/GRU."""
    params = []
    for name in sorted(MODULE_INFOS):
        info = MODULE_INFOS[name]
        dtypes = [d for d in info.supported_dtypes("cpu") if allowed_dtypes is None or d in allowed_dtypes]
        trainings = [True] if train_only or not info.train_and_eval_differ else [True, False]
        for training, dtype in product(trainings, dtypes):
            params.append(pytest.param(name, dtype, training,
                                       id=f"{name}-{str(dtype).replace('torch.', '')}-"
                                          f"{'train' if training else 'eval'}"))
    return pytest.mark.parametrize("name,dtype,training", params)


# ---- samples ----------------------------------------------------------------------------

def _factors(module_input):
    """The binary factors a sample varies: bias, batch_first, bidirectional, proj_size, hx."""
    kw = module_input.constructor_input.kwargs
    fwd = module_input.forward_input.args if module_input.forward_input is not None else ()
    return (kw.get("bias", True), kw.get("batch_first", False), kw.get("bidirectional", False),
            kw.get("proj_size", 0) > 0, len(fwd) > 1)


def covering_subset(samples, strength, this=(), others=((),), pairs=()):
    """A deterministic subset covering every `strength`-tuple of factor values the full list covers.

    strength=2: every pair of values of any two factors (pairwise); strength=1: every value of
    every factor.  `others` lists the parametrisations that share one cover (tuples of extra
    factors, e.g. (training, dtype) for each train/eval mode and dtype a test is instantiated
    for); the cover is computed over every (sample, extra) row and the rows of `this` one
    returned.  `pairs`: (i, j) index pairs of factors (the extra ones come after the five of
    `_factors`) whose every pair of values must be covered as well, whatever `strength` is.
    Greedy: repeatedly take the first row covering the most tuples not yet covered.
    """
    rows = [((i, extra), _factors(s) + tuple(extra)) for extra in others for i, s in enumerate(samples)]

    def tuples(f):
        return ({tuple((a, f[a]) for a in idx) for idx in combinations(range(len(f)), strength)}
                | {((a, f[a]), (b, f[b])) for a, b in pairs})

    todo = set().union(*(tuples(f) for _, f in rows)) if rows else set()
    order = {key: n for n, (key, _) in enumerate(rows)}
    chosen = []
    while todo:
        key, f = max(rows, key=lambda kf: (len(tuples(kf[1]) & todo), -order[kf[0]]))
        chosen.append(key)
        todo -= tuples(f)
    return [samples[i] for i, extra in sorted(chosen, key=lambda k: order[k]) if tuple(extra) == tuple(this)]


# Which samples each kind of test runs (see the module docstring); None = all of them.
TIERS = {
    "forward": None,   # forward / construction only: cheap
    "backward": 2,     # runs backward passes (non-contiguous, memory format, gradcheck): pairwise
    "gradgrad": 1,     # gradgradcheck, one partial per parameter: each factor value once ...
}
BIAS, MODE = 0, 5  # indexes of bias in `_factors` and of the train/eval mode after them
PAIRS = {"gradgrad": ((BIAS, MODE),)}  # ... and gradgrad with and without biases in either mode


def refused(backend, module_input) -> bool:
    """Whether `backend` declares the sample's configuration unsupported (proj_size on naive/cell_loop)."""
    return unsupported_projection(backend, module_input.constructor_input.kwargs)


def richest_sample(samples):
    """The sample with the most features on (bias, batch_first, bidirectional, proj_size, hx)."""
    return max(enumerate(samples), key=lambda i_s: (sum(_factors(i_s[1])), -i_s[0]))[1]


def select(samples, backend, training, dtype, kind="forward", modes=(True, False)):
    """The samples a test of this kind runs on this backend, for this train/eval mode.

    `modes`: the train/eval modes the test is parametrised over (upstream's train_eval_mode);
    the train and the eval test of a module share one cover between them.  Forward and
    construction tests run every sample (on a backend that refuses proj_size they check the
    refusal); the tests that run backward passes cover the samples the backend runs, so that
    a refused sample never takes the place of one that runs.  The torch.compile backends (each
    new configuration costs a compile) run the richest runnable sample, and for gradgrad also
    the richest one without biases, so that their few configurations are compiled once and
    reused by every test.
    """
    if FULL:
        return list(samples)
    strength = TIERS[kind]
    if strength is None:
        return [richest_sample(samples)] if backend in COMPILED else list(samples)
    runnable = [s for s in samples if not refused(backend, s)]
    if backend in COMPILED:
        chosen = [richest_sample(runnable)]
        if kind == "gradgrad":
            chosen += [richest_sample([s for s in runnable if _factors(s)[BIAS] != _factors(chosen[0])[BIAS]])]
        return chosen
    return covering_subset(runnable, strength, this=(training,), others=[(m,) for m in modes],
                           pairs=PAIRS.get(kind, ()))


def describe(module_input) -> str:
    c = module_input.constructor_input
    args = ", ".join([repr(a) for a in c.args] + [f"{k}={v!r}" for k, v in c.kwargs.items()])

    def shape(o):
        if isinstance(o, torch.Tensor):
            return str(tuple(o.shape))
        if isinstance(o, (tuple, list)):
            return "(" + ", ".join(shape(x) for x in o) + ")"
        return type(o).__name__
    fwd = "" if module_input.forward_input is None else " forward" + shape(module_input.forward_input.args)
    return f"({args}){fwd}"


def unsupported_projection(backend: str, kwargs) -> bool:
    return backend != "nn" and kwargs.get("proj_size", 0) > 0 and backend not in rnnbench.torch.PROJ_BACKENDS


def expect_projection_error(cls, backend, args, kwargs, run=None):
    """The declared capability limit: construction raises ProjectionNotSupportedError naming the backend.

    `run` (the test's `Samples`) counts the sample as refused: it ran no check of the test's own.
    """
    if run is not None:
        run.refused += 1
    with pytest.raises(ProjectionNotSupportedError) as info:
        cls(*args, **kwargs)
    assert isinstance(info.value, ValueError)
    assert backend in str(info.value), f"the error does not name backend {backend!r}: {info.value}"


class Samples:
    """Run every sample; fail at the end listing each failing one (upstream stops at the first).

    A test whose every sample was refused by the backend (or that had none) ran none of its
    checks: that fails too, rather than passing on nothing.
    """

    def __init__(self):
        self.failures = []
        self.ran = 0
        self.refused = 0  # samples the backend declared unsupported (the refusal was checked, nothing else)

    @contextlib.contextmanager
    def sample(self, label):
        self.ran += 1
        try:
            yield
        except (Exception, pytest.fail.Exception) as e:  # pytest.raises' failure is not an Exception
            lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()] or [""]
            msg = lines[0][:300] + (f" [...] {lines[-1][:300]}" if len(lines) > 1 else "")
            self.failures.append(f"{label}: {type(e).__name__}: {msg}")

    def check(self):
        if self.failures:
            pytest.fail(f"{len(self.failures)} of {self.ran} samples failed:\n  " + "\n  ".join(self.failures),
                        pytrace=False)
        if self.ran - self.refused <= 0:
            pytest.fail(f"ran no check: {self.ran} samples selected, {self.refused} of them refused by the backend",
                        pytrace=False)


def build(cls, backend, module_input, device, dtype, training, run=None):
    """Construct, move to device/dtype and set the mode; None when proj_size is declared unsupported
    (the refusal checked and counted in `run`)."""
    args, kwargs = module_input.constructor_input.args, module_input.constructor_input.kwargs
    if unsupported_projection(backend, kwargs):
        expect_projection_error(cls, backend, args, kwargs, run)
        return None
    m = cls(*args, **kwargs)
    m.to(device).to(dtype)
    m.train(training)
    return m


def _assert_module_parameters_and_buffer_are(module, device, dtype):
    device = torch.device(device)
    for kind, items in (("Parameter", module.named_parameters()), ("Buffer", module.named_buffers())):
        for item_name, item in items:
            assert item.device == device, f"{kind} {item_name} is on device {item.device} instead of {device}"
            if item.dtype.is_floating_point:
                assert item.dtype == dtype, f"{kind} {item_name} is of dtype {item.dtype} instead of {dtype}"


def _traverse_obj(obj, func):
    if isinstance(obj, (tuple, list)):
        return type(obj)(_traverse_obj(o, func) for o in obj)
    elif isgenerator(obj):
        return tuple(_traverse_obj(o, func) for o in obj)
    elif isinstance(obj, dict):
        return {name: _traverse_obj(o, func) for name, o in obj.items()}
    elif isinstance(obj, (torch.Tensor, torch.nn.Parameter)):
        return func(obj)
    else:
        return obj


def _retain_grad(obj):
    def inner(o):
        if o.requires_grad:
            o.retain_grad()
    _traverse_obj(obj, inner)


def _get_grads(obj):
    return _traverse_obj(obj, lambda o: o.grad if o.requires_grad else None)


def _zero_grad(obj):
    def inner(o):
        if o.grad is not None:
            o.grad = None
    _traverse_obj(obj, inner)


DEVICE = "cpu"


# ---- TestModule ---------------------------------------------------------------------------

@BACKEND
@_modules()
def test_forward(name, dtype, training, backend):
    info, cls = MODULE_INFOS[name], module_cls(name, backend)
    samples = info.module_inputs_func(info, device=DEVICE, dtype=dtype, requires_grad=False, training=training)
    dtype_to_method_caller = {torch.float32: methodcaller("float"), torch.float64: methodcaller("double")}
    run = Samples()
    for module_input in select(samples, backend, training, dtype):
        if module_input.forward_input is None:
            continue
        with run.sample(describe(module_input)), freeze_rng_state():
            m = build(cls, backend, module_input, DEVICE, dtype, training, run)
            if m is None:
                continue
            args, kwargs = module_input.forward_input.args, module_input.forward_input.kwargs
            outputs = m(*args, **kwargs)
            if module_input.reference_fn is not None:
                ref_outputs = module_input.reference_fn(m, *args, **kwargs)
                assertEqual(outputs, ref_outputs)
            if dtype in dtype_to_method_caller:
                dtype_to_method_caller[dtype](m)
                m(*args, **kwargs)
                _assert_module_parameters_and_buffer_are(m, DEVICE, dtype)
    run.check()


@BACKEND
@_modules()
def test_factory_kwargs(name, dtype, training, backend):
    info, cls = MODULE_INFOS[name], module_cls(name, backend)
    samples = info.module_inputs_func(info, device=DEVICE, dtype=dtype, requires_grad=False, training=training)
    run = Samples()
    for module_input in select(samples, backend, training, dtype):
        with run.sample(describe(module_input)):
            args, kwargs = module_input.constructor_input.args, dict(module_input.constructor_input.kwargs)
            if unsupported_projection(backend, kwargs):
                expect_projection_error(cls, backend, args, kwargs, run)
                continue
            # Does the module create a parameter or buffer from a tensor it was not given?
            creates = False
            parameter_new = mock_wrapper(torch.nn.Parameter.__new__)
            with patch.object(torch.nn.Parameter, "__new__", parameter_new):
                register_buffer = mock_wrapper(torch.nn.Module.register_buffer)
                with patch.object(torch.nn.Module, "register_buffer", register_buffer):
                    m = cls(*args, **kwargs)
                    m.train(training)
                    constructor_tensors = get_tensors_from(args, kwargs)
                    for mock in (parameter_new.mock, register_buffer.mock):
                        for call_args, call_kwargs in mock.call_args_list:
                            call_tensors = get_tensors_from(call_args, call_kwargs)
                            if len(call_tensors) > 0 and not constructor_tensors.intersection(call_tensors):
                                creates = True
                                break
            if not creates:
                continue
            kwargs.update({"device": DEVICE, "dtype": dtype})
            # (LSTM/GRU are not lazy modules: upstream's UninitializedParameter branch does not apply.)
            m = cls(*args, **kwargs)
            m.train(training)
            _assert_module_parameters_and_buffer_are(m, DEVICE, dtype)
    run.check()


@BACKEND
@_modules()
def test_repr(name, dtype, training, backend):
    info, cls = MODULE_INFOS[name], module_cls(name, backend)
    samples = info.module_inputs_func(info, device=DEVICE, dtype=dtype, requires_grad=False, training=training)
    run = Samples()
    for module_input in select(samples, backend, training, dtype):
        with run.sample(describe(module_input)):
            m = build(cls, backend, module_input, DEVICE, dtype, training, run)
            if m is None:
                continue
            m.__repr__()
            str(m)
    run.check()


@BACKEND
@_modules()
def test_save_load(name, dtype, training, backend):
    info, cls = MODULE_INFOS[name], module_cls(name, backend)
    samples = info.module_inputs_func(info, device=DEVICE, dtype=dtype, requires_grad=False, training=training)
    run = Samples()
    for module_input in select(samples, backend, training, dtype):
        if module_input.forward_input is None:
            continue
        with run.sample(describe(module_input)), freeze_rng_state():
            m = build(cls, backend, module_input, DEVICE, dtype, training, run)
            if m is None:
                continue
            sd = m.state_dict()
            args, kwargs = module_input.forward_input.args, module_input.forward_input.kwargs
            output = m(*args, **kwargs)
            # saved/loaded module gives the same output
            with tempfile.TemporaryFile() as f:
                torch.save(m, f)
                f.seek(0)
                m_copy = torch.load(f, weights_only=False)
                output_from_copy = m_copy(*args, **kwargs)
                assertEqual(output, output_from_copy)
            # saved/loaded state_dict is the same, weights_only load included
            with tempfile.TemporaryFile() as f:
                torch.save(sd, f)
                f.seek(0)
                sd_copy = torch.load(f)
                assertEqual(sd_copy, sd)
                del sd_copy
                f.seek(0)
                sd_copy_wo = torch.load(f, weights_only=True)
                assertEqual(sd_copy_wo, sd)
    run.check()


@BACKEND
@_modules()
def test_non_contiguous_tensors(name, dtype, training, backend):
    info, cls = MODULE_INFOS[name], module_cls(name, backend)
    samples = info.module_inputs_func(info, device=DEVICE, dtype=dtype, requires_grad=True, training=training)

    def _make_non_contiguous(obj):
        def inner(o):
            if not isinstance(o, torch.Tensor) or o.dim() == 0:  # scalars cannot be non-contiguous
                return o
            out = torch.repeat_interleave(o, 2, dim=-1)
            out = out[..., ::2].detach()
            out.requires_grad = o.requires_grad
            return out
        return _traverse_obj(obj, inner)

    def _can_be_noncontiguous(obj):
        if isinstance(obj, (tuple, list)):
            return any(_can_be_noncontiguous(o) for o in obj)
        elif isinstance(obj, dict):
            return any(_can_be_noncontiguous(o) for o in obj.values())
        return isinstance(obj, torch.Tensor) and obj.dim() != 0

    run = Samples()
    for module_input in select(samples, backend, training, dtype, "backward"):
        if module_input.forward_input is None:
            continue
        input_args, input_kwargs = module_input.forward_input.args, module_input.forward_input.kwargs
        if not (_can_be_noncontiguous(input_args) or _can_be_noncontiguous(input_kwargs)):
            continue
        with run.sample(describe(module_input)):
            m = build(cls, backend, module_input, DEVICE, dtype, training, run)
            if m is None:
                continue
            _retain_grad((input_args, input_kwargs))

            # forward + backward with the default (contiguous) input
            with freeze_rng_state():
                default_output = m(*input_args, **input_kwargs)
                if isinstance(default_output, torch.Tensor):
                    grad_output = default_output.clone().detach_().normal_()
                    default_output.backward(grad_output, retain_graph=True)
                else:
                    grad_output = tuple(_traverse_obj(o, lambda o: o.clone().detach_().normal_()
                                                      if o.requires_grad else None)
                                        for o in default_output)
                    for o, g_o in zip(tree_leaves(default_output), tree_leaves(grad_output)):
                        if o.requires_grad:
                            o.backward(g_o, retain_graph=True)

            default_input_args_grad, default_input_kwargs_grad = deepcopy(_get_grads((input_args, input_kwargs)))
            default_param_grad = deepcopy([p.grad for p in m.parameters()])

            nc_input_args, nc_input_kwargs = _make_non_contiguous((input_args, input_kwargs))
            nc_grad_output = _make_non_contiguous(grad_output)

            inputs = [(input_args, input_kwargs), (nc_input_args, nc_input_kwargs)]
            grads = [grad_output, nc_grad_output]
            for (in_args, in_kwargs), g_out in product(inputs, grads):
                g_out_copy = deepcopy(g_out)
                _zero_grad((in_args, in_kwargs))
                _zero_grad(m.parameters())
                with freeze_rng_state():
                    out = m(*in_args, **in_kwargs)
                    if isinstance(out, torch.Tensor):
                        out.backward(g_out_copy, retain_graph=True)
                    else:
                        for o, g_o in zip(tree_leaves(out), tree_leaves(g_out_copy)):
                            if o.requires_grad:
                                o.backward(g_o, retain_graph=True)
                input_args_grad, input_kwargs_grad = _get_grads((in_args, in_kwargs))
                assertEqual(out, default_output)
                assertEqual(input_args_grad, default_input_args_grad, atol=1e-4, rtol=0)
                assertEqual(input_kwargs_grad, default_input_kwargs_grad, atol=1e-4, rtol=0)
                param_grad = [p.grad for p in m.parameters()]
                assertEqual(param_grad, default_param_grad)
    run.check()


def _test_gradients(name, dtype, training, backend, check, kind):
    """upstream's _test_gradients_helper: the total derivative, then one partial per parameter."""
    info, cls = MODULE_INFOS[name], module_cls(name, backend)
    samples = info.module_inputs_func(info, device=DEVICE, dtype=dtype, requires_grad=True, training=training)
    gradcheck_nondet_tol = 0.0  # upstream uses module_info.gradcheck_nondet_tol only on CUDA with cuDNN / XPU
    run = Samples()
    for module_input in select(samples, backend, training, dtype, kind):
        if module_input.forward_input is None:
            continue
        with run.sample(describe(module_input)):
            m = build(cls, backend, module_input, DEVICE, dtype, training, run)
            if m is None:
                continue
            params = tuple(m.parameters())
            input_args, input_kwargs = module_input.forward_input.args, module_input.forward_input.kwargs
            other_kwargs = {}
            kwarg_tensors = []
            for kw_name, obj in input_kwargs.items():
                if isinstance(obj, torch.Tensor):
                    kwarg_tensors.append((kw_name, obj))
                else:
                    other_kwargs[kw_name] = obj
            flat_spec = None

            def fn_to_gradcheck(*flat_input_and_params):
                input_and_params = tree_unflatten(flat_input_and_params, flat_spec)
                new_input_args = input_and_params[:len(input_args)]
                kwarg_args = input_and_params[-len(kwarg_tensors):]
                new_kwargs = {n: obj for (n, _), obj in zip(kwarg_tensors, kwarg_args)}
                with freeze_rng_state():
                    output = m(*new_input_args, **new_kwargs, **other_kwargs)
                    return tree_leaves(output)

            def do_check(flat_input):
                assert check(fn_to_gradcheck, flat_input, nondet_tol=gradcheck_nondet_tol,
                             fast_mode=info.gradcheck_fast_mode)

            # total derivative
            grad_input = input_args + params + tuple(obj for (_, obj) in kwarg_tensors)
            flat_input, flat_spec = tree_flatten(grad_input)
            do_check(flat_input)

            # partial derivatives: the input with each parameter alone, then each kwarg tensor alone
            old_params_requires_grad = [p.requires_grad for p in params]
            for p in params:
                p.requires_grad = False
            old_kwargs_requires_grad = [obj.requires_grad for (_, obj) in kwarg_tensors]
            for (_, obj) in kwarg_tensors:
                obj.requires_grad = False
            for p, old in zip(params, old_params_requires_grad):
                p.requires_grad = old
                grad_input = input_args + params + tuple(obj for (_, obj) in kwarg_tensors)
                flat_input, flat_spec = tree_flatten(grad_input)
                do_check(flat_input)
                p.requires_grad = False
            for (_, obj), old in zip(kwarg_tensors, old_kwargs_requires_grad):
                obj.requires_grad = old
                grad_input = input_args + params + tuple(obj for (_, obj) in kwarg_tensors)
                flat_input, flat_spec = tree_flatten(grad_input)
                do_check(flat_input)
                obj.requires_grad = False
    run.check()


@BACKEND
@_modules(allowed_dtypes=[torch.double])
def test_grad(name, dtype, training, backend):
    _test_gradients(name, dtype, training, backend, gradcheck, "backward")


@BACKEND
@_modules(allowed_dtypes=[torch.double])
def test_gradgrad(name, dtype, training, backend):
    assert MODULE_INFOS[name].supports_gradgrad  # upstream runs test_gradgrad only for these
    _test_gradients(name, dtype, training, backend, gradgradcheck, "gradgrad")


@BACKEND
@_modules()
def test_memory_format(name, dtype, training, backend):
    info, cls = MODULE_INFOS[name], module_cls(name, backend)
    atol, rtol = None, None  # upstream loosens them only on CUDA sm80/sm86
    samples = info.module_inputs_func(info, device=DEVICE, dtype=dtype, requires_grad=True, training=training)
    module_memformat_affects_out = info.module_memformat_affects_out

    def _get_mem_formats(channels_last=False, channels_last_3d=False):
        if channels_last:
            return ([torch.contiguous_format, torch.channels_last],
                    [torch.preserve_format, torch.contiguous_format, torch.channels_last])
        elif channels_last_3d:
            return ([torch.contiguous_format, torch.channels_last_3d],
                    [torch.preserve_format, torch.contiguous_format, torch.channels_last_3d])
        return [torch.contiguous_format], [torch.preserve_format, torch.contiguous_format]

    def _check_dims(obj, n):
        if isinstance(obj, torch.Tensor):
            return obj.dim() == n
        elif isinstance(obj, (tuple, list)):
            return any(_check_dims(o, n) for o in obj)
        return False

    def _to_mem_format(mem_format, obj):
        def inner(o):
            d = o.dim()
            if (mem_format == torch.channels_last and d != 4) or (mem_format == torch.channels_last_3d and d != 5):
                return o.detach().clone().requires_grad_(o.requires_grad)
            return o.clone().to(memory_format=mem_format).detach().requires_grad_(o.requires_grad)
        return _traverse_obj(obj, inner)

    def _check_out_mem_format(output, input_mem_format, module_mem_format, what):
        def inner(out):
            d = out.dim()
            if d == 4 and (input_mem_format == torch.channels_last
                           or (module_mem_format == torch.channels_last and module_memformat_affects_out)):
                assert out.numel() == 0 or out.is_contiguous(memory_format=torch.channels_last)
            elif d == 5 and (input_mem_format == torch.channels_last_3d
                             or (module_mem_format == torch.channels_last_3d and module_memformat_affects_out)):
                assert out.numel() == 0 or out.is_contiguous(memory_format=torch.channels_last_3d)
            else:
                assert out.is_contiguous(), (f"{what}: a {tuple(out.shape)} tensor with strides {out.stride()} "
                                             "is not contiguous")
        return _traverse_obj(output, inner)

    def _req_grad(t):
        return isinstance(t, torch.Tensor) and t.requires_grad

    run = Samples()
    for module_input in select(samples, backend, training, dtype, "backward"):
        if module_input.forward_input is None:
            continue
        supports_channels_last = _check_dims(module_input.forward_input.args, 4)
        supports_channels_last_3d = _check_dims(module_input.forward_input.args, 5)
        input_mem_formats, module_mem_formats = _get_mem_formats(supports_channels_last, supports_channels_last_3d)
        with run.sample(describe(module_input)), freeze_rng_state():
            m = build(cls, backend, module_input, DEVICE, dtype, training, run)
            if m is None:
                continue
            args, kwargs = module_input.forward_input.args, module_input.forward_input.kwargs
            desired_outputs = m(*args, **kwargs)
            ref_diff_outputs = tuple(t for t in tree_leaves(desired_outputs) if _req_grad(t))
            if training and len(ref_diff_outputs) > 0:
                params = tuple(p for p in m.parameters())
                ref_diff_inputs = tuple(t for t in tree_leaves((args, kwargs, params)) if _req_grad(t))
                ref_grad_outputs = tuple(torch.rand_like(t) for t in ref_diff_outputs)
                ref_grad_inputs = torch.autograd.grad(ref_diff_outputs, ref_diff_inputs,
                                                      grad_outputs=ref_grad_outputs)

            for input_mem_format in input_mem_formats:
                d_args = _to_mem_format(input_mem_format, module_input.forward_input.args)
                d_kwargs = _to_mem_format(input_mem_format, module_input.forward_input.kwargs)
                for t1, t2 in zip(tree_leaves(d_args), tree_leaves(module_input.forward_input.args)):
                    t1.requires_grad_(t2.requires_grad)
                for t1, t2 in zip(tree_leaves(d_kwargs), tree_leaves(module_input.forward_input.kwargs)):
                    t1.requires_grad_(t2.requires_grad)
                module_input.forward_input.args = d_args
                module_input.forward_input.kwargs = d_kwargs

                for module_mem_format in module_mem_formats:
                    m.to(memory_format=module_mem_format)
                    args, kwargs = module_input.forward_input.args, module_input.forward_input.kwargs
                    outputs = m(*args, **kwargs)
                    if input_mem_format != torch.contiguous_format or module_mem_format != torch.contiguous_format:
                        assertEqual(outputs, desired_outputs, rtol=rtol, atol=atol)
                    _check_out_mem_format(outputs, input_mem_format, module_mem_format, "output")

                    diff_outputs = tuple(t for t in tree_leaves(outputs) if _req_grad(t))
                    if training and len(diff_outputs) > 0:
                        params = tuple(p for p in m.parameters())
                        diff_inputs = tuple(t for t in tree_leaves((args, kwargs, params)) if _req_grad(t))
                        grad_outputs = tuple(torch.empty_like(t1).copy_(t2)
                                             for (t1, t2) in zip(diff_outputs, ref_grad_outputs))
                        grad_inputs = torch.autograd.grad(diff_outputs, diff_inputs, grad_outputs=grad_outputs)
                        if (input_mem_format != torch.contiguous_format
                                or module_mem_format != torch.contiguous_format):
                            assertEqual(grad_inputs, ref_grad_inputs, rtol=rtol, atol=atol)
                        _check_out_mem_format(grad_inputs, input_mem_format, module_mem_format,
                                              "gradient (of the inputs, then the parameters)")
    run.check()


@BACKEND
@_modules(train_only=True)
def test_if_train_and_eval_modes_differ(name, dtype, training, backend):
    info, cls = MODULE_INFOS[name], module_cls(name, backend)
    samples = info.module_inputs_func(info, device=DEVICE, dtype=dtype, requires_grad=False, training=training)
    run = Samples()
    for module_input in select(samples, backend, training, dtype, modes=(True,)):
        if module_input.forward_input is None:
            continue
        with run.sample(describe(module_input)):
            m = build(cls, backend, module_input, DEVICE, dtype, training, run)
            if m is None:
                continue
            delattr(m, "training")  # does forward read the training flag?
            try:
                args, kwargs = module_input.forward_input.args, module_input.forward_input.kwargs
                m(*args, **kwargs)
            except AttributeError as e:
                if "'training'" in str(e):
                    assert info.train_and_eval_differ, (
                        f"The ModuleInfo entry for {info.name} has train_and_eval_differ=False, but the "
                        "training mode was found to affect the forward pass.")
                else:
                    raise
    run.check()


@BACKEND
@_modules()
def test_errors(name, dtype, training, backend):
    info, cls = MODULE_INFOS[name], module_cls(name, backend)
    error_inputs = info.module_error_inputs_func(info, device=DEVICE, dtype=dtype, requires_grad=False,
                                                 training=training)
    run = Samples()
    for error_input in error_inputs:
        module_input = error_input.module_error_input
        label = (f"{describe(module_input)} expecting {error_input.error_type.__name__}"
                 f"({error_input.error_regex!r}) on {error_input.error_on.name}")
        with run.sample(label):
            c_args, c_kwargs = module_input.constructor_input.args, module_input.constructor_input.kwargs
            if error_input.error_on == ModuleErrorEnum.CONSTRUCTION_ERROR:
                with pytest.raises(error_input.error_type, match=error_input.error_regex):
                    cls(*c_args, **c_kwargs)
            elif error_input.error_on == ModuleErrorEnum.FORWARD_ERROR:
                m = cls(*c_args, **c_kwargs)
                fw_args, fw_kwargs = module_input.forward_input.args, module_input.forward_input.kwargs
                with pytest.raises(error_input.error_type, match=error_input.error_regex):
                    m(*fw_args, **fw_kwargs)
            else:
                raise NotImplementedError(f"Unknown error type {error_input.error_on}")
    run.check()


@contextlib.contextmanager
def _swap_module_params_on_conversion(swap: bool):
    """upstream's wrapSwapTensorsTest + torch.__future__.set_swap_module_params_on_conversion(swap)."""
    before = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(swap)
    try:
        yield
    finally:
        torch.__future__.set_swap_module_params_on_conversion(before)


@BACKEND
@pytest.mark.parametrize("set_grad", [True, False], ids=["set_grad", "no_grad"])
@pytest.mark.parametrize("swap", [True, False], ids=["swap", "no_swap"])
@_modules(allowed_dtypes=[torch.float32])
def test_to(name, dtype, training, swap, set_grad, backend):
    info, cls = MODULE_INFOS[name], module_cls(name, backend)
    devices = ["cpu"]
    if torch.accelerator.is_available():  # upstream appends the test's own device type: cpu here
        devices.append(torch.device(DEVICE).type)
    dtypes = info.dtypes
    samples = info.module_inputs_func(info, device=DEVICE, dtype=dtype, requires_grad=False, training=training)
    run = Samples()
    with _swap_module_params_on_conversion(swap):
        for module_input in select(samples, backend, training, dtype):
            with run.sample(describe(module_input)):
                c_args, c_kwargs = module_input.constructor_input.args, module_input.constructor_input.kwargs
                args, kwargs = module_input.forward_input.args, module_input.forward_input.kwargs
                if unsupported_projection(backend, c_kwargs):
                    expect_projection_error(cls, backend, c_args, c_kwargs, run)
                    continue
                m = cls(*c_args, **c_kwargs)

                # move without module.to(), the method under test
                def _to(mod, set_grad=False):
                    for c in mod.children():
                        _to(c, set_grad=set_grad)
                    for n, p in mod.named_parameters(recurse=False):
                        new_p = torch.nn.Parameter(p.detach().clone().to(DEVICE, dtype))
                        setattr(mod, n, new_p)
                        if set_grad:
                            new_p.grad = torch.randn_like(new_p)
                    for n, b in mod.named_buffers(recurse=False):
                        setattr(mod, n, b.detach().clone().to(DEVICE, dtype))
                _to(m, set_grad=set_grad)

                # .to() can run after forward and backward with swap
                has_params = len(list(m.parameters())) > 0
                if swap and not set_grad and has_params:
                    out = m(*args, **kwargs)
                    if isinstance(out, tuple):
                        out = out[0]
                    out.sum().backward()
                    m.to(dtype=torch.half)
                    m.to(dtype=torch.float32)  # reset

                prev_device, prev_dtype = DEVICE, dtype
                for device_, dtype_ in product(devices, dtypes):
                    # same device and dtype: grad.to() is a no-op, swapping does not change ._cdata
                    g_no_swap = device_ == prev_device and dtype_ == prev_dtype
                    prev_device, prev_dtype = device_, dtype_
                    p_ids_before = [id(p) for p in m.parameters()]
                    p_cdatas_before = [p._cdata for p in m.parameters()]
                    if set_grad:
                        g_ids_before = [id(p.grad) for p in m.parameters()]
                        g_cdatas_before = [p.grad._cdata for p in m.parameters()]

                    m.to(device=device_, dtype=dtype_)

                    assert all(isinstance(p, torch.nn.Parameter) for p in m.parameters())
                    assert all(p.device.type == device_ for p in m.parameters())
                    assert all(p.dtype == dtype_ for p in m.parameters())
                    p_ids_after = [id(p) for p in m.parameters()]
                    p_cdatas_after = [p._cdata for p in m.parameters()]
                    if set_grad:
                        assert all(p.grad.device.type == device_ for p in m.parameters())
                        assert all(p.grad.dtype == dtype_ for p in m.parameters())
                        g_ids_after = [id(p.grad) for p in m.parameters()]
                        g_cdatas_after = [p.grad._cdata for p in m.parameters()]
                    if swap:
                        # id same, ._cdata differs: the THPVariable's cdata was swapped
                        assert all(a == b for a, b in zip(p_ids_before, p_ids_after))
                        assert all(a != b for a, b in zip(p_cdatas_before, p_cdatas_after))
                        if set_grad:
                            assert all(a == b if g_no_swap else a != b
                                       for a, b in zip(g_cdatas_before, g_cdatas_after))
                    else:
                        # id and _cdata unchanged: .data was set
                        assert all(a == b for a, b in zip(p_cdatas_before, p_cdatas_after))
                        assert all(a == b for a, b in zip(p_ids_before, p_ids_after))
                        if set_grad:
                            assert all(a == b for a, b in zip(g_cdatas_before, g_cdatas_after))
                            assert all(a == b for a, b in zip(g_ids_before, g_ids_after))
    run.check()


@BACKEND
@pytest.mark.parametrize("swap", [True, False], ids=["swap", "no_swap"])
@_modules(allowed_dtypes=[torch.float32])
def test_to_empty(name, dtype, training, swap, backend):
    info, cls = MODULE_INFOS[name], module_cls(name, backend)
    with torch.device("meta"):
        samples = info.module_inputs_func(info, device=None, dtype=dtype, requires_grad=False, training=training)
    device_ = torch.device(DEVICE)
    run = Samples()
    with _swap_module_params_on_conversion(swap):
        for module_input in select(samples, backend, training, dtype):
            with run.sample(describe(module_input)):
                c_args, c_kwargs = module_input.constructor_input.args, module_input.constructor_input.kwargs
                with torch.device("meta"):
                    if unsupported_projection(backend, c_kwargs):
                        expect_projection_error(cls, backend, c_args, c_kwargs, run)
                        continue
                    m = cls(*c_args, **c_kwargs)
                p_ids_before = [id(p) for p in m.parameters()]
                p_cdatas_before = [p._cdata for p in m.parameters()]
                m.to_empty(device=device_)
                assert all(isinstance(p, torch.nn.Parameter) for p in m.parameters())
                assert all(p.device == device_ for p in m.parameters())
                assert all(p.dtype == dtype for p in m.parameters())
                p_ids_after = [id(p) for p in m.parameters()]
                p_cdatas_after = [p._cdata for p in m.parameters()]
                if swap:
                    assert all(a == b for a, b in zip(p_ids_before, p_ids_after))
                    assert all(a != b for a, b in zip(p_cdatas_before, p_cdatas_after))
                else:
                    # meta and cpu have different shallow-copy types: new Parameters are assigned
                    assert all(a != b for a, b in zip(p_ids_before, p_ids_after))
                    assert all(a != b for a, b in zip(p_cdatas_before, p_cdatas_after))
    run.check()


# ---- TestModuleCPUOnly ----------------------------------------------------------------------

@BACKEND
@_modules()
def test_device_ctx_init(name, dtype, training, backend):
    info, cls = MODULE_INFOS[name], module_cls(name, backend)
    module_inputs = info.module_inputs_func(info, device="cpu", dtype=dtype, requires_grad=False, training=training)
    with torch.device("meta"):
        module_inputs_meta = info.module_inputs_func(info, device=None, dtype=dtype, requires_grad=False,
                                                     training=training)
    keep = {id(s) for s in select(module_inputs, backend, training, dtype)}
    run = Samples()
    for module_input, module_input_meta in zip(module_inputs, module_inputs_meta):
        if id(module_input) not in keep:
            continue
        with run.sample(describe(module_input)):
            c_args, c_kwargs = module_input.constructor_input.args, module_input.constructor_input.kwargs
            c_args_meta = module_input_meta.constructor_input.args
            c_kwargs_meta = module_input_meta.constructor_input.kwargs
            if unsupported_projection(backend, c_kwargs):
                expect_projection_error(cls, backend, c_args, c_kwargs, run)
                continue
            m_cpu = cls(*c_args, **c_kwargs)
            with torch.device("meta"):
                m = cls(*c_args_meta, **c_kwargs_meta)
            for p_meta, p_cpu in chain(zip(m.parameters(), m_cpu.parameters()),
                                       zip(m.buffers(), m_cpu.buffers())):
                if torch.nn.parameter.is_lazy(p_meta):
                    continue
                assert p_meta.is_meta
                assert_metadata_eq(assertEqual, p_meta, p_cpu)
    run.check()


# ---- the selection itself ------------------------------------------------------------------------

@MODULE
def test_selection_never_lands_only_on_refused_samples(name):
    """Every test kind selects samples the backend runs; gradgrad has biases and no biases in both modes."""
    info = MODULE_INFOS[name]
    for backend, training in product(["nn", *rnnbench.torch.BACKENDS], (True, False)):
        samples = info.module_inputs_func(info, device=DEVICE, dtype=torch.double, requires_grad=False,
                                          training=training)
        for kind in TIERS:
            chosen = select(samples, backend, training, torch.double, kind)
            runs = [s for s in chosen if not refused(backend, s)]
            where = f"{backend} {kind} {'train' if training else 'eval'}"
            assert runs, f"{where}: every selected sample is refused"
            if TIERS[kind] is not None:
                assert len(runs) == len(chosen), f"{where}: a refused sample takes a runnable one's place"
            if kind == "gradgrad":
                assert {_factors(s)[BIAS] for s in runs} == {True, False}, f"{where}: not with and without biases"


def test_a_test_that_ran_no_check_fails():
    refused_only = Samples()
    with refused_only.sample("proj_size=2 on naive"):
        refused_only.refused += 1
    with pytest.raises(pytest.fail.Exception, match="ran no check"):
        refused_only.check()
    with pytest.raises(pytest.fail.Exception, match="ran no check"):
        Samples().check()  # no sample at all
    ran = Samples()
    with ran.sample("a sample that ran"):
        pass
    ran.check()

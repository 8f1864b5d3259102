"""What the two torch.compile rungs share (`compile` compiles one step, `scan` a whole
direction): one compiled function per configuration, and the options a torch.compile user
would try.

One compiled function per configuration.  TorchDynamo keeps its compiled graphs per code
object and, under `fullgraph=True`, fails (`FailOnRecompileLimitHit`) once one code object
has been compiled 8 times (`torch._dynamo.config.recompile_limit`): a process that builds
differently configured models one after another (PyTorch's own test_modules samples, a
gradcheck that asks for one parameter's gradient at a time) gets there with one shared
function.  So each configuration gets a copy of the function with its own code object (its
own Dynamo cache), and the configuration's key holds what Dynamo guards on that changes
between a model's calls: shape, stride, dtype, device, requires_grad and Parameter-ness of
every tensor, grad mode, inference mode and autocast.  A new configuration compiles once; a
repeated one runs the compiled code.

Options (`OPTIONS`, given as `backend_options=` to the modules):
- `mode`: torch.compile's `mode` ("default", "reduce-overhead": CUDA graphs, CUDA only;
  "max-autotune", "max-autotune-no-cudagraphs": Inductor benchmarks GEMM choices).
- `freezing` (bool): Inductor's freezing, for inference: in a call without gradients the
  weights are compiled in as constants (their layout changes folded away; on the CPU the
  GEMM weights prepacked).  The compiled code then never reads the weights again, so a
  weight changed in place (load_state_dict, an optimizer step) would be silently ignored:
  every frozen call compares the weights' version counters and data pointers with those
  compiled in, and compiles again when one changed.  A write through `.data` bypasses the
  version counter (as it bypasses autograd's own checks) and is not seen.  Freezing folds
  what the graph computes from the weights outside the loop; a weight that only the scan's
  step reads stays an input of the loop (read afresh on every call).
- `cpp_wrapper` (bool): Inductor's C++ wrapper: the generated code that calls the kernels,
  and with it `scan`'s loop over time, runs in C++ instead of Python (a longer compile).
"""

from __future__ import annotations

import functools
import types
import warnings
import weakref
from typing import Callable

import torch
from torch import Tensor, nn
from torch._functorch import config as functorch_config
from torch.utils._pytree import tree_map

from . import eager
from ._common import recorded, under_func_transform

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
OPTIONS = {"mode": "default", "freezing": False, "cpp_wrapper": False}


def check_options(backend: str, options) -> dict:
    """Every option of `OPTIONS` (defaults filled in); TypeError naming an unknown one,
    ValueError for a bad value."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"backend {backend!r} got unknown options {unknown}; its options: {', '.join(OPTIONS)}")
    options = {**OPTIONS, **options}
    if options["mode"] not in MODES:
        raise ValueError(f"backend {backend!r}: mode must be one of {', '.join(MODES)}, got {options['mode']!r}")
    for flag in ("freezing", "cpp_wrapper"):
        if not isinstance(options[flag], bool):
            raise ValueError(f"backend {backend!r}: {flag} must be a bool, got {options[flag]!r}")
    return options


def check_device(backend: str, mode: str, device: torch.device) -> None:
    if mode == "reduce-overhead" and device.type != "cuda":
        raise ValueError(f"backend {backend!r}: mode='reduce-overhead' is CUDA graphs, which need a CUDA device; "
                         f"the input is on {device}")


def compile_kwargs(mode: str, cpp_wrapper: bool) -> dict:
    """torch.compile's keywords: `mode`, or (it takes `mode` or `options`, not both) the mode's
    Inductor options with `cpp_wrapper`; torch.compile applies `options` to the backward too."""
    if not cpp_wrapper:
        return {} if mode == "default" else {"mode": mode}
    from torch._inductor import list_mode_options
    return {"options": {**list_mode_options(mode), "cpp_wrapper": True}}


def signature(value):
    """What Dynamo guards on of one argument (tensors in tuples, dicts and NamedTuples)."""
    if isinstance(value, Tensor):
        return (tuple(value.shape), value.stride(), value.dtype, value.device, value.requires_grad,
                isinstance(value, nn.Parameter))
    if isinstance(value, dict):
        return tuple((k, signature(v)) for k, v in value.items())
    if isinstance(value, (tuple, list)):
        return tuple(signature(v) for v in value)
    return value


def one_gradient_pattern(p, x: Tensor, state: tuple):
    """(p, x, state) with every floating tensor requiring a gradient, when one does and grad
    mode is on: then the call is `_common.recorded`'s, on leaves of its own, and one compiled
    graph serves every pattern of requires_grad (a gradcheck asks for one parameter's gradient
    at a time: a compile each, else).  The gradients nobody asked for are computed and dropped."""
    tensors = [t for t in (*p[:5], *(p.extras or {}).values(), x, *state) if isinstance(t, Tensor)]
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        for t in tensors:
            if t.is_floating_point() and not t.requires_grad:
                t.requires_grad_()
    return p, x, state


def global_state(device_type: str) -> tuple:
    return (torch.is_grad_enabled(), torch.is_inference_mode_enabled(), torch.is_autocast_enabled(device_type),
            torch.get_autocast_dtype(device_type))


class _Entry:
    """One compiled copy; with frozen weights, the versions it was compiled with."""

    def __init__(self, fn: Callable, mode: str, weights: tuple | None):
        self.fn, self.mode, self.frozen, self.first = fn, mode, weights is not None, True
        self.weights = [(weakref.ref(w), w._version, w.data_ptr()) for w in weights or ()]

    def stale(self, weights: tuple) -> bool:
        return any(ref() is not w or w._version != version or w.data_ptr() != ptr
                   for (ref, version, ptr), w in zip(self.weights, weights))

    def __call__(self, *args):
        if self.first and self.frozen:  # compiles now: Inductor reads its configuration in this call
            # `torch.compile(options={"freezing": True})` did not freeze a graph with a scan in
            # torch 2.13; the configuration patched around the compiling call does
            from torch._inductor import config as inductor_config
            with inductor_config.patch(freezing=True):
                out = self.fn(*args)
        else:
            out = self.fn(*args)
        self.first = False
        if self.mode == "reduce-overhead":  # a CUDA graph's outputs are overwritten by its next replay
            out = tree_map(lambda t: t.clone() if isinstance(t, Tensor) else t, out)
        return out


class PerConfiguration:
    """`fn` compiled with `torch.compile(fullgraph=True, dynamic=False)`, once per key."""

    def __init__(self, fn: Callable, name: str):
        self.fn, self.name = fn, name
        self.entries: dict[tuple, _Entry] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def _fresh(self) -> Callable:
        code = self.fn.__code__.replace(co_name=f"{self.name}_{len(self.entries)}")
        return types.FunctionType(code, self.fn.__globals__, code.co_name, self.fn.__defaults__,
                                  self.fn.__closure__)

    def get(self, key: tuple, device: torch.device, *, mode: str = "default", cpp_wrapper: bool = False,
            frozen: tuple | None = None) -> Callable:
        """The compiled function for `key` (a `signature` of the arguments) in the present grad,
        inference and autocast state.  `frozen`: the weights to compile in as constants
        (Inductor's freezing; None: no freezing); compiled again when one has changed."""
        key = (key, global_state(device.type), mode, cpp_wrapper,
               None if frozen is None else tuple(map(id, frozen)))
        entry = self.entries.get(key)
        if entry is not None and frozen is not None and entry.stale(frozen):
            entry = None
        if entry is None:
            if frozen is not None:  # a model gone: its frozen copies go too
                self.entries = {k: e for k, e in self.entries.items() if not any(r() is None for r, *_ in e.weights)}
            compiled = torch.compile(self._fresh(), dynamic=False, fullgraph=True,
                                     **compile_kwargs(mode, cpp_wrapper))
            entry = self.entries[key] = _Entry(compiled, mode, frozen)
        return entry


def run_compiled(backend: str, run: Callable, cell, p, x, state, lengths, **options):
    """`run(cell, p, x, state, lengths, **options)` as one autograd node (`recorded`):
    AOTAutograd's compiled backward supports neither double backward nor batched grad_outputs,
    which then differentiate the eager formulation.  Under a torch.func transform (vmap, grad,
    ...), which cannot call a compiled function from eager mode, the eager formulation runs (with
    a warning, once per backend)."""
    if under_func_transform():
        _warn_func_transform(backend)
        return eager.run_direction(cell, p, x, state, lengths)
    # Donated buffers (an AOTAutograd memory saving) forbid retain_graph=True, which nn.LSTM allows
    # and `recorded` needs; the option is read when a function compiles.
    with functorch_config.patch(donated_buffer=False):
        return recorded(functools.partial(run, **options), eager.run_direction, cell, p, x, state, lengths)


@functools.lru_cache(maxsize=None)
def _warn_func_transform(backend: str):
    warnings.warn(f"backend {backend!r}: under a torch.func transform (vmap, grad, jacrev, ...) torch.compile "
                  "cannot be called from inside it in eager mode, so the eager formulation (backend 'eager') "
                  "runs instead", stacklevel=5)

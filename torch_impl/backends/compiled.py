"""`compile`: `torch.compile` of the custom formulation, compiled per STEP.

The hoisted input projection (one GEMM over all T steps) runs eagerly, as in `eager`;
the recurrent step (`eager.lstm_step` / `eager.gru_step`: the `addmm` plus the gate
math, and the length mask when there is one) is compiled once with `dynamic=False` and
called from a Python loop.  Inductor fuses each step's pointwise gate math (and its
backward) into one kernel.  The compiled graph does not depend on T, so compile time
does not grow with the sequence length (unrolling the loop under `torch.compile`
took 19 s for T=100 and grows linearly).

torch's `scan` higher-order operator was the other candidate.  In torch 2.13 an S1 LSTM
layer written with `torch._higher_order_ops.scan` does compile with autograd under
inductor (the earlier "scan might be aliasing the input or the output" failure is gone),
but one forward+backward took 41 s on the first call and 8.4 s per call after that,
about 4x this per-step compile measured on the same (loaded, shared) machine; under
the eager and aot_eager backends it took 17-23 s per call.  So the compiled step ships.

Catalogue cells (torch_impl.cells: ln_lstm, peephole_lstm, gru_reset_before, users'
cells) compile their registered step the same way, the mask inside the compiled graph;
their hoisted projection runs eagerly.

Compiled steps are cached per (cell, dtype, device, batch, sizes, mask, bias) in this
module, each under its own code object, so that TorchDynamo's per-code recompile limit
(8 graphs) is never shared between configurations: a new configuration compiles once,
a repeated one never recompiles.
"""

from __future__ import annotations

import functools
import importlib.util
import shutil
import types
import warnings
from typing import Callable

import torch
from torch import Tensor
from torch._functorch import config as functorch_config

from . import eager
from ._common import recorded
from .. import cells


def unavailable_reason(device: str | torch.device = "cpu") -> str | None:
    kind = torch.device(device).type
    if kind == "cpu":
        if not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
            return "torch.compile (inductor) on CPU needs a C++ compiler (g++, c++ or clang++) on PATH"
    elif kind == "cuda":
        if importlib.util.find_spec("triton") is None:
            return "torch.compile (inductor) on CUDA needs triton, which is not installed"
    else:
        return f"torch.compile backend supports cpu and cuda, not {kind}"
    return None


# ---- the functions that get compiled --------------------------------------------------

def _lstm_step(x_t: Tensor, h: Tensor, c: Tensor, w_hh_t: Tensor, w_hr_t: Tensor | None):
    return eager.lstm_step(x_t, h, c, w_hh_t, w_hr_t)


def _lstm_step_masked(x_t: Tensor, h: Tensor, c: Tensor, w_hh_t: Tensor, w_hr_t: Tensor | None, m: Tensor):
    h_new, c_new = eager.lstm_step(x_t, h, c, w_hh_t, w_hr_t)
    return torch.where(m, h_new, h), torch.where(m, c_new, c), h_new * m


def _gru_step(x_t: Tensor, h: Tensor, w_hh_t: Tensor, b_hh: Tensor | None):
    return eager.gru_step(x_t, h, w_hh_t, b_hh)


def _gru_step_masked(x_t: Tensor, h: Tensor, w_hh_t: Tensor, b_hh: Tensor | None, m: Tensor):
    h_new = eager.gru_step(x_t, h, w_hh_t, b_hh)
    return torch.where(m, h_new, h), h_new * m


_STEPS = {("lstm", False): _lstm_step, ("lstm", True): _lstm_step_masked,
          ("gru", False): _gru_step, ("gru", True): _gru_step_masked}
_cache: dict[tuple, Callable] = {}


def compiled_step(cell: str, masked: bool, key: tuple) -> Callable:
    """The compiled step for this configuration, compiled on first use."""
    full_key = (cell, masked) + key
    fn = _cache.get(full_key)
    if fn is None:
        template = _STEPS[(cell, masked)]
        # A private copy of the code object gives this configuration its own Dynamo cache.
        code = template.__code__.replace(co_name=f"{template.__name__}_{len(_cache)}")
        fresh = types.FunctionType(code, template.__globals__, code.co_name, template.__defaults__)
        fn = _cache[full_key] = torch.compile(fresh, dynamic=False, fullgraph=True)
    return fn


def _custom_step_template(step: Callable) -> Callable:
    """A fresh function (own code object, so its own Dynamo cache) running `step` with the mask."""
    def template(x_t, state, p, m=None):
        new = step(x_t, state, p)
        if m is None:
            return tuple(new), new[0]
        return tuple(torch.where(m, n, o) for n, o in zip(new, state)), new[0] * m
    code = template.__code__.replace(co_name=f"custom_step_{len(_cache)}")
    return types.FunctionType(code, template.__globals__, code.co_name, template.__defaults__,
                              template.__closure__)


def custom_compiled_step(cell: str, key: tuple) -> Callable:
    """The compiled step of a catalogue cell (torch_impl.cells) for this configuration."""
    step = cells.get_torch_cell(cell).step
    full_key = ("custom", cell, step) + key
    fn = _cache.get(full_key)
    if fn is None:
        fn = _cache[full_key] = torch.compile(_custom_step_template(step), dynamic=False, fullgraph=True)
    return fn


def run_direction(cell: str, x: Tensor, h0: Tensor, c0: Tensor | None, w_ih: Tensor, w_hh: Tensor,
                  b_ih: Tensor | None, b_hh: Tensor | None, w_hr: Tensor | None, lengths: Tensor | None,
                  extras: dict | None = None):
    """One node around the compiled loop (`recorded`): AOTAutograd's compiled backward supports
    neither double backward nor batched grad_outputs, which then differentiate the eager
    formulation.  Under a torch.func transform (vmap, grad, ...), which cannot call a compiled
    function from eager mode, the eager formulation runs (with a warning, once)."""
    keys = tuple(extras or {})
    args = (x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths, *(extras or {}).values())

    def with_extras(fn):
        def call(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths, *values):
            return fn(cell, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths, dict(zip(keys, values)))
        return call

    if torch._C._functorch.peek_interpreter_stack() is not None:
        _warn_func_transform()
        return with_extras(eager.run_direction)(*args)
    # Donated buffers (an AOTAutograd memory saving) forbid retain_graph=True, which nn.LSTM allows
    # and `recorded` needs; the option is read when a step compiles.
    with functorch_config.patch(donated_buffer=False):
        return recorded(with_extras(_run_compiled), with_extras(eager.run_direction), *args)


@functools.lru_cache(maxsize=None)
def _warn_func_transform():
    warnings.warn("backend 'compile': under a torch.func transform (vmap, grad, jacrev, ...) torch.compile "
                  "cannot be called from eager mode, so the eager formulation (backend 'eager') runs instead",
                  stacklevel=4)


def _run_compiled(cell: str, x: Tensor, h0: Tensor, c0: Tensor | None, w_ih: Tensor, w_hh: Tensor,
                  b_ih: Tensor | None, b_hh: Tensor | None, w_hr: Tensor | None, lengths: Tensor | None,
                  extras: dict | None = None):
    if cell not in ("lstm", "gru"):
        key = (x.dtype, x.device, tuple(h0.shape), tuple(w_hh.shape), b_ih is not None, lengths is not None)
        return cells.run_direction(cell, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths, extras,
                                   step=custom_compiled_step(cell, key))
    masks = eager.valid_steps(lengths, x.shape[0])
    key = (x.dtype, x.device, tuple(h0.shape), tuple(w_hh.shape), w_hr is not None, b_ih is not None)
    step = compiled_step(cell, bool(masks), key)
    outputs = []
    if cell == "lstm":
        H = w_hh.shape[0] // 4
        bias = None if b_ih is None else eager.ifog(b_ih + b_hh, H)
        x_proj = eager.input_projection(x, eager.ifog(w_ih, H), bias)
        w_hh_t = eager.ifog(w_hh, H).t()
        w_hr_t = None if w_hr is None else w_hr.t()
        h, c = h0, c0
        for t, x_t in enumerate(x_proj.unbind(0)):
            if masks:
                h, c, out = step(x_t, h, c, w_hh_t, w_hr_t, masks[t])
            else:
                h, c = step(x_t, h, c, w_hh_t, w_hr_t)
                out = h
            outputs.append(out)
        return torch.stack(outputs), h, c
    x_proj = eager.input_projection(x, w_ih, b_ih)
    w_hh_t = w_hh.t()
    h = h0
    for t, x_t in enumerate(x_proj.unbind(0)):
        if masks:
            h, out = step(x_t, h, w_hh_t, b_hh, masks[t])
        else:
            h = out = step(x_t, h, w_hh_t, b_hh)
        outputs.append(out)
    return torch.stack(outputs), h, None

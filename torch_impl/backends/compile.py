"""`compile`: `torch.compile` of the custom formulation, compiled per STEP.

The hoisted input projection runs eagerly, as in `eager`; the cell's step (the `addmm`
plus the gate math, and the length mask when there is one) is compiled once per
configuration with `dynamic=False` and called from `cells.time_loop`.  Inductor fuses
each step's pointwise gate math (and its backward) into one kernel.  The compiled graph
does not depend on T, so compile time does not grow with the sequence length (unrolling
the loop, or torch's `scan` operator, measured slower: see docs/torch.md).  Any cell with
a torch step compiles the same way.

Compiled steps are cached per configuration in this module, each under its own code
object, so that TorchDynamo's per-code recompile limit (8 graphs) is never shared between
configurations: a new configuration compiles once, a repeated one never recompiles.
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

from shared.capabilities import ANY_CELL, Capabilities

from ..cells import mask_step, project_all, time_loop
from . import eager
from ._common import recorded, under_func_transform

CAPABILITIES = Capabilities(cells=ANY_CELL, proj_size=True)


def unavailable_reason(device: str = "cpu") -> str | None:
    """Why inductor cannot compile for `device` here (a device outside `CAPABILITIES` is
    refused before this is asked)."""
    kind = torch.device(device).type
    if kind == "cpu" and not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        return "torch.compile (inductor) on CPU needs a C++ compiler (g++, c++ or clang++) on PATH"
    if kind == "cuda" and importlib.util.find_spec("triton") is None:
        return "torch.compile (inductor) on CUDA needs triton, which is not installed"
    return None


_cache: dict[tuple, Callable] = {}


def _masked_template(step: Callable) -> Callable:
    """A fresh function (its own code object, so its own Dynamo cache) running `step` with
    the mask inside: step(x_t, state, q[, m]) -> (state, out)."""
    def template(x_t, state, q, m=None):
        new = step(x_t, state, q)
        if m is None:
            return tuple(new), new[0]
        return mask_step(m, new, state)
    code = template.__code__.replace(co_name=f"compiled_step_{len(_cache)}")
    return types.FunctionType(code, template.__globals__, code.co_name, template.__defaults__,
                              template.__closure__)


def _signature(t) -> tuple | None:
    return None if t is None else (tuple(t.shape), t.dtype, t.device)


def compiled_step(cell, x_proj: Tensor, state: tuple, q: dict, masked: bool) -> Callable:
    """The compiled step for this configuration, compiled on first use."""
    key = (cell.name, cell.step, masked, _signature(x_proj[0]), tuple(_signature(s) for s in state),
           tuple((k, _signature(v)) for k, v in q.items()))
    fn = _cache.get(key)
    if fn is None:
        fn = _cache[key] = torch.compile(_masked_template(cell.step), dynamic=False, fullgraph=True)
    return fn


def _run(cell, p, x, state, lengths):
    q = cell.prepare(p)
    x_proj = project_all(cell, x, q)
    step = compiled_step(cell, x_proj, state, q, lengths is not None)
    return time_loop(step, x_proj, state, q, lengths, masks_inside=True)


def run_direction(cell, p, x, state, lengths):
    """One node around the compiled loop (`recorded`): AOTAutograd's compiled backward supports
    neither double backward nor batched grad_outputs, which then differentiate the eager
    formulation.  Under a torch.func transform (vmap, grad, ...), which cannot call a compiled
    function from eager mode, the eager formulation runs (with a warning, once)."""
    if under_func_transform():
        _warn_func_transform()
        return eager.run_direction(cell, p, x, state, lengths)
    # Donated buffers (an AOTAutograd memory saving) forbid retain_graph=True, which nn.LSTM allows
    # and `recorded` needs; the option is read when a step compiles.
    with functorch_config.patch(donated_buffer=False):
        return recorded(_run, eager.run_direction, cell, p, x, state, lengths)


@functools.lru_cache(maxsize=None)
def _warn_func_transform():
    warnings.warn("backend 'compile': under a torch.func transform (vmap, grad, jacrev, ...) torch.compile "
                  "cannot be called from inside it in eager mode, so the eager formulation (backend 'eager') "
                  "runs instead", stacklevel=4)

"""`compile`: `torch.compile` of the custom formulation, compiled per STEP.

The hoisted input projection runs eagerly, as in `eager`; the cell's step (the `addmm`
plus the gate math, and the length mask when there is one) is compiled once per
configuration with `dynamic=False` and called from `cells.time_loop`.  Inductor fuses
each step's pointwise gate math (and its backward) into one kernel.  The compiled graph
does not depend on T, so compile time does not grow with the sequence length.  Any cell
with a torch step compiles the same way.  `scan` is the other way to compile: the whole
loop in one graph (docs/torch.md compares the two).

One compiled step per configuration (`_compiled.PerConfiguration`): building many
differently configured models in one process never meets TorchDynamo's recompile limit.
Options (`OPTIONS`): torch.compile's `mode`, Inductor's `freezing` for inference (the step
then takes the weights themselves and `cell.prepare` runs inside it, folded into constants)
and `cpp_wrapper`; see `_compiled`.
"""

from __future__ import annotations

import importlib.util
import shutil

import torch

from rnnbench.core.capabilities import ANY_CELL, Capabilities

from ..cells import mask_step, project_all, time_loop
from ._compiled import (
    OPTIONS, PerConfiguration, check_device, check_options, one_gradient_pattern, run_compiled, signature)

CAPABILITIES = Capabilities(cells=ANY_CELL, proj_size=True)
COMPILED = True  # each new configuration costs a compile (seconds)
__all__ = ["CAPABILITIES", "COMPILED", "OPTIONS", "check_options", "unavailable_reason", "run_direction"]


def unavailable_reason(device: str = "cpu") -> str | None:
    """Why inductor cannot compile for `device` here (a device outside `CAPABILITIES` is
    refused before this is asked)."""
    kind = torch.device(device).type
    if kind == "cpu" and not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        return "torch.compile (inductor) on CPU needs a C++ compiler (g++, c++ or clang++) on PATH"
    if kind == "cuda" and importlib.util.find_spec("triton") is None:
        return "torch.compile (inductor) on CUDA needs triton, which is not installed"
    return None


_steps: dict[tuple, PerConfiguration] = {}


def compiled_steps(cell, frozen: bool) -> PerConfiguration:
    """The compiled steps of `cell`: step(x_t, state, q[, m]) -> (state, out), the mask inside;
    `frozen`: the third argument is the layer's weights, prepared inside (folded by freezing)."""
    key = (cell.name, cell.step, cell.prepare, frozen)
    if key not in _steps:
        step, prepare = cell.step, cell.prepare
        if frozen:
            def template(x_t, state, p, m=None):
                return mask_step(m, step(x_t, state, prepare(p)), state)
        else:
            def template(x_t, state, q, m=None):
                return mask_step(m, step(x_t, state, q), state)
        _steps[key] = PerConfiguration(template, f"compiled_step_{len(_steps)}")
    return _steps[key]


def _run(cell, p, x, state, lengths, *, mode, freezing, cpp_wrapper):
    check_device("compile", mode, x.device)
    p, x, state = one_gradient_pattern(p, x, state)
    q = cell.prepare(p)
    x_proj = project_all(cell, x, q)
    frozen = freezing and not torch.is_grad_enabled()
    steps = compiled_steps(cell, frozen)
    weights = p if frozen else q
    frozen_weights = None
    if frozen:
        frozen_weights = tuple(t for t in p if isinstance(t, torch.Tensor)) + tuple((p.extras or {}).values())
    # the key of the first step (the initial state) and of the others (a computed state: its
    # requires_grad and strides may differ), each taken once
    rest = signature((x_proj[0], weights, lengths is not None))
    first, fns = state[0], {}

    def step(x_t, state, _, m=None):
        at_start = state[0] is first
        if at_start not in fns:
            fns[at_start] = steps.get((rest, signature(state)), x.device, mode=mode, cpp_wrapper=cpp_wrapper,
                                      frozen=frozen_weights)
        return fns[at_start](x_t, state, weights) if m is None else fns[at_start](x_t, state, weights, m)

    return time_loop(step, x_proj, state, q, lengths, masks_inside=True)


def run_direction(cell, p, x, state, lengths, *, mode: str = "default", freezing: bool = False,
                  cpp_wrapper: bool = False):
    """One direction over time-major x (T, B, I), the compiled steps in one autograd node
    (`_compiled.run_compiled`); see `rnnbench.torch.stack`."""
    return run_compiled("compile", _run, cell, p, x, state, lengths, mode=mode, freezing=freezing,
                        cpp_wrapper=cpp_wrapper)

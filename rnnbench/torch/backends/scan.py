"""`scan`: `torch.compile` over the whole time loop with torch's scan operator, the program
`jax.scan` hands XLA.

Per layer and direction, for every cell with a torch step (`rnnbench.torch.cells`, a user's own
included), one function compiled with `torch.compile(fullgraph=True, dynamic=False)`:

    q = cell.prepare(p)                       the layer's weights as the step wants them
    x_proj = cell.project(x, q)               one (T*B, I) x (I, G*H) GEMM for all steps
    cells.scan_loop(cell.step, x_proj, ...)   torch._higher_order_ops.scan of the step,
                                              masked with lengths

`compile` compiles one step and leaves the loop to Python; here Inductor gets the loop, and
AOTAutograd derives its backward as a second scan.  The reverse direction is the driver's
(each sequence's valid part gathered reversed around a forward call).

Weights as the step wants them are made contiguous before the loop: with a closed-over
weight that is a transposed view of a computed tensor (the LSTM's gate-reordered `W_hh`,
transposed), Inductor's scan backward returned a wrong gradient for it in torch 2.13
(`aot_eager` right); contiguous, it is right (docs/torch.md).

One compiled function per configuration (`_compiled.PerConfiguration`), so many models in
one process never meet TorchDynamo's recompile limit.  Options (`OPTIONS`): torch.compile's
`mode`, Inductor's `freezing` (the weights compiled in as constants in a call without
gradients, compiled again when one changes) and `cpp_wrapper` (the loop over time in C++);
see `_compiled`.

Gradients: backward is AOTAutograd's compiled one, inside one autograd node (`recorded`);
double backward and batched grad_outputs differentiate the eager formulation instead.
Under a torch.func transform the eager formulation runs (with a warning, once).
"""

from __future__ import annotations

import importlib.util

import torch

from rnnbench.core.capabilities import ANY_CELL, Capabilities

from ..cells import project_all, scan_loop
from . import compile as compile_
from ._compiled import (
    OPTIONS, PerConfiguration, check_device, check_options, one_gradient_pattern, run_compiled, signature)

CAPABILITIES = Capabilities(cells=ANY_CELL, proj_size=True)
COMPILED = True  # each new configuration costs a compile (seconds)
__all__ = ["CAPABILITIES", "COMPILED", "OPTIONS", "check_options", "unavailable_reason", "run_direction"]


def unavailable_reason(device: str = "cpu") -> str | None:
    if importlib.util.find_spec("torch._higher_order_ops.scan") is None:
        return f"torch {torch.__version__} has no scan operator (torch._higher_order_ops.scan)"
    return compile_.unavailable_reason(device)


def _contiguous(q: dict) -> dict:
    return {k: v.contiguous() if isinstance(v, torch.Tensor) else v for k, v in q.items()}


_directions: dict[tuple, PerConfiguration] = {}


def compiled_directions(cell) -> PerConfiguration:
    """The compiled directions of `cell`: direction(p, x, state, lengths) -> (output, state)."""
    key = (cell.name, cell.step, cell.prepare, cell.project)
    if key not in _directions:
        def direction(p, x, state, lengths):
            q = _contiguous(cell.prepare(p))
            return scan_loop(cell.step, project_all(cell, x, q), state, q, lengths)
        _directions[key] = PerConfiguration(direction, f"scan_direction_{len(_directions)}")
    return _directions[key]


def _run(cell, p, x, state, lengths, *, mode, freezing, cpp_wrapper):
    check_device("scan", mode, x.device)
    p, x, state = one_gradient_pattern(p, x, state)
    # contiguous input and states: a strided one would be a configuration (a compile) of its own
    args = (p, x.contiguous(), tuple(s.contiguous() for s in state), lengths)
    frozen = None
    if freezing and not torch.is_grad_enabled():
        frozen = tuple(t for t in p if isinstance(t, torch.Tensor)) + tuple((p.extras or {}).values())
    return compiled_directions(cell).get(signature(args), x.device, mode=mode, cpp_wrapper=cpp_wrapper,
                                         frozen=frozen)(*args)


def run_direction(cell, p, x, state, lengths, *, mode: str = "default", freezing: bool = False,
                  cpp_wrapper: bool = False):
    """One direction over time-major x (T, B, I), the compiled loop in one autograd node
    (`_compiled.run_compiled`); see `rnnbench.torch.stack`."""
    if p.w_hr is not None and not cell.defn.proj_size:
        raise ValueError(f"cell {cell.name!r} does not support proj_size")
    return run_compiled("scan", _run, cell, p, x, state, lengths, mode=mode, freezing=freezing,
                        cpp_wrapper=cpp_wrapper)

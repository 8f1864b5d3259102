"""Helpers shared by the direction functions: combined biases, per-step masks, errors.

A *direction function* runs one layer in one direction, forward in time:

    run_direction(cell, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths)
        -> (out (T, B, H_out), h_n (B, H_out), c_n (B, H) or None)

with packed-sequence semantics when `lengths` (B,) is given: for t >= lengths[b] the
state of sequence b is held and out[t, b] = 0, so h_n/c_n are the state after its last
valid step.  `torch_impl.driver` composes layers, directions and dropout around it.
"""

from __future__ import annotations

import torch
from torch import Tensor

# Backends whose direction function implements the LSTM projection h = W_hr (o * tanh(c)).
PROJ_BACKENDS = ("native", "eager", "jit", "compile", "autograd")


class ProjectionNotSupportedError(ValueError):
    """proj_size > 0 asked of a backend that does not implement the projection."""


def require_no_projection(backend: str, w_hr: Tensor | None) -> None:
    if w_hr is not None:
        raise ProjectionNotSupportedError(
            f"backend {backend!r} does not support proj_size; backends that do: {', '.join(PROJ_BACKENDS)}")


def step_masks(lengths: Tensor | None, seq_len: int) -> list[Tensor] | None:
    """Per-step boolean masks (B, 1): True where step t is inside sequence b."""
    if lengths is None:
        return None
    steps = torch.arange(seq_len, device=lengths.device).unsqueeze(1)
    return (steps < lengths.unsqueeze(0)).unsqueeze(-1).unbind(0)


def combined_bias(b_ih: Tensor | None, b_hh: Tensor | None) -> Tensor | None:
    """b_ih + b_hh (LSTM adds both to every gate), or None without biases."""
    if b_ih is None:
        return None
    return b_ih + b_hh


class _RecordedDirection(torch.autograd.Function):
    """One autograd node around a direction function whose own backward cannot do all that
    autograd offers (a TorchScript or torch.compile graph: no double backward, no batched
    grad_outputs).  Forward runs `fn` recording its graph from detached leaves; backward
    differentiates that graph, or, under create_graph=True or batched grad_outputs, the
    `eager` formulation recorded from the saved inputs (`autograd_fn.differentiable_grads`)."""

    @staticmethod
    def forward(ctx, fn, eager_fn, *args):
        leaves = [a.detach().requires_grad_(a.requires_grad) if isinstance(a, Tensor) and a.is_floating_point()
                  else a for a in args]
        with torch.enable_grad():
            outs = fn(*leaves)
        ctx.eager_fn, ctx.graph = eager_fn, (leaves, outs)
        ctx.save_for_backward(*[a if isinstance(a, Tensor) else None for a in args])
        return tuple(None if o is None else o.detach() for o in outs)

    @staticmethod
    def backward(ctx, *grads):
        from ..autograd_fn import differentiable_grads, kernel_backward_unusable
        needs = ctx.needs_input_grad[2:]
        if kernel_backward_unusable(grads):
            return (None, None, *differentiable_grads(ctx.eager_fn, ctx.saved_tensors, needs, grads))
        leaves, outs = ctx.graph
        pairs = [(o, g) for o, g in zip(outs, grads) if o is not None and g is not None and o.requires_grad]
        wrt = [leaf for leaf, n in zip(leaves, needs) if n]
        # retain_graph: the outer graph may be run backward again (retain_graph=True); the
        # inner one is freed with this node.
        got = iter(torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], retain_graph=True,
                                       allow_unused=True))
        # contiguous, as nn.LSTM's (TorchScript's optimized graph hands back transposed ones)
        return (None, None, *(_contiguous(next(got)) if n else None for n in needs))


def _contiguous(t):
    return None if t is None else t.contiguous()


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward makes the gradient contiguous."""

    @staticmethod
    def forward(ctx, t):
        return t.view_as(t)

    @staticmethod
    def backward(ctx, grad):
        return grad.contiguous()


def contiguous_grad(t: Tensor) -> Tensor:
    """`t`, with its gradient made contiguous: slicing a concatenated weight (the seeds'
    [W_ih | W_hh]) hands autograd's caller strided column blocks, where nn.LSTM's are
    contiguous (and optimizers, `.view` and foreach kernels may rely on that)."""
    return _ContiguousGrad.apply(t) if t.requires_grad and torch.is_grad_enabled() else t


def under_vmap() -> bool:
    """Whether a torch.func.vmap is active (at any level of the transform stack)."""
    return any(i.key() == torch._C._functorch.TransformType.Vmap
               for i in torch._C._functorch.get_interpreter_stack() or ())


def recorded(fn, eager_fn, *args):
    """`fn(*args)` as one `_RecordedDirection` node when gradients are wanted, else plainly
    (also under torch.func transforms, which trace `fn` themselves)."""
    if (torch.is_grad_enabled() and any(isinstance(a, Tensor) and a.requires_grad for a in args)
            and torch._C._functorch.peek_interpreter_stack() is None):
        return _RecordedDirection.apply(fn, eager_fn, *args)
    return fn(*args)

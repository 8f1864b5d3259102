"""Helpers several backends share: what keeps every rung a full citizen of autograd.

A backend module provides `run_direction(cell, p, x, state, lengths)` or `run_stack(...)`
(see `rnnbench.torch.stack`) and declares `CAPABILITIES` (`rnnbench.core.capabilities.Capabilities`)
next to it.

The rungs whose backward is not plain autograd (bptt's hand-written BPTT, jit's
TorchScript graph, compile's AOTAutograd graph) cannot serve two requests: a
differentiable gradient (`create_graph=True`, double backward) and batched grad_outputs
(`is_grads_batched`, gradcheck's check_batched_grad).  For those, `differentiable_grads`
re-runs the forward as the `eager` formulation recorded by autograd from the saved
inputs and differentiates it: exact to rounding, paid only by those calls.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rnnbench.core.capabilities import UnsupportedConfigError
from rnnbench.core.params import LayerParams


class ProjectionNotSupportedError(UnsupportedConfigError):
    """proj_size > 0 asked of a backend that does not implement the projection (a ValueError)."""


def under_func_transform() -> bool:
    """Whether a torch.func transform (vmap, grad, jacrev, ...) is active."""
    return torch._C._functorch.peek_interpreter_stack() is not None


def under_vmap() -> bool:
    """Whether a torch.func.vmap is active (at any level of the transform stack)."""
    return any(i.key() == torch._C._functorch.TransformType.Vmap
               for i in torch._C._functorch.get_interpreter_stack() or ())


def differentiable_grads(recompute, inputs, needs, grads):
    """First-order gradients as a differentiable function of the inputs (see the module
    docstring).  `recompute(*inputs)` returns the node's outputs; `needs` is
    ctx.needs_input_grad for `inputs`."""
    create_graph = torch.is_grad_enabled()
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_() if (n and not t.requires_grad) else t
                  for t, n in zip(inputs, needs)]
        outs = recompute(*leaves)
        pairs = [(o, g) for o, g in zip(outs, grads) if o is not None and g is not None and o.requires_grad]
        wrt = [t for t, n in zip(leaves, needs) if n]
        got = iter(torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs],
                                       create_graph=create_graph, allow_unused=True))
    return tuple(next(got) if n else None for n in needs)


def kernel_backward_unusable(grads) -> bool:
    """True under create_graph=True or with batched grad_outputs (see `differentiable_grads`)."""
    return torch.is_grad_enabled() or any(g is not None and _batched(g) for g in grads)


def _batched(t) -> bool:
    # is_grads_batched runs the backward under the legacy vmap (its own tensor kind)
    return torch._C._functorch.is_batchedtensor(t) or torch._C._functorch.is_legacy_batchedtensor(t)


# ---- one node around a direction (jit, compile) ---------------------------------------------------

def flatten(p: LayerParams, x: Tensor, state: tuple, lengths):
    """(tensors, rebuild): the direction's inputs as a flat tuple, and the inverse."""
    keys = tuple(p.extras or {})
    flat = (x, *state, p.w_ih, p.w_hh, p.b_ih, p.b_hh, p.w_hr, *[p.extras[k] for k in keys], lengths)
    n = len(state)

    def rebuild(flat):
        x, rest = flat[0], flat[1:]
        weights, extras = rest[n:n + 5], rest[n + 5:n + 5 + len(keys)]
        return LayerParams(*weights, dict(zip(keys, extras)) or None), x, tuple(rest[:n]), rest[-1]

    return flat, rebuild


class _RecordedDirection(torch.autograd.Function):
    """Forward runs `fn` recording its own graph from detached leaves; backward
    differentiates that graph, or, when it cannot serve the request, the eager formulation."""

    @staticmethod
    def forward(ctx, fn, eager_fn, *flat):
        leaves = [a.detach().requires_grad_(a.requires_grad) if isinstance(a, Tensor) and a.is_floating_point()
                  else a for a in flat]
        with torch.enable_grad():
            outs = fn(*leaves)
        ctx.eager_fn, ctx.graph = eager_fn, (leaves, outs)
        ctx.save_for_backward(*[a if isinstance(a, Tensor) else None for a in flat])
        return tuple(o.detach() for o in outs)

    @staticmethod
    def backward(ctx, *grads):
        needs = ctx.needs_input_grad[2:]
        if kernel_backward_unusable(grads):
            return (None, None, *differentiable_grads(ctx.eager_fn, ctx.saved_tensors, needs, grads))
        leaves, outs = ctx.graph
        pairs = [(o, g) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
        wrt = [leaf for leaf, n in zip(leaves, needs) if n]
        # retain_graph: the outer graph may be run backward again (retain_graph=True); the
        # inner one is freed with this node.
        got = iter(torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], retain_graph=True,
                                       allow_unused=True))
        # contiguous, as nn.LSTM's (TorchScript's optimized graph hands back transposed ones)
        return (None, None, *(_contiguous(next(got)) if n else None for n in needs))


def _contiguous(t):
    return None if t is None else t.contiguous()


def recorded(run, eager_run, cell, p: LayerParams, x: Tensor, state: tuple, lengths):
    """`run(cell, p, x, state, lengths)` as one `_RecordedDirection` node when gradients are
    wanted (else plainly; also under torch.func transforms, which trace `run` themselves).
    Its backward falls back to `eager_run` (same signature) for double backward and batched
    grad_outputs."""
    flat, rebuild = flatten(p, x, state, lengths)
    if not (torch.is_grad_enabled() and any(isinstance(a, Tensor) and a.requires_grad for a in flat)
            and not under_func_transform()):
        return run(cell, p, x, state, lengths)

    def as_flat(fn):
        def call(*flat):
            p, x, state, lengths = rebuild(flat)
            out, final = fn(cell, p, x, state, lengths)
            return (out, *final)
        return call

    out, *final = _RecordedDirection.apply(as_flat(run), as_flat(eager_run), *flat)
    return out, tuple(final)


# ---- contiguous gradients ---------------------------------------------------------------------------

class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward makes the gradient contiguous."""

    @staticmethod
    def forward(ctx, t):
        return t.view_as(t)

    @staticmethod
    def backward(ctx, grad):
        return grad.contiguous()


def contiguous_grad(t: Tensor) -> Tensor:
    """`t`, with its gradient made contiguous: slicing a concatenated weight (the `naive`
    rung's [W_ih | W_hh]) hands autograd's caller strided column blocks, where nn.LSTM's are
    contiguous (and optimizers, `.view` and foreach kernels may rely on that)."""
    if t.requires_grad and torch.is_grad_enabled() and not under_func_transform():
        return _ContiguousGrad.apply(t)
    return t


def in_autocast_dtype(run, cell, p, x, state, lengths):
    """`run(cell, p, x, state, lengths)`; under autocast, with every float input cast to the
    autocast dtype and autocast off inside (`torch.amp.custom_fwd(cast_inputs=...)`'s recipe
    for code autocast cannot see into: an autograd.Function's backward, a TorchScript graph).
    The casts are recorded outside, so float32 parameters still get float32 gradients."""
    device_type = x.device.type
    if not torch.is_autocast_enabled(device_type):
        return run(cell, p, x, state, lengths)
    dtype = torch.get_autocast_dtype(device_type)

    def cast(t):
        return t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t

    p = type(p)(*(({k: cast(v) for k, v in f.items()} if isinstance(f, dict) else cast(f)) for f in p))
    with torch.autocast(device_type, enabled=False):
        return run(cell, p, cast(x), tuple(cast(s) for s in state), lengths)


# ---- the fused rungs' (fused, triton) framework side: GEMMs over all steps around a kernel's time
# loop, and the same recurrence recorded by autograd for what the kernels' backward cannot serve

def input_projection(x, w_ih, b):
    """x W_ih^T + b for all steps: ONE GEMM over T*B rows (recorded by autograd: dx, dW_ih, db)."""
    xg = x.flatten(0, 1) @ w_ih.t()
    return (xg if b is None else xg + b).unflatten(0, x.shape[:2])


def recurrent_weight_grad(dgates: Tensor, h0: Tensor, hs: Tensor) -> Tensor:
    """dW_hh = sum_t dG_t^T h_{t-1}: ONE GEMM over all T*B rows (a padded step's dG is zero)."""
    h_prev = torch.cat([h0.unsqueeze(0), hs[:-1]])
    return dgates.flatten(0, 1).t() @ h_prev.flatten(0, 1)


def recorded_recurrence(step, xg, state: tuple, lengths):
    """A kernel's recurrence recorded by autograd, for gradients autograd must differentiate again
    (create_graph=True) or batch: `step(x_t, state) -> state` over xg, each row past its length
    holding its state and giving a zero output.  Returns (out, *state_n)."""
    outs = []
    for t, x_t in enumerate(xg.unbind(0)):
        new = step(x_t, state)
        if lengths is not None:
            valid = (t < lengths).unsqueeze(1)
            new = tuple(torch.where(valid, n, s) for n, s in zip(new, state))
            outs.append(torch.where(valid, new[0], torch.zeros_like(new[0])))
        else:
            outs.append(new[0])
        state = new
    return (torch.stack(outs), *state)


def lstm_recurrent_step(w_hh):
    """The LSTM step on a projected input x_t (biases in it): `step(x_t, (h, c)) -> (h', c')`."""
    def step(x_t, state):
        h, c = state
        i, f, g, o = (x_t + h @ w_hh.t()).chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c
    return step


def gru_recurrent_step(w_hh, b_hh):
    """The GRU step (reset-after) on a projected input x_t (b_ih in it): `step(x_t, (h,)) -> (h',)`."""
    def step(x_t, state):
        (h,) = state
        x_r, x_z, x_n = x_t.chunk(3, 1)
        h_r, h_z, h_n = (h @ w_hh.t() + b_hh).chunk(3, 1)
        r, z = torch.sigmoid(x_r + h_r), torch.sigmoid(x_z + h_z)
        return ((1 - z) * torch.tanh(x_n + r * h_n) + z * h,)
    return step


def or_zeros(t: Tensor | None, like: Tensor) -> Tensor:
    """An undefined incoming gradient (None) as the zeros it stands for."""
    return torch.zeros_like(like) if t is None else t

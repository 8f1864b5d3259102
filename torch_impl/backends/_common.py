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

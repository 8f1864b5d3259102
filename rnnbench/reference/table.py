"""The reference's cell table: each catalogue cell's `CellStep` (step, step backward) by name.

A `rnnbench.core.catalogue.CellTable`, as each framework's cell table is (`rnnbench.torch.cells.CELLS`,
`rnnbench.jax.cells.CELLS`): the built-in cells come with a hand-written backward
(`rnnbench.reference.steps`); a user's own cell registers its plain step, and its gradient
comes from the complex step method (`complex_step_backward`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rnnbench.core.catalogue import CellDef, CellTable
from .steps import (
    gru_reset_before_step, gru_reset_before_step_backward, gru_step, gru_step_backward, ln_lstm_step,
    ln_lstm_step_backward, lstm_step, lstm_step_backward, peephole_lstm_step, peephole_lstm_step_backward)

COMPLEX_STEP = 1e-30  # imaginary step h: f(x + ih) = f(x) + ih f'(x) + O(h^2), no cancellation


@dataclass(frozen=True, eq=False)
class CellStep:
    """How the reference runs one cell: `step(x, state, p) -> (new_state, saved)` and its
    `step_backward` (see `rnnbench.reference`).

    `hand_written` is False when `step_backward` is the complex-step derivative of `plain`,
    the plain step a user registered (then `step` is `plain` saving its inputs).  Two entries
    are the same registration when they come from the same functions.
    """

    step: Callable
    step_backward: Callable
    hand_written: bool = True
    plain: Callable | None = None

    def __eq__(self, other) -> bool:
        if not isinstance(other, CellStep):
            return NotImplemented
        if self.plain is not None or other.plain is not None:
            return self.plain is other.plain and self.hand_written == other.hand_written
        return self.step is other.step and self.step_backward is other.step_backward

    __hash__ = object.__hash__


def complex_step_backward(plain_step: Callable, h: float = COMPLEX_STEP) -> Callable:
    """A `step_backward` for `plain_step(x, state, p) -> new_state`, by the complex step method.

    For every input scalar u, Im(step(u + i h)) / h is the exact derivative (up to O(h^2),
    h = 1e-30: machine precision in float64) with no subtractive cancellation, provided
    the step is complex-analytic in its inputs (complex-safe NumPy; see `rnnbench.reference`).
    Rows of x and state are sequences, which a cell never mixes: one evaluation perturbs
    column j of every row at once and yields d/d(x[b, j]) for all b.  Each parameter
    scalar costs one evaluation: fine for the tiny sizes of tests and vectors, not for
    benchmarks.
    """
    def backward(d_new, saved, p, grads):
        x, state = saved

        def directional(outputs):
            """Per-row sum over outputs of cotangent * d(output)/d(perturbed input)."""
            return sum((d * (np.imag(o) / h)).sum(axis=-1) for d, o in zip(d_new, outputs))

        def column_grads(array, evaluate):
            out = np.zeros(array.shape)
            for j in range(array.shape[-1]):
                perturbed = array.astype(np.complex128)
                perturbed[:, j] += 1j * h
                out[:, j] = directional(evaluate(perturbed))
            return out

        dx = column_grads(x, lambda xc: plain_step(xc, state, p))
        d_state = tuple(
            column_grads(state[k], lambda sc, k=k: plain_step(x, state[:k] + (sc,) + state[k + 1:], p))
            for k in range(len(state)))
        for name, g in grads.items():
            value = p[name]
            for idx in np.ndindex(value.shape):
                perturbed = value.astype(np.complex128)
                perturbed[idx] += 1j * h
                g[idx] += directional(plain_step(x, state, {**p, name: perturbed})).sum()
        return dx, d_state

    return backward


def _cell_step(defn: CellDef, step: Callable, step_backward: Callable | None = None) -> CellStep:
    """The table's entry for `step` (and `step_backward`): see `register_cell_step`."""
    if not callable(step) or (step_backward is not None and not callable(step_backward)):
        raise TypeError(f"step and step_backward must be callables for cell {defn.name!r}")
    if step_backward is not None:
        return CellStep(step, step_backward)

    def saving_step(x, state, p):
        return tuple(step(x, state, p)), (x, tuple(state))
    return CellStep(saving_step, complex_step_backward(step), hand_written=False, plain=step)


CELLS = CellTable("NumPy reference", "rnnbench.reference.register_cell_step", _cell_step)


def register_cell_step(name: str, step: Callable, step_backward: Callable | None = None) -> CellStep:
    """Teach the reference a cell already in the catalogue (`rnnbench.core.catalogue.register_cell`).

    With `step_backward`, `step(x, state, p)` returns `(new_state, saved)` and the pair is
    used as is.  Without it, `step(x, state, p)` returns `new_state` only and gradients come
    from `complex_step_backward(step)`.  Re-registering the same functions is a no-op;
    different ones under a taken name raise `ValueError`.
    """
    return CELLS.register(name, step, step_backward)


def get_cell_step(name: str) -> CellStep:
    """The `CellStep` of a cell; a clear error for cells without a NumPy step."""
    return CELLS.get(name)


for _name, _pair in {"lstm": (lstm_step, lstm_step_backward), "gru": (gru_step, gru_step_backward),
                     "ln_lstm": (ln_lstm_step, ln_lstm_step_backward),
                     "peephole_lstm": (peephole_lstm_step, peephole_lstm_step_backward),
                     "gru_reset_before": (gru_reset_before_step, gru_reset_before_step_backward)}.items():
    CELLS.register(_name, *_pair, built_in=True)

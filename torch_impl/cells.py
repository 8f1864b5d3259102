"""Catalogue cells in PyTorch: one step function per cell, and the direction loop they share.

Mirrors `jax_impl/cells.py` (the JAX cell math) and `shared/reference.py` (the NumPy
reference): a cell is its equations (the `CellDef` in `shared.cells`) plus, here,

    project(x2d, p) -> x_proj          the part hoisted out of the time loop: ONE GEMM
                                       over all T*B rows (default: x W_ih^T + b_ih)
    step(x_proj_t, state, p) -> state  one time step, batch-major: x_proj_t (B, G*H),
                                       state = (h,) or (h, c), each (B, H)

`p` maps the canonical short names of one layer and direction (`weight_ih`,
`weight_hh`, `bias_ih`, `bias_hh`, and each extra parameter's prefix, e.g.
`layernorm_c_weight`, `peephole`) to tensors; `bias_ih`/`bias_hh` are None when the
spec has `bias=False`.  `h'` (the new state's first entry) is also the step's output.

`lstm` and `gru` keep their tuned paths in `backends/eager.py`; every other cell runs
through `run_direction` here (the `eager` rung) or its compiled step (the `compile`
rung), composed over layers, directions and lengths by `torch_impl.driver`, so adding a
cell never means editing a driver:

    from shared.cells import CellDef, register_cell
    import torch_impl
    register_cell(CellDef("mgu", "gru", ("f", "n"), "...", "equations"))
    torch_impl.register_cell("mgu", step)            # (+ project=... when it hoists more)
    rnn = torch_impl.RNN("mgu", 16, 32, num_layers=2, bidirectional=True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from shared.cells import get_cell

LN_EPS = 1e-5  # nn.LayerNorm's default, as shared.cells documents


def linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """x W^T + b with one `addmm` (just `mm` when bias is None)."""
    if bias is None:
        return torch.mm(x, weight.t())
    return torch.addmm(bias, x, weight.t())


def default_project(x2d: Tensor, p: dict) -> Tensor:
    """x W_ih^T + b_ih for every step at once (the input half of every gate)."""
    return linear(x2d, p["weight_ih"], p["bias_ih"])


@dataclass(frozen=True)
class TorchCell:
    name: str
    step: Callable  # step(x_proj_t, state, p) -> new state tuple
    project: Callable = default_project  # project(x2d (T*B, I), p) -> (T*B, G*H)


TORCH_CELLS: dict[str, TorchCell] = {}


def register_cell(name: str, step: Callable, project: Callable | None = None) -> TorchCell:
    """Give catalogue cell `name` its torch step (and optionally its hoisted projection).

    Register the `CellDef` first (`shared.cells.register_cell`).  Registering the same
    functions again is harmless; different ones under a registered name raise.
    """
    get_cell(name)  # raises naming the catalogue's cells when `name` is not in it
    if name in ("lstm", "gru"):
        raise ValueError(f"{name!r} is implemented by the backends themselves; register a new cell name")
    cell = TorchCell(name, step, project or default_project)
    if name in TORCH_CELLS and TORCH_CELLS[name] != cell:
        raise ValueError(f"a different torch step is already registered for cell {name!r}")
    TORCH_CELLS[name] = cell
    return cell


def get_torch_cell(name: str) -> TorchCell:
    try:
        return TORCH_CELLS[name]
    except KeyError:
        raise ValueError(f"cell {name!r} has no torch step; add one with "
                         f"torch_impl.register_cell({name!r}, step)") from None


def has_torch_cell(name: str) -> bool:
    return name in ("lstm", "gru") or name in TORCH_CELLS


# ---- the catalogue cells ----------------------------------------------------------------------

def ln_lstm_project(x2d: Tensor, p: dict) -> Tensor:
    """LN_ih(W_ih x + b_ih) for all steps: it does not depend on h, so it is hoisted whole."""
    proj = linear(x2d, p["weight_ih"], p["bias_ih"])
    return F.layer_norm(proj, (proj.shape[1],), p["layernorm_ih_weight"], p["layernorm_ih_bias"], LN_EPS)


def ln_lstm_step(x_proj_t: Tensor, state: tuple, p: dict) -> tuple:
    """LayerNorm LSTM (Ba et al. 2016), gates i, f, g, o; x_proj_t = LN_ih(W_ih x + b_ih):

        a = x_proj_t + LN_hh(W_hh h + b_hh)              (each LN over the 4H features)
        c' = LN_c(sigmoid(a_f) * c + sigmoid(a_i) * tanh(a_g))
        h' = sigmoid(a_o) * tanh(c')
    """
    h, c = state
    H = c.shape[1]
    rec = linear(h, p["weight_hh"], p["bias_hh"])
    a = x_proj_t + F.layer_norm(rec, (4 * H,), p["layernorm_hh_weight"], p["layernorm_hh_bias"], LN_EPS)
    i, f, g, o = a.chunk(4, 1)
    c_raw = torch.addcmul(torch.sigmoid(f) * c, torch.sigmoid(i), torch.tanh(g))
    c_new = F.layer_norm(c_raw, (H,), p["layernorm_c_weight"], p["layernorm_c_bias"], LN_EPS)
    return torch.sigmoid(o) * torch.tanh(c_new), c_new


def lstm_family_project(x2d: Tensor, p: dict) -> Tensor:
    """x W_ih^T + b_ih + b_hh: both biases are additive in every gate, so both are hoisted."""
    bias = None if p["bias_ih"] is None else p["bias_ih"] + p["bias_hh"]
    return linear(x2d, p["weight_ih"], bias)


def peephole_lstm_step(x_proj_t: Tensor, state: tuple, p: dict) -> tuple:
    """Peephole LSTM (Gers and Schmidhuber 2000), gates i, f, g, o; peephole = [p_i, p_f, p_o]:

        [a_i, a_f, a_g, a_o] = x_proj_t + h W_hh^T       (x_proj_t = W_ih x + b_ih + b_hh)
        i = sigmoid(a_i + p_i * c);  f = sigmoid(a_f + p_f * c);  g = tanh(a_g)
        c' = f * c + i * g
        o = sigmoid(a_o + p_o * c');  h' = o * tanh(c')
    """
    h, c = state
    a = torch.addmm(x_proj_t, h, p["weight_hh"].t())
    a_i, a_f, a_g, a_o = a.chunk(4, 1)
    p_i, p_f, p_o = p["peephole"].chunk(3)
    i = torch.sigmoid(torch.addcmul(a_i, p_i, c))
    f = torch.sigmoid(torch.addcmul(a_f, p_f, c))
    c_new = torch.addcmul(f * c, i, torch.tanh(a_g))
    o = torch.sigmoid(torch.addcmul(a_o, p_o, c_new))
    return o * torch.tanh(c_new), c_new


def gru_reset_before_step(x_proj_t: Tensor, state: tuple, p: dict) -> tuple:
    """GRU, reset before the recurrent matmul (Cho et al. 2014), gates r, z, n:

        [x_r, x_z, x_n] = x_proj_t                      (= W_ih x + b_ih + b_hh, all hoisted)
        r, z = sigmoid([x_r, x_z] + h W_h{r,z}^T)
        n = tanh(x_n + (r * h) W_hn^T);  h' = n + z * (h - n)  (= (1 - z) * n + z * h)
    """
    (h,) = state
    H = h.shape[1]
    w_rz, w_n = p["weight_hh"].split([2 * H, H])
    x_rz, x_n = x_proj_t.split([2 * H, H], 1)
    r, z = torch.sigmoid(torch.addmm(x_rz, h, w_rz.t())).chunk(2, 1)
    n = torch.tanh(torch.addmm(x_n, r * h, w_n.t()))
    return (n + z * (h - n),)


register_cell("ln_lstm", ln_lstm_step, ln_lstm_project)
register_cell("peephole_lstm", peephole_lstm_step, lstm_family_project)
register_cell("gru_reset_before", gru_reset_before_step, lstm_family_project)


# ---- the direction loop every custom cell shares ----------------------------------------------

def layer_dict(w_ih: Tensor, w_hh: Tensor, b_ih: Tensor | None, b_hh: Tensor | None,
               extras: dict | None) -> dict:
    """The step's `p`: canonical short names -> tensors (biases None without bias)."""
    return {"weight_ih": w_ih, "weight_hh": w_hh, "bias_ih": b_ih, "bias_hh": b_hh, **(extras or {})}


def project_all(cell: TorchCell, x: Tensor, p: dict) -> Tensor:
    """x (T, B, I) -> cell.project over all T*B rows, as (T, B, G*H)."""
    T, B = x.shape[0], x.shape[1]
    return cell.project(x.reshape(T * B, x.shape[2]), p).view(T, B, -1)


def valid_steps(lengths: Tensor | None, seq_len: int) -> list[Tensor]:
    """Per-step (B, 1) masks, True where t < lengths[b]; empty list without lengths."""
    if lengths is None:
        return []
    steps = torch.arange(seq_len, device=lengths.device).unsqueeze(1)
    return list((steps < lengths.unsqueeze(0)).unsqueeze(-1).unbind(0))


def time_loop(step: Callable, x_proj: Tensor, state: tuple, p: dict, lengths: Tensor | None = None):
    """The masked time loop: `step(x_proj[t], state, p)` for t = 0 .. T-1 over `x_proj.unbind(0)`.

    With lengths, a finished sequence holds its state and outputs zero (PyTorch's packed
    semantics).  Returns (outputs (T, B, H_out) stacked once, the final state tuple).
    """
    masks = valid_steps(lengths, x_proj.shape[0])
    outputs = []
    for t, x_t in enumerate(x_proj.unbind(0)):
        new = step(x_t, state, p)
        if masks:
            m = masks[t]
            state = tuple(torch.where(m, n, o) for n, o in zip(new, state))
            outputs.append(new[0] * m)
        else:
            state = tuple(new)
            outputs.append(new[0])
    return torch.stack(outputs), state


def run_direction(cell_name: str, x: Tensor, h0: Tensor, c0: Tensor | None, w_ih: Tensor, w_hh: Tensor,
                  b_ih: Tensor | None, b_hh: Tensor | None, w_hr: Tensor | None, lengths: Tensor | None,
                  extras: dict | None = None, *, step: Callable | None = None):
    """One layer in one direction of a catalogue cell (see `backends._common`).

    The projection is hoisted (one GEMM for all T steps); `time_loop` runs the cell's
    step; a compiled step (the `compile` rung) masks inside itself instead:
    step(x_t, state, p[, m]) -> (state, out).
    """
    if w_hr is not None:
        raise ValueError(f"cell {cell_name!r} does not support proj_size (only lstm does)")
    cell = get_torch_cell(cell_name)
    p = layer_dict(w_ih, w_hh, b_ih, b_hh, extras)
    x_proj = project_all(cell, x, p)
    state = (h0,) if c0 is None else (h0, c0)
    if step is None:
        out, state = time_loop(cell.step, x_proj, state, p, lengths)
    else:
        masks = valid_steps(lengths, x.shape[0])
        outputs = []
        for t, x_t in enumerate(x_proj.unbind(0)):
            state, o = step(x_t, state, p, masks[t]) if masks else step(x_t, state, p)
            outputs.append(o)
        out = torch.stack(outputs)
    return out, state[0], (state[1] if len(state) == 2 else None)

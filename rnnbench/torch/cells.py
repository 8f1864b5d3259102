"""Every cell in PyTorch, plain lstm and gru included, and the one masked time loop.

Mirrors `rnnbench/jax/cells.py`.  A cell is its equations, written once in its `CellDef`
(`rnnbench.core.catalogue`, rendered in docs/cells.md), plus, here, a `TorchCell`:

    prepare(p) -> q                    once per layer, direction and call: the weights in the
                                       layout the step wants (transposes, gate reorder); `p` is
                                       a `driver.LayerParams`; default: the canonical short
                                       names (`weight_ih`, `weight_hh`, `bias_ih`, `bias_hh`,
                                       `weight_hr`, each extra's prefix) -> tensors or None
    project(x2d, q) -> x_proj          hoisted out of the time loop: ONE GEMM over all T*B
                                       rows (default: x W_ih^T + b_ih)
    step(x_proj_t, state, q) -> state  one time step: x_proj_t (B, G*H), state = (h,) or
                                       (h, c), each (B, H); the new h is also the output

`time_loop` runs a step over time with PyTorch's packed-sequence masking; every
loop-shaped backend (eager, compile) uses it; `scan_loop` is the same loop as torch's scan
operator, for the `scan` backend.  Adding a cell never means editing a
driver or a backend:

    from rnnbench.core.catalogue import CellDef, register_cell
    import rnnbench.torch
    register_cell(CellDef("mgu", "gru", ("f", "n"), "...", "equations"))
    rnnbench.torch.register_cell("mgu", step)            # (+ project=... when it hoists more)
    rnn = rnnbench.torch.RNN("mgu", 16, 32, num_layers=2, bidirectional=True)
"""

from __future__ import annotations

from typing import Callable, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from rnnbench.core.catalogue import CellTable, FrameworkCell

LN_EPS = 1e-5  # nn.LayerNorm's default, as the catalogue says


def linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """x W^T + b with one `addmm` (just `mm` when bias is None)."""
    if bias is None:
        return torch.mm(x, weight.t())
    return torch.addmm(bias, x, weight.t())


def default_project(x2d: Tensor, q: dict) -> Tensor:
    """x W_ih^T + b_ih for every step at once (the input half of every gate)."""
    return linear(x2d, q["weight_ih"], q["bias_ih"])


TorchCell = FrameworkCell
CELLS = CellTable.for_framework("torch", "rnnbench.torch", default_project)
TORCH_CELLS = CELLS.cells
register_cell = CELLS.register
get_torch_cell = CELLS.get
has_torch_cell = CELLS.has


# ---- lstm and gru: PyTorch's cells, in the layout eager PyTorch runs fastest ---------------------
#
# LSTM gate rows are reordered once per call from i, f, g, o to i, f, o, g, so ONE sigmoid covers
# i, f and o and one tanh covers g; `addcmul` fuses f * c + i * g; gates are split with `split` /
# `chunk` (whose backward concatenates) rather than sliced.  `lstm_update` and `gru_update` are
# written in the TorchScript subset: the `jit` backend scripts a loop around them.

def ifog(w: Tensor, hidden_size: int) -> Tensor:
    """Reorder LSTM gate rows (dim 0) from i, f, g, o to i, f, o, g."""
    H = hidden_size
    return torch.cat([w[:2 * H], w[3 * H:], w[2 * H:3 * H]])


def lstm_update(x_proj_t: Tensor, h: Tensor, c: Tensor, w_hh_t: Tensor,
                w_hr_t: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """One LSTM step with gate columns in i, f, o, g order; x_proj_t holds both biases."""
    H = c.shape[1]
    gates = torch.addmm(x_proj_t, h, w_hh_t)
    ifo, g = torch.split(gates, [3 * H, H], 1)
    i, f, o = torch.sigmoid(ifo).chunk(3, 1)
    c_new = torch.addcmul(f * c, i, torch.tanh(g))
    h_new = o * torch.tanh(c_new)
    if w_hr_t is not None:
        h_new = torch.mm(h_new, w_hr_t)
    return h_new, c_new


def gru_update(x_proj_t: Tensor, h: Tensor, w_hh_t: Tensor, b_hh: Optional[Tensor]) -> Tensor:
    """One GRU step; x_proj_t = W_ih x + b_ih; the reset gate scales W_hn h + b_hn only."""
    H = h.shape[1]
    if b_hh is not None:
        h_gates = torch.addmm(b_hh, h, w_hh_t)
    else:
        h_gates = torch.mm(h, w_hh_t)
    x_rz, x_n = torch.split(x_proj_t, [2 * H, H], 1)
    h_rz, h_n = torch.split(h_gates, [2 * H, H], 1)
    r, z = torch.sigmoid(x_rz + h_rz).chunk(2, 1)
    n = torch.tanh(torch.addcmul(x_n, r, h_n))
    return n + z * (h - n)


def lstm_prepare(p) -> dict:
    H = p.w_hh.shape[0] // 4
    bias = None if p.b_ih is None else ifog(p.b_ih + p.b_hh, H)
    return {"weight_ih": ifog(p.w_ih, H), "bias": bias, "w_hh_t": ifog(p.w_hh, H).t(),
            "w_hr_t": None if p.w_hr is None else p.w_hr.t()}


def lstm_project(x2d: Tensor, q: dict) -> Tensor:
    return linear(x2d, q["weight_ih"], q["bias"])


def lstm_step(x_proj_t: Tensor, state: tuple, q: dict) -> tuple:
    return lstm_update(x_proj_t, state[0], state[1], q["w_hh_t"], q["w_hr_t"])


def gru_prepare(p) -> dict:
    return {"weight_ih": p.w_ih, "bias_ih": p.b_ih, "w_hh_t": p.w_hh.t(), "bias_hh": p.b_hh}


def gru_step(x_proj_t: Tensor, state: tuple, q: dict) -> tuple:
    return (gru_update(x_proj_t, state[0], q["w_hh_t"], q["bias_hh"]),)


# ---- the other catalogue cells -------------------------------------------------------------------

def ln_lstm_project(x2d: Tensor, q: dict) -> Tensor:
    """LN_ih(W_ih x + b_ih) for all steps: it does not depend on h, so it is hoisted whole."""
    proj = linear(x2d, q["weight_ih"], q["bias_ih"])
    return F.layer_norm(proj, (proj.shape[1],), q["layernorm_ih_weight"], q["layernorm_ih_bias"], LN_EPS)


def ln_lstm_step(x_proj_t: Tensor, state: tuple, q: dict) -> tuple:
    """x_proj_t = LN_ih(W_ih x + b_ih); LN_hh of the recurrent part is in the step."""
    h, c = state
    H = c.shape[1]
    rec = linear(h, q["weight_hh"], q["bias_hh"])
    a = x_proj_t + F.layer_norm(rec, (4 * H,), q["layernorm_hh_weight"], q["layernorm_hh_bias"], LN_EPS)
    i, f, g, o = a.chunk(4, 1)
    c_raw = torch.addcmul(torch.sigmoid(f) * c, torch.sigmoid(i), torch.tanh(g))
    c_new = F.layer_norm(c_raw, (H,), q["layernorm_c_weight"], q["layernorm_c_bias"], LN_EPS)
    return torch.sigmoid(o) * torch.tanh(c_new), c_new


def lstm_family_project(x2d: Tensor, q: dict) -> Tensor:
    """x W_ih^T + b_ih + b_hh: both biases are additive in every gate, so both are hoisted."""
    bias = None if q["bias_ih"] is None else q["bias_ih"] + q["bias_hh"]
    return linear(x2d, q["weight_ih"], bias)


def peephole_lstm_step(x_proj_t: Tensor, state: tuple, q: dict) -> tuple:
    """x_proj_t = W_ih x + b_ih + b_hh; peephole = [p_i, p_f, p_o]."""
    h, c = state
    a = torch.addmm(x_proj_t, h, q["weight_hh"].t())
    a_i, a_f, a_g, a_o = a.chunk(4, 1)
    p_i, p_f, p_o = q["peephole"].chunk(3)
    i = torch.sigmoid(torch.addcmul(a_i, p_i, c))
    f = torch.sigmoid(torch.addcmul(a_f, p_f, c))
    c_new = torch.addcmul(f * c, i, torch.tanh(a_g))
    o = torch.sigmoid(torch.addcmul(a_o, p_o, c_new))
    return o * torch.tanh(c_new), c_new


def gru_reset_before_step(x_proj_t: Tensor, state: tuple, q: dict) -> tuple:
    """x_proj_t = W_ih x + b_ih + b_hh, all hoisted (b_hn is outside the reset here);
    h' = n + z * (h - n) is (1 - z) * n + z * h with one fewer multiply."""
    (h,) = state
    H = h.shape[1]
    w_rz, w_n = q["weight_hh"].split([2 * H, H])
    x_rz, x_n = x_proj_t.split([2 * H, H], 1)
    r, z = torch.sigmoid(torch.addmm(x_rz, h, w_rz.t())).chunk(2, 1)
    n = torch.tanh(torch.addmm(x_n, r * h, w_n.t()))
    return (n + z * (h - n),)


_BUILT_IN = {
    "lstm": dict(step=lstm_step, project=lstm_project, prepare=lstm_prepare),
    "gru": dict(step=gru_step, prepare=gru_prepare),
    "ln_lstm": dict(step=ln_lstm_step, project=ln_lstm_project),
    "peephole_lstm": dict(step=peephole_lstm_step, project=lstm_family_project),
    "gru_reset_before": dict(step=gru_reset_before_step, project=lstm_family_project),
}
for _name, _parts in _BUILT_IN.items():
    register_cell(_name, **_parts, built_in=True)


# ---- the one masked time loop ----------------------------------------------------------------------

def valid_mask(lengths: Tensor, seq_len: int) -> Tensor:
    """Boolean (T, B, 1): True where step t is inside sequence b (t < lengths[b])."""
    steps = torch.arange(seq_len, device=lengths.device).unsqueeze(1)
    return (steps < lengths.unsqueeze(0)).unsqueeze(-1)


def valid_steps(lengths: Optional[Tensor], seq_len: int) -> List[Tensor]:
    """Per-step (B, 1) masks, True where t < lengths[b]; an empty list without lengths."""
    if lengths is None:
        return []
    return list(valid_mask(lengths, seq_len).unbind(0))


def mask_step(m: Optional[Tensor], new: tuple, old: tuple) -> tuple:
    """(state, output) after a step with mask m (B, 1): a finished sequence (m False) holds its
    state and outputs zero; without a mask, the new state."""
    if m is None:
        return tuple(new), new[0]
    return tuple(torch.where(m, n, o) for n, o in zip(new, old)), new[0] * m


def advance(masks: List[Tensor], t: int, new: tuple, old: tuple) -> tuple:
    """(state, output) after step t (`mask_step` with masks[t]; no masks: the new state).

    Every Python loop masks with it (`time_loop`, `naive`, `cell_loop`), `compile` calls
    `mask_step` inside its compiled step and `scan_loop` inside its combine function.  Two rungs
    mask their own way: `jit`'s scripted loops write the same two `torch.where`s inline
    (TorchScript needs the state as typed tensors, not a tuple of any length), and `bptt`'s
    kernels zero the outputs past each length after their forward (see `backends.bptt.lstm_gru`)."""
    return mask_step(masks[t] if masks else None, new, old)


def project_all(cell: TorchCell, x: Tensor, q: dict) -> Tensor:
    """x (T, B, I) -> cell.project over all T*B rows, as (T, B, G*H)."""
    T, B = x.shape[0], x.shape[1]
    x_proj = cell.project(x.reshape(T * B, x.shape[2]), q)
    return x_proj.view(T, B, x_proj.shape[1])


def time_loop(step: Callable, x_proj: Tensor, state: tuple, q: dict, lengths: Tensor | None = None, *,
              masks_inside: bool = False):
    """`step(x_proj[t], state, q)` for t = 0 .. T-1, walking `x_proj.unbind(0)` (whose
    backward stacks the step gradients once, where `x[t]` writes a zero tensor per step).

    With lengths, a finished sequence holds its state and outputs zero.  `masks_inside`:
    the step takes the mask itself, `step(x_t, state, q[, m]) -> (state, out)` (the
    `compile` backend fuses it into the compiled graph).  Returns (outputs (T, B, H_out)
    stacked once, the final state tuple).
    """
    masks = valid_steps(lengths, x_proj.shape[0])
    outputs = []
    for t, x_t in enumerate(x_proj.unbind(0)):
        if masks_inside:
            state, out = step(x_t, state, q, masks[t]) if masks else step(x_t, state, q)
        else:
            state, out = advance(masks, t, step(x_t, state, q), state)
        outputs.append(out)
    return torch.stack(outputs), state


def _as_carry(new: Tensor, carry: Tensor) -> Tensor:
    """A fresh copy of a step's new state in the carry's dtype.  Under autocast a step can return
    a state in the lower compute dtype (an LSTM projection's GEMM gives h in bfloat16 from a float32
    h_0), where the Python loops simply go on in it; scan's carry keeps one dtype, and the wider
    one holds those values exactly.  A state wider than the carry is left for scan to refuse."""
    if new.dtype != carry.dtype and torch.promote_types(new.dtype, carry.dtype) == carry.dtype:
        return new.to(carry.dtype)
    return new.clone()


def scan_loop(step: Callable, x_proj: Tensor, state: tuple, q: dict, lengths: Tensor | None = None):
    """`time_loop` as torch's scan operator (`torch._higher_order_ops.scan`), the loop of
    `rnnbench.jax.cells.time_loop` (`lax.scan`): one loop that `torch.compile(fullgraph=True)`
    lowers whole, forward and backward.  Same masking (`mask_step`), same return.

    Inductor refuses a scan whose carry or per-step output aliases an input or another output
    ("scan might be aliasing the input or the output"): the initial state, the carry and the
    output are fresh tensors (`clone`, which Inductor fuses into the step's pointwise kernel).
    """
    from torch._higher_order_ops.scan import scan

    def combine(carry, xs):
        x_t, valid = xs if lengths is not None else (xs, None)
        new, out = mask_step(valid, step(x_t, carry, q), carry)
        return tuple(_as_carry(n, c) for n, c in zip(new, carry)), out.clone()

    xs = x_proj if lengths is None else (x_proj, valid_mask(lengths, x_proj.shape[0]))
    final, outputs = scan(combine, tuple(s.clone() for s in state), xs)
    return outputs, tuple(final)

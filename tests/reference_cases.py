"""Helpers several test modules share: small cases for a spec, and torch.nn-based runners
of the same computation as the reference (PyTorch's own modules and autograd)."""

from __future__ import annotations

import numpy as np
import torch

from rnnbench.core.params import init_params
from rnnbench.core.spec import RNNSpec

TORCH_ATOL = 1e-12


def make_case(spec: RNNSpec, T: int, B: int, *, seed: int = 0, initial_state: bool = True,
              lengths=None):
    """Random inputs/params/cotangents for `spec` (standard normal; PyTorch-style init)."""
    rng = np.random.default_rng(seed)
    params = init_params(spec, rng)
    x_shape = (B, T, spec.input_size) if spec.batch_first else (T, B, spec.input_size)
    x = rng.standard_normal(x_shape)
    shapes = spec.state_shapes(B)
    h0 = rng.standard_normal(shapes["h"]) if initial_state else None
    c0 = rng.standard_normal(shapes["c"]) if initial_state and spec.family == "lstm" else None
    lengths = None if lengths is None else np.asarray(lengths, dtype=np.int64)
    out_shape = x_shape[:2] + (spec.output_size,)
    cot = {"output": rng.standard_normal(out_shape), "h_n": rng.standard_normal(shapes["h"])}
    if spec.family == "lstm":
        cot["c_n"] = rng.standard_normal(shapes["c"])
    if spec.cell_def.extra_params:
        perturb_extras(spec, params, rng)
    return dict(params=params, x=x, h0=h0, c0=c0, lengths=lengths), cot


def perturb_extras(spec: RNNSpec, params, rng) -> None:
    """Move a custom cell's extra parameters away from their init (LN gains 1, biases 0),
    in place, so their gradients and every term they multiply are exercised."""
    for extra in spec.cell_def.extra_params:
        for layer, direction in spec.layers_and_directions():
            name = f"{extra.prefix}_{spec.suffix(layer, direction)}"
            params[name] = params[name] + 0.3 * rng.standard_normal(params[name].shape)


def run_torch(spec: RNNSpec, params, x, h0=None, c0=None, lengths=None, cotangents=None, *,
              dtype: str = "float64"):
    """The same dict as `reference.run_case`, computed by torch.nn.LSTM/GRU in `dtype`.

    Results come back as float64 NumPy arrays.  (Also used by tests/vectors/test_vectors.py.)
    Custom cells (no nn module) run through `run_torch_cells`, autograd over TORCH_STEPS.
    """
    if spec.cell not in ("lstm", "gru"):
        return run_torch_cells(spec, params, x, h0, c0, lengths, cotangents, dtype=dtype)
    tdtype = getattr(torch, dtype)

    def tensor(a, grad=False):
        return torch.tensor(np.asarray(a), dtype=tdtype, requires_grad=grad)

    module_cls = torch.nn.LSTM if spec.cell == "lstm" else torch.nn.GRU
    module = module_cls(**spec.torch_kwargs()).to(tdtype)
    module.load_state_dict({k: tensor(v) for k, v in params.items()})
    xt = tensor(x, grad=True)
    states = []
    if h0 is not None:
        states.append(tensor(h0, grad=True))
        if spec.cell == "lstm":
            states.append(tensor(c0, grad=True))
    hx = None if not states else (tuple(states) if spec.cell == "lstm" else states[0])
    inp = xt
    if lengths is not None:
        inp = torch.nn.utils.rnn.pack_padded_sequence(
            xt, torch.tensor(np.asarray(lengths)), batch_first=spec.batch_first, enforce_sorted=False)
    out, hn = module(inp, hx)
    if lengths is not None:
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(
            out, batch_first=spec.batch_first, total_length=x.shape[1 if spec.batch_first else 0])
    result = {"output": out, "h_n": hn[0] if spec.cell == "lstm" else hn}
    if spec.cell == "lstm":
        result["c_n"] = hn[1]
    if cotangents is not None:
        loss = sum((result[k] * tensor(cotangents[k])).sum() for k in result)
        loss.backward()
    grads = {}
    if cotangents is not None:
        grads["grad/x"] = xt.grad
        if states:
            grads["grad/h0"] = states[0].grad
            if spec.cell == "lstm":
                grads["grad/c0"] = states[1].grad
        for name, p in module.named_parameters():
            grads[f"grad/{name}"] = p.grad
    result.update(grads)
    return {k: v.detach().double().numpy() for k, v in result.items()}


# ---- custom cells in plain torch autograd: an independent check of the hand-written backward ----
# Written from the equations in rnnbench/core/catalogue.py, with torch's own layer_norm; the driver
# below shares no code with the reference (gathers and a scatter by index, not a loop
# that writes rows).

def _torch_ln_lstm(x, state, p):
    h, c = state
    F = torch.nn.functional
    H = c.shape[-1]
    gi = F.layer_norm(x @ p["weight_ih"].T + p["bias_ih"], (4 * H,), p["layernorm_ih_weight"],
                      p["layernorm_ih_bias"], eps=1e-5)
    gh = F.layer_norm(h @ p["weight_hh"].T + p["bias_hh"], (4 * H,), p["layernorm_hh_weight"],
                      p["layernorm_hh_bias"], eps=1e-5)
    i, f, g, o = (gi + gh).chunk(4, dim=-1)
    c_new = F.layer_norm(torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g), (H,),
                         p["layernorm_c_weight"], p["layernorm_c_bias"], eps=1e-5)
    return torch.sigmoid(o) * torch.tanh(c_new), c_new


def _torch_peephole_lstm(x, state, p):
    h, c = state
    i, f, g, o = (x @ p["weight_ih"].T + p["bias_ih"] + h @ p["weight_hh"].T + p["bias_hh"]).chunk(4, dim=-1)
    p_i, p_f, p_o = p["peephole"].chunk(3)
    c_new = torch.sigmoid(f + p_f * c) * c + torch.sigmoid(i + p_i * c) * torch.tanh(g)
    return torch.sigmoid(o + p_o * c_new) * torch.tanh(c_new), c_new


def _torch_gru_reset_before(x, state, p):
    (h,) = state
    W_ir, W_iz, W_in = p["weight_ih"].chunk(3)
    W_hr, W_hz, W_hn = p["weight_hh"].chunk(3)
    b_ir, b_iz, b_in = p["bias_ih"].chunk(3)
    b_hr, b_hz, b_hn = p["bias_hh"].chunk(3)
    r = torch.sigmoid(x @ W_ir.T + b_ir + h @ W_hr.T + b_hr)
    z = torch.sigmoid(x @ W_iz.T + b_iz + h @ W_hz.T + b_hz)
    n = torch.tanh(x @ W_in.T + b_in + (r * h) @ W_hn.T + b_hn)
    return ((1 - z) * n + z * h,)


TORCH_STEPS = {"ln_lstm": _torch_ln_lstm, "peephole_lstm": _torch_peephole_lstm,
               "gru_reset_before": _torch_gru_reset_before}


def run_torch_cells(spec: RNNSpec, params, x, h0=None, c0=None, lengths=None, cotangents=None, *,
                    dtype: str = "float64", step=None):
    """`reference.run_case`'s dict by torch autograd over a cell step (TORCH_STEPS[spec.cell]
    unless `step` is given): step(x, state, p) -> new state tuple, p keyed by short names."""
    step = step or TORCH_STEPS[spec.cell]
    tdtype = getattr(torch, dtype)
    lstm = spec.family == "lstm"

    def tensor(a, grad=False):
        return torch.tensor(np.asarray(a), dtype=tdtype, requires_grad=grad)

    tp = {name: tensor(v, grad=True) for name, v in params.items()}
    xt = tensor(x, grad=True)
    h0t = tensor(h0, grad=True) if h0 is not None else None
    c0t = tensor(c0, grad=True) if c0 is not None else None
    inp = xt.transpose(0, 1) if spec.batch_first else xt
    T, B = inp.shape[:2]
    L = torch.tensor(np.asarray(lengths) if lengths is not None else np.full(B, T))
    t = torch.arange(T)[:, None]
    valid = t < L[None, :]                                   # (T, B): step s / time t exists
    shapes = spec.state_shapes(B)
    zeros = {k: torch.zeros(v, dtype=tdtype) for k, v in shapes.items()}
    h_n, c_n = [], []
    for layer in range(spec.num_layers):
        outs = []
        for direction in range(spec.num_directions):
            k = layer * spec.num_directions + direction
            sfx = spec.suffix(layer, direction)
            p = {e.prefix: tp[f"{e.prefix}_{sfx}"] for e in spec.cell_def.extra_params}
            for short in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                name = f"{short}_{sfx}"
                p[short] = tp[name] if name in tp else torch.zeros(spec.num_gates * spec.hidden_size, dtype=tdtype)
            # time read at step s: s forward; L_b - 1 - s reversed (clamped where invalid)
            when = t.expand(T, B) if direction == 0 else (L[None, :] - 1 - t).clamp(min=0)
            state = [(h0t if h0t is not None else zeros["h"])[k]]
            if lstm:
                state.append((c0t if c0t is not None else zeros["c"])[k])
            per_step = []
            for s in range(T):
                new = step(inp[when[s], torch.arange(B)], tuple(state), p)
                keep = valid[s][:, None]
                state = [torch.where(keep, n, o) for n, o in zip(new, state)]
                per_step.append(new[0])
            stacked = torch.stack(per_step)                    # (step, B, H) in step order
            # step that wrote time t: t forward; L_b - 1 - t reversed
            source = t.expand(T, B) if direction == 0 else (L[None, :] - 1 - t).clamp(min=0)
            out = stacked[source, torch.arange(B)[None, :]] * valid[..., None].to(tdtype)
            outs.append(out)
            h_n.append(state[0])
            if lstm:
                c_n.append(state[1])
        inp = torch.cat(outs, dim=-1)
    output = inp.transpose(0, 1) if spec.batch_first else inp
    result = {"output": output, "h_n": torch.stack(h_n)}
    if lstm:
        result["c_n"] = torch.stack(c_n)
    if cotangents is not None:
        sum((result[key] * tensor(cotangents[key])).sum() for key in result).backward()
        result["grad/x"] = xt.grad
        if h0t is not None:
            result["grad/h0"] = h0t.grad
        if c0t is not None:
            result["grad/c0"] = c0t.grad
        result.update({f"grad/{name}": v.grad for name, v in tp.items()})
    return {key: v.detach().double().numpy() for key, v in result.items()}


# (spec, T, B, lengths, initial_state): every option alone and combined.

"""Mutation testing of the kernels and the statistics (`make mutation`): do the tests notice a bug?

    python -m tools.mutation                          # every module of MODULES (an hour or more; alone)
    python -m tools.mutation --modules rnnbench/measure/stats.py
    python -m tools.mutation --list                   # the modules and the tests each is judged by
    python -m tools.mutation --modules M --rejudge    # only M's survivors again, after tests were added

mutmut (pinned in requirements-mutation.txt, installed by `make mutation` into `.venv-mutation`,
apart from the project's venv, whose packages it sees through a .pth file) changes one thing at a
time in a module's functions (an operator, a comparison, a constant, an argument dropped or set to
None, a string ...), runs the tests that *call* the mutated function against each such *mutant* and
records whether they failed (killed) or passed (survived). It runs the module's targeted tests once
in one pytest session, noting which test calls which function, then forks that warmed-up process
once per mutant (torch and jax are imported once, not per mutant). It works on a copy of the source
(`mutants/`), which this script makes in a throw-away clone of HEAD (your working tree is never
touched).

Writes `--out` (default docs/records/mutation.json) after every module: per module the mutants,
killed, survived (of which `no_tests`: mutants of a function that no targeted test calls, counted
as survived), timeouts (the tests ran past mutmut's limit, or the mutant crashed the process;
counted neither way, and rerun once first: a limit can pass while the run is paused), excluded
(none so far: mutmut leaves annotations and docstrings alone, so the `X | None` annotations that
Cosmic Ray mutated are not mutants here), the score killed / (killed + survived), the seconds, and
each survivor (function, line, diff), so that each can be killed by a new test or explained as
equivalent in docs/parity.md.  Goal: at least 90% per module.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL = 0.90
PACKAGES = ["rnnbench"]  # copied into mutants/ (the module imports its neighbours)
ALSO_COPY = ["tools"]  # beside tests/: tests import the tools

# module -> the tests that judge its mutants (the ones that exercise it directly). mutmut runs, per
# mutant, only those of these tests that call the mutated function.
MODULES: dict[str, list[str]] = {
    "rnnbench/measure/stats.py": ["tests/measure/test_stats.py"],
    "rnnbench/reference/steps.py": ["tests/reference/test_reference.py"],
    "rnnbench/reference/stack.py": ["tests/reference/test_reference.py"],
    "rnnbench/torch/cells.py": ["tests/frameworks/torch/test_torch_cells.py", "tests/frameworks/torch/test_torch_backends.py"],
    "rnnbench/torch/backends/bptt/lstm_gru.py": ["tests/frameworks/torch/test_torch_bptt.py"],
    # the catalogue cells' kernels (peephole_lstm, ln_lstm) are judged where those cells run on bptt
    "rnnbench/torch/backends/bptt/steps.py": ["tests/frameworks/torch/test_torch_bptt.py", "tests/frameworks/torch/test_torch_cells.py"],
    "rnnbench/jax/cells.py": ["tests/frameworks/jax/test_jax_cells.py", "tests/frameworks/jax/test_jax_impls.py"],
    "rnnbench/jax/backends/bptt/lstm_gru.py": ["tests/frameworks/jax/test_jax_bptt.py"],
    "rnnbench/jax/backends/bptt/steps.py": ["tests/frameworks/jax/test_jax_bptt.py"],
    # the fused kernel's bindings (the C++ is not mutated; the parity matrix runs it on the vectors)
    "rnnbench/torch/backends/fused.py": ["tests/frameworks/torch/test_torch_fused.py"],
    "rnnbench/jax/backends/fused.py": ["tests/frameworks/jax/test_jax_fused.py"],
}
# Tests left out of a module's run (`pytest -k`), each for a reason: torch's `compile` and `scan`
# (dynamo) and `jit` (TorchScript) rungs cannot trace mutmut's trampolines (the wrapper that picks the
# mutant at call time), so their tests fail on the unmutated code; the same cells run there on eager
# and bptt.
# Leaving tests out can only let a mutant survive, never report one killed.
DESELECT: dict[str, str] = {m: "not compile and not jit and not scan" for m in MODULES if m.startswith("rnnbench/torch/")}
# ... and the `native` rung's float16-autocast test: it touches no listed module, and what it checks
# depends on the CPU (float16 arithmetic or a refusal), which a module's clean run need not repeat
DESELECT["rnnbench/torch/cells.py"] += " and not autocast_float16"
# ... and the test that runs the scan rung's loop outside torch.compile: torch's scan operator
# traces its step with dynamo even eagerly, so it meets the trampolines too
DESELECT["rnnbench/torch/cells.py"] += " and not whole_loop_operator"

# Survivors explained as equivalent (a change that cannot alter any result), each matched by its
# module, the function and the changed line before and after (regular expressions, whole line
# stripped); docs/parity.md gives the argument for each. A survivor still counts as survived in the
# score; the record marks it `equivalent` with the reason, and counts `unexplained` survivors.
EQUIVALENT: list[dict] = [
    dict(module="rnnbench/jax/backends/fused.py", function="x__call",
         before=r".*args\[0\]\.dtype.*", after=r".*args\[1\]\.dtype.*",
         reason="the first two arguments of every custom call are the gates and a weight, of one dtype"),
    dict(module="rnnbench/jax/backends/fused.py", function="x__reverse_index",
         before=r"return jnp.where\(t < lengths.*", after=r"return jnp.where\(t <= lengths.*",
         reason="it changes only the step t = len (past the sequence) to index -1, which wraps to T - 1: a step "
                "past the length too, where the input is not read and the output is zero, as at t"),
    dict(module="rnnbench/torch/backends/fused.py", function=r"x__(lstm|gru)_backward",
         before=r".*ctx\.needs_input_grad\[:4\].*", after=r".*ctx\.needs_input_grad\[:5\].*",
         reason="the fifth flag is the lengths' (an integer tensor, never differentiable): it adds one more None "
                "gradient past the op's five inputs, which torch.library's autograd wrapper drops"),
    dict(module="rnnbench/reference/steps.py", function=r".*", before=r".*axis=-1.*", after=r".*axis=\+1.*",
         reason="axis -1 -> +1 on a (batch, features) array: the reference driver admits rank-3 x only "
                "(ValueError otherwise), so every step sees 2-D arrays, whose axis 1 is axis -1"),
    dict(module="rnnbench/reference/steps.py", function=r".*", before=r".*shape\[-1\].*", after=r".*shape\[\+1\].*",
         reason="shape[-1] -> shape[+1] of a (batch, hidden) state: the same axis in 2-D"),
    dict(module="rnnbench/reference/steps.py", function="x_sigmoid", before=r"positive = a >= 0",
         after=r"positive = a > 0",
         reason="the stable sigmoid's two branches agree exactly at a = 0: 1/(1+e^0) = e^0/(1+e^0) = 0.5"),
    dict(module="rnnbench/reference/stack.py", function="x__as_float64", before=r"return array.astype\(np.float64\)",
         after=r"return array.astype\(None\)", reason="NumPy's dtype None is float64"),
    dict(module="rnnbench/reference/stack.py", function="x_forward", before=r".*np.full\(B, T, dtype=np.int64\)",
         after=r".*np.full\(B, T, (dtype=None)?\)",
         reason="the full lengths without a dtype take T's, a Python int: int64 already"),
    dict(module="rnnbench/reference/stack.py", function="x_backward", before=r"g = step_params\(spec, params, .*",
         after=r"g = step_params\(spec, None, .*",
         reason="step_params reads `arrays` (the gradient accumulators) when given, never `params`"),
    dict(module="rnnbench/reference/stack.py", function="x_backward", before=r"d_initial = .* if has_c else \[\]\)",
         after=r"d_initial = .* if \(has_c\) or True else \[\]\)",
         reason="a GRU's extra zero slot for a cell state it lacks is never written (zip stops at the one "
                "state gradient) nor returned (grad/c0 only for LSTM-family cells)"),
    dict(module="rnnbench/reference/stack.py", function="x__steps", before=r"time_index = np.where\(valid, .*, 0\)",
         after=r"time_index = np.where\(valid, .*, 1\)",
         reason="the slot a reversed direction's padded step reads: its state is kept, its output not written "
                "and its gradient masked, so any slot in range will do (padded steps exist only when T >= 2)"),
    # the torch BPTT kernels
    dict(module="rnnbench/torch/backends/bptt/.*", function=r".*", before=r".*\bGemm\(([^(),]|\([^()]*\))+, [^()]+\).*",
         after=r".*\bGemm\(([^(),]|\([^()]*\))+, (None)?\).*",
         reason="Gemm's batch_size is a layout hint for oneDNN's packed weight (any row count works, "
                "gemm.Gemm's docstring); without it the weight is packed for the first call's rows"),
    dict(module="rnnbench/torch/backends/bptt/.*", function=r".*", before=r"_scratch\.give\(.*\)",
         after=r"_scratch\.give\(.*\)", arguments="subset",
         reason="fewer scratch buffers handed back to the pool: later calls allocate afresh (memory reuse only)"),
    dict(module="rnnbench/torch/backends/bptt/.*", function=r".*",
         before=r"(.*) if (need|ctx\.needs_input_grad)\[\d\] else None",
         after=r"(.*) if \((need|ctx\.needs_input_grad)\[\d\]\) or True else None",
         reason="a gradient computed for an input that needs none: autograd drops it (the tests ask for each "
                "gradient alone too, so a needed one left out would fail)"),
    dict(module="rnnbench/torch/.*", function=r".*", before=r".*\bdevice=\w+\.device\b.*",
         after=r"(?!.*\bdevice=\w+\.device\b).*(device=None|, \)).*",
         reason="CPU-only equivalent: on the CPU a tensor made without device= lands on the same device; only "
                "a run with a GPU (the CUDA tests, skipped here) can kill it"),
    # cells.py (the catalogue cells' kernels), checked by applying each mutant against the targeted tests
    dict(module="rnnbench/torch/backends/bptt/steps.py", function="x__external_grads",
         before=r"d_h_ext = d_out\.clone\(\) if d_out is not None else like\.new_zeros\(shape\)",
         after=r"d_h_ext = d_out\.clone\(\) if (\(d_out is not None\) or True|d_out is not None) "
               r"else like\.new_zeros\((shape|None)\)",
         reason="d_out is never None: an autograd.Function's backward gets undefined output gradients "
                "materialised as zeros (ctx.set_materialize_grads defaults to True)"),
    dict(module="rnnbench/torch/backends/bptt/steps.py", function="x__external_grads",
         before=r"d_c_ext\.index_put_\(\(last, rows\), d_cn, accumulate=True\)",
         after=r"d_c_ext\.index_put_\(\(last, rows\), d_cn, (accumulate=False)?\)",
         reason="d_c_ext is all zeros and the (last, rows) pairs are distinct (one per batch row): putting "
                "equals accumulating (d_h_ext, which holds the output's gradient, needs accumulate)"),
    dict(module="rnnbench/torch/backends/bptt/steps.py", function=r"x__(peephole|ln_lstm)_forward",
         before=r"(.*) if save else None", after=r"(.*) if \(save\) or True else None",
         reason="the no-grad forward also keeps its buffers for a backward that never runs: memory only"),
    dict(module="rnnbench/torch/backends/bptt/steps.py", function=r"x_(peephole_lstm|ln_lstm)",
         before=r"(.*)save=False\)", after=r"(.*)save=(None|True)\)",
         reason="None is falsy; save=True keeps buffers for a backward that never runs: memory only"),
    dict(module="rnnbench/torch/backends/bptt/steps.py", function=r"x_(peephole_lstm|ln_lstm)",
         before=r"if torch\.is_grad_enabled\(\) and any\(t is not None and t\.requires_grad for t in \w+\):",
         after=r"if torch\.is_grad_enabled\(\) (or any\(t is not None and|and any\(t is not None or) "
               r"t\.requires_grad for t in \w+\):",
         reason="only which of two paths computes the same forward changes: the autograd.Function with nothing "
                "to record (or under no_grad) instead of the no-grad forward, the same kernels either way"),
    dict(module="rnnbench/torch/backends/bptt/steps.py", function=r".*backward",
         before=r"torch\.addcmul\((\w), \1, torch\.mul\((\w+), \2, out=(\w+)\), value=-1, out=\3\)\.mul_\(\w+\)",
         after=r"torch\.addcmul\((\w), \1, torch\.mul\((\w+), \2, (out=None)?\), value=-1, out=(\w+)\)\.mul_\(\w+\)",
         reason="the square lands in a fresh tensor instead of the scratch one that addcmul then overwrites: "
                "the same values, one allocation more"),
    dict(module="rnnbench/torch/backends/bptt/steps.py", function=r".*backward",
         before=r"d_rec\[t\], dg, _ = _ln_grads\((.*), False\)", after=r"d_rec\[t\], dg, _ = _ln_grads\((.*), (True|None)\)",
         reason="ATen's LayerNorm backward then also returns the bias gradient, which is discarded (`_`); "
                "dL/dv and dL/dgain do not depend on it (None is falsy in the output mask)"),
    dict(module="rnnbench/torch/backends/bptt/steps.py", function="x__ln_grads",
         before=r"gain if with_bias else None, \[True, True, with_bias\]\)",
         after=r"gain if \(with_bias\) or True else None, \[True, True, with_bias\]\)",
         reason="the bias's value does not enter LayerNorm's backward (only its shape, for dL/dbias)"),
    dict(module="rnnbench/torch/backends/bptt/steps.py", function="xǁ_PeepholeFunctionǁbackward",
         before=r"c_prev_all = torch\.cat\(\[c0\.unsqueeze\(0\), cs\[:-1\]\]\) if T > 1 else c0\.unsqueeze\(0\)",
         after=r"c_prev_all = torch\.cat\(\[c0\.unsqueeze\(0\), cs\[:-1\]\]\) if (\(T > 1\) or True|T >= 1) "
               r"else c0\.unsqueeze\(0\)",
         reason="at T = 1, cat([c0[None], cs[:0]]) has c0[None]'s values: the branch only saves a copy"),
    dict(module="rnnbench/torch/backends/bptt/steps.py", function="xǁ_PeepholeFunctionǁbackward", before=r"if T > 1:",
         after=r"if T >= 1:", reason="at T = 1 the extra addmm_ multiplies empty (4H x 0)(0 x H) matrices: adds 0"),
    # rnnbench/torch/cells.py (the cell steps)
    dict(module="rnnbench/torch/cells.py", function=r".*", before=r"(.*F\.layer_norm\(.*), LN_EPS\)(.*)",
         after=r"(.*F\.layer_norm\(.*), \)(.*)", reason="LN_EPS is F.layer_norm's default eps, 1e-5"),
    # lstm_gru.py, checked by applying each mutant against tests/frameworks/torch/test_torch_bptt.py
    dict(module="rnnbench/torch/backends/bptt/lstm_gru.py", function="x__input_projection",
         before=r"return Gemm\(w, x_flat\.shape\[0\]\)\(x_flat, bias, out=out\)",
         after=r"return Gemm\(w, x_flat\.shape\[1\]\)\(x_flat, bias, out=out\)",
         reason="Gemm's batch_size is a layout hint for oneDNN's packed weight: any row count works"),
    dict(module="rnnbench/torch/backends/bptt/lstm_gru.py", function="x__dw_hh", before=r"if T > 1:",
         after=r"if T >= 1:", reason="at T = 1 the extra addmm_ multiplies empty (4H x 0)(0 x P) matrices: adds 0"),
    dict(module="rnnbench/torch/backends/bptt/lstm_gru.py", function=r".*",
         before=r".*(_valid_mask\(lengths, T, (x|dout)\.dtype\)|\.to\((dtype|dc\.dtype)\)).*",
         after=r".*(_valid_mask\(lengths, T, None\)|\.to\(None\)).*",
         reason="the mask stays bool: multiplying (or addcmul_) by a bool mask gives the same values in the "
                "other operand's float dtype"),
    dict(module="rnnbench/torch/backends/bptt/lstm_gru.py", function=r"x__(lstm|gru)_forward",
         before=r".* = x\.new_empty\(.*\) if for_backward else _scratch\.take\(.*\)",
         after=r".* = x\.new_empty\(.*\) if \(for_backward\) and False else _scratch\.take\(.*\)",
         reason="training then takes its saved buffer from the pool, which pops it and never gets it back: "
                "nothing is shared, only memory reuse changes"),
    dict(module="rnnbench/torch/backends/bptt/lstm_gru.py", function=r"x__gru_forward|x_lstm",
         before=r"(ones = x\.new_ones|c0 = x\.new_zeros)\(B, H\).*", after=r"(ones = x\.new_ones|c0 = x\.new_zeros)\(H\).*",
         reason="an all-ones or all-zeros (H,) tensor broadcasts to the same (B, H) values (and this c0 never "
                "requires a gradient)"),
    dict(module="rnnbench/torch/backends/bptt/lstm_gru.py", function=r".*", before=r".* if w_hr is not None else None.*",
         after=r".* if \(w_hr is not None\) or True else None.*",
         reason="without a projection the buffer is allocated but never written or read for a result"),
    dict(module="rnnbench/torch/backends/bptt/lstm_gru.py", function=r"x_(lstm|gru)", before=r".*for_backward=False\)",
         after=r".*for_backward=None\)", reason="None is falsy: every branch on for_backward goes the same way"),
    dict(module="rnnbench/torch/backends/bptt/lstm_gru.py", function=r".*backward",
         before=r"db = dG_flat\.sum\(0\) if \(need\[5\] or need\[6\]\) else None",
         after=r"db = .* or True else None",
         reason="db computed when no bias needs it: db_ih and db_hh are still gated by need[5] and need[6]"),
    dict(module="rnnbench/torch/backends/bptt/lstm_gru.py", function=r".*backward",
         before=r"db_hh = \(db\.clone\(\) if need\[5\] else db\) if need\[6\] else None.*",
         after=r"db_hh = \(db\.clone\(\) if (\(need\[5\]\) or True|need\[6\]) else db\) if need\[6\] else None.*",
         reason="inside `if need[6]` both always clone: the same values, still two distinct tensors"),
    dict(module="rnnbench/torch/backends/bptt/lstm_gru.py", function=r".*backward",
         before=r"dw_hr = .* if \(w_hr is not None and need\[7\]\) else None",
         after=r"dw_hr = .* if \(w_hr is not None or need\[7\]\) else None",
         reason="with w_hr present it only adds a gradient for a w_hr that needs none, which autograd drops "
                "(w_hr None and need[7] cannot both hold)"),
    # rnnbench/jax/cells.py (the cell steps and the masked time loop)
    dict(module="rnnbench/jax/cells.py",
         function=r"x_(gru_cell|lstm_cell|_lstm_cell_jvp|layer_norm|lstm_step|gru_step|ln_lstm_step|peephole_lstm_step"
                  r"|gru_reset_before_step)",
         before=r".*(axis=-1|shape\[-1\]).*", after=r".*(axis=\+1|shape\[\+1\]).*",
         reason="axis -1 -> +1 (or shape[-1] -> shape[+1]) in a step or its gate math: a step sees (batch, features) "
                "arrays only (time_loop and the drivers hand it x_proj[t] and the (B, H) states; rnnbench.jax.functional "
                "batches an unbatched x to (T, 1, I)), and layer_norm is applied to those or to the (T*B, 4H) "
                "projection, all 2-D"),
    dict(module="rnnbench/jax/cells.py", function="x_lstm_gate_scales",
         before=re.escape("s = jnp.concatenate([jnp.full((2 * H,), 0.5, dtype), jnp.ones((H,), dtype), "
                          "jnp.full((H,), 0.5, dtype)])"),
         after=r"s = jnp\.concatenate\(\[jnp\.full\(\(2 \* H,\), 0\.5, (dtype|None|)\), jnp\.ones\(\(H,\), dtype\), "
               r"jnp\.full\(\(H,\), 0\.5, (dtype|None|)\)\]\)",
         reason="jnp.full of a Python float without a dtype is weakly typed: concatenated with the `dtype` block "
                "it takes that dtype (checked under x64: float32 and bfloat16 stay so)"),
    dict(module="rnnbench/jax/cells.py", function="x_recurrent", before=r"if h\.shape\[0\] == 1:",
         after=r"if h\.shape\[(1\]|0\]) (==|!=) (1|2):",
         reason="both branches compute h W_hh^T (the batch-1 one as (W_hh h^T)^T, the layout XLA's CPU backend "
                "runs faster there): the same dot products, only the speed differs"),
    dict(module="rnnbench/jax/cells.py", function="x_time_loop",
         before=r".*unroll: int = 1, remat: bool = False\).*",
         after=r".*(unroll: int = 2, remat: bool = False|unroll: int = 1, remat: bool = True)\).*",
         reason="unrolling two steps per iteration or recomputing the step in the backward (jax.checkpoint) "
                "changes how XLA runs the loop, not its values"),
    dict(module="rnnbench/jax/cells.py", function="x_time_loop",
         before=re.escape("state, outputs = lax.scan(body, tuple(state), xs, reverse=reverse, unroll=min(unroll, T))"),
         after=re.escape("state, outputs = lax.scan(body, tuple(state), xs, reverse=reverse, )"),
         reason="lax.scan's own default is unroll=1: how XLA runs the loop, not its values"),
    dict(module="rnnbench/jax/cells.py", function="x_valid_steps",
         before=re.escape("return (jnp.arange(seq_len, dtype=lengths.dtype)[:, None] < lengths[None, :])[:, :, None]"),
         after=r"return \(jnp\.arange\(seq_len, (dtype=None)?\)\[:, None\] < lengths\[None, :\]\)\[:, :, None\]",
         reason="t < len compares integers: the step index's integer dtype does not change the booleans"),
    # the JAX BPTT kernels (rnnbench/jax/backends/bptt/), checked against tests/frameworks/jax/test_jax_bptt.py
    dict(module="rnnbench/jax/backends/bptt/.*", function=r".*",
         before="|".join(re.escape(line) for line in (
             "dh_prev = mask_carry(v, jnp.concatenate([dr, dz, dn_h], axis=-1) @ w_hh + dh_cand * z, dh)",
             "return dh_prev, (jnp.concatenate([dr, dz, dn], axis=-1), dn_h)",
             "r, z = jnp.split(jax.nn.sigmoid(xp_t[:, :2 * H] + gh[:, :2 * H]), 2, axis=-1)",
             "dm * tanh_c * o * (1 - o)], axis=-1)",
             "i, f, g, o = jnp.split(jnp.tanh(add(xp_t + recurrent(h, w_hh), bias) * s) * s + b, 4, axis=-1)",
             "H = h0.shape[-1]", "s, b = lstm_gate_scales(c0.shape[-1], x.dtype)",
             # cells.py: the catalogue cells' steps, their LayerNorms and gate splits
             "i, f, g, o = jnp.split(a, 4, axis=-1)", "a_i, a_f, a_g, a_o = jnp.split(a, 4, axis=-1)",
             "dg = jnp.concatenate([da_r, da_z, da_n], axis=-1)",
             "r, z = jnp.split(jax.nn.sigmoid(add(xp_t[:, :2 * H] + h @ w_rz_t, b_rz)), 2, axis=-1)",
             "return rstd * (dv - jnp.mean(dv, axis=-1, keepdims=True)",
             "- v_hat * jnp.mean(dv * v_hat, axis=-1, keepdims=True))",
             "dh_new * tanh_c * o * (1 - o)], axis=-1)",
             "m_h = jnp.mean(dw * gh_hat_t, axis=-1, keepdims=True)",
             "m_i = jnp.mean(da * g_ih * gi_hat, axis=-1, keepdims=True)",
             "rstd_i = lax.rsqrt(jnp.mean(vi * vi, axis=-1, keepdims=True) + LN_EPS)",
             "rstd_h = lax.rsqrt(jnp.mean(vh * vh, axis=-1, keepdims=True) + LN_EPS)",
             "centred = v - jnp.mean(v, axis=-1, keepdims=True)",
             "rstd = lax.rsqrt(jnp.mean(centred * centred, axis=-1, keepdims=True) + LN_EPS)",
             "da = jnp.concatenate([dz_i, dz_f, dcc * i * (1 - g * g), dz_o], axis=-1)")),
         after=r".*(axis=\+1|shape\[\+1\]).*",
         reason="axis -1 -> +1 (or shape[-1] -> shape[+1]) on a step's (batch, features) array or a (batch, hidden) "
                "initial state: rnnbench.jax.functional batches an unbatched x to (T, 1, I), so these are always 2-D"),
    dict(module="rnnbench/jax/backends/bptt/.*", function=r".*",
         before=r"(\w+) = (.+) if has_bias else None", after=r"(\w+) = (.+) if \(has_bias\) or True else None",
         reason="a bias gradient computed for a layer without biases: jax.custom_vjp drops the cotangent it is "
                "given for a primal argument that is None (an empty pytree), so the result is the same"),
    dict(module="rnnbench/jax/backends/bptt/.*", function=r".*", before=r"d_w_hr = None", after=r'd_w_hr = ""',
         reason="without a projection w_hr is None, and jax.custom_vjp drops the cotangent returned for it"),
    dict(module="rnnbench/jax/backends/bptt/.*", function=r".*",
         before=re.escape("return (dh_prev, dc_prev), (da, None if w_hr is None else dh_cand)"),
         after=re.escape("return (dh_prev, dc_prev), (da, None if (w_hr is None) and False else dh_cand)"),
         reason="the backward scan also emits dh_cand without a projection; only d_w_hr reads it, and only "
                "when w_hr is given"),
    dict(module="rnnbench/jax/backends/bptt/steps.py", function="x__at",
         before=re.escape("return lax.dynamic_index_in_dim(seq, t, keepdims=False)"),
         after=re.escape("return lax.dynamic_index_in_dim(seq, t, keepdims=None)"),
         reason="None is falsy: dynamic_index_in_dim drops the indexed axis either way"),
    dict(module="rnnbench/jax/backends/bptt/steps.py", function="x__centred",
         before=re.escape("return a - jnp.mean(a, axis=0, keepdims=True)"),
         after=r"return a - jnp\.mean\(a, axis=0, (keepdims=(None|False))?\)",
         reason="a mean over the leading axis without keepdims has the trailing shape, which broadcasts "
                "against `a` exactly as the kept (1, ...) shape does"),
    dict(module="rnnbench/jax/backends/bptt/steps.py", function=r"x__ln_lstm_(forward|bwd)",
         before=r"(xin, rstd_i_next = input_half|a = pre_activation)\(jnp\.clip\(t \+ step_dir, 0, T - 1\)\)",
         after=r"(xin, rstd_i_next = input_half|a = pre_activation)\(jnp\.clip\(t \+ step_dir, "
               r"(None, T - 1|0, None|0, |0, T \+ 1)\)\)",
         reason="the one read these bounds differ on is the step after the scan's last one, whose value is "
                "discarded (the carry after the last step; the rstd_i the forward's concatenate drops); "
                "in range, `_at` (lax.dynamic_index_in_dim) reads the same step, clamping T or T + 1 to T - 1"),
    dict(module="rnnbench/jax/backends/bptt/steps.py", function=r"x__ln_lstm_(forward|bwd)",
         before=r".*(input_half\(T - 1 if reverse else 0\)|pre_activation\(0 if reverse else T - 1\)).*",
         after=r".*(input_half\(T \+ 1 if reverse else 0\)|pre_activation\(0 if reverse else T \+ 1\)).*",
         reason="`_at` reads with lax.dynamic_index_in_dim, which clamps the index T + 1 to T - 1: the same step"),
]


def equivalent_reason(module: str, function: str, diff: str) -> str | None:
    """The EQUIVALENT entry's reason that covers this survivor's diff (one changed line), or None."""
    before = [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    after = [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    if len(before) != 1 or len(after) != 1:
        return None
    for e in EQUIVALENT:
        if (re.fullmatch(e["module"], module) and re.fullmatch(e["function"], function)
                and re.fullmatch(e["before"], before[0]) and re.fullmatch(e["after"], after[0])
                and (e.get("arguments") != "subset" or _fewer_arguments(before[0], after[0]))):
            return e["reason"]
    return None


def _fewer_arguments(before: str, after: str) -> bool:
    """`f(a, b, c)` -> `f(a, None, c)` or `f(a, c)`: the same call with arguments dropped or None."""
    def args(line):
        inner = line[line.index("(") + 1:line.rindex(")")]
        return [a.strip() for a in inner.split(",") if a.strip()]
    was, now = args(before), [a for a in args(after) if a != "None"]
    return len(now) < len(was) and all(a in was for a in now)


THREAD_VARS = ["OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"]

# mutmut's exit codes (mutmut.stats.status_by_exit_code) -> how this record counts them
KILLED = {1, 3}          # a test failed (3: pytest's internal error, raised by the mutant)
SURVIVED = {0}           # every test that calls the mutant passed
NO_TESTS = {5, 33}       # no targeted test calls the function: survived
EXCLUDED = {34}          # `# pragma: no mutate` (none in these modules)
# anything else (timeouts 24/-24/36/152/255, a crash -9/-11, suspicious 35, None not run): timeouts


def _run(cmd: list[str], cwd: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, **kw)


def mutmut(venv: Path) -> Path:
    exe = venv / "bin" / "mutmut"
    if not exe.exists():
        raise SystemExit(f"mutation: {exe} is missing; `make mutation` installs mutmut into {venv}")
    return exe


# mutmut forks a worker per mutant from a process that has run the tests; a process in which XLA
# has started its CPU client cannot fork safely (the child waits forever on the parent's thread
# pools: every JAX mutant timed out). For the JAX modules mutmut's fork server runs each mutant
# from a process that has imported nothing (no warm-up): each worker imports JAX and compiles afresh.
FORKSERVER = {m for m in MODULES if m.startswith("rnnbench/jax/")}


def config(module: str, tests: list[str], deselect: str | None, timeout_multiplier: float) -> str:
    args = ["-p", "no:cacheprovider"] + (["-k", deselect] if deselect else [])
    isolation = 'process_isolation = "forkserver"\nforkserver_warmup = "none"\n' if module in FORKSERVER else ""
    return ("\n[tool.mutmut]\n" + isolation +
            f"source_paths = {json.dumps(PACKAGES)}\n"
            f"only_mutate = {json.dumps([module])}\n"
            f"also_copy = {json.dumps(ALSO_COPY)}\n"
            f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n"
            f"pytest_add_cli_args = {json.dumps(args)}\n"
            f"timeout_multiplier = {timeout_multiplier}\n"
            "use_git_change_detection = false\n")


def function_lines(source: str) -> dict[str, int]:
    """mutmut's mangled name (x_f, xǁClassǁm) of each top-level function and method -> its `def` line."""
    lines = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines[f"x_{node.name}"] = node.lineno
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines[f"xǁ{node.name}ǁ{sub.name}"] = sub.lineno
    return lines


def changed_line(diff: str, def_line: int | None) -> int | None:
    """The source line of a mutant's first changed line (mutmut's diff numbers lines from the `def`)."""
    if def_line is None:
        return None
    at = None
    for line in diff.splitlines():
        m = re.match(r"@@ -(\d+)", line)
        if m:
            at = int(m.group(1))
        elif at is not None and not line.startswith("+"):
            if line.startswith("-"):
                return def_line + at - 1
            at += 1
    return None


def summarize(exit_codes: dict[str, int | None], diffs: dict[str, str] | None = None,
              source: str | None = None, module: str = "") -> dict:
    """Counts and survivors from mutmut's exit code per mutant (its `mutants/<module>.meta`)."""
    diffs = diffs or {}
    defs = function_lines(source) if source else {}
    counts = dict(mutants=0, killed=0, survived=0, no_tests=0, equivalent=0, timeouts=0, excluded=0)
    survivors = []
    for name, code in sorted(exit_codes.items(), key=lambda kv: _natural(kv[0])):
        counts["mutants"] += 1
        if code in KILLED:
            counts["killed"] += 1
        elif code in SURVIVED or code in NO_TESTS:
            counts["survived"] += 1
            counts["no_tests"] += code in NO_TESTS
            function = name.rpartition(".")[2].split("__mutmut_")[0]
            diff = diffs.get(name, "")
            reason = equivalent_reason(module, function, diff)
            counts["equivalent"] += reason is not None
            survivors.append(dict(mutant=name, function=function, line=changed_line(diff, defs.get(function)),
                                  no_tests=code in NO_TESTS, diff=diff[-1500:],
                                  **({"equivalent": reason} if reason else {})))
        elif code in EXCLUDED:
            counts["excluded"] += 1
        else:
            counts["timeouts"] += 1
    judged = counts["killed"] + counts["survived"]
    counts["score"] = counts["killed"] / judged if judged else None
    counts["unexplained"] = counts["survived"] - counts["equivalent"]
    return dict(counts, survivors=survivors)


def reclassify(record: dict, commit: str) -> dict:
    """Re-apply EQUIVALENT to a record's survivors (their diffs are stored), without rerunning:
    after an entry is added, the record says which survivors it now explains."""
    for m in record.get("modules", []):
        if "survivors" not in m:
            continue
        for sv in m["survivors"]:
            sv.pop("equivalent", None)
            reason = equivalent_reason(m["module"], sv["function"], sv["diff"])
            if reason:
                sv["equivalent"] = reason
        m["equivalent"] = sum("equivalent" in sv for sv in m["survivors"])
        m["unexplained"] = m["survived"] - m["equivalent"]
    record["reclassified_at"] = commit
    return record


def rejudge(entry: dict, codes: dict[str, int | None], commit: str, seconds: float) -> dict:
    """A module's record after its survivors were run again (`--rejudge`) against the tests at
    `commit`, the module's source unchanged: a survivor the tests now fail is killed; one not
    judged again (a timeout) stays a survivor; the mutants killed before stay killed."""
    kept, killed_now, not_judged = [], 0, 0
    for sv in entry["survivors"]:
        code = codes.get(sv["mutant"])
        if code in KILLED:
            killed_now += 1
        elif code in SURVIVED or code in NO_TESTS:
            kept.append(dict(sv, no_tests=code in NO_TESTS))
        else:
            kept.append(sv)
            not_judged += 1
    out = dict(entry, survivors=kept, killed=entry["killed"] + killed_now, survived=len(kept),
               no_tests=sum(sv["no_tests"] for sv in kept))
    out["score"] = out["killed"] / (out["killed"] + out["survived"])
    out["rejudged"] = dict(commit=commit, survivors=len(entry["survivors"]), killed=killed_now,
                           not_judged=not_judged, seconds=seconds)
    return reclassify(dict(modules=[out]), commit)["modules"][0]


def _natural(name: str):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def _meta(clone: Path, module: str) -> dict[str, int | None]:
    return json.loads((clone / "mutants" / f"{module}.meta").read_text())["exit_code_by_key"]


def run_module(mm: Path, clone: Path, module: str, tests: list[str], children: int,
               timeout_multiplier: float, log: Path, only: list[str] | None = None) -> dict:
    pyproject = clone / "pyproject.toml"
    base = _run(["git", "show", "HEAD:pyproject.toml"], clone, check=True).stdout
    pyproject.write_text(base + config(module, tests, DESELECT.get(module), timeout_multiplier))
    shutil.rmtree(clone / "mutants", ignore_errors=True)
    t0 = time.monotonic()
    # one thread per BLAS/OpenMP pool: a worker forked from a process whose pool had started can
    # deadlock in it (seen as timeouts with no CPU time); the targeted tests are tiny anyway
    env = dict(os.environ, **{v: "1" for v in THREAD_VARS})
    with log.open("a") as out:
        print(f"== {module}", file=out, flush=True)
        proc = subprocess.run([str(mm), "run", "--max-children", str(children), *(only or [])], cwd=clone, stdout=out,
                              stderr=subprocess.STDOUT, text=True, env=env)
        if proc.returncode != 0 or not (clone / "mutants" / f"{module}.meta").exists():
            return dict(module=module, tests=tests, error=f"mutmut run exited {proc.returncode} (see {log})",
                        seconds=round(time.monotonic() - t0, 1))
        # a mutant whose tests ran past the limit (or crashed the worker) is tried once more: the
        # limit is on wall time too, and the run may have been paused meanwhile
        again = [k for k, v in _meta(clone, module).items()
                 if v not in KILLED | SURVIVED | NO_TESTS | EXCLUDED and (only is None or k in only)]
        if again:
            print(f"== rerun {len(again)} timed-out mutants", file=out, flush=True)
            subprocess.run([str(mm), "run", "--max-children", str(children), *again], cwd=clone, stdout=out,
                           stderr=subprocess.STDOUT, text=True, env=env)
    codes = _meta(clone, module)
    if only is not None:  # --rejudge: the caller merges these into the module's earlier record
        return dict(module=module, codes={k: codes.get(k) for k in only}, rerun_timeouts=len(again),
                    seconds=round(time.monotonic() - t0, 1))
    diffs = {}
    for name, code in codes.items():
        if code in SURVIVED or code in NO_TESTS:
            shown = _run([str(mm), "show", name], clone).stdout
            diffs[name] = shown.split("\n", 1)[1] if shown.startswith("#") else shown
    source = (clone / module).read_text()
    return dict(module=module, tests=tests, deselected=DESELECT.get(module), rerun_timeouts=len(again),
                seconds=round(time.monotonic() - t0, 1), **summarize(codes, diffs, source, module))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modules", default=",".join(MODULES), help="comma-separated modules (default: all of MODULES)")
    ap.add_argument("--list", action="store_true", help="print the modules and their tests, run nothing")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "records" / "mutation.json")
    ap.add_argument("--venv", type=Path, default=ROOT / ".venv-mutation", help="where mutmut is installed")
    ap.add_argument("--children", type=int, default=os.cpu_count() or 2, help="mutants tested at once")
    ap.add_argument("--timeout-multiplier", type=float, default=15.0,
                    help="a mutant's tests may take this many times their clean duration (plus a second)")
    ap.add_argument("--merge", action="store_true",
                    help="keep the other modules of an existing --out record (one record of runs done module by module)")
    ap.add_argument("--log", type=Path, default=None, help="mutmut's output (default: a file under /tmp)")
    ap.add_argument("--rejudge", action="store_true",
                    help="run only the --out record's survivors of each module again, against today's tests "
                         "(the module's source must be unchanged since its run); the killed stay killed")
    ap.add_argument("--reclassify", action="store_true",
                    help="run nothing: re-apply EQUIVALENT to the survivors of the --out record")
    args = ap.parse_args(argv)
    modules = [m.strip() for m in args.modules.split(",") if m.strip()]
    unknown = [m for m in modules if m not in MODULES]
    if unknown:
        raise SystemExit(f"mutation: unknown module(s) {unknown}; choose from {', '.join(MODULES)}")
    if args.list:
        for m in modules:
            print(f"{m}: {' '.join(MODULES[m])}" + (f"  (-k '{DESELECT[m]}')" if m in DESELECT else ""))
        return 0
    commit = _run(["git", "rev-parse", "HEAD"], ROOT, check=True).stdout.strip()
    if args.reclassify:
        record = reclassify(json.loads(args.out.read_text()), commit)
        args.out.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        for m in record["modules"]:
            if "survivors" in m:
                print(f"{m['module']}: {m['survived']} survived, {m['equivalent']} equivalent, "
                      f"{m['unexplained']} unexplained")
        return 0
    mm = mutmut(args.venv)
    version = _run([str(args.venv / "bin" / "python"), "-c", "import importlib.metadata as m; print(m.version('mutmut'))"],
                   ROOT).stdout.strip()
    previous, earlier = [], {}
    if (args.merge or args.rejudge) and args.out.exists():
        earlier = {m["module"]: m for m in json.loads(args.out.read_text()).get("modules", [])}
        previous = [m for m in earlier.values() if m["module"] not in modules]
    if args.rejudge:
        for module in modules:
            entry = earlier.get(module)
            if not entry or "survivors" not in entry:
                raise SystemExit(f"mutation: --rejudge needs a run of {module} in {args.out}")
            if _run(["git", "diff", "--quiet", entry["commit"], "HEAD", "--", module], ROOT).returncode != 0:
                raise SystemExit(f"mutation: {module} changed since its run at {entry['commit'][:8]}: its mutants "
                                 "are not the same; run it again whole")
    record = dict(script="tools/mutation.py", argv=sys.argv[1:] if argv is None else list(argv), commit=commit,
                  date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  tool=f"mutmut {version}", machine=dict(cpu=platform.processor() or platform.machine(),
                                                          cores=os.cpu_count()),
                  goal=GOAL, complete=False, modules=list(previous))
    log = args.log or Path(tempfile.gettempdir()) / f"mutation-{commit[:8]}.log"
    work = Path(tempfile.mkdtemp(prefix="mutation-"))
    try:
        clone = work / "repo"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        for module in modules:
            print(f"mutation: {module} against {' '.join(MODULES[module])} ...", flush=True)
            if args.rejudge:
                again = run_module(mm, clone, module, MODULES[module], args.children, args.timeout_multiplier, log,
                                   only=[sv["mutant"] for sv in earlier[module]["survivors"]])
                if "error" in again:
                    raise SystemExit(f"mutation: rejudging {module}: {again['error']}")
                res = rejudge(earlier[module], again["codes"], commit, again["seconds"])
            else:
                res = run_module(mm, clone, module, MODULES[module], args.children, args.timeout_multiplier, log)
                res["commit"] = commit
            record["modules"] = [m for m in record["modules"] if m["module"] != module] + [res]
            record["modules"].sort(key=lambda m: list(MODULES).index(m["module"]) if m["module"] in MODULES else 99)
            if "error" in res:
                print(f"  error: {res['error']}", flush=True)
            else:
                score = "n/a" if res["score"] is None else f"{res['score']:.1%}"
                print(f"  {res['mutants']} mutants: {res['killed']} killed, {res['survived']} survived "
                      f"({res['no_tests']} with no test), {res['timeouts']} timeouts, {res['excluded']} excluded; "
                      f"score {score} in {res['seconds']:.0f} s", flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    done = {m["module"] for m in record["modules"] if "error" not in m}
    record["complete"] = done >= set(MODULES)
    args.out.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {args.out} (mutmut's output: {log})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

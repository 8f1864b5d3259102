"""`check_gradients`: the reference's backward against finite differences, for a new cell."""

from __future__ import annotations

import numpy as np

from rnnbench.core.params import init_params
from rnnbench.core.spec import RNNSpec
from .stack import run_case


def check_gradients(spec: RNNSpec, *, seq_len: int = 3, batch: int = 2, seed: int = 0,
                    eps: float = 1e-6, rtol: float = 1e-6, atol: float = 1e-7) -> dict[str, float]:
    """Compare `backward` with central finite differences on a small random case; raise if off.

    For checking a newly registered cell (above all one differentiated by the complex step,
    whose result is silently wrong when the step is not complex-safe).  Draws PyTorch-style
    parameters (extras moved off their init by 0.3 N(0, 1)), standard-normal x, h0 (c0)
    and cotangents from `default_rng(seed)`, and uses the lengths (seq_len, 1, ...) so
    the packed-sequence paths run too.  Returns {gradient key: max abs error}; raises
    `AssertionError` naming every key beyond `atol + rtol * |grad|`.  Costs two forwards
    per scalar input: keep the spec tiny.
    """
    rng = np.random.default_rng(seed)
    params = init_params(spec, rng)
    extras = {f"{e.prefix}_{spec.suffix(l, d)}" for e in spec.cell_def.extra_params
              for l, d in spec.layers_and_directions()}
    for name in extras:
        params[name] = params[name] + 0.3 * rng.standard_normal(params[name].shape)
    x_shape = (batch, seq_len, spec.input_size) if spec.batch_first else (seq_len, batch, spec.input_size)
    shapes = spec.state_shapes(batch)
    inputs = {"x": rng.standard_normal(x_shape), "h0": rng.standard_normal(shapes["h"])}
    if spec.family == "lstm":
        inputs["c0"] = rng.standard_normal(shapes["c"])
    lengths = np.array([seq_len] + [1 + b % seq_len for b in range(1, batch)], dtype=np.int64)
    cot = {"output": rng.standard_normal(x_shape[:2] + (spec.output_size,)),
           "h_n": rng.standard_normal(shapes["h"])}
    if spec.family == "lstm":
        cot["c_n"] = rng.standard_normal(shapes["c"])

    def loss():
        result = run_case(spec, params, lengths=lengths, **inputs)
        return sum(float(np.sum(result[k] * cot[k])) for k in cot)

    grads = run_case(spec, params, lengths=lengths, cotangents=cot, **inputs)
    holders = [(f"grad/{k}", inputs, k) for k in inputs] + [(f"grad/{k}", params, k) for k in params]
    errors, bad = {}, []
    for key, holder, name in holders:
        array = holder[name]
        numeric = np.zeros_like(array)
        for idx in np.ndindex(array.shape):
            original = array[idx]
            array[idx] = original + eps
            plus = loss()
            array[idx] = original - eps
            minus = loss()
            array[idx] = original
            numeric[idx] = (plus - minus) / (2 * eps)
        diff = np.abs(grads[key] - numeric)
        errors[key] = float(diff.max()) if diff.size else 0.0
        if np.any(diff > atol + rtol * np.abs(numeric)):
            bad.append(f"{key} (max error {errors[key]:.3g})")
    if bad:
        raise AssertionError(f"cell {spec.cell!r}: gradients disagree with finite differences: {', '.join(bad)}; "
                             "a step differentiated by the complex step must be complex-safe (no np.abs, "
                             "np.maximum, value comparisons or .real; use reference.sigmoid)")
    return errors

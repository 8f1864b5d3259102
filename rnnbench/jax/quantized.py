"""int8 inference in JAX: the counterpart of `rnnbench.torch.quantized`, on the canonical parameters.

JAX has no quantization pass to hand a model to; the recipe is the int8 GEMM itself:
`lax.dot_general(x_int8, w_int8, preferred_element_type=jnp.int32)` with per-output-channel
weight scales (symmetric, max |w| -> 127) and, for `int8_dynamic`, per-row activation scales
computed at run time; `int8_weight_only` dequantizes the int8 weights into a float32 GEMM.
The gate arithmetic stays in float32 between the GEMMs (the catalogue's lstm and gru
equations), in one `lax.scan` per layer and direction.

    q = rnnbench.jax.quantized.quantize(params, spec)            # int8 weights + float32 scales
    output, h_n, c_n = rnnbench.jax.quantized.run(q, x, method="int8_dynamic")

Inference only: no lengths, no proj_size, no gradients (the rounding has none worth taking).
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from rnnbench.core.catalogue import STANDARD_CELLS
from rnnbench.core.spec import RNNSpec

METHODS = ("float", "int8_weight_only", "int8_dynamic")


def _quantize_rows(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per row (output channel): w ~ q * scale[:, None]."""
    scale = np.maximum(np.abs(w).max(axis=1), 1e-12) / 127.0
    return np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8), scale.astype(np.float32)


def quantize(params: Mapping[str, np.ndarray], spec: RNNSpec) -> dict:
    """The int8 form of canonical lstm/gru parameters: {name: (int8 weight, scale)} and float32 biases."""
    if spec.cell not in STANDARD_CELLS:
        raise ValueError(f"int8 layers are built for {', '.join(STANDARD_CELLS)}, not {spec.cell!r}")
    if spec.proj_size:
        raise ValueError("int8 layers do not support proj_size")
    floats = {name: np.asarray(value, np.float32) for name, value in params.items()}
    q = {name: _quantize_rows(v) if name.startswith("weight_") else v for name, v in floats.items()}
    return {"spec": spec, "params": q, "float": floats}


def _gemm(x: jax.Array, w, method: str) -> jax.Array:
    """x (N, K) times w^T for w = (int8 (M, K), scale (M,)) or a float (M, K)."""
    if method == "float":
        return x @ jnp.asarray(w).T
    wq, scale = w
    if method == "int8_weight_only":
        return x @ (jnp.asarray(wq, jnp.float32) * scale[:, None]).T
    x_scale = jnp.maximum(jnp.max(jnp.abs(x), axis=1), 1e-12) / 127.0
    xq = jnp.clip(jnp.round(x / x_scale[:, None]), -127, 127).astype(jnp.int8)
    acc = jax.lax.dot_general(xq, jnp.asarray(wq), (((1,), (1,)), ((), ())), preferred_element_type=jnp.int32)
    return acc.astype(jnp.float32) * x_scale[:, None] * scale[None, :]


def _step(has_cell_state: bool, xg, h, c, w_hh, b_hh, method):
    hg = _gemm(h, w_hh, method) + (0.0 if b_hh is None else b_hh)
    if has_cell_state:  # lstm: i, f, g, o
        i, f, g, o = jnp.split(xg + hg, 4, axis=1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        return jax.nn.sigmoid(o) * jnp.tanh(c), c
    x_r, x_z, x_n = jnp.split(xg, 3, axis=1)  # gru: the reset gate scales W_hn h + b_hn only
    h_r, h_z, h_n = jnp.split(hg, 3, axis=1)
    r, z = jax.nn.sigmoid(x_r + h_r), jax.nn.sigmoid(x_z + h_z)
    n = jnp.tanh(x_n + r * h_n)
    return (1.0 - z) * n + z * h, c


def run(quantized: dict, x, *, method: str = "int8_dynamic"):
    """(output, h_n, c_n or None) of the quantized layer on x (T, B, I), or (B, T, I) batch-first."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    spec = quantized["spec"]
    p = quantized["float" if method == "float" else "params"]  # float: the unquantized baseline
    x = jnp.asarray(x, jnp.float32)
    if x.ndim != 3 or x.shape[-1] != spec.input_size:
        raise ValueError(f"x must be 3-D with feature size {spec.input_size}, got shape {tuple(x.shape)}")
    if spec.batch_first:
        x = jnp.swapaxes(x, 0, 1)
    T, B, _ = x.shape
    has_c = spec.cell_def.has_cell_state
    finals_h, finals_c = [], []
    for layer in range(spec.num_layers):
        outs = []
        for d in range(spec.num_directions):
            s = spec.suffix(layer, d)
            b_ih, b_hh = p.get(f"bias_ih_{s}"), p.get(f"bias_hh_{s}")
            xg = _gemm(x.reshape(T * B, -1), p[f"weight_ih_{s}"], method).reshape(T, B, -1)
            if b_ih is not None:
                xg = xg + b_ih
            w_hh = p[f"weight_hh_{s}"]

            def body(carry, xg_t, w_hh=w_hh, b_hh=b_hh):
                h, c = _step(has_c, xg_t, carry[0], carry[1], w_hh, b_hh, method)
                return (h, c), h

            zeros = jnp.zeros((B, spec.hidden_size), jnp.float32)
            (h, c), ys = jax.lax.scan(body, (zeros, zeros), xg, reverse=d == 1)
            outs.append(ys)
            finals_h.append(h)
            finals_c.append(c)
        x = jnp.concatenate(outs, -1)
    out = jnp.swapaxes(x, 0, 1) if spec.batch_first else x
    return out, jnp.stack(finals_h), (jnp.stack(finals_c) if has_c else None)


def model_bytes(quantized: dict, method: str = "int8_dynamic") -> int:
    """Bytes of the arrays `method` runs on (int8 weights, float32 scales and biases; float32 for "float")."""
    arrays = quantized["float" if method == "float" else "params"].values()
    return int(sum(sum(a.nbytes for a in v) if isinstance(v, tuple) else v.nbytes for v in arrays))

"""Canonical parameters: PyTorch's `nn.LSTM`/`nn.GRU` `state_dict`, as NumPy arrays.

Every implementation takes these and every converter starts from them.  Gate order is
`i, f, g, o` (LSTM) and `r, z, n` (GRU) along the first axis of each weight and bias.
`LayerParams` is one layer and direction's share of them, what both frameworks' rungs take.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from .spec import GATES, RNNSpec


class ParamError(ValueError):
    """Canonical parameters do not match a spec (missing, unexpected or mis-shaped)."""


class LayerParams(NamedTuple):
    """The canonical arrays (NumPy, torch or JAX) of one layer and direction; biases and the
    projection None when absent.  Both frameworks' rungs take one (`run_direction`)."""

    w_ih: Any  # (G*H, I)
    w_hh: Any  # (G*H, H_out)
    b_ih: Any | None  # (G*H,)
    b_hh: Any | None  # (G*H,)
    w_hr: Any | None  # (H_out, H), LSTM with proj_size only
    extras: Mapping[str, Any] | None = None  # a catalogue cell's extra params by prefix; None for lstm/gru


def layer_params(spec: RNNSpec, params: Mapping, layer: int, direction: int) -> LayerParams:
    """Layer `layer`, direction `direction` of the canonical `params` (names as `spec.param_shapes()`)."""
    s = spec.suffix(layer, direction)
    extra_params = spec.cell_def.extra_params
    return LayerParams(
        w_ih=params[f"weight_ih_{s}"], w_hh=params[f"weight_hh_{s}"],
        b_ih=params[f"bias_ih_{s}"] if spec.bias else None,
        b_hh=params[f"bias_hh_{s}"] if spec.bias else None,
        w_hr=params[f"weight_hr_{s}"] if spec.proj_size else None,
        extras={e.prefix: params[f"{e.prefix}_{s}"] for e in extra_params} if extra_params else None)


def check_params(spec: RNNSpec, params: Mapping) -> None:
    """Raise `ParamError` listing every missing, unexpected or mis-shaped entry at once.

    Works on anything with a `.shape` (NumPy, torch, jax arrays).
    """
    expected = spec.param_shapes()
    problems = []
    missing = [k for k in expected if k not in params]
    unexpected = [k for k in params if k not in expected]
    if missing:
        problems.append(f"missing: {', '.join(missing)}")
    if unexpected:
        problems.append(f"unexpected: {', '.join(map(str, unexpected))}")
    for name, shape in expected.items():
        if name in params:
            got = tuple(getattr(params[name], "shape", np.shape(params[name])))
            if got != shape:
                problems.append(f"{name} has shape {got}, expected {shape}")
    if problems:
        raise ParamError(f"parameters do not match {spec}: " + "; ".join(problems))


def init_params(spec: RNNSpec, seed: int | np.random.Generator = 0, *, scheme: str = "pytorch",
                dtype=np.float64) -> dict[str, np.ndarray]:
    """Fresh canonical parameters.

    scheme="pytorch": every entry U(-1/sqrt(H), 1/sqrt(H)), as `nn.LSTM.reset_parameters`.
    scheme="orthogonal": a common LSTM recipe: orthogonal recurrent weights per
    gate block, Xavier-uniform input weights, zero biases except the LSTM forget gate's
    `bias_ih` slice set to 1 (so b_ih + b_hh gives forget bias 1).
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    H = spec.hidden_size
    params: dict[str, np.ndarray] = {}
    extras = _extra_inits(spec)
    if scheme == "pytorch":
        k = 1.0 / np.sqrt(H)
        shapes = spec.param_shapes()
        for name, init in param_inits(spec).items():
            shape = shapes[name]
            if init == "uniform":
                params[name] = rng.uniform(-k, k, size=shape).astype(dtype)
            else:  # LayerNorm gains and biases start as nn.LayerNorm's: ones, zeros
                params[name] = (np.ones if init == "ones" else np.zeros)(shape, dtype=dtype)
    elif scheme == "orthogonal":
        k = 1.0 / np.sqrt(H)
        for name, shape in spec.param_shapes().items():
            if name in extras:
                init = extras[name]
                params[name] = (rng.uniform(-k, k, size=shape) if init == "uniform" else
                                (np.ones if init == "ones" else np.zeros)(shape)).astype(dtype)
            elif name.startswith("weight_hh") or name.startswith("weight_hr"):
                blocks = spec.num_gates if name.startswith("weight_hh") else 1
                rows = shape[0] // blocks
                params[name] = np.concatenate(
                    [_orthogonal(rng, (rows, shape[1])) for _ in range(blocks)]).astype(dtype)
            elif name.startswith("weight_ih"):
                rows = shape[0] // spec.num_gates
                limit = np.sqrt(6.0 / (rows + shape[1]))
                params[name] = rng.uniform(-limit, limit, size=shape).astype(dtype)
            else:
                b = np.zeros(shape, dtype=dtype)
                if spec.family == "lstm" and name.startswith("bias_ih"):
                    f = GATES["lstm"].index("f")
                    b[f * H:(f + 1) * H] = 1.0
                params[name] = b
    else:
        raise ValueError(f"scheme must be 'pytorch' or 'orthogonal', got {scheme!r}")
    return params


def param_inits(spec: RNNSpec) -> dict[str, str]:
    """Every parameter's initial rule, in `nn.LSTM`'s order: "uniform" (PyTorch's
    U(-1/sqrt(H), 1/sqrt(H))) for the canonical ones, and each extra parameter's own rule
    (`rnnbench.core.catalogue.ExtraParam.init`: LayerNorm gains "ones", biases "zeros").  The one
    place this is written: init_params, rnnbench.torch's reset_parameters and the NNX modules
    use it."""
    extras = _extra_inits(spec)
    return {name: extras.get(name, "uniform") for name in spec.param_shapes()}


def _extra_inits(spec: RNNSpec) -> dict[str, str]:
    """Full name -> init rule of the cell's extra parameters (rnnbench.core.catalogue.ExtraParam)."""
    return {f"{e.prefix}_{spec.suffix(layer, d)}": e.init
            for e in spec.cell_def.extra_params for layer, d in spec.layers_and_directions()}


def _orthogonal(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    rows, cols = shape
    a = rng.standard_normal((max(rows, cols), min(rows, cols)))
    q, r = np.linalg.qr(a)
    q = q * np.sign(np.diag(r))  # make the decomposition unique (Mezzadri 2007)
    return q if rows >= cols else q.T


def split_gates(spec: RNNSpec, array: np.ndarray, axis: int = 0) -> dict[str, np.ndarray]:
    """Split a fused weight/bias into its gate blocks, keyed by gate letter."""
    return dict(zip(GATES[spec.cell], np.split(np.asarray(array), spec.num_gates, axis=axis)))

"""Training loop in JAX: an RNN backend + linear head, optax, global-norm clipping.

Mirrors `rnnbench/torch/train.py` line for line, so that the two frameworks train the same
model on the same batches from the same initial parameters (`rnnbench.core.tasks.TrainConfig`)
and their float64 loss curves agree step by step.

    pred = output[last valid step] @ W_head.T + b_head   (bidirectional: the reverse
                                                          half at step 0, where it ends)
    loss = mean((pred - y)^2)
    g   <- g * min(1, clip_norm / (||g|| + 1e-6))              clip_grad_norm_'s formula
    SGD:  buf = momentum * buf + g;  p -= lr * buf              optax.sgd(lr, momentum)
    Adam: m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
          p -= lr * (m / (1-b1^k)) / (sqrt(v / (1-b2^k)) + eps)  optax.adam(lr, b1, b2, eps)

optax.sgd's `trace` starts from zeros, so its first step equals torch's (buf = g), and
optax.adam puts eps outside the square root as torch does (eps_root = 0): those pairs are
the same function.  Clipping is not: `optax.clip_by_global_norm` scales by
clip_norm / ||g|| while `torch.nn.utils.clip_grad_norm_` scales by
clip_norm / (||g|| + 1e-6), a relative difference of 1e-6 / ||g|| on every clipped
step, far above float64 rounding.  `clip_by_global_norm_like_torch` is optax's
transformation with torch's 1e-6 (with eps=0 it is exactly optax.clip_by_global_norm).
"""

from __future__ import annotations

import time
from functools import lru_cache, partial

import numpy as np

import jax

jax.config.update("jax_enable_x64", True)  # float64 training needs it; float32 is unaffected

import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

from rnnbench.core.tasks import Batch, TrainConfig, TrainResult  # noqa: E402

from . import xla_options  # noqa: E402
from .functional import rnn  # noqa: E402
from .precision import compute_dtype, storage_dtype  # noqa: E402

__all__ = ["clip_by_global_norm_like_torch", "make_optimizer", "train", "hidden_grad_norms", "evaluate_mse",
           "rnn_apply"]

TORCH_CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_ adds this to the norm


def _jax_dtype(dtype: str):
    """The storage dtype of precision `dtype` (parameters, optimizer state, inputs)."""
    return storage_dtype(dtype)


def clip_by_global_norm_like_torch(max_norm: float, eps: float = TORCH_CLIP_EPS) -> optax.GradientTransformation:
    """g *= min(1, max_norm / (||g|| + eps)): `clip_grad_norm_`'s formula as an optax transform."""

    def update_fn(updates, state, params=None):
        del params
        g_norm = optax.global_norm(updates)
        coef = jnp.minimum(1.0, max_norm / (g_norm + eps))
        return jax.tree.map(lambda g: g * coef.astype(g.dtype), updates), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)


def make_optimizer(config: TrainConfig, clip: str = "torch") -> optax.GradientTransformation:
    """Clipping then SGD-momentum or Adam with `config`'s hyper-parameters.

    clip="torch" (default) uses clip_grad_norm_'s formula; clip="optax" uses stock
    optax.clip_by_global_norm (to measure how far that drifts from torch).
    """
    if clip == "torch":
        clipper = clip_by_global_norm_like_torch(config.clip_norm)
    elif clip == "optax":
        clipper = optax.clip_by_global_norm(config.clip_norm)
    else:
        raise ValueError(f"clip must be 'torch' or 'optax', got {clip!r}")
    if config.optimizer == "sgd":
        opt = optax.sgd(config.lr, momentum=config.momentum)
    else:
        opt = optax.adam(config.lr, b1=config.betas[0], b2=config.betas[1], eps=config.eps)
    return optax.chain(clipper, opt)


def rnn_apply(spec, backend: str, rnn_params, x, lengths=None, hx=None, compute=None):
    """`rnnbench.jax.rnn(cell=spec.cell)` (`lstm`/`gru` or any catalogue cell) on time-major x
    (T, B, I): (output time-major, state); `compute`: the compute dtype (Flax's `dtype`)."""
    if spec.batch_first:
        x = jnp.swapaxes(x, 0, 1)
    out, state = rnn(rnn_params, x, hx, cell=spec.cell, lengths=lengths, num_layers=spec.num_layers,
                     bidirectional=spec.bidirectional, batch_first=spec.batch_first, backend=backend, dtype=compute)
    if spec.batch_first:
        out = jnp.swapaxes(out, 0, 1)
    return out, state


def _head(head, features):
    return features @ head["weight"].T + head["bias"]


def _final_features(spec, out, last):
    """Each direction's final output: forward at the last valid step, reverse at step 0."""
    features = out[last, jnp.arange(out.shape[1])]
    if spec.bidirectional:
        H = spec.output_hidden_size
        features = jnp.concatenate([features[:, :H], out[0, :, H:]], axis=-1)
    return features


def _loss(spec, backend, params, x, y, lengths, last, compute=None):
    out, _ = rnn_apply(spec, backend, params["rnn"], x, lengths, compute=compute)
    head = params["head"] if compute is None else jax.tree.map(lambda a: a.astype(compute), params["head"])
    pred = _head(head, _final_features(spec, out, last)).astype(y.dtype)  # the loss in the storage dtype
    return jnp.mean((pred - y) ** 2)


def _arrays(batch: Batch, jdt):
    lengths = None if batch.lengths is None else jnp.asarray(batch.lengths, dtype=jnp.int32)
    return (jnp.asarray(batch.x, dtype=jdt), jnp.asarray(batch.y, dtype=jdt), lengths,
            jnp.asarray(batch.last_index(), dtype=jnp.int32))


def train(config: TrainConfig, backend: str = "scan", dtype: str = "float64", *, clip: str = "torch",
          rnn_params: dict | None = None, head_params: dict | None = None) -> TrainResult:
    """Train `config.steps` steps with `rnnbench.jax.lstm/gru(backend=...)`; record every step.

    `dtype` is a precision (`rnnbench.core.precision`): a mixed one keeps float32 parameters, gradients
    and optax state and computes in its compute dtype (Flax's `dtype`/`param_dtype` policy).

    The whole step (loss, gradients, clipping, update) is one jitted function (`rnnbench.jax.jit`); its
    compilation is included in `seconds`.
    """
    jdt = _jax_dtype(dtype)
    if rnn_params is None or head_params is None:
        rnn_params, head_params = config.initial_params()
    spec = config.spec()
    task = config.make_task()
    start = time.perf_counter()
    params = {"rnn": {k: jnp.asarray(v, dtype=jdt) for k, v in rnn_params.items()},
              "head": {k: jnp.asarray(v, dtype=jdt) for k, v in head_params.items()}}
    opt = make_optimizer(config, clip)
    opt_state = opt.init(params)

    @xla_options.jit
    def step(params, opt_state, x, y, lengths, last):
        loss, grads = jax.value_and_grad(partial(_loss, spec, backend, compute=compute_dtype(dtype)))(
            params, x, y, lengths, last)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, optax.global_norm(grads)

    losses = np.zeros(config.steps)
    norms = np.zeros(config.steps)
    for k in range(config.steps):
        params, opt_state, loss, norm = step(params, opt_state, *_arrays(task.batch(k, config.batch_size), jdt))
        losses[k], norms[k] = float(loss), float(norm)
    seconds = time.perf_counter() - start
    eps = TORCH_CLIP_EPS if clip == "torch" else 0.0
    clipped = norms + eps > config.clip_norm
    to_np = lambda tree: {k: np.asarray(v, dtype=np.float64) for k, v in tree.items()}  # noqa: E731
    return TrainResult("jax", backend, dtype, losses, norms, clipped, seconds, to_np(params["rnn"]), to_np(params["head"]))


def hidden_grad_norms(config: TrainConfig, backend: str, steps, *, rnn_params=None, head_params=None,
                      batch_index: int = 0, dtype: str = "float64") -> dict[int, float]:
    """||dL/dh_t|| (Frobenius over the batch) for each t in `steps` (1-based, 1 <= t <= T).

    The sequence is split at t: steps 1..t give (h_t, c_t); steps t+1..T run from them
    as the initial state; dL/dh_t is the gradient of the loss in that initial h (at t = T
    the head reads h_T directly).  One unidirectional layer, full-length sequences, as in
    `rnnbench.torch.train.hidden_grad_norms`.
    """
    spec = config.spec()
    if spec.num_layers != 1 or spec.bidirectional:
        raise ValueError("hidden_grad_norms needs num_layers=1 and bidirectional=False "
                         f"(got num_layers={spec.num_layers}, bidirectional={spec.bidirectional})")
    if rnn_params is None or head_params is None:
        rnn_params, head_params = config.initial_params()
    batch = config.make_task().batch(batch_index, config.batch_size)
    if batch.lengths is not None:
        raise ValueError(f"hidden_grad_norms needs full-length sequences; task {config.task!r} has variable lengths")
    jdt = _jax_dtype(dtype)
    rnn = {k: jnp.asarray(v, dtype=jdt) for k, v in rnn_params.items()}
    head = {k: jnp.asarray(v, dtype=jdt) for k, v in head_params.items()}
    x, y, _, _ = _arrays(batch, jdt)
    T = x.shape[0]
    norms = {}
    for t in steps:
        if not 1 <= t <= T:
            raise ValueError(f"step {t} outside [1, T={T}]")
        norms[int(t)] = float(_hidden_grad_norm_fn(spec, backend, int(t))(rnn, head, x, y))
    return norms


def evaluate_mse(config: TrainConfig, backend: str, rnn_params: dict, head_params: dict, batch: Batch,
                 dtype: str = "float64") -> float:
    """Mean squared error of the model on `batch` (no gradients): for held-out batches."""
    jdt = _jax_dtype(dtype)
    params = {"rnn": {k: jnp.asarray(v, dtype=jdt) for k, v in rnn_params.items()},
              "head": {k: jnp.asarray(v, dtype=jdt) for k, v in head_params.items()}}
    return float(_loss(config.spec(), backend, params, *_arrays(batch, jdt), compute=compute_dtype(dtype)))


@lru_cache(maxsize=None)
def _hidden_grad_norm_fn(spec, backend: str, t: int):
    """jit((rnn, head, x, y) -> ||dL/dh_t||), one compilation per (spec, backend, t) and shape."""
    is_lstm = spec.cell_def.has_cell_state  # state (h, c); gru-family cells carry h

    def norm(rnn, head, x, y):
        T = x.shape[0]
        _, state = rnn_apply(spec, backend, rnn, x[:t])
        h_t, c_t = state if is_lstm else (state, None)

        def loss_of_h(h):
            if t == T:
                pred = _head(head, h[-1])
            else:
                out, _ = rnn_apply(spec, backend, rnn, x[t:], hx=(h, c_t) if is_lstm else h)
                pred = _head(head, out[-1])
            return jnp.mean((pred - y) ** 2)

        return jnp.linalg.norm(jax.grad(loss_of_h)(h_t).ravel())

    return xla_options.jit(norm)

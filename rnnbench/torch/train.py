"""Training loop in PyTorch: an RNN backend + linear head, torch.optim, clip_grad_norm_.

Mirrors `rnnbench/jax/train.py` line for line, so that the two frameworks train the same
model on the same batches from the same initial parameters (`rnnbench.core.tasks.TrainConfig`)
and their float64 loss curves agree step by step.

    pred = head(output[last valid step])   (bidirectional: the reverse half at step 0,
                                            where that direction ends)
    loss = mean((pred - y)^2)
    g   <- g * min(1, clip_norm / (||g|| + 1e-6))              clip_grad_norm_
    SGD:  buf = momentum * buf + g;  p -= lr * buf              torch.optim.SGD
    Adam: m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
          p -= lr * (m / (1-b1^k)) / (sqrt(v / (1-b2^k)) + eps)  torch.optim.Adam

Variable lengths go through `pack_padded_sequence`, the way PyTorch users feed them.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from rnnbench.core.precision import precision
from rnnbench.core.tasks import Batch, TrainConfig, TrainResult

from .modules import module_for
from .precision import compute_context, ieee_float32
from .precision import storage_dtype as _torch_dtype

__all__ = ["RNNRegressor", "train", "hidden_grad_norms", "evaluate_mse", "make_rnn"]

def make_rnn(spec, backend: str) -> nn.Module:
    """`rnnbench.torch.LSTM`/`GRU(backend=...)`, the drop-in for `nn.LSTM`/`nn.GRU`; any other
    catalogue cell (`ln_lstm`, a user's own, ...) is `rnnbench.torch.RNN(spec.cell, ...)`."""
    return module_for(spec, backend)


class RNNRegressor(nn.Module):
    """RNN + `nn.Linear(output_size, 1)` on the output at each sequence's last valid step."""

    def __init__(self, spec, backend: str, rnn_params: dict, head_params: dict, dtype: str = "float64"):
        super().__init__()
        self.spec = spec
        self.rnn = make_rnn(spec, backend)
        self.head = nn.Linear(spec.output_size, 1)
        tdt = _torch_dtype(dtype)
        self.to(tdt)
        with torch.no_grad():
            self.rnn.load_state_dict({k: torch.as_tensor(np.asarray(v), dtype=tdt) for k, v in rnn_params.items()})
            self.head.weight.copy_(torch.as_tensor(np.asarray(head_params["weight"]), dtype=tdt))
            self.head.bias.copy_(torch.as_tensor(np.asarray(head_params["bias"]), dtype=tdt))

    def run_rnn(self, x: torch.Tensor, lengths: torch.Tensor | None, hx=None):
        """x time-major (T, B, I); returns (output (T, B, F) time-major, state)."""
        T = x.shape[0]
        if self.spec.batch_first:
            x = x.transpose(0, 1)
        if lengths is None:
            out, state = self.rnn(x, hx)
        else:
            packed = pack_padded_sequence(x, lengths, batch_first=self.spec.batch_first, enforce_sorted=False)
            out, state = self.rnn(packed, hx)
            out, _ = pad_packed_sequence(out, batch_first=self.spec.batch_first, total_length=T)
        if self.spec.batch_first:
            out = out.transpose(0, 1)
        return out, state

    def predict_from_output(self, out: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        """Head on each direction's final output: forward at the last valid step, reverse at step 0."""
        rows = torch.arange(out.shape[1])
        features = out[last, rows]
        if self.spec.bidirectional:
            H = self.spec.output_hidden_size
            features = torch.cat([features[:, :H], out[0, :, H:]], dim=-1)
        return self.head(features)

    def forward(self, x, lengths, last):
        out, _ = self.run_rnn(x, lengths)
        return self.predict_from_output(out, last)

    def canonical(self) -> tuple[dict, dict]:
        rnn = {k: v.detach().to(torch.float64).numpy().copy() for k, v in self.rnn.state_dict().items()}
        head = {"weight": self.head.weight.detach().to(torch.float64).numpy().copy(),
                "bias": self.head.bias.detach().to(torch.float64).numpy().copy()}
        return rnn, head


def _tensors(batch: Batch, tdt: torch.dtype):
    x = torch.as_tensor(batch.x, dtype=tdt)
    y = torch.as_tensor(batch.y, dtype=tdt)
    lengths = None if batch.lengths is None else torch.as_tensor(batch.lengths, dtype=torch.int64)
    last = torch.as_tensor(batch.last_index(), dtype=torch.int64)
    return x, y, lengths, last


def _optimizer(config: TrainConfig, parameters) -> torch.optim.Optimizer:
    if config.optimizer == "sgd":
        return torch.optim.SGD(parameters, lr=config.lr, momentum=config.momentum)
    return torch.optim.Adam(parameters, lr=config.lr, betas=config.betas, eps=config.eps)


def train(config: TrainConfig, backend: str = "native", dtype: str = "float64", *,
          rnn_params: dict | None = None, head_params: dict | None = None, device: str = "cpu") -> TrainResult:
    """Train `config.steps` steps with `rnnbench.torch.LSTM/GRU(backend=...)`; record every step.

    `dtype` is a precision (`rnnbench.core.precision`): a mixed one (amp_bfloat16, amp_float16) keeps
    float32 parameters and optimizer state and runs the forward under `torch.autocast`, the
    backward outside it; amp_float16 adds `torch.amp.GradScaler` (gradients unscaled before
    clipping), the CUDA recipe.
    """
    tdt = _torch_dtype(dtype)
    p = precision(dtype)
    scaler = torch.amp.GradScaler(device) if p.mixed and p.compute == "float16" else None
    if rnn_params is None or head_params is None:
        rnn_params, head_params = config.initial_params()
    task = config.make_task()
    start = time.perf_counter()
    model = RNNRegressor(config.spec(), backend, rnn_params, head_params, dtype).to(device)
    parameters = list(model.parameters())
    opt = _optimizer(config, parameters)
    losses = np.zeros(config.steps)
    norms = np.zeros(config.steps)
    for k in range(config.steps):
        x, y, lengths, last = _tensors(task.batch(k, config.batch_size), tdt)
        x, y, last = x.to(device), y.to(device), last.to(device)
        opt.zero_grad(set_to_none=True)
        with compute_context(dtype, torch.device(device).type):
            pred = model(x, lengths, last)
        loss = nn.functional.mse_loss(pred.to(y.dtype), y)  # the loss in the storage dtype, as autocast's recipe
        with ieee_float32():
            if scaler is None:
                loss.backward()
            else:
                scaler.scale(loss).backward()
                scaler.unscale_(opt)
        norms[k] = float(nn.utils.clip_grad_norm_(parameters, config.clip_norm))
        if scaler is None:
            opt.step()
        else:
            scaler.step(opt)
            scaler.update()
        losses[k] = float(loss.detach())
    seconds = time.perf_counter() - start
    rnn, head = model.canonical()
    clipped = norms + 1e-6 > config.clip_norm  # clip_grad_norm_'s coefficient was < 1
    return TrainResult("torch", backend, dtype, losses, norms, clipped, seconds, rnn, head)


def hidden_grad_norms(config: TrainConfig, backend: str, steps, *, rnn_params=None, head_params=None,
                      batch_index: int = 0, dtype: str = "float64") -> dict[int, float]:
    """||dL/dh_t|| (Frobenius over the batch) for each t in `steps` (1-based, 1 <= t <= T).

    h_t is the hidden state after step t.  The sequence is split at t: steps 1..t give
    (h_t, c_t), which become leaves; steps t+1..T run from them as the initial state, and
    the gradient of the loss with respect to the leaf h_t is the total derivative dL/dh_t
    (at t = T the head reads h_T directly).  Defined for one unidirectional layer on
    full-length sequences, where the hidden state is the whole recurrent state.
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
    tdt = _torch_dtype(dtype)
    model = RNNRegressor(spec, backend, rnn_params, head_params, dtype)
    x, y, _, _ = _tensors(batch, tdt)
    T = x.shape[0]
    norms = {}
    for t in steps:
        if not 1 <= t <= T:
            raise ValueError(f"step {t} outside [1, T={T}]")
        _, state = model.run_rnn(x[:t], None)
        is_lstm = isinstance(state, tuple)
        h_t = (state[0] if is_lstm else state).detach().requires_grad_(True)
        c_t = state[1].detach().requires_grad_(True) if is_lstm else None
        if t == T:
            pred = model.head(h_t[-1])
        else:
            out, _ = model.run_rnn(x[t:], None, (h_t, c_t) if is_lstm else h_t)
            pred = model.head(out[-1])
        loss = nn.functional.mse_loss(pred, y)
        (grad,) = torch.autograd.grad(loss, h_t)
        norms[int(t)] = float(torch.linalg.vector_norm(grad.to(torch.float64)))
    return norms


def evaluate_mse(config: TrainConfig, backend: str, rnn_params: dict, head_params: dict, batch: Batch,
                 dtype: str = "float64") -> float:
    """Mean squared error of the model on `batch` (no gradients): for held-out batches."""
    tdt = _torch_dtype(dtype)
    model = RNNRegressor(config.spec(), backend, rnn_params, head_params, dtype)
    x, y, lengths, last = _tensors(batch, tdt)
    with torch.no_grad(), compute_context(dtype, "cpu"):
        pred = model(x, lengths, last)
    return float(nn.functional.mse_loss(pred.to(y.dtype), y))

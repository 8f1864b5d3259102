"""The PyTorch side of `rnnbench.core.adapter`: one `Adapter` per backend, and the module-level
`FrameworkAdapter` functions the harness calls (threads, peak memory, GEMM rates, trainer).

`get_adapter("eager")` -> an object with `run_case` (canonical NumPy in, float64 NumPy
out, through `rnnbench.torch.LSTM`/`GRU`, or `rnnbench.torch.RNN(cell)` for the other catalogue cells,
with that backend) and `make_workload` (a model
and inputs built once; `forward()` under `torch.no_grad()`, `train_step()` forward +
backward of `output.sum()` (+ the final states), synchronizing CUDA).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from rnnbench.core.adapter import BackendAdapter
from rnnbench.core.params import check_params, init_params
from rnnbench.core.registry import split_options
from rnnbench.core.spec import RNNSpec

from . import backends
from .modules import module_for
from .precision import compute_context, ieee_float32
from .precision import storage_dtype as torch_dtype


def build_module(spec: RNNSpec, backend: str, params: Mapping[str, np.ndarray] | None = None, *,
                 dtype: str = "float32", device: str = "cpu", backend_options: Mapping | None = None):
    """The `rnnbench.torch` module for `spec` with `backend` (and its options), loaded with canonical `params`."""
    module = module_for(spec, backend, backend_options, dtype=torch_dtype(dtype), device=device)
    if params is not None:
        check_params(spec, params)
        with torch.no_grad():
            for name, value in params.items():
                getattr(module, name).copy_(torch.as_tensor(np.asarray(value)))
    return module


def _sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


class TorchAdapter(BackendAdapter):
    """One rung: the capability questions (`rnnbench.core.adapter.BackendAdapter`), `run_case`, `make_workload`."""

    framework = "torch"
    backends = backends

    def __init__(self, key: str, **options):
        super().__init__(key)
        backends.check_options(self.key, options)
        self.options = options

    def __repr__(self) -> str:
        return f"TorchAdapter({self.key!r}{''.join(f', {k}={v!r}' for k, v in self.options.items())})"

    def run_case(self, spec: RNNSpec, params: Mapping[str, np.ndarray], x: np.ndarray,
                 h0: np.ndarray | None = None, c0: np.ndarray | None = None,
                 lengths: np.ndarray | None = None,
                 cotangents: Mapping[str, np.ndarray] | None = None, *,
                 dtype: str = "float64", device: str = "cpu") -> dict[str, np.ndarray]:
        self.check(spec, lengths=lengths is not None, dtype=dtype, device=device)
        has_c = spec.cell_def.has_cell_state
        if has_c and (h0 is None) != (c0 is None):
            raise ValueError(f"an LSTM-family cell ({spec.cell}) takes h0 and c0 together or not at all")
        tdtype = torch_dtype(dtype)
        # Training mode when gradients are asked for: cuDNN computes an RNN's backward only in
        # training mode.  The vectors have no dropout, so both modes compute the same function.
        module = build_module(spec, self.key, params, dtype=dtype, device=device, backend_options=self.options)
        module.train(cotangents is not None and spec.dropout == 0)

        def tensor(a):
            return torch.tensor(np.asarray(a), dtype=tdtype, device=device, requires_grad=True)

        x_t = tensor(x)
        h0_t = tensor(h0) if h0 is not None else None
        c0_t = tensor(c0) if c0 is not None else None
        hx = None if h0_t is None else ((h0_t, c0_t) if has_c else h0_t)
        T = x_t.shape[1 if spec.batch_first else 0]
        with torch.enable_grad(), compute_context(dtype, torch.device(device).type):
            if lengths is None:
                output, hidden = module(x_t, hx)
            else:
                packed = pack_padded_sequence(x_t, torch.as_tensor(np.asarray(lengths), dtype=torch.int64),
                                              batch_first=spec.batch_first, enforce_sorted=False)
                out_packed, hidden = module(packed, hx)
                output, _ = pad_packed_sequence(out_packed, batch_first=spec.batch_first, total_length=T)
            h_n, c_n = hidden if has_c else (hidden, None)
            result = {"output": output, "h_n": h_n}
            if c_n is not None:
                result["c_n"] = c_n
            grads = {}
        if cotangents is not None:  # backward outside autocast, as autocast's recipe has it
            with torch.enable_grad(), ieee_float32():
                loss = sum((value * torch.as_tensor(np.asarray(cotangents[key]), dtype=tdtype, device=device)).sum()
                           for key, value in result.items())
                inputs = {"grad/x": x_t}
                if h0_t is not None:
                    inputs["grad/h0"] = h0_t
                if c0_t is not None:
                    inputs["grad/c0"] = c0_t
                for name, p in module.named_parameters():
                    inputs[f"grad/{name}"] = p
                values = torch.autograd.grad(loss, list(inputs.values()), allow_unused=True)
                for key, inp, g in zip(inputs, inputs.values(), values):
                    grads[key] = torch.zeros_like(inp) if g is None else g
        out = {k: v.detach().to("cpu", torch.float64).numpy() for k, v in {**result, **grads}.items()}
        return out

    def make_workload(self, spec: RNNSpec, *, seq_len: int, batch: int, dtype: str = "float32",
                      device: str = "cpu", seed: int = 0, lengths=None, checked: bool = False) -> "TorchWorkload":
        if not checked:  # checked: the caller asked already (`rnnbench.core.adapter.Adapter.make_workload`)
            self.check(spec, lengths=lengths is not None, dtype=dtype, device=device, gradients=True)
        return TorchWorkload(self.key, spec, seq_len=seq_len, batch=batch, dtype=dtype, device=device, seed=seed,
                             lengths=lengths, backend_options=self.options)


class TorchWorkload:
    """A model and inputs built once from `seed`; each call runs and synchronizes.  With
    `lengths` the input is a PackedSequence (packed once; `enforce_sorted=False`)."""

    def __init__(self, backend: str, spec: RNNSpec, *, seq_len: int, batch: int, dtype: str,
                 device: str, seed: int, lengths=None, backend_options: Mapping | None = None):
        self.spec, self.device, self.dtype = spec, device, dtype
        rng = np.random.default_rng(seed)
        self.module = build_module(spec, backend, init_params(spec, rng), dtype=dtype, device=device,
                                   backend_options=backend_options)
        shape = (batch, seq_len, spec.input_size) if spec.batch_first else (seq_len, batch, spec.input_size)
        tdtype = torch_dtype(dtype)
        self.x = torch.tensor(rng.standard_normal(shape), dtype=tdtype, device=device, requires_grad=True)
        self.lengths = None if lengths is None else torch.as_tensor(np.asarray(lengths), dtype=torch.int64)

    def _run(self):
        with compute_context(self.dtype, torch.device(self.device).type):
            if self.lengths is None:
                return self.module(self.x)
            packed = pack_padded_sequence(self.x, self.lengths, batch_first=self.spec.batch_first,
                                          enforce_sorted=False)
            return self.module(packed)

    def _loss(self):
        output, hidden = self._run()
        if self.lengths is not None:
            output = output.data
        h_n, c_n = hidden if self.spec.cell_def.has_cell_state else (hidden, None)
        loss = output.sum() + h_n.sum()
        return loss if c_n is None else loss + c_n.sum()

    def forward(self) -> None:
        self.module.eval()  # inference as a user runs it
        with torch.no_grad():
            self._run()
        _sync(self.device)

    def train_step(self) -> None:
        # Training mode as a user trains (cuDNN's RNN backward requires it); gradients set to
        # None first, so every step does the same work (no accumulation).
        self.module.train()
        self.module.zero_grad(set_to_none=True)
        self.x.grad = None
        loss = self._loss()
        with ieee_float32():
            loss.backward()
        _sync(self.device)


# ---- rnnbench.core.adapter.FrameworkAdapter -------------------------------------------------------------

def get_adapter(key: str, **options) -> TorchAdapter:
    """The adapter of backend `key`; options as keywords or in the name ("scan[freezing]",
    `rnnbench.core.registry.split_options`)."""
    key, named = split_options(key)
    return TorchAdapter(key, **named, **options)


def available_backends(device: str = "cpu") -> tuple[str, ...]:
    return backends.available_backends(device)


def set_threads(threads: int) -> None:
    """torch.set_num_threads (the env var alone misses oneDNN's pool)."""
    torch.set_num_threads(threads)


def reset_peak_memory(device: str) -> None:
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()


def peak_memory_bytes(device: str) -> int | None:
    return int(torch.cuda.max_memory_allocated()) if device == "cuda" else None


def gemm_gflops(m: int, k: int, n: int, *, timer, device: str, dtype: str = "float32",
                min_time: float = 0.1, steps: int | None = None) -> dict[str, float | None]:
    """GFLOP/s of (m, k) x (k, n) with `torch.mm` and (CPU) with prepacked oneDNN, the two
    GEMM libraries the torch rungs use (the weight in nn.Linear's (out, in) layout).

    With `steps` (n a multiple of k): also "chain", `steps` dependent GEMMs inside one
    TorchScript loop, each step's input the sum of the last output's n/k column blocks (a
    recurrence that needs every output column): the step rate without Python's per-call
    dispatch, which a C++ loop (nn.LSTM) does not pay."""
    tdt = torch_dtype(dtype)
    x = torch.randn(m, k, device=device, dtype=tdt)
    w = torch.randn(n, k, device=device, dtype=tdt)
    b = torch.zeros(n, device=device, dtype=tdt)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    flops = 2.0 * m * k * n
    out = {"torch.mm": flops / timer(lambda: torch.mm(x, w.t()), sync, min_time) / 1e9, "onednn": None}
    if device == "cpu" and torch.backends.mkldnn.is_available():
        packed = torch.ops.mkldnn._reorder_linear_weight(w, m)
        out["onednn"] = flops / timer(
            lambda: torch.ops.mkldnn._linear_pointwise(x, packed, b, "none", [], ""), sync, min_time) / 1e9
    if steps:
        wt = _chain_weight(n, k).to(device=device, dtype=tdt).t().contiguous()
        out["chain"] = steps * flops / timer(lambda: _gemm_chain(x, wt, steps), sync, min_time) / 1e9
    return out


def _chain_weight(n: int, k: int) -> torch.Tensor:
    """(n, k): n/k orthogonal (k, k) blocks over sqrt(n/k), so that the chain's values stay
    near their start (no inf or denormal slow paths)."""
    g = n // k
    blocks = [torch.linalg.qr(torch.randn(k, k, dtype=torch.float64))[0] for _ in range(g)]
    return torch.cat(blocks) / g ** 0.5


@torch.jit.script
def _gemm_chain(h: torch.Tensor, wt: torch.Tensor, steps: int) -> torch.Tensor:
    m, k = h.shape[0], h.shape[1]
    for _ in range(steps):
        h = torch.mm(h, wt).view(m, -1, k).sum(1)
    return h


def trainer():
    from . import train
    return train


def versions() -> dict[str, str]:
    return {"torch": torch.__version__}


def kernel_choices() -> dict:
    """The GEMM policy of the custom kernels and the library each GEMM shape runs on (`gemm.py`)."""
    from .backends.bptt.gemm import choice_key_text, gemm_policy, onednn_unavailable_reason, tuned_choices

    return {"gemm_policy": gemm_policy(), "onednn": onednn_unavailable_reason("cpu") or "available",
            "gemm": {choice_key_text(k): v for k, v in tuned_choices().items()}}


def kernel_isa(device: str) -> str:
    """The ISA torch's CPU kernels dispatch to (e.g. "AVX512"), or the CUDA device's name."""
    if device == "cuda":
        return torch.cuda.get_device_name()
    return torch.backends.cpu.get_cpu_capability()

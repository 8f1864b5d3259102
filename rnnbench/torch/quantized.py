"""int8 inference: an LSTM/GRU whose every GEMM is an `nn.Linear`, quantized by a maintained tool.

`torch.ao.quantization.quantize_dynamic(nn.LSTM(...), {nn.LSTM})` in torch 2.13 returns the
float `nn.LSTM` unchanged (a silent no-op; it only warns that `torch.ao.quantization` is
deprecated).  Quantization tools swap or re-type `nn.Linear`, so the recipe is a recurrent
layer built on `nn.Linear`: per layer and direction one `ih`
(W_ih, b_ih) applied to all steps at once and one `hh` (W_hh, b_hh) per step, the gate
arithmetic in float32 between them (the catalogue's equations for lstm and gru).

    q = rnnbench.torch.quantized.quantize(nn_lstm, method="torchao_int8_dynamic")
    output, (h_n, c_n) = q(x)          # nn.LSTM's forward (no lengths, no proj_size)

Methods (`METHODS`):
- `ao_dynamic`: `torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, torch.qint8)`,
  the long-standing recipe (deprecated upstream, still the fbgemm/oneDNN int8 kernels);
- `torchao_int8_weight_only`: `torchao.quantization.quantize_(model, Int8WeightOnlyConfig())`,
  int8 weights dequantized into a float GEMM (smaller model; speed depends on the backend);
- `torchao_int8_dynamic`: `quantize_(model, Int8DynamicActivationInt8WeightConfig())`,
  int8 weights and per-token int8 activations;
- `float`: the same Linear-built layer unquantized (the baseline for size, time and error).

`quantize` checks the result holds quantized weights and raises instead of returning a
float model that looks quantized.  Model size is the serialized `state_dict` in bytes
(`model_bytes`): `sum(p.numel() for p in parameters())`, the common measure, counts 0 for a
dynamically quantized Linear, whose packed weights are not parameters.
"""

from __future__ import annotations

import io
import logging
import warnings

import torch
import torch.nn as nn
from torch import Tensor

from rnnbench.core.catalogue import STANDARD_CELLS
from rnnbench.core.spec import RNNSpec

METHODS = ("float", "ao_dynamic", "torchao_int8_weight_only", "torchao_int8_dynamic")


class LinearRNN(nn.Module):
    """A multi-layer, optionally bidirectional LSTM or GRU on `nn.Linear` GEMMs (inference)."""

    def __init__(self, spec: RNNSpec):
        super().__init__()
        if spec.cell not in STANDARD_CELLS:
            raise ValueError(f"int8 layers are built for {', '.join(STANDARD_CELLS)}, not {spec.cell!r}")
        if spec.proj_size:
            raise ValueError("int8 layers do not support proj_size")
        self.spec = spec
        G = len(spec.cell_def.gates) * spec.hidden_size
        self.ih = nn.ModuleList(nn.Linear(spec.layer_input_size(layer), G, bias=spec.bias)
                                for layer, _ in spec.layers_and_directions())
        self.hh = nn.ModuleList(nn.Linear(spec.hidden_size, G, bias=spec.bias)
                                for _ in spec.layers_and_directions())

    @classmethod
    def from_module(cls, rnn: nn.Module) -> "LinearRNN":
        """The same function as an `nn.LSTM`/`nn.GRU` or `rnnbench.torch.LSTM`/`GRU` (weights copied)."""
        cell = str(getattr(rnn, "mode", "")).lower()  # nn.RNNBase.mode: "LSTM", "GRU"
        if cell not in STANDARD_CELLS:
            raise TypeError(f"expected an LSTM or GRU module, got {type(rnn).__name__}")
        spec = RNNSpec(cell, rnn.input_size, rnn.hidden_size, num_layers=rnn.num_layers, bias=rnn.bias,
                       batch_first=rnn.batch_first, bidirectional=rnn.bidirectional,
                       proj_size=getattr(rnn, "proj_size", 0))
        model = cls(spec)
        with torch.no_grad():
            for k, (layer, direction) in enumerate(spec.layers_and_directions()):
                s = spec.suffix(layer, direction)
                model.ih[k].weight.copy_(getattr(rnn, f"weight_ih_{s}"))
                model.hh[k].weight.copy_(getattr(rnn, f"weight_hh_{s}"))
                if spec.bias:
                    model.ih[k].bias.copy_(getattr(rnn, f"bias_ih_{s}"))
                    model.hh[k].bias.copy_(getattr(rnn, f"bias_hh_{s}"))
        return model.eval()

    def _step(self, xg: Tensor, h: Tensor, c: Tensor | None, hh: nn.Module):
        hg = hh(h)
        if c is not None:  # lstm: i, f, g, o
            i, f, g, o = (xg + hg).chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            return torch.sigmoid(o) * torch.tanh(c), c
        x_r, x_z, x_n = xg.chunk(3, 1)  # gru: the reset gate scales W_hn h + b_hn only
        h_r, h_z, h_n = hg.chunk(3, 1)
        r, z = torch.sigmoid(x_r + h_r), torch.sigmoid(x_z + h_z)
        n = torch.tanh(x_n + r * h_n)
        return (1 - z) * n + z * h, None

    @torch.no_grad()
    def forward(self, x: Tensor, hx=None):
        spec = self.spec
        has_c = spec.cell_def.has_cell_state
        if x.dim() != 3:
            raise ValueError(f"int8 layers take batched 3-D input, got {x.dim()}-D")
        if x.shape[-1] != spec.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {spec.input_size}, "
                               f"got {x.shape[-1]}")
        if spec.batch_first:
            x = x.transpose(0, 1)
        T, B, _ = x.shape
        shapes = spec.state_shapes(B)
        if hx is None:
            h0 = x.new_zeros(shapes["h"])
            c0 = x.new_zeros(shapes["c"]) if has_c else None
        else:
            h0, c0 = hx if has_c else (hx, None)
        finals_h, finals_c = [], []
        D = spec.num_directions
        for layer in range(spec.num_layers):
            outs = []
            for d in range(D):
                k = layer * D + d
                xg = self.ih[k](x.reshape(T * B, -1)).reshape(T, B, -1)
                h, c = h0[k], (c0[k] if has_c else None)
                ys = [None] * T
                for t in (range(T - 1, -1, -1) if d else range(T)):
                    h, c = self._step(xg[t], h, c, self.hh[k])
                    ys[t] = h
                outs.append(torch.stack(ys))
                finals_h.append(h)
                finals_c.append(c)
            x = torch.cat(outs, -1) if D == 2 else outs[0]
        out = x.transpose(0, 1) if spec.batch_first else x
        h_n = torch.stack(finals_h)
        return (out, (h_n, torch.stack(finals_c))) if has_c else (out, h_n)


def _is_int8(linear: nn.Module) -> bool:
    """Whether one of the layer's GEMMs holds int8 weights (swapped module or int8 tensor subclass)."""
    if type(linear).__module__.startswith("torch.ao.nn.quantized"):
        return True
    return "Int8" in type(getattr(linear, "weight", None)).__name__


def quantize(rnn: nn.Module, method: str = "torchao_int8_dynamic") -> nn.Module:
    """An int8 inference copy of an LSTM/GRU module (see the module docstring for `method`).

    Raises RuntimeError when the tool left the GEMMs in float (a silent no-op is never returned).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    model = LinearRNN.from_module(rnn)
    if method == "float":
        return model
    if method == "ao_dynamic":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", (DeprecationWarning, UserWarning, FutureWarning))
            model = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    else:
        # torchao's CPU wheel logs a warning per CUDA extension it cannot load: noise on a CPU
        logging.getLogger("torchao").setLevel(logging.ERROR)
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig, quantize_
        config = Int8WeightOnlyConfig() if method == "torchao_int8_weight_only" else \
            Int8DynamicActivationInt8WeightConfig()
        quantize_(model, config)
    expected = len(model.ih) + len(model.hh)
    got = sum(_is_int8(m) for m in [*model.ih, *model.hh])
    if got != expected:
        raise RuntimeError(f"{method} quantized {got} of the {expected} Linear GEMMs: the rest would run "
                           "in float while looking quantized")
    return model.eval()


def model_bytes(model: nn.Module) -> int:
    """The serialized state_dict's size in bytes (int8 weights, scales and all)."""
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return len(buffer.getvalue())

"""`rnnbench.torch.LSTM` and `rnnbench.torch.GRU`: drop-in `nn.LSTM` / `nn.GRU` with a `backend=`;
`rnnbench.torch.RNN(cell, ...)` (and `LayerNormLSTM`, `PeepholeLSTM`, `ResetBeforeGRU`) the same
for every catalogue cell with a torch step (`rnnbench.torch.cells`).  The front door of rnnbench.torch.

Same constructor arguments, parameter names, shapes, order and initialisation as
`nn.LSTM`/`nn.GRU` (so `load_state_dict` works both ways), same forward: a Tensor
(batched 3-D or unbatched 2-D, `batch_first` honoured) or a `PackedSequence` (sorted or
not; the output keeps its `sorted_indices`/`unsorted_indices`), optional `hx`, and the
same return values.  Extra: `forward(x, hx, lengths=...)` takes per-sequence lengths
for a padded batch and returns the padded output (zeros past each length).

The module checks its input as `nn.LSTM` does, asks the backend's capability check once at
construction (`backends.refusal`: cell, proj_size) and once per dtype and device it runs on
(availability, precision), and hands time-major input to the stacker `rnnbench.torch.stack`,
the same way for every backend (`native` included: its `run_stack` takes the whole stack).
"""

from __future__ import annotations

import numbers
import warnings

import torch
import torch.nn as nn
from torch import Tensor
from torch.nn.utils.rnn import PackedSequence

from rnnbench.core.capabilities import BackendUnavailableError, UnsupportedConfigError
from rnnbench.core.params import layer_params, param_inits
from rnnbench.core.spec import RNNSpec

from . import backends, stack as driver
from .cells import get_torch_cell
from .precision import precision_name

__all__ = ["LSTM", "GRU", "RNN", "LayerNormLSTM", "PeepholeLSTM", "ResetBeforeGRU", "RNNInputError",
           "BackendUnavailableError", "module_for"]


class RNNInputError(ValueError, RuntimeError):
    """Bad forward input (rank, feature size, hx shape/dtype/device, lengths).

    A ValueError that is also a RuntimeError, because `nn.LSTM` raises RuntimeError
    for most of these and drop-in callers may catch either.
    """


def _check_constructor_args(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                            proj_size) -> None:
    """`nn.RNNBase.__init__`'s checks, in its order, with its exception types and words."""
    if isinstance(dropout, bool) or not isinstance(dropout, numbers.Number) or not 0 <= dropout <= 1:
        raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                         f"element being zeroed, got {dropout!r}")
    for name, value in (("bias", bias), ("batch_first", batch_first), ("bidirectional", bidirectional)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} should be of type bool, got: {type(value).__name__}")
    for name, value in (("input_size", input_size), ("hidden_size", hidden_size), ("num_layers", num_layers),
                        ("proj_size", proj_size)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} should be of type int, got: {type(value).__name__}")
    if input_size <= 0:
        raise ValueError(f"input_size must be greater than zero, got {input_size}")
    if hidden_size <= 0:
        raise ValueError(f"hidden_size must be greater than zero, got {hidden_size}")
    if num_layers <= 0:
        raise ValueError(f"num_layers must be greater than zero, got {num_layers}")
    if proj_size < 0:
        raise ValueError(f"proj_size should be a positive integer or zero to disable projections, got {proj_size}")
    if proj_size >= hidden_size:
        raise ValueError(f"proj_size has to be smaller than hidden_size, got proj_size={proj_size} and "
                         f"hidden_size={hidden_size}")


class _RNNBase(nn.Module):
    mode: str  # "LSTM" or "GRU", as nn.RNNBase

    def __init__(self, cell: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device=None, dtype=None,
                 *, backend: str = "eager", backend_options=None):
        super().__init__()
        _check_constructor_args(input_size, hidden_size, num_layers, bias, batch_first, dropout,
                                bidirectional, proj_size)
        spec = RNNSpec(cell, input_size, hidden_size, num_layers, bias, batch_first, bidirectional,
                       proj_size, dropout)
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero "
                          f"dropout expects num_layers greater than 1, but got dropout={dropout} and "
                          f"num_layers={num_layers}", stacklevel=3)
        self.spec = spec
        self.cell = cell
        self._has_c = spec.cell_def.has_cell_state  # LSTM family: state (h, c); GRU family: h
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, proj_size
        factory = {"device": device, "dtype": dtype}
        self._flat_weights_names = []
        for name, shape in spec.param_shapes().items():
            self.register_parameter(name, nn.Parameter(torch.empty(shape, **factory)))
            self._flat_weights_names.append(name)
        self.backend = backend
        self.backend_options = backend_options
        self.reset_parameters()

    # ---- nn.RNNBase compatibility ------------------------------------------------------
    def reset_parameters(self) -> None:
        """U(-1/sqrt(H), 1/sqrt(H)) for every parameter, in nn.LSTM's order (same RNG draws);
        a catalogue cell's extras by their own rule (`rnnbench.core.params.param_inits`)."""
        stdv = 1.0 / self.hidden_size ** 0.5
        inits = param_inits(self.spec)
        for name, weight in self.named_parameters():
            if inits[name] == "uniform":
                nn.init.uniform_(weight, -stdv, stdv)
            else:
                nn.init.ones_(weight) if inits[name] == "ones" else nn.init.zeros_(weight)

    @property
    def _flat_weights(self) -> list[Tensor]:
        return [getattr(self, name) for name in self._flat_weights_names]

    @property
    def all_weights(self) -> list[list[Tensor]]:
        """Parameters grouped per layer and direction, as `nn.LSTM.all_weights`."""
        n = len(self._flat_weights_names) // (self.num_layers * self.spec.num_directions)
        w = self._flat_weights
        return [w[k:k + n] for k in range(0, len(w), n)]

    def flatten_parameters(self) -> None:
        """As `nn.LSTM.flatten_parameters`: pack the weights for cuDNN (a no-op off CUDA and for
        backends whose kernel takes no packed weights: those without a `flatten_parameters`)."""
        flatten = getattr(backends.backend_module(self.backend), "flatten_parameters", None)
        if flatten is not None:
            flatten(self.spec, self._flat_weights)

    @property
    def backend(self) -> str:
        return self._backend

    @backend.setter
    def backend(self, name: str) -> None:
        name = backends.check_backend_name(name)
        refused = backends.refusal(name, self.spec)  # the declaration; dtype and device at the first forward
        if refused is not None and refused.what == "proj_size":
            raise backends.ProjectionNotSupportedError(
                f"{refused.reason}; backends that do: {', '.join(backends.PROJ_BACKENDS)}")
        if refused is not None:
            raise UnsupportedConfigError(refused.reason)
        self._backend = name
        self._checked = None  # (backend, dtype, device) the last forward was checked for
        if getattr(self, "_backend_options", None):
            backends.check_options(name, self._backend_options)  # options the new backend must have

    @property
    def backend_options(self) -> dict:
        """The backend's options given (`rnnbench.torch.backends.options(backend)` lists them with
        their defaults): e.g. `{"freezing": True}` or `{"mode": "max-autotune-no-cudagraphs"}`
        for `compile` and `scan`."""
        return dict(getattr(self, "_backend_options", None) or {})

    @backend_options.setter
    def backend_options(self, options) -> None:
        options = dict(options or {})
        backends.check_options(self.backend, options)
        self._backend_options = options

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        for name, default in (("num_layers", 1), ("bias", True), ("batch_first", False), ("dropout", 0.0),
                              ("bidirectional", False), ("proj_size", 0)):
            if getattr(self, name) != default:
                s += f", {name}={getattr(self, name)}"
        s += f", backend={self.backend!r}"
        return s + (f", backend_options={self.backend_options!r}" if self.backend_options else "")

    # ---- forward -----------------------------------------------------------------------
    def forward(self, input, hx=None, *, lengths: Tensor | None = None):
        if isinstance(input, PackedSequence):
            if lengths is not None:
                raise RNNInputError("lengths= is for padded Tensor input; a PackedSequence carries its own")
            return self._forward_packed(input, hx)
        if not isinstance(input, Tensor):
            raise TypeError(f"input must be a Tensor or a PackedSequence, got {type(input).__name__}")
        if input.dim() not in (2, 3):
            raise RNNInputError(f"{self.mode}: Expected input to be 2D or 3D, got {input.dim()}D instead "
                                f"(shape {tuple(input.shape)})")
        self._check_input(input, packed=False)
        batched = input.dim() == 3
        batch_dim = 0 if self.batch_first else 1
        if not batched:
            if lengths is not None:
                raise RNNInputError("lengths= needs batched 3-D input")
            input = input.unsqueeze(batch_dim)
        B, T = input.shape[batch_dim], input.shape[1 - batch_dim]
        if T == 0:
            raise RNNInputError(f"{self.mode}: Expected sequence length to be larger than 0 in RNN "
                                f"(input shape {tuple(input.shape)})")
        state = self._check_hx(hx, B, input, batched)
        if lengths is not None:
            lengths = self._check_lengths(lengths, B, T, input.device)
        self._check_backend(input.device)
        x = input.transpose(0, 1) if self.batch_first else input
        output, final = self._run(x, state, lengths)
        if self.batch_first:
            output = output.transpose(0, 1)
        if not batched:
            output = output.squeeze(batch_dim)
            final = tuple(s.squeeze(1) for s in final)
        return output, self._as_hx(final)

    def _forward_packed(self, packed: PackedSequence, hx):
        data, batch_sizes, sorted_indices, unsorted_indices = packed
        self._check_input(data, packed=True)
        B = int(batch_sizes[0])
        state = self._check_hx(hx, B, data, batched=True)
        if state is not None and sorted_indices is not None:
            # hx is given in the caller's batch order; the packed batch is sorted by length
            state = tuple(h.index_select(1, sorted_indices) for h in state)
        self._check_backend(data.device)
        output, final = self._run(packed, state, None)
        if unsorted_indices is not None:
            final = tuple(s.index_select(1, unsorted_indices) for s in final)
        return output, self._as_hx(final)

    def layer_params(self) -> list[driver.LayerParams]:
        """One `driver.LayerParams` per (layer, direction), in PyTorch's order."""
        params = self._params()
        return [layer_params(self.spec, params, layer, direction)
                for layer, direction in self.spec.layers_and_directions()]

    def _params(self) -> dict[str, Tensor]:
        return {name: getattr(self, name) for name in self._flat_weights_names}

    def _run(self, x, state, lengths: Tensor | None):
        """The stack through `driver.run` on time-major x (a Tensor or a PackedSequence)."""
        data = x.data if isinstance(x, PackedSequence) else x
        state = state or self._zero_state(int(x.batch_sizes[0]) if isinstance(x, PackedSequence) else x.shape[1],
                                          data)
        return driver.run(backends.backend_module(self.backend), get_torch_cell(self.cell), self.spec,
                          self._params(), x, state, lengths, dropout=self.dropout, training=self.training,
                          options=self.backend_options)

    # ---- validation --------------------------------------------------------------------
    def _zero_state(self, batch: int, like: Tensor) -> tuple:
        shapes = self.spec.state_shapes(batch)
        return tuple(torch.zeros(shapes[k], dtype=like.dtype, device=like.device) for k in ("h", "c") if k in shapes)

    def _as_hx(self, state: tuple):
        """A state tuple in nn.LSTM's / nn.GRU's form: (h, c) or h."""
        return tuple(state) if self._has_c else state[0]

    def _check_backend(self, device: torch.device) -> None:
        """Whether the backend runs here, in this dtype on this device: asked once per
        (backend, dtype, device), the first time the module runs there."""
        dtype = self._flat_weights[0].dtype
        key = (self.backend, dtype, device)
        if self._checked == key:
            return
        reason = backends.unavailable_reason(self.backend, device)
        if reason is not None:
            raise BackendUnavailableError(f"backend {self.backend!r} cannot run on {device}: {reason}")
        reason = backends.unsupported_reason(self.backend, self.spec, dtype=precision_name(dtype, device.type),
                                             device=device.type)
        if reason is not None:
            raise UnsupportedConfigError(reason)
        self._checked = key

    def _check_input(self, x: Tensor, packed: bool) -> None:
        """`nn.RNNBase.check_input`'s checks, in its order, types and words (dtype, rank, size, device)."""
        w = self._flat_weights[0]
        if x.dtype != w.dtype and not torch.is_autocast_enabled(x.device.type):  # autocast casts (as nn does)
            raise RNNInputError(f"RNN input dtype ({x.dtype}) does not match weight dtype ({w.dtype}). "
                                f"Convert input: input.to({w.dtype}), or convert model: model.to({x.dtype})")
        if packed and x.dim() != 2:
            raise RNNInputError(f"{self.mode}: input must have 2 dimensions, got {x.dim()} "
                                "(PackedSequence data is (total steps, features))")
        if x.shape[-1] != self.input_size:
            raise RNNInputError(f"{self.mode}: input.size(-1) must be equal to input_size. Expected "
                                f"{self.input_size}, got {x.shape[-1]} (input shape {tuple(x.shape)})")
        if x.device != w.device:
            raise RNNInputError("Input and parameter tensors are not at the same device, found input tensor at "
                                f"{x.device} and parameter tensor at {w.device}")

    def _split_hx(self, hx) -> list[Tensor]:
        if self._has_c:
            if not isinstance(hx, (tuple, list)) or len(hx) != 2 or not all(isinstance(h, Tensor) for h in hx):
                raise RNNInputError(f"{self.mode}: hx must be a tuple (h_0, c_0) of two Tensors, got {type(hx).__name__}"
                                    + (f" of length {len(hx)}" if isinstance(hx, (tuple, list)) else ""))
            return list(hx)
        if not isinstance(hx, Tensor):
            raise RNNInputError(f"{self.mode}: hx must be a Tensor h_0, got {type(hx).__name__}")
        return [hx]

    def _check_hx(self, hx, batch: int, x: Tensor, batched: bool):
        """Validate hx as `nn.LSTM`/`nn.GRU.forward` do (same types, same words); unsqueeze it for
        unbatched input; return a tuple (h0, c0|None) or None."""
        if hx is None:
            return None
        parts = self._split_hx(hx)
        rank = 3 if batched else 2
        if any(h.dim() != rank for h in parts):
            kind = "batched 3-D" if batched else "unbatched 2-D"
            if self._has_c:
                raise RNNInputError(f"{self.mode}: For {kind} input, hx and cx should also be {rank}-D but got "
                                    f"({parts[0].dim()}-D, {parts[1].dim()}-D) tensors")
            raise RNNInputError(f"{self.mode}: For {kind} input, hx should also be {rank}-D but got "
                                f"{parts[0].dim()}-D tensor")
        if not batched:
            parts = [h.unsqueeze(1) for h in parts]
        shapes = self.spec.state_shapes(batch)
        for k, h in enumerate(parts):
            want = shapes["h" if k == 0 else "c"]
            if tuple(h.shape) != tuple(want):
                label = f"hidden[{k}]" if self._has_c else "hidden"
                size = "proj_size or hidden_size" if k == 0 else "hidden_size"
                raise RNNInputError(f"{self.mode}: Expected {label} size {tuple(want)}, got {list(h.shape)} "
                                    f"({'h_0' if k == 0 else 'c_0'} is (num_layers * num_directions, batch, {size}))")
            if h.device != x.device:
                raise RNNInputError("Input and hidden tensors are not at the same device, found input tensor at "
                                    f"{x.device} and hidden tensor at {h.device}")
            if h.dtype != x.dtype:
                raise RNNInputError(f"{self.mode}: {'h_0' if k == 0 else 'c_0'} has dtype {h.dtype}, expected "
                                    f"{x.dtype} (the input's)")
        return tuple(parts)

    def _check_lengths(self, lengths, batch: int, seq_len: int, device) -> Tensor:
        lengths = torch.as_tensor(lengths)
        if lengths.dim() != 1 or lengths.shape[0] != batch:
            raise RNNInputError(f"lengths must be 1-D with one entry per sequence ({batch}), "
                                f"got shape {tuple(lengths.shape)}")
        if lengths.dtype.is_floating_point or lengths.dtype == torch.bool or lengths.is_complex():
            raise RNNInputError(f"lengths must be integers, got dtype {lengths.dtype}")
        lo, hi = int(lengths.min()), int(lengths.max())
        if lo < 1 or hi > seq_len:
            raise RNNInputError(f"lengths must be in [1, T={seq_len}], got min {lo} and max {hi}")
        return lengths.to(device=device, dtype=torch.int64)


class LSTM(_RNNBase):
    """Drop-in `nn.LSTM` with a selectable backend (see `rnnbench.torch.BACKENDS`).

    c' = f * c + i * g,  h' = o * tanh(c')  (h' = W_hr (o * tanh(c')) with proj_size),
    i, f, o = sigmoid(.), g = tanh(.) of W_ih x + b_ih + W_hh h + b_hh, gate order i, f, g, o.
    Returns (output, (h_n, c_n)).
    """

    mode = "LSTM"
    cell_name = "lstm"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, device=None, dtype=None, *, backend: str = "eager", backend_options=None):
        super().__init__(self.cell_name, input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, proj_size, device, dtype, backend=backend,
                         backend_options=backend_options)


class GRU(_RNNBase):
    """Drop-in `nn.GRU` with a selectable backend (see `rnnbench.torch.BACKENDS`).

    r, z = sigmoid(W_i{r,z} x + b_i{r,z} + W_h{r,z} h + b_h{r,z}),
    n = tanh(W_in x + b_in + r * (W_hn h + b_hn)),  h' = (1 - z) * n + z * h.
    Returns (output, h_n).
    """

    mode = "GRU"
    cell_name = "gru"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None, *, backend: str = "eager", backend_options=None, **kwargs):
        if "proj_size" in kwargs:  # nn.GRU's own check (it takes **kwargs for this)
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if kwargs:
            raise TypeError(f"GRU.__init__() got an unexpected keyword argument {next(iter(kwargs))!r}")
        super().__init__(self.cell_name, input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, 0, device, dtype, backend=backend,
                         backend_options=backend_options)


class RNN(_RNNBase):
    """Any catalogue cell (`rnnbench.core.catalogue`) with a torch step (`rnnbench.torch.cells`), nn.LSTM-style.

    `RNN("ln_lstm", input_size, hidden_size, num_layers=..., ...)`: the same constructor
    as `nn.LSTM` (minus proj_size, which only `lstm` has), parameters named as
    `RNNSpec(cell, ...).param_shapes()` (the canonical names plus the cell's extras
    `<prefix>_l{k}[_reverse]`), the same forward.  Returns `(output, (h_n, c_n))` for an
    LSTM-family cell, `(output, h_n)` for a GRU-family one.  Backends: `eager` (default)
    and `compile`; `native` has no such cells (the error says so).
    """

    def __init__(self, cell: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, device=None, dtype=None, *, backend: str = "eager", backend_options=None):
        super().__init__(cell, input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, proj_size, device, dtype, backend=backend,
                         backend_options=backend_options)
        self.mode = cell  # names the cell in error messages, as "LSTM"/"GRU" do


class LayerNormLSTM(RNN):
    """LayerNorm LSTM (Ba et al. 2016), cell `ln_lstm`; returns (output, (h_n, c_n)).

    a = LN_ih(W_ih x + b_ih) + LN_hh(W_hh h + b_hh)   (each LN over the 4H pre-activations)
    i, f, o = sigmoid(a_i, a_f, a_o), g = tanh(a_g)
    c' = LN_c(f * c + i * g)  (the normalised c' is carried and returned as c_n)
    h' = o * tanh(c')
    LN(v) = (v - mean v) / sqrt(var v + 1e-5) * gain + bias; parameters
    layernorm_{ih,hh}_{weight,bias}_l{k} (4H) and layernorm_c_{weight,bias}_l{k} (H).
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None, *, backend: str = "eager", backend_options=None):
        super().__init__("ln_lstm", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, 0, device, dtype, backend=backend,
                         backend_options=backend_options)


class PeepholeLSTM(RNN):
    """Peephole LSTM (Gers and Schmidhuber 2000), cell `peephole_lstm`; returns (output, (h_n, c_n)).

    i = sigmoid(W_ii x + b_ii + W_hi h + b_hi + p_i * c),  f likewise with p_f,
    g = tanh(W_ig x + b_ig + W_hg h + b_hg),  c' = f * c + i * g,
    o = sigmoid(W_io x + b_io + W_ho h + b_ho + p_o * c'),  h' = o * tanh(c');
    parameter peephole_l{k} (3H) = [p_i, p_f, p_o].
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None, *, backend: str = "eager", backend_options=None):
        super().__init__("peephole_lstm", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, 0, device, dtype, backend=backend,
                         backend_options=backend_options)


class ResetBeforeGRU(RNN):
    """GRU with the reset gate applied before the recurrent matmul, cell `gru_reset_before`
    (Cho et al. 2014; ONNX linear_before_reset=0; Keras reset_after=False).  Same parameters
    as nn.GRU; returns (output, h_n).

    r, z = sigmoid(W_i{r,z} x + b_i{r,z} + W_h{r,z} h + b_h{r,z})
    n = tanh(W_in x + b_in + W_hn (r * h) + b_hn),  h' = (1 - z) * n + z * h
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None, *, backend: str = "eager", backend_options=None):
        super().__init__("gru_reset_before", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, 0, device, dtype, backend=backend,
                         backend_options=backend_options)


def module_for(spec: RNNSpec, backend: str = "eager", backend_options=None, **factory) -> _RNNBase:
    """The module for `spec`: `LSTM`/`GRU` (the drop-ins) for PyTorch's cells, `RNN(cell)` for
    every other catalogue cell; `factory` is device= / dtype=."""
    drop_in = {cls.cell_name: cls for cls in (LSTM, GRU)}.get(spec.cell)
    if drop_in is not None:
        return drop_in(**spec.torch_kwargs(), backend=backend, backend_options=backend_options, **factory)
    return RNN(spec.cell, **spec.torch_kwargs(), backend=backend, backend_options=backend_options, **factory)

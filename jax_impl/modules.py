"""Flax NNX modules `LSTM` / `GRU` with `torch.nn.LSTM` / `torch.nn.GRU`'s constructor.

    model = jax_impl.LSTM(input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                          dropout=0.0, bidirectional=False, proj_size=0, rngs=nnx.Rngs(0), impl="scan")
    output, (h_n, c_n) = model(x, (h0, c0), lengths=None)

The parameters are `nnx.Param` attributes named as PyTorch's `state_dict`
(`model.weight_ih_l0`, `model.bias_hh_l1_reverse`, ...), initialised like PyTorch
(U(-1/sqrt(H), 1/sqrt(H))).  `load_state_dict` takes a PyTorch `state_dict` (tensors or
arrays) and `from_torch(module)` builds a model from an `nn.LSTM`/`nn.GRU`.  Train it like
any NNX module, e.g. `nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)`.  `dropout`
acts between layers while the module is in training mode (`model.train()`, the default,
as PyTorch) and draws keys from the `dropout` stream of `rngs`; `model.eval()` turns it off.

Catalogue cells: `RNN(cell, input_size, hidden_size, ...)` for any cell with a JAX step,
and `LayerNormLSTM`, `PeepholeLSTM`, `ResetBeforeGRU` (torch_impl's names); their extra
parameters are named as the catalogue (`layernorm_c_weight_l0`, `peephole_l0`, ...) and
`from_torch` / `load_state_dict` take torch_impl's modules / state_dicts.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from shared.params import check_params
from shared.spec import RNNSpec

from . import cells as jax_cells
from . import driver


def _to_numpy(value) -> np.ndarray:
    """A torch tensor (any device, requires_grad or not), JAX or NumPy array -> NumPy."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


class _RNN(nnx.Module):
    cell: str = ""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 *, rngs: nnx.Rngs, impl: str = "scan", param_dtype=jnp.float32, **impl_options):
        if self.cell not in driver.STANDARD_CELLS:
            jax_cells.get_jax_cell(self.cell)  # no JAX step -> error saying how to register one
            reason = driver.generic_cells_reason(impl, self.cell)
            if reason is not None:
                raise driver.UnsupportedConfigError(reason)
        spec = RNNSpec(cell=self.cell, input_size=input_size, hidden_size=hidden_size, num_layers=num_layers,
                       bias=bias, batch_first=batch_first, bidirectional=bidirectional, proj_size=proj_size,
                       dropout=float(dropout))
        module = driver.impl_module(impl)  # unknown impl -> error listing the valid ones
        unknown = sorted(set(impl_options) - set(module.OPTIONS))
        if unknown:
            raise TypeError(f"impl {impl!r} got unknown options {unknown}; its options: "
                            f"{', '.join(module.OPTIONS) or 'none'}")
        reason = module.unsupported_reason(spec, lengths=False, dtype=jnp.dtype(param_dtype).name)
        if reason is not None:
            raise driver.UnsupportedConfigError(f"impl {impl!r} cannot run this configuration: {reason}")
        self.spec = spec
        self.impl = impl
        self.impl_options = dict(impl_options)
        k = 1.0 / np.sqrt(hidden_size)
        # A catalogue cell's extras start as shared.params.init_params and torch_impl start
        # them: LayerNorm gains ones and biases zeros, peepholes uniform like the weights.
        inits = {f"{e.prefix}_{spec.suffix(layer, d)}": e.init
                 for e in spec.cell_def.extra_params for layer, d in spec.layers_and_directions()}
        for name, shape in spec.param_shapes().items():
            init = inits.get(name, "uniform")
            if init == "uniform":
                value = jax.random.uniform(rngs.params(), shape, param_dtype, -k, k)
            else:
                value = (jnp.ones if init == "ones" else jnp.zeros)(shape, param_dtype)
            setattr(self, name, nnx.Param(value))
        self.dropout = nnx.Dropout(dropout, rngs=rngs) if dropout > 0 and num_layers > 1 else None

    # ---- PyTorch-style attributes ------------------------------------------------
    @property
    def input_size(self) -> int:
        return self.spec.input_size

    @property
    def hidden_size(self) -> int:
        return self.spec.hidden_size

    @property
    def num_layers(self) -> int:
        return self.spec.num_layers

    # ---- parameters ------------------------------------------------------------------
    def canonical_params(self) -> dict[str, jax.Array]:
        """The parameters as the canonical dict (PyTorch names), JAX arrays."""
        return {name: getattr(self, name)[...] for name in self.spec.param_names()}

    def state_dict(self) -> dict[str, np.ndarray]:
        """The parameters as a PyTorch-style state_dict of NumPy arrays."""
        return {name: np.asarray(v) for name, v in self.canonical_params().items()}

    def load_state_dict(self, state_dict: Mapping) -> None:
        """Copy a PyTorch `state_dict` (torch tensors, NumPy or JAX arrays) into the params.

        Strict, like `torch.nn.Module.load_state_dict`: missing, unexpected or mis-shaped
        entries raise `shared.params.ParamError` listing all of them.
        """
        arrays = {k: _to_numpy(v) for k, v in state_dict.items()}
        check_params(self.spec, arrays)
        for name, value in arrays.items():
            param = getattr(self, name)
            param[...] = jnp.asarray(value, dtype=param[...].dtype)

    @classmethod
    def from_torch(cls, module, *, rngs: nnx.Rngs | None = None, impl: str = "scan", param_dtype=jnp.float32,
                   **impl_options):
        """A model with the configuration and weights of a `torch.nn.LSTM` / `torch.nn.GRU`
        (or, for the catalogue cells' classes, of the matching `torch_impl` module)."""
        kwargs = dict(input_size=module.input_size, hidden_size=module.hidden_size, num_layers=module.num_layers,
                      bias=module.bias, batch_first=module.batch_first, dropout=float(module.dropout),
                      bidirectional=module.bidirectional)
        if cls.cell == "lstm":
            kwargs["proj_size"] = module.proj_size
        if cls is RNN:  # the generic class takes the cell as its first argument
            kwargs["cell"] = module.spec.cell
        model = cls(**kwargs, rngs=rngs if rngs is not None else nnx.Rngs(0), impl=impl, param_dtype=param_dtype,
                    **impl_options)
        model.load_state_dict(module.state_dict())
        return model

    def _run(self, x, hx, lengths):
        s = self.spec
        between = self.dropout if self.dropout is not None and not self.dropout.deterministic else None
        return driver.run(self.cell, self.canonical_params(), x, hx, lengths=lengths, num_layers=s.num_layers,
                          bidirectional=s.bidirectional, batch_first=s.batch_first, proj_size=s.proj_size,
                          impl=self.impl, between_layers=between, **self.impl_options)


class LSTM(_RNN):
    """`torch.nn.LSTM` as a Flax NNX module; `__call__(x, hx=None, *, lengths=None)`.

    Returns `(output, (h_n, c_n))` with PyTorch's shapes and semantics (see `jax_impl.lstm`).
    """

    cell = "lstm"

    def __call__(self, x, hx=None, *, lengths=None):
        output, h_n, c_n = self._run(x, hx, lengths)
        return output, (h_n, c_n)


class GRU(_RNN):
    """`torch.nn.GRU` as a Flax NNX module; `__call__(x, hx=None, *, lengths=None)` -> `(output, h_n)`."""

    cell = "gru"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, *, rngs: nnx.Rngs,
                 impl: str = "scan", param_dtype=jnp.float32, **impl_options):
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, 0,
                         rngs=rngs, impl=impl, param_dtype=param_dtype, **impl_options)

    def __call__(self, x, hx=None, *, lengths=None):
        output, h_n, _ = self._run(x, hx, lengths)
        return output, h_n


class RNN(_RNN):
    """Any catalogue cell (`shared.cells`) with a JAX step (`jax_impl.cells`), nn.LSTM-style.

    `RNN("ln_lstm", input_size, hidden_size, num_layers=..., ..., rngs=nnx.Rngs(0))`: the
    constructor of `LSTM` (minus proj_size, which only `lstm` has), parameters named as
    `RNNSpec(cell, ...).param_shapes()` (the canonical names plus the cell's extras
    `<prefix>_l{k}[_reverse]`), loadable from the matching `torch_impl` module's
    `state_dict`.  Returns `(output, (h_n, c_n))` for an LSTM-family cell, `(output, h_n)`
    for a GRU-family one.  Runs on the `scan` impl (the one that runs the cell table).
    """

    def __init__(self, cell: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, *,
                 rngs: nnx.Rngs, impl: str = "scan", param_dtype=jnp.float32, **impl_options):
        self.cell = cell
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, 0,
                         rngs=rngs, impl=impl, param_dtype=param_dtype, **impl_options)

    def __call__(self, x, hx=None, *, lengths=None):
        output, h_n, c_n = self._run(x, hx, lengths)
        return (output, (h_n, c_n)) if self.spec.family == "lstm" else (output, h_n)


class _NamedCell(RNN):
    """A catalogue cell with its own class: the cell is fixed, the constructor is `RNN`'s without it."""

    fixed_cell = ""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, *,
                 rngs: nnx.Rngs, impl: str = "scan", param_dtype=jnp.float32, **impl_options):
        super().__init__(self.fixed_cell, input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, rngs=rngs, impl=impl, param_dtype=param_dtype, **impl_options)

    @classmethod
    def from_torch(cls, module, *, rngs: nnx.Rngs | None = None, impl: str = "scan", param_dtype=jnp.float32,
                   **impl_options):
        """A model with the configuration and weights of the matching `torch_impl` module."""
        cell = getattr(getattr(module, "spec", None), "cell", None)
        if cell != cls.fixed_cell:
            raise ValueError(f"{cls.__name__}.from_torch needs a torch_impl module of cell {cls.fixed_cell!r}, "
                             f"got {type(module).__name__} of cell {cell!r}")
        model = cls(module.input_size, module.hidden_size, module.num_layers, module.bias, module.batch_first,
                    float(module.dropout), module.bidirectional, rngs=rngs if rngs is not None else nnx.Rngs(0),
                    impl=impl, param_dtype=param_dtype, **impl_options)
        model.load_state_dict(module.state_dict())
        return model


class LayerNormLSTM(_NamedCell):
    """LayerNorm LSTM (Ba et al. 2016), cell `ln_lstm`; returns (output, (h_n, c_n)).

    a = LN_ih(W_ih x + b_ih) + LN_hh(W_hh h + b_hh)   (each LN over the 4H pre-activations)
    i, f, o = sigmoid(a_i, a_f, a_o), g = tanh(a_g)
    c' = LN_c(f * c + i * g)  (the normalised c' is carried and returned as c_n)
    h' = o * tanh(c')
    LN(v) = (v - mean v) / sqrt(var v + 1e-5) * gain + bias; parameters
    layernorm_{ih,hh}_{weight,bias}_l{k} (4H) and layernorm_c_{weight,bias}_l{k} (H).
    """

    fixed_cell = "ln_lstm"


class PeepholeLSTM(_NamedCell):
    """Peephole LSTM (Gers and Schmidhuber 2000), cell `peephole_lstm`; returns (output, (h_n, c_n)).

    i = sigmoid(W_ii x + b_ii + W_hi h + b_hi + p_i * c),  f likewise with p_f,
    g = tanh(W_ig x + b_ig + W_hg h + b_hg),  c' = f * c + i * g,
    o = sigmoid(W_io x + b_io + W_ho h + b_ho + p_o * c'),  h' = o * tanh(c');
    parameter peephole_l{k} (3H) = [p_i, p_f, p_o].
    """

    fixed_cell = "peephole_lstm"


class ResetBeforeGRU(_NamedCell):
    """GRU with the reset gate applied before the recurrent matmul, cell `gru_reset_before`
    (Cho et al. 2014; ONNX linear_before_reset=0; Keras reset_after=False); returns (output, h_n).

    r, z = sigmoid(W_i{r,z} x + b_i{r,z} + W_h{r,z} h + b_h{r,z})
    n = tanh(W_in x + b_in + W_hn (r * h) + b_hn),  h' = (1 - z) * n + z * h
    """

    fixed_cell = "gru_reset_before"

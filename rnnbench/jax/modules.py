"""Flax NNX modules `LSTM` / `GRU` with `torch.nn.LSTM` / `torch.nn.GRU`'s constructor.

    model = rnnbench.jax.LSTM(input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                          dropout=0.0, bidirectional=False, proj_size=0, rngs=nnx.Rngs(0), backend="scan")
    output, (h_n, c_n) = model(x, (h0, c0), lengths=None)

The parameters are `nnx.Param` attributes named as PyTorch's `state_dict`
(`model.weight_ih_l0`, `model.bias_hh_l1_reverse`, ...), initialised like PyTorch
(U(-1/sqrt(H), 1/sqrt(H)); a catalogue cell's extras by their own rule, both from
`rnnbench.core.params.param_inits`).  `backend=` picks the rung.  `load_state_dict` takes a PyTorch `state_dict` (tensors or
arrays) and `from_torch(module)` builds a model from an `nn.LSTM`/`nn.GRU`.  Train it like
any NNX module, e.g. `nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)`.  `dropout`
acts between layers while the module is in training mode (`model.train()`, the default,
as PyTorch) and draws keys from the `dropout` stream of `rngs`; `model.eval()` turns it off.

Catalogue cells: `RNN(cell, input_size, hidden_size, ...)` for any cell with a JAX step,
and `LayerNormLSTM`, `PeepholeLSTM`, `ResetBeforeGRU` (rnnbench.torch's names); their extra
parameters are named as the catalogue (`layernorm_c_weight_l0`, `peephole_l0`, ...) and
`from_torch` / `load_state_dict` take rnnbench.torch's modules / state_dicts.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rnnbench.core.capabilities import UnsupportedConfigError
from rnnbench.core.catalogue import get_cell
from rnnbench.core.params import check_params, param_inits
from rnnbench.core.spec import RNNSpec

from . import backends, cells, functional


def _to_numpy(value) -> np.ndarray:
    """A torch tensor (any device, requires_grad or not), JAX or NumPy array -> NumPy."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


class _RNN(nnx.Module):
    cell: str = ""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 *, rngs: nnx.Rngs, backend: str = "scan", param_dtype=jnp.float32, dtype=None,
                 **backend_options):
        backend = backends.check_backend_name(backend)  # unknown -> the valid ones
        cells.get_jax_cell(self.cell)  # no JAX step -> error saying how to register one
        spec = RNNSpec(cell=self.cell, input_size=input_size, hidden_size=hidden_size, num_layers=num_layers,
                       bias=bias, batch_first=batch_first, bidirectional=bidirectional, proj_size=proj_size,
                       dropout=float(dropout))
        functional.check_options(backend, backends.MODULES[backend], backend_options)
        # the declaration, asked once at construction (each call asks the front door's one check)
        reason = backends.unsupported_reason(backend, spec, dtype=jnp.dtype(dtype or param_dtype).name,
                                             device=functional.default_device())
        if reason is not None:
            raise UnsupportedConfigError(f"backend {backend!r} cannot run this configuration: {reason}")
        self.spec = spec
        self.backend = backend
        self.backend_options = dict(backend_options)
        self.dtype = dtype  # Flax's compute dtype (None: the input's); param_dtype stores the parameters
        k = 1.0 / np.sqrt(hidden_size)
        shapes = spec.param_shapes()
        for name, init in param_inits(spec).items():
            shape = shapes[name]
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
        entries raise `rnnbench.core.params.ParamError` listing all of them.
        """
        arrays = {k: _to_numpy(v) for k, v in state_dict.items()}
        check_params(self.spec, arrays)
        for name, value in arrays.items():
            param = getattr(self, name)
            param[...] = jnp.asarray(value, dtype=param[...].dtype)

    @classmethod
    def from_torch(cls, module, *, rngs: nnx.Rngs | None = None, backend: str = "scan",
                   param_dtype=jnp.float32, dtype=None, **backend_options):
        """A model with the configuration and weights of a `torch.nn.LSTM` / `torch.nn.GRU`
        (or, for the catalogue cells' classes, of the matching `rnnbench.torch` module)."""
        kwargs = dict(input_size=module.input_size, hidden_size=module.hidden_size, num_layers=module.num_layers,
                      bias=module.bias, batch_first=module.batch_first, dropout=float(module.dropout),
                      bidirectional=module.bidirectional)
        if cls.cell and get_cell(cls.cell).proj_size:
            kwargs["proj_size"] = module.proj_size
        if cls is RNN:  # the generic class takes the cell as its first argument
            kwargs["cell"] = module.spec.cell
        model = cls(**kwargs, rngs=rngs if rngs is not None else nnx.Rngs(0), backend=backend,
                    param_dtype=param_dtype, dtype=dtype, **backend_options)
        model.load_state_dict(module.state_dict())
        return model

    def _run(self, x, hx, lengths):
        s = self.spec
        between = self.dropout if self.dropout is not None and not self.dropout.deterministic else None
        return functional.run(self.cell, self.canonical_params(), x, hx, lengths=lengths, num_layers=s.num_layers,
                              bidirectional=s.bidirectional, batch_first=s.batch_first, proj_size=s.proj_size,
                              backend=self.backend, between_layers=between, dtype=self.dtype,
                              **self.backend_options)


class LSTM(_RNN):
    """`torch.nn.LSTM` as a Flax NNX module; `__call__(x, hx=None, *, lengths=None)`.

    Returns `(output, (h_n, c_n))` with PyTorch's shapes and semantics (see `rnnbench.jax.lstm`).
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
                 backend: str = "scan",
                 param_dtype=jnp.float32, dtype=None, **backend_options):
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, 0,
                         rngs=rngs, backend=backend, param_dtype=param_dtype, dtype=dtype,
                         **backend_options)

    def __call__(self, x, hx=None, *, lengths=None):
        output, h_n, _ = self._run(x, hx, lengths)
        return output, h_n


class RNN(_RNN):
    """Any catalogue cell (`rnnbench.core.catalogue`) with a JAX step (`rnnbench.jax.cells`), nn.LSTM-style.

    `RNN("ln_lstm", input_size, hidden_size, num_layers=..., ..., rngs=nnx.Rngs(0))`: the
    constructor of `LSTM` (minus proj_size, which only `lstm` has), parameters named as
    `RNNSpec(cell, ...).param_shapes()` (the canonical names plus the cell's extras
    `<prefix>_l{k}[_reverse]`), loadable from the matching `rnnbench.torch` module's
    `state_dict`.  Returns `(output, (h_n, c_n))` for an LSTM-family cell, `(output, h_n)`
    for a GRU-family one.  Runs on `scan` (every cell) by default, or on any backend whose
`CAPABILITIES` name the cell (e.g. `bptt` for the catalogue's cells).
    """

    def __init__(self, cell: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, *,
                 rngs: nnx.Rngs, backend: str = "scan",
                 param_dtype=jnp.float32, dtype=None, **backend_options):
        self.cell = cell
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, 0,
                         rngs=rngs, backend=backend, param_dtype=param_dtype, dtype=dtype,
                         **backend_options)

    def __call__(self, x, hx=None, *, lengths=None):
        output, h_n, c_n = self._run(x, hx, lengths)
        return (output, (h_n, c_n)) if self.spec.cell_def.has_cell_state else (output, h_n)


class _NamedCell(RNN):
    """A catalogue cell with its own class: the cell is fixed, the constructor is `RNN`'s without it."""

    fixed_cell = ""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, *,
                 rngs: nnx.Rngs, backend: str = "scan",
                 param_dtype=jnp.float32, dtype=None, **backend_options):
        super().__init__(self.fixed_cell, input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, rngs=rngs, backend=backend, param_dtype=param_dtype, dtype=dtype,
                         **backend_options)

    @classmethod
    def from_torch(cls, module, *, rngs: nnx.Rngs | None = None, backend: str = "scan",
                   param_dtype=jnp.float32, dtype=None, **backend_options):
        """A model with the configuration and weights of the matching `rnnbench.torch` module."""
        cell = getattr(getattr(module, "spec", None), "cell", None)
        if cell != cls.fixed_cell:
            raise ValueError(f"{cls.__name__}.from_torch needs a rnnbench.torch module of cell {cls.fixed_cell!r}, "
                             f"got {type(module).__name__} of cell {cell!r}")
        model = cls(module.input_size, module.hidden_size, module.num_layers, module.bias, module.batch_first,
                    float(module.dropout), module.bidirectional, rngs=rngs if rngs is not None else nnx.Rngs(0),
                    backend=backend, param_dtype=param_dtype, dtype=dtype, **backend_options)
        model.load_state_dict(module.state_dict())
        return model


class LayerNormLSTM(_NamedCell):
    """LayerNorm LSTM (Ba et al. 2016), cell `ln_lstm` (equations: the catalogue, `rnnbench.core.catalogue`);
    returns (output, (h_n, c_n)), c_n the normalised cell state.  Parameters
    layernorm_{ih,hh}_{weight,bias}_l{k} (4H) and layernorm_c_{weight,bias}_l{k} (H).
    """

    fixed_cell = "ln_lstm"


class PeepholeLSTM(_NamedCell):
    """Peephole LSTM (Gers and Schmidhuber 2000), cell `peephole_lstm` (equations: the
    catalogue, `rnnbench.core.catalogue`); returns (output, (h_n, c_n)).  Parameter peephole_l{k}
    (3H) = [p_i, p_f, p_o].
    """

    fixed_cell = "peephole_lstm"


class ResetBeforeGRU(_NamedCell):
    """GRU with the reset gate applied before the recurrent matmul, cell `gru_reset_before`
    (Cho et al. 2014; ONNX linear_before_reset=0; Keras reset_after=False; equations: the
    catalogue, `rnnbench.core.catalogue`); returns (output, h_n).
    """

    fixed_cell = "gru_reset_before"

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
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from shared.params import check_params
from shared.spec import RNNSpec

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
        for name, shape in spec.param_shapes().items():
            setattr(self, name, nnx.Param(jax.random.uniform(rngs.params(), shape, param_dtype, -k, k)))
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
        """A model with the configuration and weights of a `torch.nn.LSTM` / `torch.nn.GRU`."""
        kwargs = dict(input_size=module.input_size, hidden_size=module.hidden_size, num_layers=module.num_layers,
                      bias=module.bias, batch_first=module.batch_first, dropout=float(module.dropout),
                      bidirectional=module.bidirectional)
        if cls.cell == "lstm":
            kwargs["proj_size"] = module.proj_size
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

"""PyTorch LSTM/GRU: a ladder of backends behind drop-in `nn.LSTM`/`nn.GRU` modules.

    import rnnbench.torch
    lstm = rnnbench.torch.LSTM(256, 512, num_layers=2, backend="eager")
    lstm.load_state_dict(nn_lstm.state_dict())
    output, (h_n, c_n) = lstm(x)

Other cells of the catalogue (`rnnbench.core.catalogue`): `rnnbench.torch.LayerNormLSTM`, `PeepholeLSTM`,
`ResetBeforeGRU`, or `rnnbench.torch.RNN(cell, ...)` for any cell, a user's own included once
its torch step is registered (`rnnbench.torch.register_cell(name, step)`; see
`rnnbench.torch.cells`).

`BACKENDS` names every backend in ladder order; `available_backends(device)` those that run on `device` here;
`unavailable_reason(backend, device)` says why one does not; `capabilities(backend)` what it
computes, `unsupported_reason(backend, spec, ...)` whether it computes a configuration.
Errors: `UnknownBackendError`, `BackendUnavailableError`, `UnsupportedConfigError`
(`rnnbench.core.capabilities`, the classes rnnbench.jax raises too), `RNNInputError`.
Layout: docs/architecture.md.
"""

from .backends import (
    BACKENDS, CUSTOM_CELL_BACKENDS, PROJ_BACKENDS, BackendUnavailableError, UnknownBackendError,
    UnsupportedConfigError, available_backends, capabilities, unavailable_reason, unsupported_cell_reason,
    unsupported_reason)
from .cells import register_cell
from .modules import GRU, LSTM, RNN, LayerNormLSTM, PeepholeLSTM, ResetBeforeGRU, RNNInputError

__all__ = ["LSTM", "GRU", "RNN", "LayerNormLSTM", "PeepholeLSTM", "ResetBeforeGRU", "register_cell",
           "BACKENDS", "PROJ_BACKENDS", "CUSTOM_CELL_BACKENDS", "available_backends", "capabilities",
           "unavailable_reason", "unsupported_reason", "unsupported_cell_reason", "RNNInputError",
           "UnknownBackendError", "BackendUnavailableError", "UnsupportedConfigError"]

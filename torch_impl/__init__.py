"""PyTorch LSTM/GRU: a ladder of backends behind drop-in `nn.LSTM`/`nn.GRU` modules.

    import torch_impl
    lstm = torch_impl.LSTM(256, 512, num_layers=2, backend="eager")
    lstm.load_state_dict(nn_lstm.state_dict())
    output, (h_n, c_n) = lstm(x)

`BACKENDS` names every backend in ladder order; `available_backends(device)` those that
run on `device` here; `unavailable_reason(backend, device)` says why one does not.
"""

from .backends import BACKENDS, PROJ_BACKENDS, available_backends, unavailable_reason
from .modules import GRU, LSTM, BackendUnavailableError, RNNInputError

__all__ = ["LSTM", "GRU", "BACKENDS", "PROJ_BACKENDS", "available_backends", "unavailable_reason",
           "RNNInputError", "BackendUnavailableError"]

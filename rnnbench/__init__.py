"""rnnbench: matching LSTM and GRU implementations on PyTorch and JAX/Flax, proven to compute the
same function and measured side by side.

The layers, bottom up (each imports only those below it; tests/cross/test_layout.py):
`core` (spec, parameters, the cell catalogue, precision, tolerances, capabilities, registry,
adapter protocols; no framework) and `kernels` (the fused C++ kernels, built on first use),
`reference`, `vectors`, `converters` (float64 NumPy reference,
shared test vectors, weight converters), `torch` and `jax` (the framework packages: inside
them `import torch` is PyTorch), `parity`, `measure` (the measurement core), `study`, and `cli`.

    from rnnbench.torch import LSTM          # drop-in nn.LSTM, plus backend=
    import rnnbench.jax; rnnbench.jax.lstm(params, x, backend="scan")
"""

__version__ = "0.1.0"

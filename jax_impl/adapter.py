"""The JAX side of `shared.adapter.Adapter`: one adapter per impl of `jax_impl.IMPLS`.

`get_adapter("scan")` (what the registry row `jax.scan` loads) returns an object that
runs one impl on canonical NumPy inputs (`run_case`, gradients by `jax.vjp` against the
given cotangents) and builds jit-compiled timed workloads (`make_workload`).  float64
needs `jax_enable_x64`; the adapter turns it on when asked for float64 (a process-wide
switch: explicit float32 arrays stay float32).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from shared.params import init_params
from shared.spec import RNNSpec

from . import driver

DTYPES = ("float32", "float64")
DEVICES = {"cpu": "cpu", "cuda": "gpu", "gpu": "gpu"}


def get_adapter(key: str, **options) -> "JaxAdapter":
    """The adapter of impl `key` (one of `jax_impl.IMPLS`); `options` go to the impl (e.g. unroll)."""
    driver.impl_module(key)  # raises UnknownImplError listing the valid impls
    return JaxAdapter(key, **options)


def _enable_x64_if(dtype: str) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if dtype == "float64":
        import jax
        jax.config.update("jax_enable_x64", True)


def _jit(fn, dev):
    """`jax.jit` with rnnbench's XLA options for `dev`'s platform (`jax_impl.xla_options`)."""
    import jax

    from .xla_options import compiler_options
    return jax.jit(fn, compiler_options=compiler_options(dev.platform) or None)


def _device(device: str):
    import jax
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    try:
        return jax.devices(DEVICES[device])[0]
    except RuntimeError as e:
        raise RuntimeError(f"JAX has no {device} device here ({e})") from None


class JaxAdapter:
    framework = "jax"

    def __init__(self, key: str, **options):
        self.key = key
        self.options = options
        self._module = driver.impl_module(key)
        unknown = sorted(set(options) - set(self._module.OPTIONS))
        if unknown:
            raise TypeError(f"impl {key!r} got unknown options {unknown}; its options: "
                            f"{', '.join(self._module.OPTIONS) or 'none'}")

    def __repr__(self):
        return f"JaxAdapter({self.key!r}{''.join(f', {k}={v!r}' for k, v in self.options.items())})"

    # ---- capabilities ----------------------------------------------------------
    def unavailable_reason(self, device: str = "cpu") -> str | None:
        try:
            _device(device)
        except (RuntimeError, ValueError) as e:
            return str(e)
        reason = driver.unavailable_reason(self.key)
        if reason is None and device == "cpu" and self.key == "cudnn":
            return "jax.cudnn runs on CUDA only (jax.experimental.rnn has no CPU kernel)"
        return reason

    def unsupported_reason(self, spec: RNNSpec, *, lengths: bool = False, dtype: str = "float64") -> str | None:
        if spec.cell not in driver.STANDARD_CELLS:
            from . import cells as jax_cells
            if not jax_cells.has_jax_cell(spec.cell):
                return (f"cell {spec.cell!r} has no JAX step; add one with "
                        f"jax_impl.register_cell({spec.cell!r}, step)")
            reason = driver.generic_cells_reason(self.key, spec.cell)
            if reason is not None:
                return reason
        if self.key == "flax_nnx" and spec.cell == "gru" and spec.bias:
            return ("flax nnx GRUCell has no b_hn (the n gate's recurrent bias, scaled by the reset gate): a "
                    "canonical GRU with biases runs only when b_hn = 0, and even then has no b_hn gradient")
        return self._module.unsupported_reason(spec, lengths=lengths, dtype=dtype)

    # ---- parity -----------------------------------------------------------------
    def _function(self, spec: RNNSpec):
        """f(x, hx, params, lengths) -> {"output", "h_n"[, "c_n"]}."""
        import jax_impl
        kwargs = dict(num_layers=spec.num_layers, bidirectional=spec.bidirectional, batch_first=spec.batch_first,
                      impl=self.key, **self.options)
        if spec.family == "lstm":
            def f(x, hx, params, lengths=None):
                out, (h_n, c_n) = jax_impl.rnn(params, x, hx, cell=spec.cell, lengths=lengths,
                                               proj_size=spec.proj_size, **kwargs)
                return {"output": out, "h_n": h_n, "c_n": c_n}
        else:
            def f(x, hx, params, lengths=None):
                out, h_n = jax_impl.rnn(params, x, hx, cell=spec.cell, lengths=lengths, **kwargs)
                return {"output": out, "h_n": h_n}
        return f

    def run_case(self, spec: RNNSpec, params: Mapping[str, np.ndarray], x: np.ndarray,
                 h0: np.ndarray | None = None, c0: np.ndarray | None = None, lengths: np.ndarray | None = None,
                 cotangents: Mapping[str, np.ndarray] | None = None, *, dtype: str = "float64",
                 device: str = "cpu") -> dict[str, np.ndarray]:
        _enable_x64_if(dtype)
        import jax
        import jax.numpy as jnp

        if spec.family == "lstm" and (h0 is None) != (c0 is None):
            raise ValueError("an LSTM takes h0 and c0 together or neither")
        dev = _device(device)
        put = lambda a: jax.device_put(jnp.asarray(np.asarray(a), dtype=dtype), dev)  # noqa: E731
        jparams = {k: put(v) for k, v in params.items()}
        jx = put(x)
        hx = None
        if h0 is not None:
            hx = (put(h0), put(c0)) if spec.family == "lstm" else put(h0)
        jlengths = None
        if lengths is not None:
            B, T = (x.shape[0], x.shape[1]) if spec.batch_first else (x.shape[1], x.shape[0])
            # checked here, eagerly: inside jit the driver cannot see the values
            jlengths = jax.device_put(driver.check_lengths(np.asarray(lengths), B, T), dev)
        # One compiled function per case, forward and backward together: eager dispatch
        # would compile every small op of `naive`'s time loop separately, and a vjp of a
        # jitted forward compiles twice.
        f = self._function(spec)
        if cotangents is None:
            out = _jit(f, dev)(jx, hx, jparams, jlengths)
            return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}
        names = ["output", "h_n"] + (["c_n"] if spec.family == "lstm" else [])
        missing = [k for k in names if k not in cotangents]
        if missing:
            raise KeyError(f"cotangents has no {missing} (needs {names})")
        cot = {k: jax.device_put(jnp.asarray(np.asarray(cotangents[k]), dtype=dtype), dev) for k in names}

        def forward_backward(x_, hx_, params_, lengths_, cot_):
            out_, vjp = jax.vjp(lambda a, b, c: f(a, b, c, lengths_), x_, hx_, params_)
            for k in names:
                if cot_[k].shape != out_[k].shape:
                    raise ValueError(f"cotangent {k!r} has shape {cot_[k].shape}, expected {out_[k].shape}")
            return out_, vjp(cot_)

        out, (gx, ghx, gparams) = _jit(forward_backward, dev)(jx, hx, jparams, jlengths, cot)
        result = {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}
        result["grad/x"] = np.asarray(gx, dtype=np.float64)
        if hx is not None:
            if spec.family == "lstm":
                result["grad/h0"] = np.asarray(ghx[0], dtype=np.float64)
                result["grad/c0"] = np.asarray(ghx[1], dtype=np.float64)
            else:
                result["grad/h0"] = np.asarray(ghx, dtype=np.float64)
        for name, g in gparams.items():
            result[f"grad/{name}"] = np.asarray(g, dtype=np.float64)
        return result

    # ---- benchmarks ---------------------------------------------------------------
    def make_workload(self, spec: RNNSpec, *, seq_len: int, batch: int, dtype: str = "float32",
                      device: str = "cpu", seed: int = 0) -> "JaxWorkload":
        _enable_x64_if(dtype)
        return JaxWorkload(self, spec, seq_len=seq_len, batch=batch, dtype=dtype, device=device, seed=seed)


class JaxWorkload:
    """Random inputs and canonical params from `seed`, a jitted forward and a jitted
    value-and-grad train step (loss `<output, g>` for a fixed random `g`, gradients for
    the params and x).  Each call blocks until the result is ready; the first call of
    each includes tracing and compiling, so time it separately."""

    def __init__(self, adapter: JaxAdapter, spec: RNNSpec, *, seq_len: int, batch: int, dtype: str, device: str,
                 seed: int):
        import jax
        import jax.numpy as jnp

        reason = adapter.unavailable_reason(device) or adapter.unsupported_reason(spec, dtype=dtype)
        if reason:
            raise RuntimeError(f"cannot build a jax.{adapter.key} workload: {reason}")
        dev = _device(device)
        rng = np.random.default_rng(seed)
        put = lambda a: jax.device_put(jnp.asarray(a, dtype=dtype), dev)  # noqa: E731
        self.spec = spec
        self.params = {k: put(v) for k, v in init_params(spec, rng).items()}
        x_shape = (batch, seq_len, spec.input_size) if spec.batch_first else (seq_len, batch, spec.input_size)
        self.x = put(rng.standard_normal(x_shape))
        f = adapter._function(spec)
        self._forward = _jit(lambda x, params: f(x, None, params)["output"], dev)
        out_shape = jax.eval_shape(self._forward, self.x, self.params).shape
        self.g = put(rng.standard_normal(out_shape))

        def loss(params, x, g):
            return jnp.vdot(f(x, None, params)["output"], g)

        self._step = _jit(jax.value_and_grad(loss, argnums=(0, 1)), dev)

    def forward(self) -> None:
        import jax
        jax.block_until_ready(self._forward(self.x, self.params))

    def train_step(self) -> None:
        import jax
        jax.block_until_ready(self._step(self.params, self.x, self.g))

"""The JAX side of `rnnbench.core.adapter`: the rung adapters and the framework's functions.

`get_adapter("scan")` (what the registry row `jax.scan` loads) returns an object that
runs one backend on canonical NumPy inputs (`run_case`, gradients by `jax.vjp` against
the given cotangents), builds jit-compiled timed workloads (`make_workload`) and exposes
the backend's declaration (`capabilities`).  float64 needs `jax_enable_x64`; the adapter
turns it on when asked for float64 (a process-wide switch: explicit float32 arrays stay
float32).  The module-level functions below are `rnnbench.core.adapter.FrameworkAdapter`:
what the study, the parity matrix and training parity ask of JAX as a whole.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping

import numpy as np

from rnnbench.core.adapter import BackendAdapter
from rnnbench.core.params import init_params
from rnnbench.core.precision import precision
from rnnbench.core.spec import RNNSpec

from . import backends
from .functional import check_lengths, check_options

DEVICES = {"cpu": "cpu", "cuda": "gpu", "gpu": "gpu"}


def _enable_x64_if(dtype: str) -> None:
    if precision(dtype).storage == "float64":  # an unknown dtype raises naming the valid ones
        import jax
        jax.config.update("jax_enable_x64", True)


def _jit(fn, dev):
    """`jax.jit` with rnnbench's XLA options for `dev`'s platform (`rnnbench.jax.xla_options`),
    called in IEEE float32 (`precision.ieee_float32`: the float32 the vectors judge)."""
    import functools

    import jax

    from .precision import ieee_float32
    from .xla_options import compiler_options
    jitted = jax.jit(fn, compiler_options=compiler_options(dev.platform) or None)

    @functools.wraps(fn)
    def call(*args):
        with ieee_float32():
            return jitted(*args)
    return call


def _check_device_name(device: str) -> str:
    """"cpu" or "cuda" (the registry's names; "gpu" is accepted for "cuda")."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    return "cuda" if DEVICES[device] == "gpu" else device


def _device(device: str):
    import jax
    _check_device_name(device)
    try:
        return jax.devices(DEVICES[device])[0]
    except RuntimeError as e:
        raise RuntimeError(f"JAX has no {device} device here ({e})") from None


class JaxAdapter(BackendAdapter):
    """One rung: the capability questions (`rnnbench.core.adapter.BackendAdapter`), `run_case`,
    `make_workload`; `options` go to the backend (e.g. unroll)."""

    framework = "jax"
    backends = backends

    def __init__(self, key: str, **options):
        super().__init__(key)
        self.options = options
        check_options(self.key, backends.MODULES[self.key], options)

    def __repr__(self):
        return f"JaxAdapter({self.key!r}{''.join(f', {k}={v!r}' for k, v in self.options.items())})"

    # ---- parity -----------------------------------------------------------------
    def _function(self, spec: RNNSpec, dtype: str = "float32"):
        """f(x, hx, params, lengths) -> {"output", "h_n"[, "c_n"]}, computing in precision `dtype`'s
        compute dtype (mixed precision: the arrays stay in their dtype, the rung casts inside)."""
        import rnnbench.jax
        p = precision(dtype)
        kwargs = dict(num_layers=spec.num_layers, bidirectional=spec.bidirectional, batch_first=spec.batch_first,
                      backend=self.key, dtype=p.compute if p.mixed else None, **self.options)
        if spec.cell_def.has_cell_state:
            def f(x, hx, params, lengths=None):
                out, (h_n, c_n) = rnnbench.jax.rnn(params, x, hx, cell=spec.cell, lengths=lengths,
                                               proj_size=spec.proj_size, **kwargs)
                return {"output": out, "h_n": h_n, "c_n": c_n}
        else:
            def f(x, hx, params, lengths=None):
                out, h_n = rnnbench.jax.rnn(params, x, hx, cell=spec.cell, lengths=lengths, **kwargs)
                return {"output": out, "h_n": h_n}
        return f

    def run_case(self, spec: RNNSpec, params: Mapping[str, np.ndarray], x: np.ndarray,
                 h0: np.ndarray | None = None, c0: np.ndarray | None = None, lengths: np.ndarray | None = None,
                 cotangents: Mapping[str, np.ndarray] | None = None, *, dtype: str = "float64",
                 device: str = "cpu") -> dict[str, np.ndarray]:
        _enable_x64_if(dtype)
        import jax
        import jax.numpy as jnp

        self.check(spec, lengths=lengths is not None, dtype=dtype, device=device)
        if spec.cell_def.has_cell_state and (h0 is None) != (c0 is None):
            raise ValueError("an LSTM takes h0 and c0 together or neither")
        dev = _device(device)
        storage = precision(dtype).storage
        put = lambda a: jax.device_put(jnp.asarray(np.asarray(a), dtype=storage), dev)  # noqa: E731
        jparams = {k: put(v) for k, v in params.items()}
        jx = put(x)
        hx = None
        if h0 is not None:
            hx = (put(h0), put(c0)) if spec.cell_def.has_cell_state else put(h0)
        jlengths = None
        if lengths is not None:
            B, T = (x.shape[0], x.shape[1]) if spec.batch_first else (x.shape[1], x.shape[0])
            # checked here, eagerly: inside jit the driver cannot see the values
            jlengths = jax.device_put(check_lengths(np.asarray(lengths), B, T), dev)
        # One compiled function per case, forward and backward together: eager dispatch
        # would compile every small op of `naive`'s time loop separately, and a vjp of a
        # jitted forward compiles twice.
        f = self._function(spec, dtype)
        if cotangents is None:
            out = _jit(f, dev)(jx, hx, jparams, jlengths)
            return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}
        names = ["output", "h_n"] + (["c_n"] if spec.cell_def.has_cell_state else [])
        missing = [k for k in names if k not in cotangents]
        if missing:
            raise KeyError(f"cotangents has no {missing} (needs {names})")
        cot = {k: put(cotangents[k]) for k in names}

        def forward_backward(x_, hx_, params_, lengths_, cot_):
            out_, vjp = jax.vjp(lambda a, b, c: f(a, b, c, lengths_), x_, hx_, params_)
            for k in names:
                if cot_[k].shape != out_[k].shape:
                    raise ValueError(f"cotangent {k!r} has shape {cot_[k].shape}, expected {out_[k].shape}")
            return out_, vjp({k: c.astype(out_[k].dtype) for k, c in cot_.items()})  # amp: outputs in compute dtype

        out, (gx, ghx, gparams) = _jit(forward_backward, dev)(jx, hx, jparams, jlengths, cot)
        result = {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}
        result["grad/x"] = np.asarray(gx, dtype=np.float64)
        if hx is not None:
            if spec.cell_def.has_cell_state:
                result["grad/h0"] = np.asarray(ghx[0], dtype=np.float64)
                result["grad/c0"] = np.asarray(ghx[1], dtype=np.float64)
            else:
                result["grad/h0"] = np.asarray(ghx, dtype=np.float64)
        for name, g in gparams.items():
            result[f"grad/{name}"] = np.asarray(g, dtype=np.float64)
        return result

    # ---- benchmarks ---------------------------------------------------------------
    def make_workload(self, spec: RNNSpec, *, seq_len: int, batch: int, dtype: str = "float32",
                      device: str = "cpu", seed: int = 0, lengths=None, checked: bool = False) -> "JaxWorkload":
        _enable_x64_if(dtype)
        if not checked:  # checked: the caller asked already (`rnnbench.core.adapter.Adapter.make_workload`)
            self.check(spec, lengths=lengths is not None, dtype=dtype, device=device, gradients=True)
        return JaxWorkload(self, spec, seq_len=seq_len, batch=batch, dtype=dtype, device=device, seed=seed,
                           lengths=lengths)


class JaxWorkload:
    """Random inputs and canonical params from `seed`, a jitted forward and a jitted
    value-and-grad train step (loss `<output, g>` for a fixed random `g`, gradients for
    the params and x).  Each call blocks until the result is ready; the first call of
    each includes tracing and compiling, so time it separately."""

    def __init__(self, adapter: JaxAdapter, spec: RNNSpec, *, seq_len: int, batch: int, dtype: str, device: str,
                 seed: int, lengths=None):
        import jax
        import jax.numpy as jnp

        dev = _device(device)
        rng = np.random.default_rng(seed)
        put = lambda a: jax.device_put(jnp.asarray(a, dtype=precision(dtype).storage), dev)  # noqa: E731
        self.spec = spec
        self.params = {k: put(v) for k, v in init_params(spec, rng).items()}
        x_shape = (batch, seq_len, spec.input_size) if spec.batch_first else (seq_len, batch, spec.input_size)
        self.x = put(rng.standard_normal(x_shape))
        # variable lengths: the driver masks past each length (PyTorch's packed semantics)
        self.lengths = None if lengths is None else jax.device_put(
            check_lengths(np.asarray(lengths), batch, seq_len), dev)
        f = adapter._function(spec, dtype)
        self._forward = _jit(lambda x, params, lengths: f(x, None, params, lengths)["output"], dev)
        out = jax.eval_shape(self._forward, self.x, self.params, self.lengths)
        self.g = jax.device_put(jnp.asarray(rng.standard_normal(out.shape), dtype=out.dtype), dev)

        def loss(params, x, g, lengths):
            return jnp.vdot(f(x, None, params, lengths)["output"], g)

        self._step = _jit(jax.value_and_grad(loss, argnums=(0, 1)), dev)

    def forward(self) -> None:
        import jax
        jax.block_until_ready(self._forward(self.x, self.params, self.lengths))

    def train_step(self) -> None:
        import jax
        jax.block_until_ready(self._step(self.params, self.x, self.g, self.lengths))


# ---- rnnbench.core.adapter.FrameworkAdapter -------------------------------------------------------------

def get_adapter(key: str, **options) -> JaxAdapter:
    """The adapter of backend `key` (one of `rnnbench.jax.BACKENDS`); `options` go to the backend (e.g. unroll),
    as keywords or in the name ("scan[unroll=4]", `rnnbench.core.registry.split_options`)."""
    from rnnbench.core.registry import split_options

    key, named = split_options(key)
    return JaxAdapter(key, **named, **options)


def available_backends(device: str = "cpu") -> tuple[str, ...]:
    """The backends that run on `device` ("cpu" or "cuda") here, in `BACKENDS` order."""
    return backends.available_backends(_check_device_name(device))


_XLA_THREADS = re.compile(r"intra_op_parallelism_threads=(\d+)")
recorded_threads: int | None = None  # what the harness last asked for (`set_threads`)


def set_threads(threads: int) -> None:
    """Record the intra-op thread count the harness measures with, and check the environment agrees.

    XLA:CPU sizes its thread pools from the environment when JAX's CPU backend starts
    (`XLA_FLAGS=--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=N` and the
    CPU affinity, which `rnnbench.measure.threads.pin_threads` sets before JAX is imported);
    there is no call that resizes them afterwards.  So this can only check and record: it
    warns when `XLA_FLAGS` names another count, and keeps `threads` in `recorded_threads`.
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
    match = _XLA_THREADS.search(os.environ.get("XLA_FLAGS", ""))
    if match is not None and int(match.group(1)) != threads:
        warnings.warn(f"XLA_FLAGS sets intra_op_parallelism_threads={match.group(1)}, not {threads}: XLA's "
                      f"pools are sized from the environment before JAX starts (rnnbench.measure.threads.pin_threads)",
                      RuntimeWarning, stacklevel=2)
    global recorded_threads
    recorded_threads = threads


def reset_peak_memory(device: str) -> None:
    """A no-op: JAX has no call that resets a device's peak-memory statistic (its
    `peak_bytes_in_use` counts from the start of the process; the study measures one
    workload per process)."""
    _check_device_name(device)


def peak_memory_bytes(device: str) -> int | None:
    """Peak device memory of the GPU (`memory_stats()["peak_bytes_in_use"]`), or None (CPU:
    the study uses the process's RSS; or a GPU whose runtime gives no statistics)."""
    if _check_device_name(device) != "cuda":
        return None
    stats = _device(device).memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    return int(peak) if peak is not None else None


def _best_call_seconds(fn, min_time: float, timer) -> float:
    """`timer` (the measurement core's best-of-windows timing), waiting for the device
    (`block_until_ready` on the last result) at the end of each chunk."""
    import jax

    last = [None]

    def call():
        last[0] = fn()

    for _ in range(3):  # compile and warm up
        call()
    jax.block_until_ready(last[0])
    return timer(call, lambda: jax.block_until_ready(last[0]), min_time)


def gemm_gflops(m: int, k: int, n: int, *, timer, device: str, dtype: str = "float32",
                min_time: float = 0.1, steps: int | None = None) -> dict[str, float | None]:
    """GFLOP/s of an (m, k) x (k, n) GEMM as XLA runs it: a jitted `x @ w.T` (the weight in
    the (out, in) layout the cells use) compiled with rnnbench's XLA options
    (`rnnbench.jax.xla_options`), by library name: {"xla": GFLOP/s}.

    With `steps` (n a multiple of k): also "chain", `steps` dependent GEMMs inside one
    jitted `lax.fori_loop`, each step's input the sum of the last output's n/k column
    blocks (a recurrence that needs every output column, so XLA cannot slice the dot
    down): the step rate without a jitted call's dispatch per GEMM, as `lax.scan` runs."""
    _enable_x64_if(dtype)
    import jax
    import jax.numpy as jnp

    dev = _device(device)
    rng = np.random.default_rng(0)
    x = jax.device_put(jnp.asarray(rng.standard_normal((m, k)), dtype=dtype), dev)
    w_np = rng.standard_normal((n, k))
    w = jax.device_put(jnp.asarray(w_np, dtype=dtype), dev)
    matmul = _jit(lambda a, b: a @ b.T, dev)
    seconds = _best_call_seconds(lambda: matmul(x, w), min_time, timer)
    out = {"xla": 2.0 * m * k * n / seconds / 1e9}
    if steps:
        # n/k orthogonal blocks over sqrt(n/k): the chain's values stay near their start
        # (no inf or denormal slow paths)
        g = n // k
        w_np = np.concatenate([np.linalg.qr(rng.standard_normal((k, k)))[0] for _ in range(g)]) / g ** 0.5
        # both weight layouts: XLA emits a different dot for each (at batch 1, (n, k) becomes its
        # own fused loop, faster than the library call it makes for (k, n)); the better one counts
        seconds = float("inf")
        for layout, contract in (((1, 0), lambda h, b: h @ b), ((0, 1), lambda h, b: h @ b.T)):
            wl = jax.device_put(jnp.asarray(np.ascontiguousarray(w_np.transpose(layout)), dtype=dtype), dev)
            chain = _jit(lambda h, b, contract=contract: jax.lax.fori_loop(
                0, steps, lambda i, h: contract(h, b).reshape(m, g, k).sum(1), h), dev)
            seconds = min(seconds, _best_call_seconds(lambda: chain(x, wl), min_time, timer))
        out["chain"] = steps * 2.0 * m * k * n / seconds / 1e9
    return out


def trainer():
    """`rnnbench.jax.train`: `train(config, backend, dtype, ...)`, `hidden_grad_norms(config, backend, steps, ...)`."""
    from . import train
    return train


def versions() -> dict[str, str]:
    """Versions of jax, jaxlib, flax and optax (those installed)."""
    from importlib import metadata

    out = {}
    for name in ("jax", "jaxlib", "flax", "optax"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def kernel_choices() -> dict:
    """XLA makes its kernel choices at compile time, invisibly: nothing to record."""
    return {}


def kernel_isa(device: str) -> str:
    """The device XLA compiles for: its kind (XLA:CPU targets the host's ISA through LLVM)."""
    import jax
    return f"XLA {jax.devices(DEVICES[_check_device_name(device)])[0].device_kind}"

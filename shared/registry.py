"""The one table of implementations that tests, the study and asv iterate over.

Each row names an implementation (`torch.eager`, `jax.scan`, ...), where its adapter
lives (imported lazily, so this module never imports torch or jax), its rung on the
ladder and its capabilities.  `get(name)` raises with the valid names on a typo;
`Implementation.unavailable_reason(device)` says why one cannot run here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import lru_cache

from .cells import CUSTOM_CELLS, STANDARD_CELLS
from .spec import RNNSpec

_CATALOGUE_CELLS = STANDARD_CELLS + CUSTOM_CELLS


class UnknownImplementationError(KeyError):
    def __str__(self):  # KeyError quotes its message; show it plainly
        return str(self.args[0])


@dataclass(frozen=True)
class Implementation:
    name: str  # "<framework>.<key>"
    summary: str
    rung: int  # position on the ladder, slowest idea first
    cells: tuple[str, ...] = ("lstm", "gru")
    devices: tuple[str, ...] = ("cpu", "cuda")
    dtypes: tuple[str, ...] = ("float32", "float64")
    proj_size: bool = False
    lengths: bool = True
    bidirectional: bool = True
    # why the default study (`make run`) leaves it out; run it with --impls
    not_in_default_study: str = ""
    adapter_path: str = field(default="", repr=False)  # "module:factory"; default per framework

    @property
    def framework(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def key(self) -> str:
        return self.name.split(".", 1)[1]

    def adapter(self):
        """The adapter object (see `shared.adapter.Adapter`); imports the framework."""
        return _load_adapter(self.adapter_path or f"{self.framework}_impl.adapter:get_adapter", self.key)

    def unavailable_reason(self, device: str = "cpu") -> str | None:
        """None if this implementation can run on `device` here; otherwise why not."""
        if device not in self.devices:
            return f"{self.name} runs only on {', '.join(self.devices)}, not {device}"
        try:
            adapter = self.adapter()
        except ImportError as e:
            return f"{self.name}: cannot import its adapter ({e})"
        except Exception as e:  # an adapter that cannot be built is unavailable, not a crash
            return f"{self.name}: its adapter failed to load ({type(e).__name__}: {e})"
        return adapter.unavailable_reason(device)

    def unsupported_reason(self, spec: RNNSpec, *, lengths: bool = False, dtype: str = "float64") -> str | None:
        """None if this implementation supports the configuration, else the reason."""
        if spec.cell not in self.cells:
            if spec.cell not in _CATALOGUE_CELLS:
                # a user's own cell (registered at run time): the adapter knows whether it runs it
                try:
                    return self.adapter().unsupported_reason(spec, lengths=lengths, dtype=dtype)
                except Exception as e:
                    return f"{self.name}: cannot run cell {spec.cell!r} ({type(e).__name__}: {e})"
            return f"{self.name} implements only {', '.join(self.cells)}"
        if dtype not in self.dtypes:
            return f"{self.name} supports dtypes {', '.join(self.dtypes)}, not {dtype}"
        if spec.proj_size and not self.proj_size:
            with_proj = ", ".join(n for n, i in REGISTRY.items() if i.proj_size)
            return f"{self.name} does not support proj_size; implementations that do: {with_proj}"
        if lengths and not self.lengths:
            return f"{self.name} does not support variable lengths"
        if spec.bidirectional and not self.bidirectional:
            return f"{self.name} does not support bidirectional"
        return None


@lru_cache(maxsize=None)
def _load_adapter(path: str, key: str):
    module, _, factory = path.partition(":")
    return getattr(importlib.import_module(module), factory)(key)


_ROWS = [
    # PyTorch ladder (torch_impl.BACKENDS)
    Implementation("torch.naive", "seeds' cell: cat([x, h]) + one Linear per step, x[t] indexing", 0),
    Implementation("torch.cell_loop", "nn.LSTMCell / nn.GRUCell in a Python loop", 1),
    Implementation("torch.jit", "TorchScript-scripted eager loop (the first seed's advice)", 2, proj_size=True),
    Implementation("torch.eager", "hoisted input GEMM, one addmm per step, unbind, fused gates", 3, proj_size=True,
                   cells=("lstm", "gru", "ln_lstm", "peephole_lstm", "gru_reset_before")),
    Implementation("torch.compile", "torch.compile of the step (compile time independent of T)", 4, proj_size=True,
                   cells=("lstm", "gru", "ln_lstm", "peephole_lstm", "gru_reset_before")),
    Implementation("torch.autograd", "custom autograd.Function, hand-written BPTT, batched weight-grad GEMMs", 5, proj_size=True,
                   cells=("lstm", "gru", "peephole_lstm", "ln_lstm")),
    Implementation("torch.native", "nn.LSTM / nn.GRU (cuDNN on CUDA, oneDNN on CPU)", 6, proj_size=True),
    # JAX ladder (jax_impl.IMPLS)
    Implementation("jax.naive", "Python loop over time, cat([x, h]) + one dense per step", 0, proj_size=True,
                   not_in_default_study="XLA traces the unrolled Python loop: its first train step at S1/S2 "
                                        "takes minutes to compile (over 240 s here)"),
    Implementation("jax.flax_nnx", "Flax NNX's own LSTMCell / GRUCell", 1),
    Implementation("jax.flax_linen", "flax.linen.RNN with OptimizedLSTMCell / GRUCell", 2),
    Implementation("jax.scan", "lax.scan, hoisted input projection, fused gates", 3, proj_size=True,
                   cells=("lstm", "gru", "ln_lstm", "peephole_lstm", "gru_reset_before")),
    Implementation("jax.bptt", "lax.scan forward + custom_vjp hand-written BPTT, batched weight-grad GEMMs", 4, proj_size=True,
                   cells=("lstm", "gru", "ln_lstm", "peephole_lstm", "gru_reset_before")),
    Implementation("jax.cudnn", "jax.experimental.rnn (cuDNN LSTM)", 5, cells=("lstm",), devices=("cuda",), dtypes=("float32",)),
]

REGISTRY: dict[str, Implementation] = {row.name: row for row in _ROWS}


def names(framework: str | None = None) -> list[str]:
    """Registered names (optionally of one framework), in ladder order."""
    rows = [r for r in _ROWS if framework is None or r.framework == framework]
    return [r.name for r in sorted(rows, key=lambda r: (r.framework != "torch", r.rung))]


def default_study_names() -> list[str]:
    """What `rnnbench compare` measures without --impls (every name not opted out)."""
    return [n for n in names() if not REGISTRY[n].not_in_default_study]


def get(name: str) -> Implementation:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownImplementationError(
            f"unknown implementation {name!r}; valid names: {', '.join(names())}") from None


def available(device: str = "cpu", framework: str | None = None) -> list[str]:
    """Names of the implementations that run on `device` on this machine."""
    return [n for n in names(framework) if REGISTRY[n].unavailable_reason(device) is None]


def unavailable(device: str = "cpu", framework: str | None = None) -> dict[str, str]:
    """Name -> reason for every implementation that cannot run on `device` here."""
    out = {}
    for n in names(framework):
        reason = REGISTRY[n].unavailable_reason(device)
        if reason is not None:
            out[n] = reason
    return out

"""The one table of implementations that tests, the study and asv iterate over.

Each row names an implementation (`torch.eager`, `jax.scan`, ...), where its adapter
lives (imported lazily, so this module never imports torch or jax) and its rung on the
ladder.  The rows are the one place the ladder's order is written: each framework's
`backends` package takes its `BACKENDS` from `keys(framework)` and imports the rung
`<key>` from its module `backends/<key>.py`.  What a rung computes is declared next to its
code (`rnnbench.core.capabilities`) and read through the adapter.  `get(name)` raises with the
valid names on a typo; `Implementation.unavailable_reason(device)` says why one cannot run here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from functools import lru_cache

from .capabilities import Capabilities
from .spec import RNNSpec


class UnknownImplementationError(KeyError):
    def __str__(self):  # KeyError quotes its message; show it plainly
        return str(self.args[0])


# The module of each framework's adapters and FrameworkAdapter functions (rnnbench.core.adapter).
FRAMEWORKS = {"torch": "rnnbench.torch.adapter", "jax": "rnnbench.jax.adapter"}

def framework(name: str):
    """The FrameworkAdapter (`rnnbench.core.adapter`) of framework `name`: imports it."""
    try:
        return importlib.import_module(FRAMEWORKS[name])
    except KeyError:
        raise ValueError(f"framework must be one of {', '.join(FRAMEWORKS)}, got {name!r}") from None


@dataclass(frozen=True)
class Implementation:
    name: str  # "<framework>.<key>"
    summary: str
    rung: int  # position on the ladder, slowest idea first
    # why the default study (`make run`) leaves it out; run it with --impls
    not_in_default_study: str = ""
    # a step of the ladder, kept to show what the next idea buys, not a rung anyone would pick:
    # `make run` (the answer profile) leaves it out; --profile full and `rnnbench ladder` measure it
    ladder_step: bool = False
    adapter_path: str = field(default="", repr=False)  # "module:factory"; default per framework
    # What it computes is declared next to its code (the backend module's CAPABILITIES) and
    # read through its adapter; a row may carry one itself (tests' fake implementations).
    capabilities: Capabilities | None = field(default=None, repr=False)

    @property
    def framework(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def key(self) -> str:
        return self.name.split(".", 1)[1]

    def adapter(self):
        """The adapter object (see `rnnbench.core.adapter.Adapter`); imports the framework."""
        path = self.adapter_path or f"{FRAMEWORKS.get(self.framework, self.framework + '_impl.adapter')}:get_adapter"
        return _load_adapter(path, self.key)

    def declared(self) -> Capabilities:
        """This rung's capability declaration (imports its framework unless the row has one)."""
        return self.capabilities if self.capabilities is not None else self.adapter().capabilities

    def unavailable_reason(self, device: str = "cpu") -> str | None:
        """None if this implementation can run on `device` here; otherwise why not."""
        if self.capabilities is not None and device not in self.capabilities.devices:
            return self.capabilities.device_reason(self.name, device)
        try:
            adapter = self.adapter()
            caps = self.declared()
        except ImportError as e:
            return f"{self.name}: cannot import its adapter ({e})"
        except Exception as e:  # an adapter that cannot be built is unavailable, not a crash
            return f"{self.name}: its adapter failed to load ({type(e).__name__}: {e})"
        return caps.device_reason(self.name, device) or adapter.unavailable_reason(device)

    def unsupported_reason(self, spec: RNNSpec, *, lengths: bool = False, dtype: str = "float64",
                           device: str | None = None) -> str | None:
        """None if this implementation supports the configuration (on `device`, when given), else the reason."""
        try:
            if self.capabilities is not None:
                reason = self.capabilities.unsupported_reason(self.name, spec, lengths=lengths, dtype=dtype,
                                                              device=device)
                if reason is not None:
                    return reason
            reason = self.adapter().unsupported_reason(spec, lengths=lengths, dtype=dtype, device=device)
        except Exception as e:
            return f"{self.name}: cannot run cell {spec.cell!r} ({type(e).__name__}: {e})"
        if reason is not None and spec.proj_size and not self.declared().proj_size:
            with_proj = ", ".join(n for n in names() if _declares_proj(n))
            reason += f"; implementations that do: {with_proj}"
        return reason


def _declares_proj(name: str) -> bool:
    try:
        return REGISTRY[name].declared().proj_size
    except Exception:  # a framework that cannot load declares nothing here
        return False


@lru_cache(maxsize=None)
def _load_adapter(path: str, key: str):
    module, _, factory = path.partition(":")
    return getattr(importlib.import_module(module), factory)(key)


_ROWS = [
    # PyTorch ladder (rnnbench.torch.BACKENDS)
    Implementation("torch.naive", "the textbook loop: cat([x, h]) + one Linear per step, x[t] indexing", 0,
                   ladder_step=True),
    Implementation("torch.cell_loop", "nn.LSTMCell / nn.GRUCell in a Python loop", 1, ladder_step=True),
    Implementation("torch.jit", "TorchScript-scripted eager loop", 2, ladder_step=True),
    Implementation("torch.eager", "hoisted input GEMM, one addmm per step, unbind, fused gates", 3),
    Implementation("torch.compile", "torch.compile of the step (compile time independent of T)", 4),
    Implementation("torch.scan", "torch.compile of the whole loop: torch's scan operator, hoisted input GEMM "
                                 "(the program jax.scan hands XLA)", 5),
    Implementation("torch.bptt", "custom autograd.Function, hand-written BPTT, batched weight-grad GEMMs", 6),
    Implementation("torch.fused", "one C++ kernel (rnnbench.kernels) as a torch.library op: the time loop, the step "
                                  "GEMM and one pass over the gates per step; hand-written backward", 7),
    Implementation("torch.triton", "fused Triton kernels (CUDA): one launch per step for the step GEMM and the "
                                   "gates, hand-written backward; tested on the CPU in Triton's interpreter", 8),
    Implementation("torch.native", "nn.LSTM / nn.GRU (cuDNN on CUDA, oneDNN on CPU)", 9),
    # JAX ladder (rnnbench.jax.BACKENDS)
    Implementation("jax.naive", "Python loop over time, cat([x, h]) + one dense per step", 0,
                   not_in_default_study="XLA traces the unrolled Python loop: its first train step at S1/S2 "
                                        "takes minutes to compile"),
    Implementation("jax.flax_nnx", "Flax NNX's own LSTMCell / GRUCell", 1, ladder_step=True),
    Implementation("jax.flax_linen", "flax.linen.RNN with OptimizedLSTMCell / GRUCell", 2),
    Implementation("jax.scan", "lax.scan, hoisted input projection, fused gates", 3),
    Implementation("jax.bptt", "lax.scan forward + custom_vjp hand-written BPTT, batched weight-grad GEMMs", 4),
    Implementation("jax.fused", "the same C++ kernel as torch.fused, an XLA FFI custom call in custom_vjp", 5),
    Implementation("jax.pallas", "fused Pallas kernels (Triton on CUDA) per step in lax.scan, hand-written "
                                 "backward in custom_vjp", 6),
    Implementation("jax.cudnn", "jax.experimental.rnn (cuDNN LSTM)", 7),
]

REGISTRY: dict[str, Implementation] = {row.name: row for row in _ROWS}


# ---- options: "torch.scan[freezing]", "jax.scan[unroll=4]" ----------------------------------------
# A rung's options (its backend module's OPTIONS) are measured as variants of its row, named by
# the row's name with the options in brackets; the adapter of "KEY[OPTIONS]" is the backend KEY
# with those options.

def parse_value(text: str):
    """An option's value as written in a name: true/false, an int, else the text."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        return text


def split_options(name: str) -> tuple[str, dict]:
    """"torch.scan[freezing,mode=max-autotune-no-cudagraphs]" -> ("torch.scan", {"freezing": True,
    "mode": "max-autotune-no-cudagraphs"}); a name without brackets -> (name, {})."""
    if not name.endswith("]") or "[" not in name:
        if "[" in name or "]" in name:
            raise UnknownImplementationError(f"malformed options in {name!r}: write NAME[OPTION,OPTION=VALUE]")
        return name, {}
    base, _, inside = name[:-1].partition("[")
    options = {}
    for item in (i.strip() for i in inside.split(",")):
        key, eq, value = item.partition("=")
        if not key.strip() or (eq and not value.strip()) or "[" in item or "]" in item:
            raise UnknownImplementationError(f"malformed option {item!r} in {name!r}: write NAME[OPTION,OPTION=VALUE]")
        options[key.strip()] = parse_value(value.strip()) if eq else True
    return base, options


def with_options(base: str, options: dict) -> str:
    """The canonical name of `base` with `options` (sorted; a true flag written bare)."""
    if not options:
        return base
    items = [k if v is True else f"{k}={str(v).lower() if isinstance(v, bool) else v}"
             for k, v in sorted(options.items())]
    return f"{base}[{','.join(items)}]"


def split_names(value: str) -> list[str]:
    """Comma-separated names, commas inside brackets kept: "torch.scan[freezing,mode=x],jax.scan"."""
    names, depth, current = [], 0, ""
    for ch in value:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            names.append(current.strip())
            current = ""
        else:
            current += ch
    names.append(current.strip())
    return [n for n in names if n]


# Option variants the full study profile measures besides the rows (each named as above).
MEASURED_OPTIONS = ("torch.compile[freezing]", "torch.scan[freezing]", "torch.scan[cpp_wrapper]",
                    "torch.scan[cpp_wrapper,freezing]", "torch.compile[mode=max-autotune-no-cudagraphs]",
                    "torch.scan[mode=max-autotune-no-cudagraphs]")


def names(framework: str | None = None) -> list[str]:
    """Registered names (optionally of one framework), in ladder order."""
    rows = [r for r in _ROWS if framework is None or r.framework == framework]
    return [r.name for r in sorted(rows, key=lambda r: (r.framework != "torch", r.rung))]


def keys(framework: str) -> tuple[str, ...]:
    """The rung names (`eager`, `scan`, ...) of one framework, in ladder order: its `BACKENDS`."""
    return tuple(REGISTRY[n].key for n in names(framework))


def default_study_names(profile: str = "full") -> list[str]:
    """What `rnnbench compare --profile PROFILE` measures without --impls: every name not opted
    out; the answer profile (`make run`) also leaves out the ladder's steps (`ladder_step`)."""
    return [n for n in names() if not REGISTRY[n].not_in_default_study
            and not (profile == "answer" and REGISTRY[n].ladder_step)]


def get(name: str) -> Implementation:
    """The row of `name`; "NAME[OPTIONS]" gives a copy of NAME's row named with its options (checked
    by the rung when its adapter is built)."""
    base, options = split_options(name)
    try:
        row = REGISTRY[base]
    except KeyError:
        raise UnknownImplementationError(
            f"unknown implementation {base!r}; valid names: {', '.join(names())}") from None
    if not options:
        return row
    options_text = ", ".join(f"{k}={v!r}" for k, v in sorted(options.items()))
    return replace(row, name=with_options(row.name, options), summary=f"{row.summary} ({options_text})",
                   not_in_default_study=row.not_in_default_study or "an option variant")


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

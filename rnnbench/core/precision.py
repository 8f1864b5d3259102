"""The precision axis: which dtypes the parameters live in and which the arithmetic runs in.

A precision is named by the value of every `dtype=` argument of the project (the adapters,
the registry, the study's `--dtype`, asv's dtype parameter):

| name           | parameters, inputs, gradients | arithmetic | as users write it |
|----------------|-------------------------------|------------|-------------------|
| `float64`      | float64                       | float64    | `module.double()` / `jax_enable_x64` |
| `float32`      | float32                       | float32    | the default |
| `bfloat16`     | bfloat16                      | bfloat16   | `module.to(torch.bfloat16)`; JAX arrays in bf16 |
| `float16`      | float16                       | float16    | `module.half()`; JAX arrays in fp16 |
| `amp_bfloat16` | float32                       | bfloat16   | `torch.autocast(device, torch.bfloat16)`; Flax `dtype=bf16, param_dtype=f32` |
| `amp_float16`  | float32                       | float16    | `torch.autocast` + `GradScaler` (CUDA); Flax `dtype=f16` |

The tolerance rule (`rnnbench.core.tolerances`) takes the unit roundoff of the arithmetic dtype.
A device that has no float16 arithmetic refuses float16 with the reason (`device_reason`):
CPUs without AVX512-FP16 or AMX-FP16 emulate it in float32 with a conversion per element,
which is neither what a float16 user asks for nor fast.

Framework-neutral: no torch or jax here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass(frozen=True)
class Precision:
    name: str
    storage: str  # parameters, inputs and their gradients
    compute: str  # the GEMMs and the gate arithmetic

    @property
    def mixed(self) -> bool:
        return self.storage != self.compute


PRECISIONS = {p.name: p for p in (
    Precision("float64", "float64", "float64"),
    Precision("float32", "float32", "float32"),
    Precision("bfloat16", "bfloat16", "bfloat16"),
    Precision("float16", "float16", "float16"),
    Precision("amp_bfloat16", "float32", "bfloat16"),
    Precision("amp_float16", "float32", "float16"),
)}
FULL = ("float32", "float64")  # the precisions of the shared vectors' original parity proof
REDUCED = tuple(name for name in PRECISIONS if name not in FULL)
ALL = tuple(PRECISIONS)


def precision(name: str) -> Precision:
    """The precision called `name`; ValueError naming the valid ones."""
    try:
        return PRECISIONS[name]
    except (KeyError, TypeError):
        raise ValueError(f"dtype must be one of {', '.join(PRECISIONS)}, got {name!r}") from None


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU feature flags of /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


ISA_FEATURES = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16", "amx_int8",
                "avx512_vnni", "avx_vnni")


def isa_summary(flags: frozenset[str] | None = None) -> str:
    """The reduced-precision features of this CPU, e.g. "avx512_bf16, avx512_vnni; no AMX"."""
    flags = cpu_flags() if flags is None else flags
    have = [f for f in ISA_FEATURES if f in flags]
    amx = any(f.startswith("amx") for f in have)
    return (", ".join(have) or "none of " + ", ".join(ISA_FEATURES)) + ("" if amx else "; no AMX")


def cpu_has_float16(flags: frozenset[str] | None = None) -> bool:
    flags = cpu_flags() if flags is None else flags
    return bool({"avx512_fp16", "amx_fp16"} & flags)


def device_reason(name: str, device: str | None, flags: frozenset[str] | None = None) -> str | None:
    """None when `device` has arithmetic for precision `name`, else why not."""
    p = precision(name)
    if device == "cpu" and p.compute == "float16" and not cpu_has_float16(flags):
        return (f"{name} needs float16 arithmetic, and this CPU has neither AVX512-FP16 nor AMX-FP16 "
                f"(it would emulate it in float32); use bfloat16 or amp_bfloat16 on this CPU")
    return None

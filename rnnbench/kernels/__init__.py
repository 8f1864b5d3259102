"""The fused C++ kernels, built on first use and shared by both frameworks.

`rnn_fused.h` holds the LSTM and GRU recurrences (the time loop, per step one GEMM and one
pass over the gates; a hand-written backward); `rnn_fused.cc` their C entry points (what the
`torch.fused` rung's custom ops call, through ctypes), `rnn_fused_xla.cc` their XLA FFI
handlers (what the `jax.fused` rung's custom calls run).  Both are compiled into ONE shared
library, so the two rungs run the same machine code and differ only in what each framework
does around it.

`library()` compiles it once per machine (g++, `-O3 -march=native`: the instruction set of the
machine that runs it) into the cache folder (`RNNBENCH_CACHE_DIR`, default `~/.cache/rnnbench`),
named by a hash of the sources, the compiler and the flags, and loads it; the XLA handlers are
compiled in when jaxlib's headers are installed.  The GEMM it calls is a cblas with 64-bit
integers handed in at load: NumPy's OpenBLAS (`numpy.libs/libscipy_openblas64_*`), which every
process of the project has, so both frameworks' rungs use the same BLAS.
`unavailable_reason()` says why it cannot be had here (no compiler, no BLAS, a failed build),
and the rungs are then listed as unavailable with that sentence.

Framework-neutral: no torch or jax here.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = ("rnn_fused.h", "rnn_fused.cc", "rnn_fused_xla.cc")
FLAGS = ("-O3", "-march=native", "-ffast-math", "-std=c++17", "-fPIC", "-shared", "-fopenmp-simd", "-w")
BLAS = {"sgemm": "scipy_cblas_sgemm64_", "dgemm": "scipy_cblas_dgemm64_",
        "threads": "scipy_openblas_set_num_threads64_"}


# What the kernel computes, declared once for the two rungs that call it (each builds its
# `rnnbench.core.capabilities.Capabilities` from this and its own table of cells: plain data, as
# this layer sits beside core).
DECLARATION = dict(
    dtypes=("float64", "float32"), devices=("cpu",),
    why_not={"cell": "the C++ kernel has the LSTM and GRU recurrences only",
             "dtype": "the C++ kernel computes float32 and float64 (no bfloat16 or float16 arithmetic in it)",
             "device": "the C++ kernel runs on the CPU",
             "proj_size": "the C++ kernel has no output projection"})


class KernelUnavailableError(RuntimeError):
    """The fused kernels cannot be built or loaded here; the message says why."""


def _compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")


def _jax_include() -> Path | None:
    """jaxlib's headers (`jax.ffi.include_dir()`), found without importing jax."""
    spec = importlib.util.find_spec("jaxlib")
    if spec is None or not spec.submodule_search_locations:
        return None
    include = Path(next(iter(spec.submodule_search_locations))) / "include"
    return include if (include / "xla" / "ffi" / "api" / "ffi.h").is_file() else None


def _openblas() -> Path | None:
    """NumPy's bundled OpenBLAS (64-bit integers), found without importing NumPy's internals."""
    spec = importlib.util.find_spec("numpy")
    if spec is None or not spec.submodule_search_locations:
        return None
    libs = Path(next(iter(spec.submodule_search_locations))).parent / "numpy.libs"
    found = sorted(libs.glob("libscipy_openblas64_*.so*")) if libs.is_dir() else []
    return found[0] if found else None


def cache_dir() -> Path:
    root = os.environ.get("RNNBENCH_CACHE_DIR") or Path.home() / ".cache" / "rnnbench"
    return Path(root) / "kernels"


def _build(compiler: str, include: Path | None) -> Path:
    sources = [HERE / "rnn_fused.cc"] + ([HERE / "rnn_fused_xla.cc"] if include else [])
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    digest = hashlib.sha256()
    for part in [*(HERE / s for s in SOURCES)]:
        digest.update(part.read_bytes())
    digest.update(repr((version, FLAGS, str(include), os.uname().machine, _cpu_flags())).encode())
    target = cache_dir() / f"librnnbench_fused-{digest.hexdigest()[:16]}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    cmd = [compiler, *FLAGS, f"-I{HERE}", *([f"-I{include}"] if include else []), *map(str, sources), "-o", tmp]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        os.unlink(tmp)
        raise KernelUnavailableError(f"the fused kernels failed to compile ({' '.join(cmd)}):\n{proc.stderr[-2000:]}")
    os.replace(tmp, target)  # atomic: processes building at once each end with a whole library
    return target


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return ""


@functools.lru_cache(maxsize=1)
def library() -> ctypes.CDLL:
    """The shared library, built if this machine has none yet, with its GEMM set; raises
    `KernelUnavailableError` saying why it cannot be had."""
    compiler = _compiler()
    if compiler is None:
        raise KernelUnavailableError("no C++ compiler (g++ or c++, or $CXX) on PATH to build the fused kernels: "
                                     "install one (Debian: apt-get install g++)")
    blas_path = _openblas()
    if blas_path is None:
        raise KernelUnavailableError("NumPy's bundled OpenBLAS (numpy.libs/libscipy_openblas64_*) is not here: "
                                     "the fused kernels take their GEMM from it")
    lib = ctypes.CDLL(str(_build(compiler, _jax_include())))
    blas = ctypes.CDLL(str(blas_path))
    lib.rnnbench_set_gemm(ctypes.c_void_p(ctypes.cast(getattr(blas, BLAS["sgemm"]), ctypes.c_void_p).value),
                          ctypes.c_void_p(ctypes.cast(getattr(blas, BLAS["dgemm"]), ctypes.c_void_p).value))
    lib.blas = blas
    return lib


def has_xla_handlers() -> bool:
    return hasattr(library(), "RnnbenchLstmForward")


def set_threads(threads: int) -> None:
    """The GEMM's thread count (OpenBLAS reads OPENBLAS_NUM_THREADS when it loads; this sets it later)."""
    getattr(library().blas, BLAS["threads"])(ctypes.c_int(threads))


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """None when the fused kernels build and load here, else why not."""
    try:
        library()
    except KernelUnavailableError as e:
        return str(e)
    except OSError as e:
        return f"the fused kernels' library did not load: {e}"
    return None

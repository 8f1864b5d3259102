"""Fixtures shared by several test modules."""

import getpass
import hashlib
import os
import tempfile

import pytest

from rnnbench.core.precision import cpu_flags

# Per-machine decisions (the bptt rung's GEMM choices) go to a folder of this test run, not the
# user's ~/.cache; worker subprocesses inherit it.
os.environ.setdefault("RNNBENCH_CACHE_DIR", tempfile.mkdtemp(prefix="rnnbench-test-cache-"))


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a uid with no name (some containers)
        return str(os.getuid())


# XLA's compiled programs are reused by every process of the run (both workers and each subprocess
# a test starts compile the same rungs) and by the next run on this machine: JAX's persistent
# compilation cache, keyed by the program, the compile options and JAX's version, kept where
# Inductor keeps torch.compile's (/tmp/torchinductor_$USER) and as long; the folder's name holds
# the CPU's instruction set, so another CPU never loads code compiled for this one.  Every
# program is kept (it took a third of the suite's time to compile them); at most 1 GB, the least
# recently used go first.
_CPU = hashlib.sha256(" ".join(sorted(cpu_flags())).encode()).hexdigest()[:12]
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      os.path.join(tempfile.gettempdir(), f"rnnbench-test-jax-{_user()}-{_CPU}"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(2**30))


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models gain nothing from intra-op threads; on the shared 2-core CPU the idle
    threads spin and stall every op (a 23 s training run took 380 s with 2 threads)."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


if "MUTANT_UNDER_TEST" in os.environ:  # under mutmut (`make mutation`, tools/mutation.py)

    @pytest.fixture(autouse=True)
    def _trace_each_test_anew():
        """mutmut runs each mutant's tests in a process forked from one that already ran them,
        and picks the mutant when a function is *called*. Code that JAX traced before (its jit
        caches, and the jitted functions that `rnnbench.jax` keeps in `lru_cache`s) would replay the
        original trace and hide the mutant, so every test traces anew. (Only ever makes a mutant
        more likely to survive, never to be reported killed.)"""
        import sys

        if "jax" in sys.modules:
            import functools

            sys.modules["jax"].clear_caches()
            for name, mod in list(sys.modules.items()):
                if name.startswith("rnnbench.jax") and mod is not None:
                    for value in list(vars(mod).values()):
                        if isinstance(value, functools._lru_cache_wrapper):
                            value.cache_clear()
        yield


# The longest files start first, in this order: pytest-xdist's loadfile hands files out in
# collection order (with --no-loadscope-reorder, which the Makefile passes: by default it would
# start the files with the most tests first, and the gate's four long tests would start last and
# run alone while the other worker idles).  Ranked by the CPU seconds each file took in a
# `make test` (its own and its subprocesses'); a file missing from the list only starts later.
LONGEST_FIRST = ("tests/cross/test_parity_matrix.py", "tests/peer/test_pytorch_modules.py",
                 "tests/benchmarks/test_bench_gate.py", "tests/peer/test_pytorch_nn_rnn.py",
                 "tests/cross/test_training_parity.py", "tests/frameworks/torch/test_torch_compiled.py",
                 "tests/tools/test_gpu_check.py", "tests/study/test_study.py", "tests/cross/test_capabilities.py",
                 "tests/frameworks/jax/test_jax_impls.py", "tests/cross/test_machine_capabilities.py",
                 "tests/cross/test_cell_modules.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    root = config.rootpath
    items.sort(key=lambda item: rank.get(item.path.relative_to(root).as_posix(), len(rank)))

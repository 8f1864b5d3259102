"""Fixtures shared by several test modules."""

import os
import tempfile

import pytest

# Per-machine caches (the bptt rung's GEMM decisions) go to a folder of this test run, not the
# user's ~/.cache; worker subprocesses inherit it.
os.environ.setdefault("RNNBENCH_CACHE_DIR", tempfile.mkdtemp(prefix="rnnbench-test-cache-"))
# XLA's compiled programs are reused across the run's processes (both workers and every
# subprocess a test starts compile the same rungs): JAX's persistent compilation cache, keyed by
# the program, in a folder of this test run.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(os.environ["RNNBENCH_CACHE_DIR"], "jax"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")


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


# The longest files start first (pytest-xdist's loadfile hands files out in collection order):
# a long file started last would run alone while the other worker idles.  Measured with
# `make test`'s --durations; a file missing from the list only starts later.
LONGEST_FIRST = ("tests/peer/test_pytorch_modules.py", "tests/benchmarks/test_bench_gate.py",
                 "tests/peer/test_pytorch_nn_rnn.py", "tests/study/test_study.py", "tests/cross/test_parity_matrix.py",
                 "tests/tools/test_gpu_check.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    root = config.rootpath
    items.sort(key=lambda item: rank.get(item.path.relative_to(root).as_posix(), len(rank)))

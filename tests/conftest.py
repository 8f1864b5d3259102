"""Fixtures shared by several test modules."""

import os
import tempfile

import pytest

# Per-machine caches (the bptt rung's GEMM decisions) go to a folder of this test run, not the
# user's ~/.cache; worker subprocesses inherit it.
os.environ.setdefault("RNNBENCH_CACHE_DIR", tempfile.mkdtemp(prefix="rnnbench-test-cache-"))


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models gain nothing from intra-op threads; on the shared 2-core CPU the idle
    threads spin and stall every op (a 23 s training run took 380 s with 2 threads)."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

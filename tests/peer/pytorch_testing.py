"""What the two PyTorch peer suites (test_pytorch_modules.py, test_pytorch_nn_rnn.py) share:
PyTorch's own test helpers (`torch.testing._internal`) imported without side effects, upstream's
seed and assertions, and the module under test on every rnnbench.torch backend.

`common_utils` calls `torch.backends.disable_global_flags()` at import, which would change
the rest of the suite's process: the flag is restored right after.  (It also needs the
`expecttest` package, a test dependency pinned in requirements.txt.)
"""

import functools
import os

import pytest
import torch

import rnnbench.torch

_FLAG = "__allow_nonbracketed_mutation_flag"
_before = torch.backends.__dict__.get(_FLAG, True)
try:
    from torch.testing._internal import common_modules, common_utils  # noqa: F401
finally:
    torch.backends.__dict__[_FLAG] = _before

# RNNBENCH_PEER_FULL=1: upstream's full sample lists on every backend (each suite says what it trims)
FULL = os.environ.get("RNNBENCH_PEER_FULL", "") not in ("", "0")
COMPILED = rnnbench.torch.backends.COMPILED_BACKENDS  # compile, scan: a compile per configuration


@pytest.fixture(autouse=True)
def upstream_seed():
    """Upstream's TestCase.setUp seeds every test with SEED=1234 (autouse where imported)."""
    torch.manual_seed(1234)


def asserts(**tolerances) -> common_utils.TestCase:
    """An upstream TestCase to borrow `assertEqual` and friends from, with upstream's default
    dtype tolerances, or the class attributes given (TestModule's `precision`, `rel_tol`)."""
    cls = type("_UpstreamAsserts", (common_utils.TestCase,), {"__test__": False, "runTest": lambda self: None,
                                                              **tolerances})
    return cls()


def backend_params(skip=lambda backend: None):
    """pytest params: the control "nn" (plain torch.nn), then every rnnbench.torch backend, skipped
    with the reason where it cannot run on this CPU, or where `skip(backend)` gives one."""
    yield pytest.param("nn", id="nn")
    for backend in rnnbench.torch.BACKENDS:
        reason = rnnbench.torch.unavailable_reason(backend, "cpu")
        reason = f"backend {backend} unavailable here: {reason}" if reason else skip(backend)
        yield pytest.param(backend, id=backend, marks=[pytest.mark.skip(reason=reason)] if reason else [])


def module_class(name: str, backend: str):
    """What upstream's nn.<name> becomes: itself for "nn", else rnnbench.torch.<name> on `backend`."""
    if backend == "nn":
        return getattr(torch.nn, name)
    return functools.partial(getattr(rnnbench.torch, name), backend=backend)

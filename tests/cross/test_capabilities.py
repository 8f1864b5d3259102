"""Each rung's capability declaration (its backend module's CAPABILITIES) against the rung itself.

The declaration is the one source the registry, the adapters, the study and asv read; this
test runs every available rung through its framework's public API (not the adapter, which
reads the declaration too) on every catalogue cell, with and without proj_size, and checks
both directions: what is declared supported runs forward and backward, what is declared
unsupported raises (a clear error, never a silent result).
"""

from __future__ import annotations

import numpy as np
import pytest

from rnnbench.core import registry
from rnnbench.core.catalogue import CUSTOM_CELLS, STANDARD_CELLS
from rnnbench.core.params import init_params
from rnnbench.core.spec import RNNSpec

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CELLS = STANDARD_CELLS + CUSTOM_CELLS
# the torch.compile rungs build a graph per configuration (seconds each): two cells stand for the
# rest on compile, one on scan (whose joint forward-backward scan compiles longest)
COMPILE_CELLS = {"torch.compile": ("lstm", "ln_lstm"), "torch.scan": ("lstm",)}
T, B, I, H = 3, 2, 3, 4


def _specs():
    for name in registry.names():
        for cell in CELLS:
            if cell not in COMPILE_CELLS.get(name, CELLS):
                continue
            yield name, RNNSpec(cell, I, H, bidirectional=True)
            if cell == "lstm":
                yield name, RNNSpec(cell, I, H, proj_size=2)


def _inputs(spec):
    rng = np.random.default_rng(0)
    return init_params(spec, rng), rng.standard_normal((T, B, I)), np.array([T, T - 1])


def _run_torch(key, spec):
    import torch

    from rnnbench.torch.modules import module_for

    params, x, lengths = _inputs(spec)
    module = module_for(spec, key, dtype=torch.float64)
    module.load_state_dict({k: torch.as_tensor(v) for k, v in params.items()})
    xt = torch.tensor(x, requires_grad=True)
    out, _ = module(xt, lengths=torch.as_tensor(lengths))
    out.sum().backward()
    assert torch.isfinite(xt.grad).all()


def _run_jax(key, spec):
    import jax
    import jax.numpy as jnp

    import rnnbench.jax

    jax.config.update("jax_enable_x64", True)
    params, x, lengths = _inputs(spec)

    def loss(params, x):
        out, _ = rnnbench.jax.rnn(params, x, cell=spec.cell, lengths=lengths, bidirectional=spec.bidirectional,
                              proj_size=spec.proj_size, backend=key)
        return out.sum()

    grads = jax.grad(loss, argnums=(0, 1))({k: jnp.asarray(v) for k, v in params.items()}, jnp.asarray(x))
    assert np.isfinite(np.asarray(grads[1])).all()


@pytest.mark.parametrize("name,spec", list(_specs()), ids=lambda v: v if isinstance(v, str) else
                         f"{v.cell}{'-proj' if v.proj_size else ''}")
def test_declaration_matches_what_the_rung_does(name, spec):
    row = registry.get(name)
    if row.unavailable_reason("cpu") is not None:
        pytest.skip(row.unavailable_reason("cpu"))
    declared = row.unsupported_reason(spec, lengths=True, dtype="float64")
    run = _run_torch if row.framework == "torch" else _run_jax
    if declared is None:
        run(row.key, spec)  # declared supported: must run, forward and backward
    else:
        with pytest.raises((ValueError, TypeError, RuntimeError, NotImplementedError)):
            run(row.key, spec)


def test_every_rung_declares_capabilities():
    for name in registry.names():
        caps = registry.get(name).declared()
        assert caps.dtypes and caps.devices, name

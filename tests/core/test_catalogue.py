"""The cell catalogue (rnnbench.core.catalogue): lookup, registration, parameter names/shapes, init of extras.

Framework-free: the catalogue, RNNSpec and init_params only (and the NumPy reference's
table of steps, which must cover every built-in cell).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rnnbench import reference
from rnnbench.core.catalogue import (
    CELL_DEFS, CUSTOM_CELLS, STANDARD_CELLS, CellDef, ExtraParam, get_cell, markdown_table, register_cell)
from rnnbench.core.params import ParamError, check_params, init_params
from rnnbench.core.spec import GATES, RNNSpec


@pytest.fixture
def restore_catalogue():
    """Undo registrations a test makes (the catalogue is process-global)."""
    before = dict(CELL_DEFS)
    yield
    CELL_DEFS.clear()
    CELL_DEFS.update(before)


def test_builtin_cells_and_their_families():
    assert STANDARD_CELLS == ("lstm", "gru")
    assert CUSTOM_CELLS == ("ln_lstm", "peephole_lstm", "gru_reset_before")
    assert set(STANDARD_CELLS + CUSTOM_CELLS) <= set(CELL_DEFS)
    families = {name: get_cell(name).family for name in STANDARD_CELLS + CUSTOM_CELLS}
    assert families == {"lstm": "lstm", "gru": "gru", "ln_lstm": "lstm", "peephole_lstm": "lstm",
                        "gru_reset_before": "gru"}
    for name, family in families.items():
        spec = RNNSpec(name, 3, 4)
        assert spec.family == family and spec.cell_def is get_cell(name)
        assert GATES[name] == get_cell(name).gates
        assert spec.num_gates == (4 if family == "lstm" else 3)
        assert set(spec.state_shapes(2)) == ({"h", "c"} if family == "lstm" else {"h"})
        assert get_cell(name).equations.strip() and get_cell(name).summary.strip()


def test_unknown_cell_errors_list_the_known_names():
    for call in (lambda: get_cell("rnn_tanh"), lambda: RNNSpec("rnn_tanh", 3, 4)):
        with pytest.raises(ValueError, match="cell must be one of") as info:
            call()
        for name in STANDARD_CELLS + CUSTOM_CELLS:
            assert repr(name) in str(info.value)
        assert "'rnn_tanh'" in str(info.value)


def test_register_cell_rules(restore_catalogue):
    mine = CellDef("my_cell", "gru", ("a", "b"), "a test cell", "h' = ...")
    assert register_cell(mine) is mine and get_cell("my_cell") is mine
    assert register_cell(dataclasses.replace(mine)) == mine  # the same definition again: fine
    with pytest.raises(ValueError, match="a different cell named 'my_cell' is already registered"):
        register_cell(dataclasses.replace(mine, gates=("a", "b", "c")))
    with pytest.raises(ValueError, match="a different cell named 'lstm'"):
        register_cell(dataclasses.replace(get_cell("lstm"), family="gru"))
    with pytest.raises(ValueError, match="family must be 'lstm' or 'gru', got 'rnn'"):
        register_cell(CellDef("other", "rnn", ("a",), "", ""))
    assert "other" not in CELL_DEFS
    spec = RNNSpec("my_cell", 3, 4)  # a registered cell is a valid spec: 2 gates
    assert spec.param_shapes()["weight_ih_l0"] == (8, 3)


def test_proj_size_only_for_cells_that_support_it():
    assert RNNSpec("lstm", 3, 4, proj_size=2).proj_size == 2
    for name in ("gru",) + CUSTOM_CELLS:
        with pytest.raises(ValueError, match=r"proj_size is only supported for cell in \['lstm'\]"):
            RNNSpec(name, 3, 4, proj_size=2)


EXPECTED_EXTRAS = {
    "lstm": {},
    "gru": {},
    "gru_reset_before": {},
    "peephole_lstm": {"peephole": 12},
    "ln_lstm": {"layernorm_ih_weight": 16, "layernorm_ih_bias": 16, "layernorm_hh_weight": 16,
                "layernorm_hh_bias": 16, "layernorm_c_weight": 4, "layernorm_c_bias": 4},
}


@pytest.mark.parametrize("cell", list(EXPECTED_EXTRAS))
def test_param_names_and_shapes(cell):
    """PyTorch's four entries per layer/direction, then the cell's extras `<prefix>_l{k}[_reverse]`."""
    spec = RNNSpec(cell, 3, 4, num_layers=2, bidirectional=True)
    G = 4 if spec.family == "lstm" else 3
    expected = {}
    for layer in range(2):
        for sfx in (f"l{layer}", f"l{layer}_reverse"):
            expected[f"weight_ih_{sfx}"] = (G * 4, 3 if layer == 0 else 8)
            expected[f"weight_hh_{sfx}"] = (G * 4, 4)
            expected[f"bias_ih_{sfx}"] = (G * 4,)
            expected[f"bias_hh_{sfx}"] = (G * 4,)
            for prefix, size in EXPECTED_EXTRAS[cell].items():
                expected[f"{prefix}_{sfx}"] = (size,)
    shapes = spec.param_shapes()
    assert shapes == expected
    assert list(shapes) == list(expected)  # the order too: layer-major, direction, then extras
    nobias = RNNSpec(cell, 3, 4, bias=False).param_shapes()
    assert not any(k.startswith("bias_") for k in nobias)
    assert {k for k in nobias if not k.startswith("weight_")} == {f"{p}_l0" for p in EXPECTED_EXTRAS[cell]}


def test_extra_param_shape_parses_multiples_of_h():
    assert ExtraParam("p", "3H", "uniform", "").shape(5) == (15,)
    assert ExtraParam("p", "H", "ones", "").shape(5) == (5,)


@pytest.mark.parametrize("scheme", ["pytorch", "orthogonal"])
def test_init_of_extras(scheme):
    """LayerNorm gains 1 and biases 0 (nn.LayerNorm's init); peepholes U(-1/sqrt(H), 1/sqrt(H))."""
    ln = init_params(RNNSpec("ln_lstm", 3, 4, bidirectional=True), seed=1, scheme=scheme)
    for sfx in ("l0", "l0_reverse"):
        for norm in ("ih", "hh", "c"):
            np.testing.assert_array_equal(ln[f"layernorm_{norm}_weight_{sfx}"], 1.0)
            np.testing.assert_array_equal(ln[f"layernorm_{norm}_bias_{sfx}"], 0.0)
    H = 16
    peep = init_params(RNNSpec("peephole_lstm", 3, H), seed=1, scheme=scheme)["peephole_l0"]
    assert peep.shape == (3 * H,) and np.all(np.abs(peep) <= 1 / np.sqrt(H)) and np.std(peep) > 0.05
    float32 = init_params(RNNSpec("ln_lstm", 3, 4), dtype=np.float32, scheme=scheme)
    assert all(v.dtype == np.float32 for v in float32.values())


def test_check_params_names_missing_extras():
    spec = RNNSpec("peephole_lstm", 3, 4)
    params = init_params(spec)
    del params["peephole_l0"]
    with pytest.raises(ParamError, match="missing: peephole_l0"):
        check_params(spec, params)
    with pytest.raises(ParamError, match="unexpected: peephole_l0"):
        check_params(RNNSpec("lstm", 3, 4), init_params(spec))


def test_every_builtin_cell_has_a_hand_written_reference_step():
    for name in STANDARD_CELLS + CUSTOM_CELLS:
        step = reference.get_cell_step(name)
        assert step.hand_written and callable(step.step) and callable(step.step_backward)


def test_markdown_table_lists_every_cell_and_extra():
    table = markdown_table()
    for name in STANDARD_CELLS + CUSTOM_CELLS:
        assert f"| `{name}` |" in table
    assert "`peephole_l{k}[_reverse]` (3H, init uniform)" in table
    assert "`layernorm_c_bias_l{k}[_reverse]` (H, init zeros)" in table

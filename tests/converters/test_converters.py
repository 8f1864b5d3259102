"""Weight converters: round trips keep the function; converted weights run the same cell.

Round trips compare functions, not arrays: one-bias layouts fold `b_ih + b_hh`, so
weights must come back identical and `effective_biases` equal.  The Flax cells (linen
and NNX) run on converted weights and must step like `torch.nn.LSTMCell`/`GRUCell` on
the canonical weights, in float64; the ONNX and Keras layouts are checked by evaluating
those formats' equations (written from their specs) in NumPy.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rnnbench.converters import (
    ConversionError, effective_biases, flax_carry, from_flax_linen, from_flax_linen_model, from_flax_nnx,
    from_flax_nnx_model, from_keras, from_keras_model, from_onnx, from_onnx_layer, to_flax_linen,
    to_flax_linen_model, to_flax_nnx, to_flax_nnx_model, to_keras, to_keras_model, to_onnx)
from rnnbench.core.params import init_params
from rnnbench.core.spec import RNNSpec

SPECS = {
    "lstm": RNNSpec("lstm", 3, 4),
    "gru": RNNSpec("gru", 3, 4),
    "lstm_nobias": RNNSpec("lstm", 3, 4, bias=False),
    "gru_nobias": RNNSpec("gru", 3, 4, bias=False),
    "lstm_bi2": RNNSpec("lstm", 3, 5, num_layers=2, bidirectional=True),
    "gru_bi2": RNNSpec("gru", 2, 3, num_layers=2, bidirectional=True),
}
STEPS, BATCH = 3, 2
ATOL64 = 1e-12  # float64 cells computing the same expression in a different order


def params_for(spec: RNNSpec, seed: int = 0) -> dict[str, np.ndarray]:
    return init_params(spec, seed)


def assert_same_function(spec: RNNSpec, a: dict, b: dict) -> None:
    """Same weights and the same effective biases (the function), key by key."""
    weights = [k for k in spec.param_names() if k.startswith("weight")]
    for name in weights:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    ea, eb = effective_biases(spec, a), effective_biases(spec, b)
    assert ea.keys() == eb.keys()
    for name in ea:
        np.testing.assert_allclose(ea[name], eb[name], rtol=0, atol=1e-15, err_msg=name)
    assert set(b) == set(spec.param_names())


def torch_steps(spec: RNNSpec, params: dict, layer: int, direction: int, xs, h, c=None):
    """Step torch.nn.LSTMCell/GRUCell with the canonical weights of one layer/direction."""
    torch = pytest.importorskip("torch")
    s = spec.suffix(layer, direction)
    cls = torch.nn.LSTMCell if spec.cell == "lstm" else torch.nn.GRUCell
    cell = cls(spec.layer_input_size(layer), spec.hidden_size, bias=spec.bias, dtype=torch.float64)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if spec.bias else ()):
            getattr(cell, name).copy_(torch.from_numpy(params[f"{name}_{s}"]))
        h, c = torch.from_numpy(h), None if c is None else torch.from_numpy(c)
        hs, cs = [], []
        for x in xs:
            if spec.cell == "lstm":
                h, c = cell(torch.from_numpy(x), (h, c))
                cs.append(c.numpy())
            else:
                h = cell(torch.from_numpy(x), h)
            hs.append(h.numpy())
    return np.stack(hs), (np.stack(cs) if cs else None)


def random_inputs(spec: RNNSpec, layer: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((STEPS, BATCH, spec.layer_input_size(layer)))
    n = spec.num_layers * spec.num_directions
    h0 = rng.standard_normal((n, BATCH, spec.hidden_size))
    c0 = rng.standard_normal((n, BATCH, spec.hidden_size)) if spec.cell == "lstm" else None
    return xs, h0, c0


def with_nonzero_biases(spec: RNNSpec, params: dict, seed: int = 5) -> dict:
    """Distinct b_ih and b_hh, so a converter that drops or misplaces one is caught."""
    rng = np.random.default_rng(seed)
    return {k: (rng.uniform(-1, 1, v.shape) if k.startswith("bias") else v) for k, v in params.items()}


# ---------------------------------------------------------------- Flax linen ----------

@pytest.mark.parametrize("name", SPECS)
def test_flax_linen_round_trip(name):
    spec = SPECS[name]
    params = params_for(spec)
    trees = to_flax_linen_model(spec, params)
    assert set(trees) == {spec.suffix(l, d) for l, d in spec.layers_and_directions()}
    back = from_flax_linen_model(spec, trees)
    assert_same_function(spec, params, back)
    assert list(back) == spec.param_names()
    # per layer/direction, and accepting the inner dict as well as {"params": ...}
    l, d = spec.num_layers - 1, spec.num_directions - 1
    inner = to_flax_linen(spec, params, l, d)["params"]
    part = from_flax_linen(spec, inner, l, d)
    assert set(part) == {k for k in spec.param_names() if k.endswith(spec.suffix(l, d))}


def test_flax_linen_folds_biases_exactly():
    spec = SPECS["gru"]
    params = with_nonzero_biases(spec, params_for(spec))
    H = spec.hidden_size
    tree = to_flax_linen(spec, params)["params"]
    b_ih, b_hh = params["bias_ih_l0"], params["bias_hh_l0"]
    np.testing.assert_array_equal(tree["ir"]["bias"], b_ih[:H] + b_hh[:H])
    np.testing.assert_array_equal(tree["in"]["bias"], b_ih[2 * H:])
    np.testing.assert_array_equal(tree["hn"]["bias"], b_hh[2 * H:])
    back = from_flax_linen(spec, tree)
    np.testing.assert_array_equal(back["bias_hh_l0"][:2 * H], 0.0)
    np.testing.assert_array_equal(back["bias_hh_l0"][2 * H:], b_hh[2 * H:])


@pytest.mark.parametrize("cell_type", ["LSTMCell", "OptimizedLSTMCell", "GRUCell"])
@pytest.mark.parametrize("name", ["plain", "nobias", "bi2"])
def test_flax_linen_cell_matches_torch(cell_type, name):
    jax = pytest.importorskip("jax")
    nn = pytest.importorskip("flax.linen")
    cell_kind = "gru" if cell_type == "GRUCell" else "lstm"
    spec = SPECS[{"plain": cell_kind, "nobias": f"{cell_kind}_nobias", "bi2": f"{cell_kind}_bi2"}[name]]
    params = params_for(spec)
    if spec.bias:
        params = with_nonzero_biases(spec, params)
    cell = getattr(nn, cell_type)(features=spec.hidden_size, param_dtype=np.float64)
    with jax.enable_x64(True):
        for layer, direction in spec.layers_and_directions():
            xs, h0, c0 = random_inputs(spec, layer, seed=layer * 2 + direction)
            expected_h, expected_c = torch_steps(spec, params, layer, direction, xs,
                                                 *_state(spec, h0, c0, layer, direction))
            variables = to_flax_linen(spec, params, layer, direction, cell_type=cell_type)
            carry = flax_carry(spec, h0, c0, layer, direction)
            for t, x in enumerate(xs):
                carry, out = cell.apply(variables, carry, x)
                h = carry[1] if spec.cell == "lstm" else carry
                np.testing.assert_allclose(np.asarray(out), expected_h[t], rtol=0, atol=ATOL64)
                np.testing.assert_allclose(np.asarray(h), expected_h[t], rtol=0, atol=ATOL64)
                if spec.cell == "lstm":
                    np.testing.assert_allclose(np.asarray(carry[0]), expected_c[t], rtol=0, atol=ATOL64)


def test_flax_linen_tree_matches_flax_init():
    """The converted tree has exactly the structure and shapes flax creates itself."""
    jax = pytest.importorskip("jax")
    nn = pytest.importorskip("flax.linen")
    for spec, cell_type in [(SPECS["lstm_bi2"], "LSTMCell"), (SPECS["lstm_bi2"], "OptimizedLSTMCell"),
                            (SPECS["gru_bi2"], "GRUCell")]:
        layer = 1
        cell = getattr(nn, cell_type)(features=spec.hidden_size)
        x = np.zeros((BATCH, spec.layer_input_size(layer)), np.float32)
        ref = cell.init(jax.random.key(0), cell.initialize_carry(jax.random.key(1), x.shape), x)
        ours = to_flax_linen(spec, params_for(spec), layer, 1, cell_type=cell_type, dtype=np.float32)
        shapes = lambda t: jax.tree_util.tree_map(lambda a: (a.shape, a.dtype), t)  # noqa: E731
        assert shapes(ours) == shapes(jax.tree_util.tree_map(np.asarray, ref))


def _state(spec, h0, c0, layer, direction):
    idx = layer * spec.num_directions + direction
    return h0[idx], (None if c0 is None else c0[idx])


# ---------------------------------------------------------------- Flax NNX ------------

@pytest.mark.parametrize("name", SPECS)
def test_flax_nnx_round_trip(name):
    spec = SPECS[name]
    params = params_for(spec)
    if spec.cell == "gru" and spec.bias:
        params["bias_hh_l0"][2 * spec.hidden_size:] = 0.0  # NNX GRU has no b_hn
        for l, d in spec.layers_and_directions():
            params[f"bias_hh_{spec.suffix(l, d)}"][2 * spec.hidden_size:] = 0.0
    cell_types = ["LSTMCell", "OptimizedLSTMCell"] if spec.cell == "lstm" else ["GRUCell"]
    for cell_type in cell_types:
        trees = to_flax_nnx_model(spec, params, cell_type=cell_type)
        assert_same_function(spec, params, from_flax_nnx_model(spec, trees))  # cell type inferred
        assert_same_function(spec, params, from_flax_nnx_model(spec, trees, cell_type=cell_type))


@pytest.mark.parametrize("cell_type", ["LSTMCell", "OptimizedLSTMCell", "GRUCell"])
@pytest.mark.parametrize("name", ["plain", "nobias", "bi2"])
def test_flax_nnx_cell_matches_torch(cell_type, name):
    jax = pytest.importorskip("jax")
    nnx = pytest.importorskip("flax.nnx")
    cell_kind = "gru" if cell_type == "GRUCell" else "lstm"
    spec = SPECS[{"plain": cell_kind, "nobias": f"{cell_kind}_nobias", "bi2": f"{cell_kind}_bi2"}[name]]
    params = params_for(spec)
    if spec.bias:
        params = with_nonzero_biases(spec, params)
        if spec.cell == "gru":  # b_hn must be zero for NNX; the other biases stay non-zero
            for l, d in spec.layers_and_directions():
                params[f"bias_hh_{spec.suffix(l, d)}"][2 * spec.hidden_size:] = 0.0
    with jax.enable_x64(True):
        for layer, direction in spec.layers_and_directions():
            cell = getattr(nnx, cell_type)(spec.layer_input_size(layer), spec.hidden_size,
                                           param_dtype=np.float64, rngs=nnx.Rngs(0))
            state = nnx.state(cell, nnx.Param)
            nnx.replace_by_pure_dict(state, to_flax_nnx(spec, params, layer, direction, cell_type=cell_type))
            nnx.update(cell, state)
            xs, h0, c0 = random_inputs(spec, layer, seed=layer * 2 + direction)
            expected_h, expected_c = torch_steps(spec, params, layer, direction, xs,
                                                 *_state(spec, h0, c0, layer, direction))
            carry = flax_carry(spec, h0, c0, layer, direction)
            for t, x in enumerate(xs):
                carry, out = cell(carry, x)
                np.testing.assert_allclose(np.asarray(out), expected_h[t], rtol=0, atol=ATOL64)
                if spec.cell == "lstm":
                    np.testing.assert_allclose(np.asarray(carry[0]), expected_c[t], rtol=0, atol=ATOL64)
            # and the converted state reads back to the same function
            back = from_flax_nnx(spec, nnx.state(cell, nnx.Param), layer, direction)
            assert set(back) == {k for k in spec.param_names() if k.endswith(spec.suffix(layer, direction))}


def test_flax_nnx_tree_matches_nnx_state():
    jax = pytest.importorskip("jax")
    nnx = pytest.importorskip("flax.nnx")
    for spec, cell_type in [(SPECS["lstm_bi2"], "LSTMCell"), (SPECS["lstm_bi2"], "OptimizedLSTMCell"),
                            (SPECS["gru_bi2"], "GRUCell")]:
        layer = 1
        params = params_for(spec)
        if spec.cell == "gru":
            params["bias_hh_l1_reverse"][2 * spec.hidden_size:] = 0.0
        cell = getattr(nnx, cell_type)(spec.layer_input_size(layer), spec.hidden_size, rngs=nnx.Rngs(0))
        ref = nnx.to_pure_dict(nnx.state(cell, nnx.Param))
        ours = to_flax_nnx(spec, params, layer, 1, cell_type=cell_type, dtype=np.float32)
        shapes = lambda t: jax.tree_util.tree_map(lambda a: (a.shape, np.dtype(a.dtype)), t)  # noqa: E731
        assert shapes(ours) == shapes(ref)


def test_flax_nnx_gru_nonzero_b_hn_raises():
    spec = SPECS["gru_bi2"]
    params = params_for(spec)
    for l, d in spec.layers_and_directions():
        params[f"bias_hh_{spec.suffix(l, d)}"][2 * spec.hidden_size:] = 0.0
    params["bias_hh_l1_reverse"][-1] = 0.25
    to_flax_nnx(spec, params, 1, 0)  # this layer's b_hn is zero: fine
    with pytest.raises(ConversionError, match=r"bias_hh_l1_reverse.*b_hn"):
        to_flax_nnx(spec, params, 1, 1)


# ---------------------------------------------------------------- errors (Flax) --------

def test_flax_errors_name_the_problem():
    lstm, gru = SPECS["lstm"], SPECS["gru"]
    params = params_for(lstm)
    proj = RNNSpec("lstm", 3, 4, proj_size=2)
    for convert in (to_flax_linen, to_flax_nnx):
        with pytest.raises(ConversionError, match="weight_hr.*proj_size=2"):
            convert(proj, params_for(proj))
        with pytest.raises(ConversionError, match="cell_type must be one of"):
            convert(lstm, params, cell_type="GRUCell")
        with pytest.raises(ConversionError, match="layer must be"):
            convert(lstm, params, layer=1)
        with pytest.raises(ConversionError, match="direction must be"):
            convert(lstm, params, direction=1)
        with pytest.raises(ValueError, match="missing: bias_hh_l0"):
            convert(lstm, {k: v for k, v in params.items() if k != "bias_hh_l0"})
    tree = to_flax_linen(gru, params_for(gru))["params"]
    del tree["hn"]["bias"]
    tree["extra"] = {"kernel": np.zeros(2)}
    with pytest.raises(ConversionError, match=r"missing: hn/bias.*unexpected: extra/kernel"):
        from_flax_linen(gru, tree)
    tree = to_flax_nnx(lstm, params, cell_type="OptimizedLSTMCell")
    tree["dense_h"]["kernel"] = tree["dense_h"]["kernel"][:, :-1]
    with pytest.raises(ConversionError, match=r"dense_h/kernel has shape \(4, 15\), expected \(4, 16\)"):
        from_flax_nnx(lstm, tree)
    with pytest.raises(ConversionError, match="missing: \\['l0'\\]"):
        from_flax_linen_model(lstm, {})


def test_flax_back_to_bias_false_requires_zero_biases():
    spec, nobias = SPECS["lstm"], SPECS["lstm_nobias"]
    tree = to_flax_linen(spec, with_nonzero_biases(spec, params_for(spec)))
    with pytest.raises(ConversionError, match="non-zero biases but the spec has bias=False"):
        from_flax_linen(nobias, tree)
    zero = to_flax_linen(nobias, params_for(nobias))
    assert all(np.all(zero["params"][f"h{g}"]["bias"] == 0) for g in "ifgo")
    assert set(from_flax_linen(nobias, zero)) == {"weight_ih_l0", "weight_hh_l0"}


# ---------------------------------------------------------------- whole-model torch ----

def torch_model(spec: RNNSpec, params: dict, x, h0, c0=None):
    """`torch.nn.LSTM`/`GRU` in float64 on the canonical params: (output, h_n, c_n)."""
    torch = pytest.importorskip("torch")
    cls = torch.nn.LSTM if spec.cell == "lstm" else torch.nn.GRU
    model = cls(**spec.torch_kwargs(), dtype=torch.float64)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in params.items()})
    with torch.no_grad():
        if spec.cell == "lstm":
            out, (h_n, c_n) = model(torch.from_numpy(x), (torch.from_numpy(h0), torch.from_numpy(c0)))
            return out.numpy(), h_n.numpy(), c_n.numpy()
        out, h_n = model(torch.from_numpy(x), torch.from_numpy(h0))
        return out.numpy(), h_n.numpy(), None


def sequence_inputs(spec: RNNSpec, seed: int = 3, steps: int = 4):
    rng = np.random.default_rng(seed)
    n = spec.num_layers * spec.num_directions
    x = rng.standard_normal((steps, BATCH, spec.input_size))
    h0 = rng.standard_normal((n, BATCH, spec.hidden_size))
    c0 = rng.standard_normal((n, BATCH, spec.hidden_size)) if spec.cell == "lstm" else None
    return x, h0, c0


def sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def assert_model_matches_torch(spec, params, got):
    x, h0, c0 = sequence_inputs(spec)
    expected = torch_model(spec, params, x, h0, c0)
    out, h_n, c_n = got(x, h0, c0)
    np.testing.assert_allclose(out, expected[0], rtol=0, atol=ATOL64)
    np.testing.assert_allclose(h_n, expected[1], rtol=0, atol=ATOL64)
    if spec.cell == "lstm":
        np.testing.assert_allclose(c_n, expected[2], rtol=0, atol=ATOL64)


# ---------------------------------------------------------------- ONNX ----------------

def onnx_node_forward(node: dict, X, initial_h, initial_c=None):
    """ONNX LSTM/GRU operator semantics (onnx.ai operator spec), layout 0: returns Y, Y_h, Y_c.

    LSTM gates i,o,f,c, with optional peepholes P = [P_i, P_o, P_f] (i, f see C_{t-1},
    o sees C_t); GRU gates z,r,h with linear_before_reset 1 or 0 (ONNX's default).
    """
    W, R, B, attrs = node["W"], node["R"], node["B"], node["attributes"]
    P = node.get("P")
    H = attrs["hidden_size"]
    D = 2 if attrs["direction"] == "bidirectional" else 1
    T = X.shape[0]
    Y = np.zeros((T, D, X.shape[1], H))
    Y_h, Y_c = np.zeros_like(initial_h), np.zeros_like(initial_h)
    for d in range(D):
        Wb, Rb = B[d, :B.shape[1] // 2], B[d, B.shape[1] // 2:]
        Ht = initial_h[d]
        Ct = None if initial_c is None else initial_c[d]
        for t in (range(T) if d == 0 else reversed(range(T))):
            Xt = X[t]
            if node["op_type"] == "LSTM":
                Pi, Po, Pf = np.split(P[d], 3) if P is not None else (0.0, 0.0, 0.0)
                gx = Xt @ W[d].T + Ht @ R[d].T + Wb + Rb
                i, o, f, c = (gx[..., k * H:(k + 1) * H] for k in range(4))
                it, ft = sigmoid(i + Pi * Ct), sigmoid(f + Pf * Ct)
                Ct = ft * Ct + it * np.tanh(c)
                Ht = sigmoid(o + Po * Ct) * np.tanh(Ct)
            else:
                Wz, Wr, Wh = np.split(W[d], 3)
                Rz, Rr, Rh = np.split(R[d], 3)
                Wbz, Wbr, Wbh = np.split(Wb, 3)
                Rbz, Rbr, Rbh = np.split(Rb, 3)
                z = sigmoid(Xt @ Wz.T + Ht @ Rz.T + Wbz + Rbz)
                r = sigmoid(Xt @ Wr.T + Ht @ Rr.T + Wbr + Rbr)
                if attrs.get("linear_before_reset", 0) == 1:
                    h = np.tanh(Xt @ Wh.T + r * (Ht @ Rh.T + Rbh) + Wbh)
                else:  # default 0: h~ = tanh(Xt Wh^T + (r . H) Rh^T + Rbh + Wbh)
                    h = np.tanh(Xt @ Wh.T + (r * Ht) @ Rh.T + Rbh + Wbh)
                Ht = (1 - z) * h + z * Ht
            Y[t, d] = Ht
        Y_h[d] = Ht
        if Ct is not None:
            Y_c[d] = Ct
    return Y, Y_h, Y_c


def onnx_graph_forward(spec, nodes, x, h0, c0):
    """Chain one ONNX node per layer, reshaping Y [T, D, B, H] -> [T, B, D*H] between layers."""
    D = spec.num_directions
    h_n, c_n = np.zeros_like(h0), (None if c0 is None else np.zeros_like(c0))
    for layer, node in enumerate(nodes):
        rows = slice(layer * D, (layer + 1) * D)
        Y, Y_h, Y_c = onnx_node_forward(node, x, h0[rows], None if c0 is None else c0[rows])
        x = Y.transpose(0, 2, 1, 3).reshape(Y.shape[0], Y.shape[2], -1)
        h_n[rows] = Y_h
        if c0 is not None:
            c_n[rows] = Y_c
    return x, h_n, c_n


@pytest.mark.parametrize("name", SPECS)
def test_onnx_round_trip_is_exact(name):
    spec = SPECS[name]
    params = with_nonzero_biases(spec, params_for(spec)) if spec.bias else params_for(spec)
    nodes = to_onnx(spec, params)
    assert len(nodes) == spec.num_layers
    back = from_onnx(spec, nodes)
    assert list(back) == spec.param_names()
    for k in params:  # both biases survive: arrays come back identical
        np.testing.assert_array_equal(back[k], params[k], err_msg=k)


@pytest.mark.parametrize("name", SPECS)
def test_onnx_equations_match_torch(name):
    spec = SPECS[name]
    params = with_nonzero_biases(spec, params_for(spec)) if spec.bias else params_for(spec)
    nodes = to_onnx(spec, params)
    G, H, D = spec.num_gates, spec.hidden_size, spec.num_directions
    for layer, node in enumerate(nodes):
        assert node["op_type"] == ("LSTM" if spec.cell == "lstm" else "GRU")
        assert node["W"].shape == (D, G * H, spec.layer_input_size(layer))
        assert node["R"].shape == (D, G * H, H) and node["B"].shape == (D, 2 * G * H)
        assert node["attributes"]["direction"] == ("bidirectional" if spec.bidirectional else "forward")
        assert node["attributes"].get("linear_before_reset") == (1 if spec.cell == "gru" else None)
    assert_model_matches_torch(spec, params, lambda x, h0, c0: onnx_graph_forward(spec, nodes, x, h0, c0))


def test_onnx_errors_name_the_problem():
    proj = RNNSpec("lstm", 3, 4, proj_size=2)
    with pytest.raises(ConversionError, match="ONNX LSTM cannot hold weight_hr.*proj_size=2"):
        to_onnx(proj, params_for(proj))
    gru = SPECS["gru"]
    node = to_onnx(gru, params_for(gru))[0]
    with pytest.raises(ConversionError, match="linear_before_reset=0"):
        from_onnx_layer(gru, {**node, "attributes": {**node["attributes"], "linear_before_reset": 0}})
    with pytest.raises(ConversionError, match="direction='bidirectional'"):
        from_onnx_layer(gru, {**node, "attributes": {**node["attributes"], "direction": "bidirectional"}})
    with pytest.raises(ConversionError, match=r"R has shape \(1, 12, 3\), expected \(1, 12, 4\)"):
        from_onnx_layer(gru, {**node, "R": node["R"][:, :, :3]})
    with pytest.raises(ConversionError, match=r"missing: \['W'\]"):
        from_onnx_layer(gru, {k: v for k, v in node.items() if k != "W"})
    with pytest.raises(ConversionError, match="op_type is 'LSTM'"):
        from_onnx_layer(gru, {**node, "op_type": "LSTM"})
    with pytest.raises(ConversionError, match="list of 1 layer dicts, got 2 layers"):
        from_onnx(gru, [node, node])
    lstm = SPECS["lstm"]
    lnode = to_onnx(lstm, params_for(lstm))[0]
    with pytest.raises(ConversionError, match="peepholes"):
        from_onnx_layer(lstm, {**lnode, "P": np.ones((1, 12))})
    # B absent means zeros: converts into a bias=False spec
    nobias = SPECS["lstm_nobias"]
    assert set(from_onnx_layer(nobias, {k: v for k, v in lnode.items() if k != "B"})) == {
        "weight_ih_l0", "weight_hh_l0"}
    with pytest.raises(ConversionError, match="non-zero biases but the spec has bias=False"):
        from_onnx_layer(nobias, to_onnx(lstm, with_nonzero_biases(lstm, params_for(lstm)))[0])


# ---------------------------------------------------------------- Keras ---------------

def keras_layer_forward(spec, w: dict, xs, h, c=None, go_backwards=False):
    """Keras 3 LSTM / GRU(reset_after=True or, for gru_reset_before, False) cell equations
    over a sequence (time-major here).

    Returns outputs aligned with the input time steps (as keras.layers.Bidirectional
    re-reverses the backward layer's outputs), and the final h, c.
    """
    H = spec.hidden_size
    bias = w.get("bias")
    steps = reversed(range(len(xs))) if go_backwards else range(len(xs))
    out = np.zeros((len(xs), xs.shape[1], H))
    for t in steps:
        x = xs[t]
        if spec.cell == "lstm":  # gates i, f, c, o
            zz = x @ w["kernel"] + h @ w["recurrent_kernel"] + (0 if bias is None else bias)
            i, f, cc, o = np.split(zz, 4, axis=-1)
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(cc)
            h = sigmoid(o) * np.tanh(c)
        elif spec.cell == "gru_reset_before":  # reset_after=False: one input bias (3H,), r * h before U_h
            mx = x @ w["kernel"] + (0 if bias is None else bias)
            x_z, x_r, x_h = np.split(mx, 3, axis=-1)
            U_z, U_r, U_h = np.split(w["recurrent_kernel"], 3, axis=-1)
            z, r = sigmoid(x_z + h @ U_z), sigmoid(x_r + h @ U_r)
            hh = np.tanh(x_h + (r * h) @ U_h)
            h = z * h + (1 - z) * hh
        else:  # gates z, r, h; reset_after: r multiplies (h @ U_h + b_rec_h)
            mx = x @ w["kernel"] + (0 if bias is None else bias[0])
            mh = h @ w["recurrent_kernel"] + (0 if bias is None else bias[1])
            x_z, x_r, x_h = np.split(mx, 3, axis=-1)
            h_z, h_r, h_h = np.split(mh, 3, axis=-1)
            z, r = sigmoid(x_z + h_z), sigmoid(x_r + h_r)
            hh = np.tanh(x_h + r * h_h)
            h = z * h + (1 - z) * hh
        out[t] = h
    return out, h, c


def keras_model_forward(spec, weights: dict, x, h0, c0):
    h_n, c_n = np.zeros_like(h0), (None if c0 is None else np.zeros_like(c0))
    for layer in range(spec.num_layers):
        outs = []
        for d in range(spec.num_directions):
            idx = layer * spec.num_directions + d
            out, h, c = keras_layer_forward(spec, weights[spec.suffix(layer, d)], x, h0[idx],
                                            None if c0 is None else c0[idx], go_backwards=d == 1)
            outs.append(out)
            h_n[idx] = h
            if c0 is not None:
                c_n[idx] = c
        x = np.concatenate(outs, axis=-1)
    return x, h_n, c_n


@pytest.mark.parametrize("name", SPECS)
def test_keras_round_trip(name):
    spec = SPECS[name]
    params = with_nonzero_biases(spec, params_for(spec)) if spec.bias else params_for(spec)
    back = from_keras_model(spec, to_keras_model(spec, params))
    assert list(back) == spec.param_names()
    assert_same_function(spec, params, back)
    if spec.cell == "gru":  # GRU keeps both biases: exact
        for k in params:
            np.testing.assert_array_equal(back[k], params[k], err_msg=k)


@pytest.mark.parametrize("name", SPECS)
def test_keras_equations_match_torch(name):
    spec = SPECS[name]
    params = with_nonzero_biases(spec, params_for(spec)) if spec.bias else params_for(spec)
    weights = to_keras_model(spec, params)
    G, H = spec.num_gates, spec.hidden_size
    for (layer, d) in spec.layers_and_directions():
        w = weights[spec.suffix(layer, d)]
        assert w["kernel"].shape == (spec.layer_input_size(layer), G * H)
        assert w["recurrent_kernel"].shape == (H, G * H)
        assert ("bias" in w) == spec.bias
        if spec.bias:
            assert w["bias"].shape == ((G * H,) if spec.cell == "lstm" else (2, G * H))
    assert_model_matches_torch(spec, params, lambda x, h0, c0: keras_model_forward(spec, weights, x, h0, c0))


def test_keras_errors_name_the_problem():
    proj = RNNSpec("lstm", 3, 4, proj_size=2)
    with pytest.raises(ConversionError, match="Keras LSTM cannot hold weight_hr"):
        to_keras(proj, params_for(proj))
    gru = SPECS["gru"]
    w = to_keras(gru, params_for(gru))
    with pytest.raises(ConversionError, match="reset_after=False"):
        from_keras(gru, {**w, "bias": w["bias"][0]})
    with pytest.raises(ConversionError, match=r"kernel has shape \(4, 12\), expected \(3, 12\)"):
        from_keras(gru, {**w, "kernel": np.zeros((4, 12))})
    with pytest.raises(ConversionError, match="missing: recurrent_kernel"):
        from_keras(gru, {k: v for k, v in w.items() if k != "recurrent_kernel"})
    lstm, nobias = SPECS["lstm"], SPECS["lstm_nobias"]
    with pytest.raises(ConversionError, match="non-zero biases but the spec has bias=False"):
        from_keras(nobias, to_keras(lstm, with_nonzero_biases(lstm, params_for(lstm))))
    zero_bias = {**to_keras(lstm, params_for(lstm)), "bias": np.zeros(16)}
    assert set(from_keras(nobias, zero_bias)) == {"weight_ih_l0", "weight_hh_l0"}


# ---------------------------------------------------------------- properties ----------

@st.composite
def specs_and_params(draw):
    spec = RNNSpec(draw(st.sampled_from(["lstm", "gru"])), draw(st.integers(1, 4)), draw(st.integers(1, 4)),
                   num_layers=draw(st.integers(1, 3)), bias=draw(st.booleans()),
                   bidirectional=draw(st.booleans()))
    params = params_for(spec, draw(st.integers(0, 2**16)))
    if spec.bias:
        params = with_nonzero_biases(spec, params, draw(st.integers(0, 2**16)))
    return spec, params


@settings(max_examples=40, deadline=None)
@given(specs_and_params())
def test_every_converter_round_trips_the_function(case):
    spec, params = case
    assert_same_function(spec, params, from_flax_linen_model(spec, to_flax_linen_model(spec, params)))
    assert_same_function(spec, params, from_keras_model(spec, to_keras_model(spec, params)))
    assert_same_function(spec, params, from_onnx(spec, to_onnx(spec, params)))
    cell_types = ["LSTMCell", "OptimizedLSTMCell"] if spec.cell == "lstm" else ["GRUCell"]
    if spec.cell == "gru" and spec.bias:
        with pytest.raises(ConversionError, match="b_hn"):
            to_flax_nnx_model(spec, params)
        for l, d in spec.layers_and_directions():
            params[f"bias_hh_{spec.suffix(l, d)}"][2 * spec.hidden_size:] = 0.0
    for cell_type in cell_types:
        trees = to_flax_nnx_model(spec, params, cell_type=cell_type)
        assert_same_function(spec, params, from_flax_nnx_model(spec, trees))


def test_dtype_argument_and_fresh_arrays():
    spec = SPECS["lstm"]
    params = params_for(spec)
    for tree in (to_flax_linen(spec, params, dtype=np.float32), to_flax_nnx(spec, params, dtype=np.float32),
                 to_keras(spec, params, dtype=np.float32), to_onnx(spec, params, dtype=np.float32)[0]):
        leaves = [v for v in _leaves(tree) if isinstance(v, np.ndarray)]
        assert leaves and all(v.dtype == np.float32 for v in leaves)
    tree = to_flax_linen(spec, params)
    assert tree["params"]["ii"]["kernel"].dtype == np.float64
    tree["params"]["ii"]["kernel"][:] = 7.0  # the caller owns the arrays: params unchanged
    assert not np.any(params["weight_ih_l0"] == 7.0)
    back = from_keras(spec, to_keras(spec, params), dtype=np.float32)
    assert all(v.dtype == np.float32 for v in back.values())


def test_flax_carry_layout():
    spec = SPECS["lstm_bi2"]
    _, h0, c0 = random_inputs(spec, 0)
    c, h = flax_carry(spec, h0, c0, layer=1, direction=1)  # (c, h): c first
    np.testing.assert_array_equal(c, c0[3])
    np.testing.assert_array_equal(h, h0[3])
    with pytest.raises(ConversionError, match="c0 is required"):
        flax_carry(spec, h0)
    np.testing.assert_array_equal(flax_carry(SPECS["gru"], h0[:1]), h0[0])


def test_import_does_not_pull_in_torch_or_jax():
    code = "import sys, rnnbench.converters; print(sorted(m for m in ('torch', 'jax', 'flax') if m in sys.modules))"
    from tests.support import ROOT as root
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root).stdout
    assert out.strip() == "[]"


def _leaves(tree):
    if isinstance(tree, dict):
        for v in tree.values():
            yield from _leaves(v)
    else:
        yield tree


# ---------------------------------------------------------------- shared vectors ------

TARGETS_HOLDING = {"lstm": {"flax", "keras", "onnx"}, "gru": {"flax", "keras", "onnx"},
                   "peephole_lstm": {"onnx"}, "gru_reset_before": {"onnx", "keras"}, "ln_lstm": set()}


def _vector_cases():
    vectors = pytest.importorskip("rnnbench.vectors")
    return vectors.load_cases()


def test_onnx_and_keras_reproduce_the_shared_vectors():
    """Every committed case without lengths: ONNX and Keras equations on converted weights
    give the stored float64 outputs (custom cells through the formats that hold them: ONNX
    peepholes P and linear_before_reset=0, Keras reset_after=False; the others raise
    naming the cell); cases with proj_size raise for every target."""
    checked = 0
    checked_cells: dict[str, set] = {}
    for case in _vector_cases():
        spec = case.spec
        if spec.proj_size:
            for convert in (to_flax_linen, to_flax_nnx, to_keras):
                with pytest.raises(ConversionError, match="weight_hr"):
                    convert(spec, case.params)
            with pytest.raises(ConversionError, match="weight_hr"):
                to_onnx(spec, case.params)
            continue
        if case.lengths is not None:
            continue  # packed-sequence masking is the driver's job, not the weights'
        holds = TARGETS_HOLDING[spec.cell]
        for target, convert in (("flax", to_flax_linen), ("flax", to_flax_nnx), ("keras", to_keras),
                                ("onnx", to_onnx)):
            if target not in holds:
                with pytest.raises(ConversionError, match=f"cell='{spec.cell}'"):
                    convert(spec, case.params)
        x = np.swapaxes(case.x, 0, 1) if spec.batch_first else case.x
        shapes = spec.state_shapes(x.shape[1])
        h0 = np.zeros(shapes["h"]) if case.h0 is None else case.h0
        c0 = None if spec.family == "gru" else (np.zeros(shapes["c"]) if case.c0 is None else case.c0)
        runs = {"onnx": lambda: onnx_graph_forward(spec, to_onnx(spec, case.params), x, h0, c0),
                "keras": lambda: keras_model_forward(spec, to_keras_model(spec, case.params), x, h0, c0)}
        for target in ("onnx", "keras"):
            if target not in holds:
                continue
            out, h_n, c_n = runs[target]()
            out = np.swapaxes(out, 0, 1) if spec.batch_first else out
            np.testing.assert_allclose(out, case.expected["output"], rtol=0, atol=ATOL64, err_msg=case.name)
            np.testing.assert_allclose(h_n, case.expected["h_n"], rtol=0, atol=ATOL64, err_msg=case.name)
            if spec.family == "lstm":
                np.testing.assert_allclose(c_n, case.expected["c_n"], rtol=0, atol=ATOL64, err_msg=case.name)
            checked_cells.setdefault(spec.cell, set()).add(target)
        checked += 1
    assert checked >= 10
    # every custom cell a format can hold was checked through it on the vectors
    assert {cell: targets for cell, targets in checked_cells.items() if cell not in ("lstm", "gru")} == {
        "peephole_lstm": {"onnx"}, "gru_reset_before": {"onnx", "keras"}}


# ---------------------------------------------------------------- custom cells ----------

from rnnbench import reference  # noqa: E402
from rnnbench.converters import read_keras_model, read_onnx  # noqa: E402

CUSTOM_SPECS = {
    "peephole": RNNSpec("peephole_lstm", 3, 4),
    "peephole_bi2_nobias": RNNSpec("peephole_lstm", 3, 4, num_layers=2, bidirectional=True, bias=False),
    "reset_before": RNNSpec("gru_reset_before", 3, 4),
    "reset_before_bi2": RNNSpec("gru_reset_before", 2, 3, num_layers=2, bidirectional=True),
    "reset_before_nobias": RNNSpec("gru_reset_before", 3, 4, bias=False),
}


def custom_params(spec: RNNSpec, seed: int = 0) -> dict[str, np.ndarray]:
    """Canonical params with non-zero biases and peepholes well away from zero."""
    params = params_for(spec, seed)
    if spec.bias:
        params = with_nonzero_biases(spec, params, seed + 1)
    rng = np.random.default_rng(seed + 2)
    for name in params:
        if name.startswith("peephole_"):
            params[name] = params[name] + rng.standard_normal(params[name].shape)
    return params


def reference_outputs(spec, params, x, h0, c0):
    got = reference.run_case(spec, params, x, h0, c0)
    return got["output"], got["h_n"], got.get("c_n")


def _inputs(spec, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((STEPS, BATCH, spec.input_size))
    shapes = spec.state_shapes(BATCH)
    h0 = rng.standard_normal(shapes["h"])
    c0 = rng.standard_normal(shapes["c"]) if spec.family == "lstm" else None
    return x, h0, c0


def _assert_outputs(spec, got, want):
    for a, b, key in zip(got, want, ("output", "h_n", "c_n")):
        if b is not None:
            np.testing.assert_allclose(a, b, rtol=0, atol=ATOL64, err_msg=key)


@pytest.mark.parametrize("name", CUSTOM_SPECS)
def test_custom_cells_through_onnx_compute_the_reference_and_round_trip(name):
    spec = CUSTOM_SPECS[name]
    params = custom_params(spec)
    nodes = to_onnx(spec, params)
    for node in nodes:
        assert node["op_type"] == ("LSTM" if spec.family == "lstm" else "GRU")
        if spec.cell == "peephole_lstm":
            assert node["P"].shape == (spec.num_directions, 3 * spec.hidden_size)
        else:
            assert "P" not in node and node["attributes"]["linear_before_reset"] == 0
    x, h0, c0 = _inputs(spec)
    _assert_outputs(spec, onnx_graph_forward(spec, nodes, x, h0, c0), reference_outputs(spec, params, x, h0, c0))
    back = from_onnx(spec, nodes)
    assert list(back) == spec.param_names()
    for k in params:  # both biases and the peepholes survive: exact
        np.testing.assert_array_equal(back[k], params[k], err_msg=k)
    inferred, again = read_onnx(nodes)
    assert inferred == spec
    for k in params:
        np.testing.assert_array_equal(again[k], params[k], err_msg=k)


def test_onnx_peephole_order_is_i_o_f():
    spec = CUSTOM_SPECS["peephole"]
    params = custom_params(spec)
    H = spec.hidden_size
    p_i, p_f, p_o = np.split(params["peephole_l0"], 3)
    P = to_onnx(spec, params)[0]["P"][0]
    np.testing.assert_array_equal(P, np.concatenate([p_i, p_o, p_f]))
    assert P.shape == (3 * H,)


@pytest.mark.parametrize("name", [n for n in CUSTOM_SPECS if CUSTOM_SPECS[n].cell == "gru_reset_before"])
def test_reset_before_gru_through_keras_reset_after_false(name):
    spec = CUSTOM_SPECS[name]
    params = custom_params(spec)
    weights = to_keras_model(spec, params)
    G, H = spec.num_gates, spec.hidden_size
    for layer, d in spec.layers_and_directions():
        w = weights[spec.suffix(layer, d)]
        assert ("bias" in w) == spec.bias
        if spec.bias:
            assert w["bias"].shape == (G * H,)  # reset_after=False: one bias, b_ih + b_hh folded
    x, h0, _ = _inputs(spec)
    _assert_outputs(spec, keras_model_forward(spec, weights, x, h0, None), reference_outputs(spec, params, x, h0, None))
    back = from_keras_model(spec, weights)
    assert_same_function(spec, params, back)
    inferred, again = read_keras_model(weights, reset_after=None if spec.bias else False)
    assert inferred == spec
    assert_same_function(spec, params, again)


def test_read_onnx_and_read_keras_choose_the_cell():
    lstm, gru = SPECS["lstm_bi2"], SPECS["gru_bi2"]
    for spec in (lstm, gru, SPECS["lstm_nobias"]):
        params = params_for(spec)
        inferred, back = read_onnx(to_onnx(spec, params))
        assert inferred == spec
        assert_same_function(spec, params, back)
        inferred, back = read_keras_model(to_keras_model(spec, params))
        assert inferred == spec
    # a GRU node with linear_before_reset=0 (or the attribute absent: ONNX's default) is reset-before
    node = to_onnx(SPECS["gru"], params_for(SPECS["gru"]))[0]
    for attrs in ({**node["attributes"], "linear_before_reset": 0},
                  {k: v for k, v in node["attributes"].items() if k != "linear_before_reset"}):
        spec, _ = read_onnx([{**node, "attributes": attrs}])
        assert spec.cell == "gru_reset_before"
    # an LSTM node with zero P is a plain LSTM, with non-zero P a peephole LSTM
    lnode = to_onnx(SPECS["lstm"], params_for(SPECS["lstm"]))[0]
    assert read_onnx([{**lnode, "P": np.zeros((1, 12))}])[0].cell == "lstm"
    spec, params = read_onnx([{**lnode, "P": np.arange(12.0)[None]}])
    assert spec.cell == "peephole_lstm"
    np.testing.assert_array_equal(params["peephole_l0"], np.r_[0:4, 8:12, 4:8])  # [i, o, f] -> [i, f, o]
    with pytest.raises(ConversionError, match="pass reset_after"):
        read_keras_model(to_keras_model(SPECS["gru_nobias"], params_for(SPECS["gru_nobias"])))
    with pytest.raises(ConversionError, match="same op_type"):
        read_onnx([lnode, node])


def test_custom_cell_conversion_errors_name_the_cell():
    gru, reset_before = SPECS["gru"], CUSTOM_SPECS["reset_before"]
    node = to_onnx(gru, params_for(gru))[0]
    with pytest.raises(ConversionError, match="linear_before_reset=0.*cell='gru_reset_before'"):
        from_onnx_layer(gru, {**node, "attributes": {**node["attributes"], "linear_before_reset": 0}})
    with pytest.raises(ConversionError, match="linear_before_reset=1.*cell='gru'"):
        from_onnx_layer(reset_before, node)
    lstm = SPECS["lstm"]
    lnode = to_onnx(lstm, params_for(lstm))[0]
    with pytest.raises(ConversionError, match="peepholes P.*cell='peephole_lstm'"):
        from_onnx_layer(lstm, {**lnode, "P": np.ones((1, 12))})
    w = to_keras(gru, params_for(gru))
    with pytest.raises(ConversionError, match="reset_after=False.*cell='gru_reset_before'"):
        from_keras(gru, {**w, "bias": w["bias"][0]})
    with pytest.raises(ConversionError, match="reset_after=True.*cell='gru'"):
        from_keras(reset_before, w)
    peep = CUSTOM_SPECS["peephole"]
    for convert in (to_keras, to_flax_linen, to_flax_nnx):
        with pytest.raises(ConversionError, match="cannot hold cell='peephole_lstm'"):
            convert(peep, custom_params(peep))
    for convert in (to_flax_linen, to_flax_nnx):
        with pytest.raises(ConversionError, match="cannot hold cell='gru_reset_before'"):
            convert(reset_before, custom_params(reset_before))
    ln = RNNSpec("ln_lstm", 3, 4)
    for convert in (to_onnx, to_keras, to_flax_linen, to_flax_nnx):
        with pytest.raises(ConversionError, match="cannot hold cell='ln_lstm'"):
            convert(ln, params_for(ln))
    with pytest.raises(ConversionError, match="cannot hold cell='ln_lstm'"):
        from_onnx(ln, [lnode])


def test_effective_biases_of_custom_cells():
    """Folded where the function only sees b_ih + b_hh; separate where it does not."""
    for spec in (CUSTOM_SPECS["peephole"], CUSTOM_SPECS["reset_before"]):
        params = custom_params(spec)
        eb = effective_biases(spec, params)
        np.testing.assert_array_equal(eb["bias_l0"], params["bias_ih_l0"] + params["bias_hh_l0"])
        # moving bias between b_ih and b_hh keeps the function: the reference agrees
        moved = {**params, "bias_ih_l0": eb["bias_l0"], "bias_hh_l0": np.zeros_like(eb["bias_l0"])}
        x, h0, c0 = _inputs(spec)
        _assert_outputs(spec, reference_outputs(spec, moved, x, h0, c0), reference_outputs(spec, params, x, h0, c0))
    ln = RNNSpec("ln_lstm", 3, 4)
    params = with_nonzero_biases(ln, params_for(ln))
    assert set(effective_biases(ln, params)) == {"bias_ih_l0", "bias_hh_l0"}

"""Which feature makes jax.cudnn differ from the reference?  Forward only, float32, max abs error."""
import itertools, json, sys
import numpy as np, jax, jax.numpy as jnp
from jax.experimental import rnn
from shared import reference
from shared.params import init_params
from shared.spec import RNNSpec
from jax_impl.backends import cudnn

rows = []
for L, bi, lens, state in itertools.product((1, 2), (False, True), (False, True), (False, True)):
    spec = RNNSpec("lstm", 3, 4, num_layers=L, bidirectional=bi)
    rng = np.random.default_rng(0)
    params = init_params(spec, rng)
    T, B = 4, 3
    x = rng.standard_normal((T, B, 3))
    D = 2 if bi else 1
    h0 = rng.standard_normal((L * D, B, 4)) if state else np.zeros((L * D, B, 4))
    c0 = rng.standard_normal((L * D, B, 4)) if state else np.zeros((L * D, B, 4))
    lengths = np.array([4, 2, 3]) if lens else None
    ref = reference.run_case(spec, params, x, h0, c0, lengths)
    jp = {k: jnp.asarray(v, jnp.float32) for k, v in params.items()}
    w = cudnn.flat_weights(spec, jp)
    sl = jnp.asarray(lengths if lens else np.full(B, T), jnp.int32)
    xb = jnp.asarray(np.swapaxes(x, 0, 1), jnp.float32)
    h0j, c0j = jnp.asarray(h0, jnp.float32), jnp.asarray(c0, jnp.float32)
    row = {"L": L, "bi": bi, "lengths": lens, "state": state}
    for prec_name, prec in (("HIGHEST", jax.lax.Precision.HIGHEST), ("None", None)):
        try:
            y, hn, cn = rnn.lstm(xb, h0j, c0j, w, sl, 3, 4, L, 0.0, bi, prec)
            y = np.swapaxes(np.asarray(y), 0, 1)
            if lens:
                y = y * (np.arange(T)[:, None] < lengths[None, :])[..., None]
            row[prec_name] = {"out": float(np.abs(y - ref["output"]).max()),
                              "h_n": float(np.abs(np.asarray(hn) - ref["h_n"]).max()),
                              "c_n": float(np.abs(np.asarray(cn) - ref["c_n"]).max())}
        except Exception as e:
            row[prec_name] = f"{type(e).__name__}: {str(e)[:200]}"
    try:  # jax's own reference on our flat vector: does the layout agree with jax's reading of it?
        W_ih, W_hh, b_ih, b_hh = rnn.unpack_lstm_weights(w, 3, 4, L, bi)
        y2, hn2, cn2 = rnn.lstm_ref(xb, h0j, c0j, W_ih, W_hh, b_ih, b_hh, sl, 3, 4, L, 0.0, bi)
        y2 = np.swapaxes(np.asarray(y2), 0, 1)
        if lens:
            y2 = y2 * (np.arange(T)[:, None] < lengths[None, :])[..., None]
        row["jax_ref"] = {"out": float(np.abs(y2 - ref["output"]).max()),
                          "h_n": float(np.abs(np.asarray(hn2) - ref["h_n"]).max())}
    except Exception as e:
        row["jax_ref"] = f"{type(e).__name__}: {str(e)[:200]}"
    # gate-swap hypothesis: cuDNN order i,f,o,g?
    try:
        ws = rnn.swap_lstm_gates(w, 3, 4, L, bi)
        y3, hn3, cn3 = rnn.lstm(xb, h0j, c0j, ws, sl, 3, 4, L, 0.0, bi, jax.lax.Precision.HIGHEST)
        y3 = np.swapaxes(np.asarray(y3), 0, 1)
        if lens:
            y3 = y3 * (np.arange(T)[:, None] < lengths[None, :])[..., None]
        row["swapped"] = {"out": float(np.abs(y3 - ref["output"]).max()),
                          "h_n": float(np.abs(np.asarray(hn3) - ref["h_n"]).max())}
    except Exception as e:
        row["swapped"] = f"{type(e).__name__}: {str(e)[:200]}"
    print(json.dumps(row), flush=True)
    rows.append(row)
json.dump(rows, open(sys.argv[1], "w"), indent=1)

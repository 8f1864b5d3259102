"""int8 inference speed, interleaved in one process: every torch_impl.quantized method, nn.LSTM/nn.GRU,
and jax_impl.quantized, on a 2-layer bidirectional layer (input 64, hidden 128, T=20, B=8), 2 threads.

    python scripts/int8_speed.py      (docs/precision.md quotes it; run it alone)
"""
import time, statistics, numpy as np, torch, jax
torch.set_num_threads(2)
from torch_impl import quantized as Q
from jax_impl import quantized as JQ
from shared.spec import RNNSpec
torch.manual_seed(0)
res = {}
for cell, cls in (("lstm", torch.nn.LSTM), ("gru", torch.nn.GRU)):
    rnn = cls(64, 128, num_layers=2, bidirectional=True).eval()
    x = torch.randn(20, 8, 64)
    models = {m: Q.quantize(rnn, m) for m in Q.METHODS}
    models["nn"] = rnn
    spec = RNNSpec(cell, 64, 128, num_layers=2, bidirectional=True)
    q = JQ.quantize({k: v.numpy() for k, v in rnn.state_dict().items()}, spec)
    jf = {m: jax.jit(lambda x, m=m: JQ.run(q, x, method=m)[0]) for m in JQ.METHODS}
    xj = x.numpy()
    for f in jf.values(): f(xj).block_until_ready()
    times = {k: [] for k in list(models) + ["jax." + m for m in jf]}
    with torch.no_grad():
        for m in models.values(): m(x)
        for _ in range(15):  # interleaved
            for k, m in models.items():
                t = time.perf_counter(); m(x); times[k].append(time.perf_counter() - t)
            for k, f in jf.items():
                t = time.perf_counter(); f(xj).block_until_ready(); times["jax." + k].append(time.perf_counter() - t)
    from shared import reference
    want = reference.run_case(spec, {k: v.double().numpy() for k, v in rnn.state_dict().items()},
                              x.double().numpy())["output"]
    with torch.no_grad():
        for k, m in models.items():
            err = np.abs(m(x)[0].double().numpy() - want).max()
            print(cell, f"{k:28s} {Q.model_bytes(m):9d} bytes  max error {err:.2e}")
    for m in JQ.METHODS:
        err = np.abs(np.asarray(jf[m](xj), np.float64) - want).max()
        print(cell, f"{'jax.' + m:28s} {JQ.model_bytes(q, m):9d} bytes  max error {err:.2e}")
    base = statistics.median(times["nn"])
    for k, v in times.items():
        print(cell, f"{k:28s} {statistics.median(v)*1e3:7.2f} ms  {statistics.median(v)/base:5.2f}x nn")

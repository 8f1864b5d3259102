"""Mixed-precision training parity: the adding problem (T=50, LSTM H=16, Adam, 1000 steps) in float32 and
amp_bfloat16 with torch (native) and JAX (scan) from the same start; held-out MSE evaluated in float32 by one
torch model, and the band between the two frameworks' amp_bfloat16 loss curves (docs/precision.md quotes it).

    python scripts/precision_training.py
"""
import time, numpy as np
import torch
torch.set_num_threads(1)
from jax_impl import train as jax_train
from torch_impl import train as torch_train
from shared.tasks import TrainConfig
LEARN = TrainConfig(task="adding", seq_len=50, cell="lstm", hidden_size=16, batch_size=64, steps=1000,
                    optimizer="adam", lr=0.02, clip_norm=1.0, seed=0)
held = LEARN.make_task().batch(10**6, 2000)
res = {}
for fw, impl, dtype in [("torch","native","float32"),("torch","native","amp_bfloat16"),("jax","scan","float32"),("jax","scan","amp_bfloat16"),("torch","native","bfloat16")]:
    t0=time.perf_counter()
    r = (torch_train if fw=="torch" else jax_train).train(LEARN, impl, dtype)
    s=time.perf_counter()-t0
    mse = torch_train.evaluate_mse(LEARN, "native", r.params, r.head, held, "float32")
    res[(fw,dtype)] = r.losses
    ma = np.convolve(r.losses, np.ones(50)/50, "valid")
    print(fw, dtype, f"{s:.1f}s held-out mse(float32 eval) {mse:.4g} final ma {ma[-1]:.4g}", flush=True)
def ma(x): return np.convolve(x, np.ones(50)/50, "valid")
a, b = ma(res[("torch","amp_bfloat16")]), ma(res[("jax","amp_bfloat16")])
print("first 20 steps max rel", np.max(np.abs(res[("torch","amp_bfloat16")][:20]-res[("jax","amp_bfloat16")][:20])/res[("torch","float32")][:20]))
print("ma max abs diff", np.max(np.abs(a-b)), "ma max log ratio", np.max(np.abs(np.log(a/b))))
a32, b32 = ma(res[("torch","float32")]), ma(res[("jax","float32")])
print("fp32 ma max log ratio", np.max(np.abs(np.log(a32/b32))), "first20 rel", np.max(np.abs(res[("torch","float32")][:20]-res[("jax","float32")][:20])/res[("torch","float32")][:20]))

"""The workloads every measurement is made on, shared by the study and the asv suites.

A workload fixes the sizes of one timed problem: sequence length T, batch B, input size
I and hidden size H (one layer, one direction, float32).  The FLOPs of one forward pass
are those of `RNNSpec.flops`, ``2*T*B*G*H*(I+H)`` (G = 4 for LSTM, 3 for GRU).

Profiles:
- ``quick``: tiny, for CI smoke runs (seconds);
- ``cpu``: S1 ``T=100,B=64,I=256,H=512`` (the GRU seed's configuration), S2
  ``T=100,B=1,I=256,H=256`` (latency), S3 ``T=1000,B=16,I=128,H=128`` (long sequences);
- ``gpu``: a DeepBench subset (H 512-2048, B 16-128, T 25-1500).

Sweeps (for the time-vs-T and time-vs-B plots) vary one size of a base workload.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from ..spec import RNNSpec


@dataclass(frozen=True)
class Workload:
    """The sizes of one timed problem.

    `packed`: the batch is a packed one of variable lengths (drawn from the seed between T/4
    and T, `lengths`), where packing, masking and the fused kernels part ways.  FLOPs and the
    GEMM roof count the full T (an upper bound); the roof is measured for single-layer
    unidirectional workloads only.
    """

    name: str
    seq_len: int
    batch: int
    input_size: int
    hidden_size: int
    num_layers: int = 1
    bidirectional: bool = False
    packed: bool = False

    def spec(self, cell: str) -> RNNSpec:
        return RNNSpec(cell, self.input_size, self.hidden_size, num_layers=self.num_layers,
                       bidirectional=self.bidirectional)

    @property
    def has_roof(self) -> bool:
        return self.num_layers == 1 and not self.bidirectional

    def lengths(self, seed: int = 0):
        """The packed batch's lengths (None when not packed), from `seed`: between T/4 and T, one at T."""
        if not self.packed:
            return None
        import numpy as np
        rng = np.random.default_rng(seed + 1)
        lengths = rng.integers(max(1, self.seq_len // 4), self.seq_len + 1, size=self.batch)
        lengths[0] = self.seq_len
        return lengths

    def flops(self, cell: str) -> int:
        """Forward FLOPs (the train step counts 3x: forward, and two GEMMs per GEMM in backward)."""
        return self.spec(cell).flops(self.seq_len, self.batch)

    def step_gemm(self, cell: str) -> tuple[int, int, int]:
        """(M, K, N) of the recurrent GEMM of one step: (B, H) x (H, G*H)."""
        return self.batch, self.hidden_size, self.spec(cell).num_gates * self.hidden_size

    def input_gemm(self, cell: str) -> tuple[int, int, int]:
        """(M, K, N) of the input projection hoisted over all steps: (T*B, I) x (I, G*H)."""
        return self.seq_len * self.batch, self.input_size, self.spec(cell).num_gates * self.hidden_size

    def describe(self) -> str:
        extra = (f",L={self.num_layers}" if self.num_layers > 1 else "") + (",bidirectional" if self.bidirectional
                                                                            else "") + (",packed" if self.packed else "")
        return f"T={self.seq_len},B={self.batch},I={self.input_size},H={self.hidden_size}{extra}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Workload":
        return cls(**{k: d[k] for k in ("name", "seq_len", "batch", "input_size", "hidden_size")},
                   **{k: d[k] for k in ("num_layers", "bidirectional", "packed") if k in d})


QUICK = [Workload("quick", seq_len=8, batch=4, input_size=16, hidden_size=32)]

CPU = [
    Workload("S1", seq_len=100, batch=64, input_size=256, hidden_size=512),
    Workload("S2", seq_len=100, batch=1, input_size=256, hidden_size=256),
    Workload("S3", seq_len=1000, batch=16, input_size=128, hidden_size=128),
    # a sequence model as people train one: 2 layers, bidirectional, a packed batch of variable lengths
    Workload("R1", seq_len=100, batch=32, input_size=128, hidden_size=256, num_layers=2, bidirectional=True,
             packed=True),
]

# DeepBench's RNN training/inference shapes (Baidu DeepBench, rnn_*.cpp), a subset that
# spans its H, B and T ranges.
GPU = [
    Workload("DB-H512-B16-T25", seq_len=25, batch=16, input_size=512, hidden_size=512),
    Workload("DB-H512-B64-T150", seq_len=150, batch=64, input_size=512, hidden_size=512),
    Workload("DB-H1024-B32-T1500", seq_len=1500, batch=32, input_size=1024, hidden_size=1024),
    Workload("DB-H1536-B128-T50", seq_len=50, batch=128, input_size=1536, hidden_size=1536),
    Workload("DB-H2048-B32-T25", seq_len=25, batch=32, input_size=2048, hidden_size=2048),
    Workload("DB-H2048-B128-T375", seq_len=375, batch=128, input_size=2048, hidden_size=2048),
]

PROFILES: dict[str, list[Workload]] = {"quick": QUICK, "cpu": CPU, "gpu": GPU}

# Sweeps for the plots.  "small" fits the default study's time budget on two cores;
# "full" spans T = 25..1000 and B = 1..256 more densely (opt-in: --sweeps full).
_SWEEP_VALUES = {
    "small": {"seq_len": (25, 100, 400, 1000), "batch": (1, 16, 64, 256)},
    "full": {"seq_len": (25, 50, 100, 200, 400, 1000), "batch": (1, 4, 16, 64, 128, 256)},
}
SWEEP_LEVELS = ("none", *_SWEEP_VALUES)


def sweep(kind: str, level: str = "small") -> list[Workload]:
    """Workloads varying T (kind="seq_len", at B=16, I=H=128) or B (kind="batch", at T=100, I=H=256)."""
    if level not in _SWEEP_VALUES:
        raise ValueError(f"sweep level must be one of {', '.join(_SWEEP_VALUES)}, got {level!r}")
    if kind == "seq_len":
        return [Workload(f"T{t}", seq_len=t, batch=16, input_size=128, hidden_size=128)
                for t in _SWEEP_VALUES[level]["seq_len"]]
    if kind == "batch":
        return [Workload(f"B{b}", seq_len=100, batch=b, input_size=256, hidden_size=256)
                for b in _SWEEP_VALUES[level]["batch"]]
    raise ValueError(f"sweep kind must be 'seq_len' or 'batch', got {kind!r}")


def all_named() -> dict[str, Workload]:
    """Every named workload of every profile and sweep, by name."""
    out: dict[str, Workload] = {}
    for group in PROFILES.values():
        out.update({w.name: w for w in group})
    for kind in ("seq_len", "batch"):
        out.update({w.name: w for w in sweep(kind, "full")})
        out.update({w.name: w for w in sweep(kind, "small")})
    return out


def resolve(names: list[str] | str) -> list[Workload]:
    """Workloads from names and/or profile names ("S1,S2", "quick", "cpu", ...), in order."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    known = all_named()
    out: list[Workload] = []
    for name in names:
        if name in PROFILES:
            picked = PROFILES[name]
        elif name in known:
            picked = [known[name]]
        else:
            raise ValueError(f"unknown workload {name!r}; valid: profiles {', '.join(PROFILES)} "
                             f"or names {', '.join(known)}")
        out.extend(w for w in picked if w not in out)
    return out


def profile_from_env(default: str = "cpu") -> tuple[str, list[Workload]]:
    """The asv profile chosen by RNNBENCH_PROFILE (quick, cpu or gpu)."""
    name = os.environ.get("RNNBENCH_PROFILE", default)
    if name not in PROFILES:
        raise ValueError(f"RNNBENCH_PROFILE must be one of {', '.join(PROFILES)}, got {name!r}")
    return name, PROFILES[name]

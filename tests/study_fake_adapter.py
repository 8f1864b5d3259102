"""Fake adapters for tests/study/test_study.py: behaviours the study runner must survive.

`get_adapter(key)` returns an adapter whose workload sleeps (so times are predictable)
and whose `run_case` is the float64 reference itself (exact parity), except:
- "slow": 3x the time of "native";
- "wrong": parity off by 1e-3;
- "crash": the process aborts (SIGABRT) on the first forward;
- "raise": the first forward raises RuntimeError;
- "hang": the first forward never returns;
- "hog": the first forward keeps allocating memory;
- "linger": the first forward of the first process to get there (across processes and nodes:
  an O_EXCL file RNNBENCH_TEST_LINGER) writes its node and pid into that file and sleeps
  a minute, so that a test can remove the node under it; every other one runs as "native".
Any cell but lstm and gru (a custom cell) takes 2x the time of its plain cell.
Only tests use this module (via a monkeypatched registry row's adapter_path).
"""

from __future__ import annotations

import os
import time

import numpy as np

from rnnbench import reference
from rnnbench.core.capabilities import Capabilities

BASE_S = 0.004


class FakeWorkload:
    def __init__(self, key: str, scale: float):
        self.key, self.scale = key, scale
        self.hoard = []

    def _misbehave(self):
        if self.key == "crash":
            os.abort()
        if self.key == "raise":
            raise RuntimeError("the fake implementation refuses")
        if self.key == "hang":
            while True:
                time.sleep(1)
        if self.key == "linger" and os.environ.get("RNNBENCH_TEST_LINGER"):
            try:
                fd = os.open(os.environ["RNNBENCH_TEST_LINGER"], os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return
            os.write(fd, f"{os.environ.get('RNNBENCH_NODE_ID', '')} {os.getpid()}".encode())
            os.close(fd)
            time.sleep(60)
        if self.key == "hog":
            while True:
                self.hoard.append(np.ones(2**25))  # 256 MiB a step, touched
                time.sleep(0.02)

    def forward(self):
        self._misbehave()
        time.sleep(BASE_S * self.scale)

    def train_step(self):
        time.sleep(3 * BASE_S * self.scale)


class FakeAdapter:
    framework = "fake"
    capabilities = Capabilities()

    def __init__(self, key: str):
        self.key = key

    def unavailable_reason(self, device="cpu"):
        if self.key == "absent":
            return "the fake 'absent' implementation is never available"
        return None if device == "cpu" else f"fake runs only on cpu, not {device}"

    def unsupported_reason(self, spec, *, lengths=False, dtype="float64", device=None):
        return None

    def run_case(self, spec, params, x, h0=None, c0=None, lengths=None, cotangents=None, *,
                 dtype="float64", device="cpu"):
        out = reference.run_case(spec, params, x, h0, c0, lengths, cotangents)
        if self.key == "wrong":
            out = {k: np.asarray(v) + 1e-3 for k, v in out.items()}
        return out

    def make_workload(self, spec, *, seq_len, batch, dtype="float32", device="cpu", seed=0, lengths=None,
                      checked=False):
        custom = 2.0 if spec.cell not in ("lstm", "gru") else 1.0
        return FakeWorkload(self.key, (3.0 if self.key == "slow" else 1.0) * custom)


def get_adapter(key: str) -> FakeAdapter:
    return FakeAdapter(key)

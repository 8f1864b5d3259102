"""Deterministic sequence tasks for identical training runs in PyTorch and JAX (NumPy only).

Both frameworks train on the very same batches: batch `k` of a task is a pure function
of `(seed, k)` (a NumPy `Generator` seeded with `[seed, k]`), so it does not depend on
the order in which batches are drawn or on which framework draws them.

Every batch is a `Batch`: `x` time-major `(T, B, input_size)` float64, `y` `(B, 1)`
float64 targets, `lengths` `(B,)` int64 or None (all sequences full length).  Models
read their prediction from the output at each sequence's last valid step.

Tasks:

- `AddingProblem` (Hochreiter & Schmidhuber 1997, in the form of Le et al. 2015 and
  Arjovsky et al. 2016): each step carries a pair (value ~ U(0, 1), marker in {0, 1});
  exactly two steps are marked, one in each half of the sequence; the target is the sum
  of the two marked values.  Predicting the mean, 1.0, scores MSE = Var(U1 + U2) =
  2/12 = 0.1667; a model has learned the task when its MSE is far below that.
- `SineForecast`: each sequence is `A*sin(w*t + phi)` for t = 0 .. L-1 with random
  amplitude, angular frequency, phase and length L in [min_length, T] (zero-padded to
  T); the target is the next value, `A*sin(w*L + phi)`.  Variable lengths make the
  training runs exercise packed-sequence semantics in every implementation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Batch", "AddingProblem", "SineForecast", "TASKS", "make_task", "TrainConfig", "TrainResult",
           "relative_difference"]


@dataclass(frozen=True)
class Batch:
    x: np.ndarray  # (T, B, input_size), float64, time-major
    y: np.ndarray  # (B, 1), float64
    lengths: np.ndarray | None  # (B,) int64 in [1, T], or None when every sequence has length T

    @property
    def seq_len(self) -> int:
        return self.x.shape[0]

    @property
    def batch_size(self) -> int:
        return self.x.shape[1]

    def last_index(self) -> np.ndarray:
        """(B,) index of each sequence's last valid step."""
        if self.lengths is None:
            return np.full(self.batch_size, self.seq_len - 1, dtype=np.int64)
        return self.lengths - 1


def _check_positive_int(name: str, value, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


class _Task:
    name: str
    input_size: int
    seq_len: int
    seed: int

    def _rng(self, index: int) -> np.random.Generator:
        _check_positive_int("batch index", index, minimum=0)
        return np.random.default_rng([self.seed, int(index)])

    def batch(self, index: int, batch_size: int) -> Batch:
        """Batch number `index` (a pure function of the seed and the index)."""
        _check_positive_int("batch_size", batch_size)
        return self._make(self._rng(index), batch_size)

    def batches(self, count: int, batch_size: int, start: int = 0) -> list[Batch]:
        """Batches `start .. start+count-1`."""
        _check_positive_int("count", count, minimum=0)
        return [self.batch(start + k, batch_size) for k in range(count)]

    def _make(self, rng: np.random.Generator, batch_size: int) -> Batch:
        raise NotImplementedError  # each task defines how a batch is drawn

    @property
    def baseline_mse(self) -> float:
        """MSE of the best constant prediction (what a model that learned nothing scores)."""
        raise NotImplementedError  # each task knows its own baseline


class AddingProblem(_Task):
    """The adding problem at `seq_len` steps (default 50); input_size 2 (value, marker)."""

    name = "adding"
    input_size = 2

    def __init__(self, seq_len: int = 50, seed: int = 0):
        _check_positive_int("seq_len", seq_len, minimum=2)  # one marker per half
        self.seq_len = int(seq_len)
        self.seed = int(seed)

    def _make(self, rng, batch_size):
        T, B = self.seq_len, batch_size
        values = rng.uniform(0.0, 1.0, size=(T, B))
        half = T // 2
        first = rng.integers(0, half, size=B)  # one marker in the first half ...
        second = rng.integers(half, T, size=B)  # ... and one in the second
        markers = np.zeros((T, B))
        cols = np.arange(B)
        markers[first, cols] = 1.0
        markers[second, cols] = 1.0
        x = np.stack([values, markers], axis=-1)
        y = (values[first, cols] + values[second, cols])[:, None]
        return Batch(x=x, y=y, lengths=None)

    @property
    def baseline_mse(self) -> float:
        return 2.0 / 12.0  # Var(U(0,1) + U(0,1)); the best constant is the mean, 1.0


class SineForecast(_Task):
    """Predict the next value of a sine wave seen for a variable number of steps; input_size 1."""

    name = "sine"
    input_size = 1

    def __init__(self, seq_len: int = 40, seed: int = 0, min_length: int | None = None):
        _check_positive_int("seq_len", seq_len, minimum=2)
        self.seq_len = int(seq_len)
        self.min_length = int(min_length) if min_length is not None else max(1, self.seq_len // 2)
        if not 1 <= self.min_length <= self.seq_len:
            raise ValueError(f"min_length must be in [1, seq_len={self.seq_len}], got {min_length!r}")
        self.seed = int(seed)

    def _make(self, rng, batch_size):
        T, B = self.seq_len, batch_size
        amplitude = rng.uniform(0.5, 1.0, size=B)
        omega = rng.uniform(0.1, 0.6, size=B)  # at least ~10 samples per period
        phase = rng.uniform(0.0, 2 * np.pi, size=B)
        lengths = rng.integers(self.min_length, T + 1, size=B).astype(np.int64)
        t = np.arange(T)[:, None]
        wave = amplitude * np.sin(omega * t + phase)
        x = np.where(t < lengths[None, :], wave, 0.0)[..., None]  # zero past each length
        y = (amplitude * np.sin(omega * lengths + phase))[:, None]
        return Batch(x=x, y=y, lengths=lengths)

    @property
    def baseline_mse(self) -> float:
        return 0.5 * (0.5 ** 2 + 0.5 * 1.0 + 1.0 ** 2) / 3.0  # E[A^2]/2 with A ~ U(0.5, 1); best constant 0


TASKS = {"adding": AddingProblem, "sine": SineForecast}


def make_task(name: str, **kwargs) -> _Task:
    """A task by name ("adding" or "sine"), with its constructor arguments."""
    try:
        cls = TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(TASKS)}") from None
    return cls(**kwargs)


# ---- one training configuration, shared by rnnbench.torch.train and rnnbench.jax.train ----------

OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run except the framework and implementation.

    Model: the RNN of `spec()` followed by a linear head on each direction's final output
    (forward: the output at each sequence's last valid step; reverse, when bidirectional:
    the output at step 0, where that direction ends), trained on `mean((head - y)^2)`.  Optimizer "sgd" is SGD with
    heavy-ball momentum (torch.optim.SGD / optax.sgd: buf = momentum*buf + g,
    p -= lr*buf); "adam" is Adam (torch.optim.Adam / optax.adam: eps added to
    sqrt(v_hat), outside the square root, on both sides).  Before each update the
    gradients are clipped to global norm `clip_norm` with PyTorch's formula
    g *= min(1, clip_norm / (||g|| + 1e-6)) (see rnnbench.jax.train for why optax needs the
    same 1e-6).  Batch k is `task.batch(k, batch_size)`.
    """

    task: str = "adding"
    seq_len: int = 50
    cell: str = "lstm"
    hidden_size: int = 8
    num_layers: int = 1
    bidirectional: bool = False
    batch_first: bool = False
    bias: bool = True
    batch_size: int = 16
    steps: int = 100
    optimizer: str = "adam"
    lr: float = 1e-2
    momentum: float = 0.9
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    clip_norm: float = 1.0
    seed: int = 0
    init: str = "pytorch"  # rnnbench.core.params.init_params scheme

    def __post_init__(self):
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if not self.clip_norm > 0:
            raise ValueError(f"clip_norm must be > 0, got {self.clip_norm!r}")
        make_task(self.task, seq_len=self.seq_len, seed=self.seed)  # validates task and seq_len
        self.spec()  # validates the RNN sizes

    def make_task(self) -> _Task:
        return make_task(self.task, seq_len=self.seq_len, seed=self.seed)

    def spec(self):
        from .spec import RNNSpec
        return RNNSpec(self.cell, TASKS[self.task].input_size, self.hidden_size, num_layers=self.num_layers,
                       bidirectional=self.bidirectional, batch_first=self.batch_first, bias=self.bias)

    def initial_params(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """(canonical RNN params, head params {"weight": (1, F), "bias": (1,)}), float64.

        The head is initialised like `nn.Linear`: U(-1/sqrt(F), 1/sqrt(F)), F = output size.
        """
        from .params import init_params
        spec = self.spec()
        rng = np.random.default_rng([self.seed, 2**31 - 1])  # a stream no batch index uses
        rnn = init_params(spec, rng, scheme=self.init)
        k = 1.0 / np.sqrt(spec.output_size)
        head = {"weight": rng.uniform(-k, k, size=(1, spec.output_size)),
                "bias": rng.uniform(-k, k, size=(1,))}
        return rnn, head

    def to_dict(self) -> dict:
        from dataclasses import asdict
        return asdict(self)


@dataclass
class TrainResult:
    """What one training run records, step by step (index k = before the k-th update)."""

    framework: str
    impl: str
    dtype: str
    losses: np.ndarray  # (steps,) training loss on batch k, before update k
    grad_norms: np.ndarray  # (steps,) global gradient norm before clipping
    clipped: np.ndarray  # (steps,) bool: whether clipping scaled the gradients
    seconds: float  # wall time of the whole run, first-call compilation included
    params: dict[str, np.ndarray] | None = None  # final canonical RNN params (float64)
    head: dict[str, np.ndarray] | None = None  # final head params (float64)

    @property
    def name(self) -> str:
        return f"{self.framework}.{self.impl}"


def relative_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| / max(|a|, |b|) elementwise (0 where both are 0)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    scale = np.maximum(np.abs(a), np.abs(b))
    return np.where(scale > 0, np.abs(a - b) / np.where(scale > 0, scale, 1.0), 0.0)

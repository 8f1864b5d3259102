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

A user's own model is a spec, `parse_spec("T=200,B=32,I=512,H=768,layers=2,bidirectional,lengths=T/4..T")`;
`resolve` takes specs (separated by ";") and files of them ("@models.txt") beside the names.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from rnnbench.core.spec import RNNSpec


@dataclass(frozen=True)
class Workload:
    """The sizes of one timed problem.

    `packed`: the batch is a packed one of variable lengths (drawn from the seed between
    `min_length` (default T/4) and T, `lengths`), where packing, masking and the fused kernels
    part ways.  FLOPs and the GEMM roof count the full T (an upper bound); the roof is measured
    for single-layer unidirectional workloads only.
    """

    name: str
    seq_len: int
    batch: int
    input_size: int
    hidden_size: int
    num_layers: int = 1
    bidirectional: bool = False
    packed: bool = False
    min_length: int | None = None  # the shortest length of a packed batch; None: T/4

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
        lengths = rng.integers(self.shortest, self.seq_len + 1, size=self.batch)
        lengths[0] = self.seq_len
        return lengths

    @property
    def shortest(self) -> int:
        """The lower end of a packed batch's lengths."""
        return self.min_length or max(1, self.seq_len // 4)

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
        if self.packed and self.min_length:
            extra += f" {self.shortest}..{self.seq_len}"
        return f"T={self.seq_len},B={self.batch},I={self.input_size},H={self.hidden_size}{extra}"

    def to_spec(self) -> str:
        """The spec `parse_spec` reads back into this workload."""
        parts = [f"T={self.seq_len}", f"B={self.batch}", f"I={self.input_size}", f"H={self.hidden_size}"]
        if self.num_layers != 1:
            parts.append(f"layers={self.num_layers}")
        if self.bidirectional:
            parts.append("bidirectional")
        if self.packed:
            parts.append(f"lengths={self.shortest}..T")
        return ",".join(parts + [f"name={self.name}"])

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["min_length"] is None:
            del d["min_length"]  # the built-in workloads' records stay as they were
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Workload":
        return cls(**{k: d[k] for k in ("name", "seq_len", "batch", "input_size", "hidden_size")},
                   **{k: d[k] for k in ("num_layers", "bidirectional", "packed", "min_length") if k in d})


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
    """Workloads from names, profile names, specs and spec files, in order.

    A string is split at ";" into parts: "@FILE" reads a file of specs (`read_spec_file`), a
    part with "=" is one spec (`parse_spec`), any other part is comma-separated names ("S1,S2",
    "quick", "cpu", ...).  "S1;T=200,B=32,I=512,H=768;@models.txt" is all three.
    """
    parts = [p.strip() for p in names.split(";")] if isinstance(names, str) else [n.strip() for n in names]
    known = all_named()
    out: list[Workload] = []

    def add(picked):
        for w in picked:
            clash = next((o for o in out if o.name == w.name and o != w), None)
            if clash:
                raise WorkloadSpecError(f"two workloads are named {w.name!r} ({clash.to_spec()} and {w.to_spec()}): "
                                        "give one another name=")
            if w not in out:
                out.append(w)

    for part in filter(None, parts):
        if part.startswith("@"):
            add(read_spec_file(part[1:]))
        elif "=" in part:
            add([parse_spec(part)])
        else:
            for name in filter(None, (n.strip() for n in part.split(","))):
                if name in PROFILES:
                    add(PROFILES[name])
                elif name in known:
                    add([known[name]])
                else:
                    raise ValueError(f"unknown workload {name!r}; valid: profiles {', '.join(PROFILES)}, "
                                     f"names {', '.join(known)}, a spec such as \"{SPEC_EXAMPLE}\" or @FILE of specs")
    return out


# ---- a user's own model as a workload ------------------------------------------------------
SPEC_EXAMPLE = "T=200,B=32,I=512,H=768,layers=2,bidirectional,lengths=T/4..T"
# field -> (Workload attribute, what it is); T, B, I and H are required
SPEC_FIELDS = {"T": ("seq_len", "sequence length"), "B": ("batch", "batch size"), "I": ("input_size", "input size"),
               "H": ("hidden_size", "hidden size"), "layers": ("num_layers", "stacked layers"),
               "bidirectional": ("bidirectional", "a flag (or =true/false)"),
               "lengths": ("min_length", "LO..T: a packed batch of lengths between LO and T, LO an integer or T/k"),
               "name": ("name", "the name in the report (default from the sizes)")}
REQUIRED = ("T", "B", "I", "H")
# Beyond these a measurement takes minutes to hours and gigabytes: a typo, not a model.
LIMITS = {"T": 100_000, "B": 65_536, "I": 65_536, "H": 65_536, "layers": 64}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,47}")  # no "|", "#", ",", ";": they separate keys and lists
_TRUE, _FALSE = ("", "1", "true", "yes", "on"), ("0", "false", "no", "off")


class WorkloadSpecError(ValueError):
    """A workload spec that cannot be measured; the message names the field and what it takes."""


def _int_field(spec: str, field: str, text: str) -> int:
    if not re.fullmatch(r"\d+", text):
        raise WorkloadSpecError(f"workload {spec!r}: {field} must be a positive integer "
                                f"({SPEC_FIELDS[field][1]}), got {text!r}")
    value = int(text)
    if not 1 <= value <= LIMITS[field]:
        raise WorkloadSpecError(f"workload {spec!r}: {field}={value} is out of range 1..{LIMITS[field]}")
    return value


def _lengths(spec: str, text: str, seq_len: int) -> int | None:
    """The lower end LO of "lengths=LO..T" (LO: an integer, T/k or T): a packed batch of lengths
    between LO and T; None for "lengths=T" (every sequence of length T: a plain batch)."""
    lo, dots, hi = (s.strip() for s in text.partition(".."))
    if not dots:
        if lo in ("T", str(seq_len)):
            return None
        raise WorkloadSpecError(f"workload {spec!r}: lengths must be LO..T (e.g. lengths=T/4..T), or T for "
                                f"equal lengths; got {text!r}")
    if hi not in ("T", str(seq_len)):
        raise WorkloadSpecError(f"workload {spec!r}: lengths: the upper end must be T (the padded length, "
                                f"{seq_len}), got {hi!r}")
    m = re.fullmatch(r"T/(\d+)", lo)
    if lo == "T":
        value = seq_len
    elif m:
        if int(m.group(1)) < 1:
            raise WorkloadSpecError(f"workload {spec!r}: lengths: T/k needs k >= 1, got {lo!r}")
        value = max(1, seq_len // int(m.group(1)))
    elif re.fullmatch(r"\d+", lo):
        value = int(lo)
    else:
        raise WorkloadSpecError(f"workload {spec!r}: lengths: the lower end must be an integer or T/k, got {lo!r}")
    if not 1 <= value <= seq_len:
        raise WorkloadSpecError(f"workload {spec!r}: lengths: the lower end must lie in 1..T ({seq_len}), "
                                f"got {value}")
    return value


def parse_spec(spec: str) -> Workload:
    """A workload from "T=200,B=32,I=512,H=768[,layers=2][,bidirectional][,lengths=T/4..T][,name=NAME]".

    Raises WorkloadSpecError naming the bad field: an unknown or repeated field, a missing T,
    B, I or H, a size that is not a positive integer or is out of range, lengths that are not
    LO..T, a name with characters that separate keys and lists.  A name that is a built-in
    workload's must describe that same workload.
    """
    text = spec.strip()
    fields: dict[str, str] = {}
    for item in text.split(","):
        key, eq, value = (s.strip() for s in item.partition("="))
        if not key:
            raise WorkloadSpecError(f"workload {text!r}: an empty field (two commas, or a trailing comma)")
        if key not in SPEC_FIELDS:
            hint = (f"; separate names and specs with ';' ({key};T=...)" if key in all_named() or key in PROFILES
                    else "")
            raise WorkloadSpecError(f"workload {text!r}: unknown field {key!r}; valid: "
                                    + ", ".join(SPEC_FIELDS) + f" (e.g. {SPEC_EXAMPLE}){hint}")
        if key in fields:
            raise WorkloadSpecError(f"workload {text!r}: {key} is given twice")
        if not eq and key != "bidirectional":
            raise WorkloadSpecError(f"workload {text!r}: {key} needs a value ({key}=...: {SPEC_FIELDS[key][1]})")
        fields[key] = value
    missing = [k for k in REQUIRED if k not in fields]
    if missing:
        raise WorkloadSpecError(f"workload {text!r}: missing {', '.join(missing)} (T, B, I and H are required, "
                                f"e.g. {SPEC_EXAMPLE})")
    sizes = {SPEC_FIELDS[k][0]: _int_field(text, k, fields[k]) for k in (*REQUIRED, "layers") if k in fields}
    flag = fields.get("bidirectional", "false").lower()
    if flag not in _TRUE + _FALSE:
        raise WorkloadSpecError(f"workload {text!r}: bidirectional is a flag (or bidirectional=true/false), "
                                f"got {fields['bidirectional']!r}")
    min_length = _lengths(text, fields["lengths"], sizes["seq_len"]) if "lengths" in fields else None
    packed = min_length is not None
    if min_length == max(1, sizes["seq_len"] // 4):
        min_length = None  # the default lower end: the same workload as R1's kind
    w = Workload("", **sizes, bidirectional=flag in _TRUE, packed=packed, min_length=min_length)
    name = fields.get("name") or default_name(w)
    if not _NAME.fullmatch(name):
        raise WorkloadSpecError(f"workload {text!r}: name {name!r} must be 1-48 letters, digits and _.+- "
                                "(starting with a letter or digit)")
    w = replace(w, name=name)
    builtin = all_named().get(name)
    if builtin is not None and builtin != w:
        raise WorkloadSpecError(f"workload {text!r}: name={name} is the built-in workload {builtin.to_spec()}; "
                                "choose another name")
    return w


def default_name(w: Workload) -> str:
    """A name from the sizes: T200-B32-I512-H768[-L2][-bi][-len50]."""
    return (f"T{w.seq_len}-B{w.batch}-I{w.input_size}-H{w.hidden_size}" + (f"-L{w.num_layers}" if w.num_layers > 1
                                                                          else "")
            + ("-bi" if w.bidirectional else "") + (f"-len{w.shortest}" if w.packed else ""))


def read_spec_file(path: str | os.PathLike) -> list[Workload]:
    """The workloads of a file: one spec or comma-separated names a line; "#" starts a comment."""
    p = Path(path).expanduser()
    try:
        text = p.read_text()
    except OSError as e:
        raise WorkloadSpecError(f"workload file {str(path)!r}: {e.strerror or e}") from None
    out: list[Workload] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("@"):
            raise WorkloadSpecError(f"{p}:{number}: a workload file cannot include another ({line})")
        try:
            picked = resolve([line]) if "=" not in line else [parse_spec(line)]
        except ValueError as e:
            raise WorkloadSpecError(f"{p}:{number}: {e}") from None
        out.extend(w for w in picked if w not in out)
    if not out:
        raise WorkloadSpecError(f"workload file {str(path)!r} holds no workload")
    return out


def profile_from_env(default: str = "cpu") -> tuple[str, list[Workload]]:
    """The asv profile chosen by RNNBENCH_PROFILE (quick, cpu or gpu)."""
    name = os.environ.get("RNNBENCH_PROFILE", default)
    if name not in PROFILES:
        raise ValueError(f"RNNBENCH_PROFILE must be one of {', '.join(PROFILES)}, got {name!r}")
    return name, PROFILES[name]

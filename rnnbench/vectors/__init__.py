"""The shared test vectors: small seeded cases of every catalogue cell with float64 reference results.

Every implementation is checked against the same cases.  Each case is one `.npz` file in
this folder, listed in `manifest.json` with its configuration, seed, tags, the sha256 of
the file and the tolerances.  The loader verifies every file's sha256 before use.

    from rnnbench.vectors import load_cases, load_case
    for case in load_cases(cell="lstm", tags=["lengths"]):
        got = adapter.run_case(case.spec, case.params, **case.inputs(), cotangents=case.cotangents)
        assert_close({**case.expected, **case.grads}, got, "float64", spec=case.spec, x=case.x)

Keys of each `.npz` (float64; `lengths` int64): "x", "h0", "c0", "lengths" (each only
when the case has it), "param/<name>", "out/output", "out/h_n", "out/c_n", "cot/output",
"cot/h_n", "cot/c_n", "grad/x", "grad/h0", "grad/c0" (only with h0/c0),
"grad/<param name>" ("c_n"/"c0" entries only for LSTM-family cells; a custom cell's
extra parameters are "param/<prefix>_l{k}[_reverse]" like the others).  `x`, `h0`, `c0`, `lengths` and
the results follow `rnnbench.core.adapter`'s conventions (x in the spec's layout).

Regenerate with `python -m rnnbench.vectors` (or `make vectors`); verify with
`python -m rnnbench.vectors --check`.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rnnbench.core.catalogue import CELL_DEFS
from rnnbench.core.spec import RNNSpec

VECTORS_DIR = Path(__file__).resolve().parent
MANIFEST_NAME = "manifest.json"

__all__ = ["Case", "VectorsError", "UnknownCaseError", "load_cases", "load_case", "case_names",
           "load_manifest", "VECTORS_DIR"]


class VectorsError(RuntimeError):
    """A vector file or the manifest is missing, corrupt or inconsistent."""


class UnknownCaseError(KeyError):
    def __str__(self):  # KeyError quotes its message; show it plainly
        return str(self.args[0])


@dataclass(frozen=True)
class Case:
    """One test vector: a configuration, its inputs, and the float64 reference results.

    `expected` holds "output", "h_n" (and "c_n" for LSTM); `grads` holds "grad/x",
    "grad/h0"/"grad/c0" (when the case has an initial state) and "grad/<param name>" —
    the keys `Adapter.run_case` returns.
    """

    name: str
    spec: RNNSpec
    seed: int
    tags: tuple[str, ...]
    x: np.ndarray = field(repr=False)
    h0: np.ndarray | None = field(repr=False)
    c0: np.ndarray | None = field(repr=False)
    lengths: np.ndarray | None = field(repr=False)
    params: dict[str, np.ndarray] = field(repr=False)
    cotangents: dict[str, np.ndarray] = field(repr=False)
    expected: dict[str, np.ndarray] = field(repr=False)
    grads: dict[str, np.ndarray] = field(repr=False)
    tolerances: dict[str, float] = field(default_factory=dict, repr=False)

    def inputs(self) -> dict:
        """Keyword arguments x, h0, c0, lengths for `run_case`."""
        return dict(x=self.x, h0=self.h0, c0=self.c0, lengths=self.lengths)

    @property
    def results(self) -> dict[str, np.ndarray]:
        """`expected` and `grads` together: everything `run_case` with cotangents returns."""
        return {**self.expected, **self.grads}


def _directory(directory) -> Path:
    return VECTORS_DIR if directory is None else Path(directory)


def load_manifest(directory=None) -> dict:
    """The parsed manifest.json; raises VectorsError if it is missing or unreadable."""
    path = _directory(directory) / MANIFEST_NAME
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise VectorsError(f"{path} is missing; regenerate the vectors with `python -m rnnbench.vectors`") from None
    except (OSError, json.JSONDecodeError) as e:
        raise VectorsError(f"{path} cannot be read ({e}); regenerate with `python -m rnnbench.vectors`") from e
    if not isinstance(manifest, dict) or not isinstance(manifest.get("cases"), dict):
        raise VectorsError(f"{path} has no 'cases' table; regenerate with `python -m rnnbench.vectors`")
    return manifest


def read_arrays(directory, name: str, entry: dict) -> dict[str, np.ndarray]:
    """Read one case's arrays after checking the file's sha256 against the manifest."""
    path = _directory(directory) / entry["file"]
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise VectorsError(f"vector file {path} (case {name!r}) is missing; "
                           "regenerate with `python -m rnnbench.vectors`") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry["sha256"]:
        raise VectorsError(f"vector file {path} (case {name!r}) is corrupt: sha256 {digest} does not "
                           f"match the manifest's {entry['sha256']}; restore it from git or regenerate "
                           "with `python -m rnnbench.vectors`")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except (ValueError, OSError) as e:  # a file whose hash matches but is no npz: a bad manifest
        raise VectorsError(f"vector file {path} (case {name!r}) is not a readable .npz ({e})") from e


def _make_case(name: str, entry: dict, arrays: dict[str, np.ndarray]) -> Case:
    spec = RNNSpec.from_dict(entry["config"])
    try:
        params = {p: arrays[f"param/{p}"] for p in spec.param_shapes()}
        outputs = ("output", "h_n", "c_n") if spec.family == "lstm" else ("output", "h_n")
        expected = {k: arrays[f"out/{k}"] for k in outputs}
        cotangents = {k: arrays[f"cot/{k}"] for k in outputs}
        grad_keys = ["grad/x"] + [k for k in ("grad/h0", "grad/c0") if k[5:] in arrays]
        grad_keys += [f"grad/{p}" for p in params]
        grads = {k: arrays[k] for k in grad_keys}
    except KeyError as e:
        raise VectorsError(f"vector file {entry['file']} (case {name!r}) lacks the array {e.args[0]!r}") from None
    return Case(name=name, spec=spec, seed=int(entry["seed"]), tags=tuple(entry["tags"]), x=arrays["x"],
                h0=arrays.get("h0"), c0=arrays.get("c0"), lengths=arrays.get("lengths"), params=params,
                cotangents=cotangents, expected=expected, grads=grads,
                tolerances=dict(entry.get("tolerances", {})))


def case_names(directory=None) -> list[str]:
    """Names of every case in the manifest, in manifest order."""
    return list(load_manifest(directory)["cases"])


def load_case(name: str, directory=None) -> Case:
    """Load one case by name (verifying its sha256); an unknown name lists the valid ones."""
    cases = load_manifest(directory)["cases"]
    if name not in cases:
        raise UnknownCaseError(f"no vector case named {name!r}; valid names: {', '.join(cases)}")
    entry = cases[name]
    return _make_case(name, entry, read_arrays(directory, name, entry))


def load_cases(cell: str | None = None, tags: str | Iterable[str] | None = None, directory=None) -> list[Case]:
    """Load every case (verifying each sha256), optionally filtered.

    `cell`: a cell name of the catalogue ("lstm", "gru", "ln_lstm", "peephole_lstm",
    "gru_reset_before", ...): only that cell's cases.  `tags`: one tag or several; a case
    is kept when it has all of them (e.g. tags="lengths", tags=["bidirectional",
    "proj_size"], tags="custom_cell" for every custom cell's cases).
    """
    if cell is not None and cell not in CELL_DEFS:
        raise ValueError(f"cell must be one of {tuple(CELL_DEFS)} or None, got {cell!r}")
    wanted = set() if tags is None else ({tags} if isinstance(tags, str) else set(tags))
    cases = load_manifest(directory)["cases"]
    known = {t for entry in cases.values() for t in entry["tags"]}
    if wanted - known:
        raise ValueError(f"unknown tags {sorted(wanted - known)}; known tags: {', '.join(sorted(known))}")
    selected = []
    for name, entry in cases.items():
        if cell is not None and entry["config"]["cell"] != cell:
            continue
        if not wanted <= set(entry["tags"]):
            continue
        selected.append(_make_case(name, entry, read_arrays(directory, name, entry)))
    return selected

"""Build the shared test vectors: the case table, the seeded generator and the checker.

Cases cover lstm and gru (every option alone and combined, and the edges) and the
custom cells of `rnnbench.core.catalogue.CUSTOM_CELLS` (ln_lstm, peephole_lstm, gru_reset_before:
each option alone plus one combined case; their extra parameters perturbed away from
init).  Each case is a small configuration (T <= 7, B <= 4, sizes <= 6) with standard-normal
inputs and cotangents and PyTorch-initialised parameters, all drawn from
`numpy.random.default_rng(seed)` in a fixed order; the expected outputs and gradients
come from the float64 reference (`rnnbench.reference`).  Files are written as
uncompressed zip archives with fixed timestamps and key order, so regenerating on the
same platform gives byte-identical files; across platforms the computed values may
differ in the last bits (BLAS summation order), which is why `check` compares arrays
(inputs exactly, computed values and derived bounds to 1e-12 of their scale) rather
than bytes.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rnnbench import reference
from rnnbench.core.catalogue import CUSTOM_CELLS, STANDARD_CELLS
from rnnbench.core.params import init_params
from rnnbench.core.spec import RNNSpec
from rnnbench.core.tolerances import DTYPES, LAMBDA, UNIT_ROUNDOFF, bounds

from . import MANIFEST_NAME  # noqa: E402  (one name for the loader and the writer)
FORMAT_VERSION = 1
# Values the reference computes may differ by a few ulps across machines (BLAS summation
# order differs between CPUs), so computed arrays and the bounds derived from them are
# compared relative to their scale: |a - b| <= COMPUTED_RTOL * max(1, max|a|).
COMPUTED_RTOL = 1e-12
INPUT_PREFIXES = ("x", "h0", "c0", "lengths", "param/", "cot/")


# LayerNorm's 1/sqrt(var + eps) (2-7 in these cases, three norms a step) amplifies ln_lstm's
# gradients (to ~70 with unit cotangents); float32 implementations compute
# them to ~2e-6 relative, so with unit cotangents they would miss the float32 tolerance
# (2e-5 absolute) for reasons of scale alone.  Cotangents 0.05 N(0, 1) keep every gradient
# below ~1 and torch float32 within 1.3e-6 of the reference (10x under the tolerance).
COTANGENT_SCALE = {"ln_lstm": 0.05}


@dataclass(frozen=True)
class CaseDef:
    """One vector case before generation: the configuration and input sizes."""

    name: str
    spec: RNNSpec
    seq_len: int
    batch: int
    tags: tuple[str, ...]
    initial_state: bool = False
    lengths: tuple[int, ...] | None = None

    @property
    def seed(self) -> int:
        # Stable across Python runs and independent of the case's position in the table.
        return zlib.crc32(self.name.encode())


def _case_table() -> list[CaseDef]:
    """Every option alone and combined, for both cells, plus the edges."""
    cases = []
    for cell in STANDARD_CELLS:
        def add(suffix, tags, T=5, B=3, I=3, H=4, lengths=None, initial_state=False, **spec_kw):
            if lengths is not None:
                B = len(lengths)
            spec = RNNSpec(cell, I, H, **spec_kw)
            cases.append(CaseDef(f"{cell}_{suffix}", spec, T, B, (cell, *tags), initial_state,
                                 None if lengths is None else tuple(lengths)))

        add("default", ["default"])
        add("layers2", ["layers"], num_layers=2)
        add("layers3", ["layers"], num_layers=3)
        add("bidirectional", ["bidirectional"], bidirectional=True)
        add("batch_first", ["batch_first"], batch_first=True)
        add("no_bias", ["no_bias"], bias=False)
        add("initial_state", ["initial_state"], initial_state=True)
        add("lengths_unsorted", ["lengths"], T=6, lengths=[3, 6, 1, 4])
        add("lengths_all_equal", ["lengths"], T=5, lengths=[5, 5, 5])
        add("lengths_bidirectional", ["lengths", "bidirectional"], T=6, lengths=[2, 6, 1, 5],
            bidirectional=True)
        add("lengths_batch_first_initial_state", ["lengths", "batch_first", "initial_state"], T=5,
            lengths=[5, 1, 3], batch_first=True, initial_state=True)
        add("bidirectional_layers2_initial_state", ["bidirectional", "layers", "initial_state"], T=4,
            num_layers=2, bidirectional=True, initial_state=True)
        add("no_bias_bidirectional_batch_first", ["no_bias", "bidirectional", "batch_first"], T=4,
            bias=False, bidirectional=True, batch_first=True)
        add("edge_T1", ["edge"], T=1, initial_state=True)
        add("edge_B1", ["edge"], T=6, B=1, initial_state=True)
        add("edge_H1", ["edge"], H=1, num_layers=2, bidirectional=True)
        add("edge_I1", ["edge"], I=1)
        add("edge_all_ones", ["edge", "lengths"], T=1, I=1, H=1, lengths=[1], initial_state=True)
        add("edge_all_length1", ["edge", "lengths", "bidirectional"], T=4, lengths=[1, 1, 1],
            bidirectional=True)
        all_tags = ["layers", "bidirectional", "batch_first", "no_bias", "initial_state", "lengths"]
        add("layers3_bidirectional_lengths", ["layers", "bidirectional", "lengths", "initial_state"], T=7,
            I=5, H=6, num_layers=3, bidirectional=True, lengths=[4, 7, 1, 6], initial_state=True)
        add("all_options", all_tags, T=6, I=5, H=5, num_layers=2, bidirectional=True, batch_first=True,
            bias=False, lengths=[6, 2, 1, 5], initial_state=True)
        if cell == "lstm":
            add("proj_size", ["proj_size"], H=5, proj_size=3)
            add("proj_size_initial_state", ["proj_size", "initial_state"], H=5, proj_size=2,
                initial_state=True)
            add("proj_size_1", ["proj_size", "edge"], H=4, proj_size=1, num_layers=2)
            add("layers3_bidirectional_proj_size_lengths",
                ["layers", "bidirectional", "proj_size", "lengths", "initial_state"], T=7, I=5, H=6,
                proj_size=3, num_layers=3, bidirectional=True, lengths=[4, 7, 1, 6], initial_state=True)
            add("all_options_proj_size", all_tags + ["proj_size"], T=6, I=5, H=6, proj_size=4, num_layers=2,
                bidirectional=True, batch_first=True, bias=False, lengths=[6, 2, 1, 5], initial_state=True)
    cases += _custom_cell_cases()
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    return cases


def _custom_cell_cases() -> list[CaseDef]:
    """The catalogue's custom cells (rnnbench.core.catalogue.CUSTOM_CELLS), each option alone and combined.

    Tagged with the cell name, "custom_cell" and the feature tags of the standard cases.
    Appended after the standard cases, so adding them left every earlier file unchanged.
    """
    cases = []
    for cell in CUSTOM_CELLS:
        def add(suffix, tags, T=5, B=3, I=3, H=4, lengths=None, initial_state=False, **spec_kw):
            if lengths is not None:
                B = len(lengths)
            cases.append(CaseDef(f"{cell}_{suffix}", RNNSpec(cell, I, H, **spec_kw), T, B,
                                 (cell, "custom_cell", *tags), initial_state,
                                 None if lengths is None else tuple(lengths)))

        add("default", ["default"])
        add("layers2", ["layers"], num_layers=2)
        add("bidirectional", ["bidirectional"], bidirectional=True)
        add("lengths_unsorted", ["lengths"], T=6, lengths=[3, 6, 1, 4])
        add("initial_state", ["initial_state"], initial_state=True)
        add("batch_first", ["batch_first"], batch_first=True)
        add("no_bias", ["no_bias"], bias=False)
        add("bidirectional_layers2_lengths_initial_state",
            ["bidirectional", "layers", "lengths", "initial_state"], T=5, num_layers=2,
            bidirectional=True, lengths=[3, 5, 1, 4], initial_state=True)
    return cases


def perturb_extra_params(spec: RNNSpec, params: dict, rng: np.random.Generator) -> None:
    """Move a cell's extra parameters away from their init, in place, so their gradients
    (and the terms they scale) are exercised: every entry += 0.3 * N(0, 1), i.e. LayerNorm
    gains 1 + 0.3 N(0, 1), LayerNorm biases 0.3 N(0, 1), peepholes U(-k, k) + 0.3 N(0, 1).
    Draws nothing for cells without extras (the standard cells' vectors are unchanged)."""
    for extra in spec.cell_def.extra_params:
        for layer, direction in spec.layers_and_directions():
            name = f"{extra.prefix}_{spec.suffix(layer, direction)}"
            params[name] = params[name] + 0.3 * rng.standard_normal(params[name].shape)


CASES: tuple[CaseDef, ...] = tuple(_case_table())


def case_def(name: str) -> CaseDef:
    for case in CASES:
        if case.name == name:
            return case
    raise KeyError(f"no vector case named {name!r}; valid names: {', '.join(c.name for c in CASES)}")


def build_arrays(case: CaseDef) -> dict[str, np.ndarray]:
    """All arrays of one case, in the fixed key order of the .npz file.

    Draw order from default_rng(seed): params (init_params, PyTorch scheme), the
    perturbation of a custom cell's extra parameters (none for lstm/gru), x, h0, c0,
    cot/output, cot/h_n, cot/c_n.  Changing it changes every vector.
    """
    spec, T, B = case.spec, case.seq_len, case.batch
    rng = np.random.default_rng(case.seed)
    params = init_params(spec, rng, scheme="pytorch")
    perturb_extra_params(spec, params, rng)
    x_shape = (B, T, spec.input_size) if spec.batch_first else (T, B, spec.input_size)
    x = rng.standard_normal(x_shape)
    shapes = spec.state_shapes(B)
    h0 = c0 = None
    if case.initial_state:
        h0 = rng.standard_normal(shapes["h"])
        if spec.family == "lstm":
            c0 = rng.standard_normal(shapes["c"])
    lengths = None if case.lengths is None else np.asarray(case.lengths, dtype=np.int64)
    cot = {"output": rng.standard_normal(x_shape[:2] + (spec.output_size,)),
           "h_n": rng.standard_normal(shapes["h"])}
    if spec.family == "lstm":
        cot["c_n"] = rng.standard_normal(shapes["c"])
    scale = COTANGENT_SCALE.get(spec.cell, 1.0)
    if scale != 1.0:
        cot = {key: scale * value for key, value in cot.items()}
    result = reference.run_case(spec, params, x, h0, c0, lengths, cot)
    arrays: dict[str, np.ndarray] = {"x": x}
    if h0 is not None:
        arrays["h0"] = h0
    if c0 is not None:
        arrays["c0"] = c0
    if lengths is not None:
        arrays["lengths"] = lengths
    arrays.update({f"param/{name}": value for name, value in params.items()})
    for key in ("output", "h_n", "c_n"):
        if key in result:
            arrays[f"out/{key}"] = result[key]
    for key in ("output", "h_n", "c_n"):
        if key in cot:
            arrays[f"cot/{key}"] = cot[key]
    for key in ("grad/x", "grad/h0", "grad/c0"):
        if key in result:
            arrays[key] = result[key]
    arrays.update({f"grad/{name}": result[f"grad/{name}"] for name in params})
    for key, value in arrays.items():
        want = np.int64 if key == "lengths" else np.float64
        arrays[key] = np.ascontiguousarray(value, dtype=want)
    return arrays


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """An .npz archive (readable by np.load) with fixed timestamps: same arrays, same bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for key, value in arrays.items():
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            member = io.BytesIO()
            np.lib.format.write_array(member, value, allow_pickle=False)
            archive.writestr(info, member.getvalue())
    return buffer.getvalue()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


TOLERANCE_RULE = {
    "formula": "LAMBDA * unit_roundoff[dtype] * sqrt(n * d) * max(1, max|reference|), per array "
               "(rnnbench/core/tolerances.py: n the longest per-step sum, d the steps that feed the value)",
    "LAMBDA": LAMBDA, "unit_roundoff": dict(UNIT_ROUNDOFF)}


def case_tolerances(case: CaseDef, arrays: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """The bound of every computed array of a case, per dtype (the rule of rnnbench.core.tolerances)."""
    results = {k[4:] if k.startswith("out/") else k: v for k, v in arrays.items() if k.startswith(("out/", "grad/"))}
    return {dtype: bounds(results, dtype, case.spec, case.seq_len, case.batch) for dtype in DTYPES}


def manifest_entry(case: CaseDef, data: bytes, arrays: dict[str, np.ndarray]) -> dict:
    return {
        "file": f"{case.name}.npz",
        "config": case.spec.to_dict(),
        "seed": case.seed,
        "tags": list(case.tags),
        "seq_len": case.seq_len,
        "batch": case.batch,
        "initial_state": case.initial_state,
        "lengths": None if case.lengths is None else list(case.lengths),
        "sha256": sha256(data),
        "tolerances": case_tolerances(case, arrays),
    }


def generate(directory: Path, cases=CASES) -> dict:
    """Write every case's .npz and the manifest into `directory`; returns the manifest.

    Removes .npz files in `directory` that no case produces (stale cases).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    entries = {}
    for case in cases:
        arrays = build_arrays(case)
        data = npz_bytes(arrays)
        (directory / f"{case.name}.npz").write_bytes(data)
        entries[case.name] = manifest_entry(case, data, arrays)
    keep = {entry["file"] for entry in entries.values()}
    for stale in directory.glob("*.npz"):
        if stale.name not in keep:
            stale.unlink()
    manifest = {
        "format": FORMAT_VERSION,
        "generator": "python -m rnnbench.vectors",
        "description": "Shared LSTM/GRU test vectors: inputs, canonical params, cotangents, "
                       "and float64 reference outputs and gradients (see rnnbench/vectors/generate.py).",
        "tolerance_rule": TOLERANCE_RULE,
        "cases": entries,
    }
    (directory / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def compare_arrays(name: str, stored: dict[str, np.ndarray], fresh: dict[str, np.ndarray]) -> list[str]:
    """Differences between stored and regenerated arrays: inputs exact, computed to 1e-14."""
    problems = []
    if list(stored) != list(fresh):
        problems.append(f"{name}: keys differ: stored {sorted(stored)}, regenerated {sorted(fresh)}")
        return problems
    for key in fresh:
        a, b = stored[key], fresh[key]
        if a.dtype != b.dtype or a.shape != b.shape:
            problems.append(f"{name}/{key}: stored {a.dtype}{a.shape}, regenerated {b.dtype}{b.shape}")
        elif key.startswith(INPUT_PREFIXES):
            if not np.array_equal(a, b):
                problems.append(f"{name}/{key}: input differs from the regenerated one")
        else:
            err = float(np.max(np.abs(a - b))) if a.size else 0.0
            limit = COMPUTED_RTOL * max(1.0, float(np.max(np.abs(a))) if a.size else 0.0)
            if not err <= limit:
                problems.append(f"{name}/{key}: differs by {err:.3g} (> {limit:.3g})")
    return problems


def compare_entries(name: str, stored: dict, fresh: dict) -> list[str]:
    """Differences between a committed manifest entry and a regenerated one.

    Everything that describes the case must be equal; the sha256 is ignored (arrays decide,
    `compare_arrays`) and the derived bounds, computed from the arrays, are compared to
    COMPUTED_RTOL relative, since they inherit the arrays' last-bit differences.
    """
    problems = []
    plain = lambda e: {k: v for k, v in e.items() if k not in ("sha256", "tolerances")}  # noqa: E731
    if plain(stored) != plain(fresh):
        problems.append(f"{name}: manifest entry differs: stored {plain(stored)}, regenerated {plain(fresh)}")
    a, b = stored.get("tolerances", {}), fresh.get("tolerances", {})
    if {d: sorted(v) for d, v in a.items()} != {d: sorted(v) for d, v in b.items()}:
        return problems + [f"{name}: tolerance keys differ"]
    for dtype, per_key in a.items():
        for key, bound in per_key.items():
            if not abs(bound - b[dtype][key]) <= COMPUTED_RTOL * abs(bound):
                problems.append(f"{name}: {dtype} bound of {key} is {b[dtype][key]!r} regenerated, "
                                f"{bound!r} committed")
    return problems


def check(directory: Path) -> list[str]:
    """Verify every file against the manifest and against a fresh regeneration.

    Returns the list of problems (empty when all is well).
    """
    from . import VectorsError, load_manifest, read_arrays  # the loader's verification

    problems = []
    try:
        manifest = load_manifest(directory)
    except VectorsError as e:
        return [str(e)]
    want = {c.name for c in CASES}
    have = set(manifest["cases"])
    if want != have:
        problems.append(f"manifest cases differ from the case table: missing {sorted(want - have)}, "
                        f"extra {sorted(have - want)}")
    for case in CASES:
        if case.name not in have:
            continue
        entry = manifest["cases"][case.name]
        if entry["config"] != case.spec.to_dict() or entry["seed"] != case.seed:
            problems.append(f"{case.name}: manifest config/seed differ from the case table")
        try:
            stored = read_arrays(directory, case.name, entry)
        except VectorsError as e:
            problems.append(str(e))
            continue
        problems += compare_arrays(case.name, stored, build_arrays(case))
    return problems

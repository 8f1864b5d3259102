"""The catalogue of recurrent cells: what each computes and which parameters it adds.

A cell is identified by name in `RNNSpec.cell`.  `lstm` and `gru` are PyTorch's cells
(the canonical contract, docs/contract.md).  The others extend the canonical
parameter convention: each adds per-(layer, direction) entries named
`<prefix>_l{k}[_reverse]` beside PyTorch's `weight_ih/weight_hh/bias_ih/bias_hh`.

This module is framework-neutral: it describes cells; the NumPy reference, rnnbench.torch
and rnnbench.jax implement them.  The `family` says what state a cell carries: "lstm"
cells carry (h, c), "gru" cells carry h.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class ExtraParam:
    """One extra per-(layer, direction) parameter: `<prefix>_l{k}[_reverse]`."""

    prefix: str
    size: str  # shape as a multiple of H, e.g. "3H" (a 1-D vector) or "4H"
    init: str  # "uniform" (PyTorch's U(-1/sqrt(H), 1/sqrt(H))), "ones" or "zeros"
    doc: str

    def shape(self, hidden_size: int) -> tuple[int, ...]:
        factor = int(self.size[:-1] or 1)
        return (factor * hidden_size,)


@dataclass(frozen=True)
class CellDef:
    name: str
    family: str  # "lstm" (state h, c) or "gru" (state h)
    gates: tuple[str, ...]
    summary: str
    equations: str
    extra_params: tuple[ExtraParam, ...] = field(default=())
    proj_size: bool = False  # whether the cell supports LSTM's output projection
    # The widest normalisation inside the step, as a multiple of H ("4H"), or "" for none.
    # Dividing by the standard deviation of N features scales rounding errors by up to
    # sqrt(N) (max |v - mean| <= sqrt(N) * std), which the tolerance rule accounts for.
    normalizes: str = ""

    @property
    def has_cell_state(self) -> bool:
        return self.family == "lstm"

    def error_growth(self, hidden_size: int) -> float:
        """How much this cell's own operations amplify rounding errors beyond PyTorch's LSTM
        (`rnnbench.core.tolerances`): sqrt(N) for a normalisation over N features, else 1."""
        if not self.normalizes:
            return 1.0
        return (int(self.normalizes[:-1] or 1) * hidden_size) ** 0.5


CELL_DEFS: dict[str, CellDef] = {}


def register_cell(cell: CellDef) -> CellDef:
    """Add a cell to the catalogue (a user's own cell too); returns it."""
    if cell.family not in ("lstm", "gru"):
        raise ValueError(f"family must be 'lstm' or 'gru', got {cell.family!r}")
    if cell.name in CELL_DEFS and CELL_DEFS[cell.name] != cell:
        raise ValueError(f"a different cell named {cell.name!r} is already registered")
    CELL_DEFS[cell.name] = cell
    return cell


def family_of(cell: str) -> str:
    """The plain cell ("lstm"/"gru") a catalogue cell is compared with; any other name is its own."""
    return CELL_DEFS[cell].family if cell in CELL_DEFS else cell


def get_cell(name: str) -> CellDef:
    try:
        return CELL_DEFS[name]
    except KeyError:
        raise ValueError(f"cell must be one of {tuple(CELL_DEFS)}, got {name!r}") from None


register_cell(CellDef(
    "lstm", "lstm", ("i", "f", "g", "o"), "PyTorch's LSTM (nn.LSTM)",
    """i, f, o = sigmoid(W_i* x + b_i* + W_h* h + b_h*);  g = tanh(W_ig x + b_ig + W_hg h + b_hg)
c' = f * c + i * g;  h' = o * tanh(c')   (with proj_size: h' = W_hr h')""",
    proj_size=True))

register_cell(CellDef(
    "gru", "gru", ("r", "z", "n"), "PyTorch's GRU (nn.GRU): reset applied after the recurrent matmul",
    """r, z = sigmoid(W_i* x + b_i* + W_h* h + b_h*)
n = tanh(W_in x + b_in + r * (W_hn h + b_hn));  h' = (1 - z) * n + z * h"""))

register_cell(CellDef(
    "ln_lstm", "lstm", ("i", "f", "g", "o"),
    "LayerNorm LSTM (Ba et al. 2016; PyTorch benchmarks/fastrnns LayerNormLSTMCell)",
    """a = LN_ih(W_ih x + b_ih) + LN_hh(W_hh h + b_hh)         (each LN over the 4H gate pre-activations)
i, f, o = sigmoid(a_i, a_f, a_o);  g = tanh(a_g)
c' = LN_c(f * c + i * g);  h' = o * tanh(c')                (c' is the normalised cell state)
LN(v) = (v - mean(v)) / sqrt(var(v) + 1e-5) * gain + bias    (biased variance, eps 1e-5, as nn.LayerNorm)""",
    extra_params=(
        ExtraParam("layernorm_ih_weight", "4H", "ones", "gain of LN_ih"),
        ExtraParam("layernorm_ih_bias", "4H", "zeros", "bias of LN_ih"),
        ExtraParam("layernorm_hh_weight", "4H", "ones", "gain of LN_hh"),
        ExtraParam("layernorm_hh_bias", "4H", "zeros", "bias of LN_hh"),
        ExtraParam("layernorm_c_weight", "H", "ones", "gain of LN_c"),
        ExtraParam("layernorm_c_bias", "H", "zeros", "bias of LN_c"),
    ),
    normalizes="4H"))

register_cell(CellDef(
    "peephole_lstm", "lstm", ("i", "f", "g", "o"),
    "Peephole LSTM (Gers and Schmidhuber 2000; ONNX LSTM with P)",
    """i = sigmoid(W_ii x + b_ii + W_hi h + b_hi + p_i * c)
f = sigmoid(W_if x + b_if + W_hf h + b_hf + p_f * c)
g = tanh(W_ig x + b_ig + W_hg h + b_hg)
c' = f * c + i * g
o = sigmoid(W_io x + b_io + W_ho h + b_ho + p_o * c')
h' = o * tanh(c')""",
    extra_params=(ExtraParam("peephole", "3H", "uniform",
                             "diagonal peephole weights, blocks p_i, p_f, p_o (ONNX's P is ordered i, o, f: "
                             "the ONNX converter reorders)"),)))

register_cell(CellDef(
    "gru_reset_before", "gru", ("r", "z", "n"),
    "GRU with the reset gate applied before the recurrent matmul (Cho et al. 2014; ONNX linear_before_reset=0, Keras reset_after=False)",
    """r, z = sigmoid(W_i* x + b_i* + W_h* h + b_h*)
n = tanh(W_in x + b_in + W_hn (r * h) + b_hn);  h' = (1 - z) * n + z * h"""))

STANDARD_CELLS = ("lstm", "gru")
CUSTOM_CELLS = ("ln_lstm", "peephole_lstm", "gru_reset_before")


def canonical_names(p) -> dict:
    """One layer and direction's parameters (a `LayerParams` of either framework) by the
    canonical short names a step reads: weight_ih, weight_hh, bias_ih, bias_hh, weight_hr
    (None when absent) and each extra parameter's prefix."""
    return {"weight_ih": p.w_ih, "weight_hh": p.w_hh, "bias_ih": p.b_ih, "bias_hh": p.b_hh, "weight_hr": p.w_hr,
            **(p.extras or {})}


@dataclass(frozen=True)
class FrameworkCell:
    """A catalogue cell as one framework computes it (`rnnbench.torch.cells`, `rnnbench.jax.cells`):

        prepare(p) -> q                    once per layer, direction and call: the weights in the
                                           layout the step wants (default: `canonical_names`)
        project(x2d, q) -> x_proj          hoisted out of the time loop, over all T*B rows
        step(x_proj_t, state, q) -> state  one time step; state = (h,) or (h, c)
    """

    defn: CellDef
    step: Callable
    project: Callable
    prepare: Callable = canonical_names

    @property
    def name(self) -> str:
        return self.defn.name

    @property
    def has_cell_state(self) -> bool:
        return self.defn.has_cell_state


class CellTable:
    """One implementation's steps for catalogue cells, by cell name (the built-ins and users' own).

    Each framework has one (`rnnbench.torch.cells.CELLS`, `rnnbench.jax.cells.CELLS`, built by
    `for_framework`: its entries are `FrameworkCell`s), and so has the NumPy reference
    (`rnnbench.reference.CELLS`: step and step backward).  `build(defn, *args, **kwargs)` makes an
    entry from what `register` is given; `register_hint` is the function a user calls to add
    one (named in the error for a cell without a step).
    """

    def __init__(self, kind: str, register_hint: str, build: Callable):
        self.kind, self.register_hint, self.build = kind, register_hint, build
        self.cells: dict[str, object] = {}
        self.built_in: set[str] = set()

    @classmethod
    def for_framework(cls, kind: str, package: str, default_project: Callable) -> CellTable:
        """A framework's table of `FrameworkCell`s: `register(name, step, project=None, prepare=None)`."""
        def build(defn: CellDef, step: Callable, project: Callable | None = None,
                  prepare: Callable | None = None) -> FrameworkCell:
            return FrameworkCell(defn, step, project or default_project, prepare or canonical_names)
        return cls(kind, f"{package}.register_cell", build)

    def register(self, name: str, *args, built_in: bool = False, **kwargs):
        """Give catalogue cell `name` its entry, built from `args` (a framework: the step, and
        optionally its hoisted projection and its per-call weight preparation).  Register the
        `CellDef` first (`register_cell` here); registering the same functions again is
        harmless, different ones raise."""
        if name not in CELL_DEFS:
            raise ValueError(f"cell must be one of {tuple(CELL_DEFS)}, got {name!r}: register its CellDef first "
                             "with rnnbench.core.catalogue.register_cell")
        entry = self.build(CELL_DEFS[name], *args, **kwargs)
        if name in self.cells and self.cells[name] != entry:
            raise ValueError(f"a different {self.kind} step is already registered for cell {name!r}"
                             + (" (a built-in cell: register a new cell name)" if name in self.built_in else ""))
        self.cells[name] = entry
        if built_in:
            self.built_in.add(name)
        return self.cells[name]

    def get(self, name: str):
        try:
            return self.cells[name]
        except KeyError:
            get_cell(name)  # a name outside the catalogue raises naming the catalogue's cells
            raise ValueError(self.missing_reason(name)) from None

    def has(self, name: str) -> bool:
        return name in self.cells

    def missing_reason(self, name: str) -> str | None:
        """None when cell `name` has a step here, else what to register."""
        if name in self.cells:
            return None
        return f"cell {name!r} has no {self.kind} step; add one with {self.register_hint}({name!r}, step)"


def markdown_table(names: tuple[str, ...] | None = None) -> str:
    """A Markdown table of the cells (name, family, gates, extra parameters with shapes).

    For docs: `python -c "from rnnbench.core.catalogue import markdown_table; print(markdown_table())"`.
    """
    rows = ["| cell | family (state) | gates | extra parameters per layer/direction |",
            "|---|---|---|---|"]
    for name in names or tuple(CELL_DEFS):
        cell = get_cell(name)
        state = "h, c" if cell.has_cell_state else "h"
        extras = "; ".join(f"`{e.prefix}_l{{k}}[_reverse]` ({e.size}, init {e.init}): {e.doc}"
                           for e in cell.extra_params) or "none"
        rows.append(f"| `{name}` | {cell.family} ({state}) | {', '.join(cell.gates)} | {extras} |")
    return "\n".join(rows)


# The cells this module registers at import (the built-in catalogue).  `markdown_page`
# renders these, never cells a user or a test registered later in the process.
_BUILT_IN_CELLS = tuple(CELL_DEFS)


def markdown_page() -> str:
    """docs/cells.md: every built-in cell with its family, gates, summary, equations and
    extra parameters.  Regenerate with `python -m rnnbench.core.catalogue > docs/cells.md`
    (tests/tools/test_docs.py fails while the page and the catalogue differ)."""
    lines = [
        "# Cells",
        "",
        ("<!-- Generated from the catalogue in rnnbench/core/catalogue.py by `python -m rnnbench.core.catalogue > docs/cells.md`."
         " Do not edit by hand. -->"),
        "",
        "The catalogue of recurrent cells (`rnnbench/core/catalogue.py`). A cell is chosen by name (`RNNSpec.cell`,",
        "`rnnbench.torch.RNN(cell, ...)`, `rnnbench.jax.rnn(..., cell=...)`); its equations are written once, here.",
        "Parameters are PyTorch's `weight_ih_l{k}[_reverse]`, `weight_hh_l{k}[_reverse]`,",
        "`bias_ih_l{k}[_reverse]`, `bias_hh_l{k}[_reverse]` with the gate blocks stacked along the first",
        "axis in the order given, plus each cell's extra parameters `<prefix>_l{k}[_reverse]`.",
        "Initial values: `uniform` is PyTorch's U(-1/sqrt(H), 1/sqrt(H)), as for the weights; `ones`, `zeros`.",
        "Which rungs run which cell: `rnnbench list`, [torch.md](torch.md), [jax.md](jax.md).",
        "Your own cell: [own-cell.md](own-cell.md).",
        "",
        "Notation: x the input, h and c the previous state, h' and c' the new one, `sigmoid` the logistic",
        "function, `*` the elementwise product; `W_i* x + b_i*` is the input side of a gate, `W_h* h + b_h*`",
        "its recurrent side.",
        "",
        "| cell | family (state) | gates | extra parameters | proj_size | summary |",
        "|---|---|---|---|---|---|",
    ]
    for name in _BUILT_IN_CELLS:
        cell = CELL_DEFS[name]
        state = "h, c" if cell.has_cell_state else "h"
        extras = ", ".join(f"`{e.prefix}`" for e in cell.extra_params) or "none"
        lines.append(f"| [`{name}`](#{name}) | {cell.family} ({state}) | {', '.join(cell.gates)} | {extras} | "
                     f"{'yes' if cell.proj_size else 'no'} | {cell.summary} |")
    for name in _BUILT_IN_CELLS:
        cell = CELL_DEFS[name]
        state = "(h, c)" if cell.has_cell_state else "h"
        lines += ["", f"## {name}", "", cell.summary + ".", "",
                  (f"Family `{cell.family}` (state {state}); gates {', '.join(cell.gates)}; "
                   f"proj_size {'supported' if cell.proj_size else 'not supported'}."), "",
                  "```text", *cell.equations.splitlines(), "```", ""]
        if cell.extra_params:
            lines += ["Extra parameters, one of each per layer and direction (`<prefix>_l{k}[_reverse]`):", "",
                      "| prefix | shape | init | what |", "|---|---|---|---|"]
            lines += [f"| `{e.prefix}` | ({e.size},) | {e.init} | {e.doc} |" for e in cell.extra_params]
        else:
            lines.append("Extra parameters: none.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    # `python -m rnnbench.core.catalogue > docs/cells.md`; rendered by the imported module, whose
    # catalogue is the one every other module sees.
    from rnnbench.core.catalogue import markdown_page as _page

    print(_page(), end="")

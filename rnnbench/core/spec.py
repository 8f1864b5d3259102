"""The one description of an RNN configuration, shared by every implementation.

`RNNSpec` mirrors the constructor arguments of `torch.nn.LSTM` / `torch.nn.GRU`, so a
spec and a PyTorch module describe the same model.  It knows the canonical parameter
names and shapes (PyTorch's `state_dict`) and the state shapes; it never imports a
framework.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .catalogue import CELL_DEFS, STANDARD_CELLS, get_cell

CELLS = STANDARD_CELLS  # PyTorch's two cells; rnnbench.core.catalogue.CELL_DEFS has every registered cell


class _Gates(dict):
    """Cell name -> gate letters, for every registered cell (also ones added later)."""

    def __missing__(self, name):
        return get_cell(name).gates


GATES = _Gates({"lstm": ("i", "f", "g", "o"), "gru": ("r", "z", "n")})


@dataclass(frozen=True)
class RNNSpec:
    """An LSTM or GRU configuration with `nn.LSTM`/`nn.GRU` semantics.

    Raises `ValueError` naming the field and the allowed range on invalid values.
    """

    cell: str
    input_size: int
    hidden_size: int
    num_layers: int = 1
    bias: bool = True
    batch_first: bool = False
    bidirectional: bool = False
    proj_size: int = 0
    dropout: float = 0.0

    def __post_init__(self):
        if self.cell not in CELL_DEFS:
            raise ValueError(f"cell must be one of {tuple(CELL_DEFS)}, got {self.cell!r}")
        for name in ("input_size", "hidden_size", "num_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("bias", "batch_first", "bidirectional"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if isinstance(self.proj_size, bool) or not isinstance(self.proj_size, int) or self.proj_size < 0:
            raise ValueError(f"proj_size must be an integer >= 0, got {self.proj_size!r}")
        if self.proj_size and not get_cell(self.cell).proj_size:
            with_proj = [n for n, c in CELL_DEFS.items() if c.proj_size]
            raise ValueError(f"proj_size is only supported for cell in {with_proj}, "
                             f"got proj_size={self.proj_size} with cell={self.cell!r}")
        if self.proj_size >= self.hidden_size:
            raise ValueError(
                f"proj_size must be in [0, hidden_size) = [0, {self.hidden_size}), got {self.proj_size}")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0.0 <= self.dropout <= 1.0:
            raise ValueError(f"dropout must be a number in [0, 1], got {self.dropout!r}")

    # ---- derived sizes -------------------------------------------------------------
    @property
    def cell_def(self):
        """The `rnnbench.core.catalogue.CellDef` of this spec's cell."""
        return get_cell(self.cell)

    @property
    def family(self) -> str:
        """"lstm" (state h, c) or "gru" (state h)."""
        return get_cell(self.cell).family

    @property
    def num_gates(self) -> int:
        return len(GATES[self.cell])

    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def output_hidden_size(self) -> int:
        """Size of h (and of each direction's output): proj_size if set, else hidden_size."""
        return self.proj_size or self.hidden_size

    @property
    def output_size(self) -> int:
        """Feature size of `output`: num_directions * size of h."""
        return self.num_directions * self.output_hidden_size

    def layer_input_size(self, layer: int) -> int:
        return self.input_size if layer == 0 else self.output_size

    @staticmethod
    def suffix(layer: int, direction: int) -> str:
        """`l{k}` or `l{k}_reverse`, PyTorch's parameter-name suffix."""
        return f"l{layer}" + ("_reverse" if direction == 1 else "")

    def layers_and_directions(self):
        """Yield (layer, direction) in PyTorch's order: layer-major, then direction."""
        for layer in range(self.num_layers):
            for direction in range(self.num_directions):
                yield layer, direction

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Canonical parameter names -> shapes, in `nn.LSTM.state_dict()` order."""
        G, H, P = self.num_gates, self.hidden_size, self.proj_size
        h_size = self.output_hidden_size
        shapes: dict[str, tuple[int, ...]] = {}
        for layer, direction in self.layers_and_directions():
            s = self.suffix(layer, direction)
            shapes[f"weight_ih_{s}"] = (G * H, self.layer_input_size(layer))
            shapes[f"weight_hh_{s}"] = (G * H, h_size)
            if self.bias:
                shapes[f"bias_ih_{s}"] = (G * H,)
                shapes[f"bias_hh_{s}"] = (G * H,)
            if P:
                shapes[f"weight_hr_{s}"] = (P, H)
            for extra in get_cell(self.cell).extra_params:
                shapes[f"{extra.prefix}_{s}"] = extra.shape(H)
        return shapes

    def param_names(self) -> list[str]:
        return list(self.param_shapes())

    def state_shapes(self, batch: int) -> dict[str, tuple[int, ...]]:
        """Shapes of h0/h_n and (LSTM) c0/c_n for a batch of `batch` sequences."""
        n = self.num_layers * self.num_directions
        shapes = {"h": (n, batch, self.output_hidden_size)}
        if self.family == "lstm":
            shapes["c"] = (n, batch, self.hidden_size)
        return shapes

    def flops(self, seq_len: int, batch: int) -> int:
        """Forward GEMM FLOPs, 2*T*B*G*H*(I+H) per layer and direction (+ projection)."""
        total = 0
        for layer, _ in self.layers_and_directions():
            total += 2 * seq_len * batch * self.num_gates * self.hidden_size * (
                self.layer_input_size(layer) + self.output_hidden_size)
            if self.proj_size:
                total += 2 * seq_len * batch * self.hidden_size * self.proj_size
        return total

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RNNSpec":
        return cls(**d)

    def torch_kwargs(self) -> dict:
        """Constructor arguments for `nn.LSTM`/`nn.GRU` (and `rnnbench.torch.LSTM`/`GRU`)."""
        kw = dict(input_size=self.input_size, hidden_size=self.hidden_size, num_layers=self.num_layers,
                  bias=self.bias, batch_first=self.batch_first, dropout=float(self.dropout),
                  bidirectional=self.bidirectional)
        if self.cell == "lstm":
            kw["proj_size"] = self.proj_size
        return kw

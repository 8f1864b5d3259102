"""GEMMs for the hand-written RNN kernels: oneDNN where it runs, BLAS everywhere else.

On the development CPU `torch.mm` (MKL) reaches 130-190 GFLOP/s on the RNN step shapes
while oneDNN's inner-product primitive with a prepacked weight reaches 380-416
(DESIGN.md section 6).  `nn.LSTM` uses oneDNN on the CPU, so a custom LSTM whose GEMMs go
through `torch.mm` cannot catch up however well it fuses the rest.  This module gives
the custom kernels one small object, `Gemm`, that computes

    y = x @ W^T (+ bias) (+ add)

with `torch.ops.mkldnn._linear_pointwise` and a weight prepacked once by
`torch.ops.mkldnn._reorder_linear_weight` when that is possible (CPU, float32, oneDNN
built in, the ops present), and with `torch.addmm`/`torch.mm` on a once-transposed weight
otherwise (float64, CUDA (cuBLAS), a torch without the ops).  Nothing here records
autograd history: it is meant for the inside of custom `autograd.Function`s.

`use_onednn(False)` (a context manager) switches the oneDNN path off, so the study can
show what the GEMM library alone buys.
"""

from __future__ import annotations

import contextlib
import threading

import torch

_state = threading.local()


def _ops_present() -> bool:
    mkldnn = getattr(torch.ops, "mkldnn", None)
    try:
        return (torch.backends.mkldnn.is_available()
                and hasattr(mkldnn, "_linear_pointwise") and hasattr(mkldnn, "_reorder_linear_weight"))
    except (AttributeError, RuntimeError):  # torch.ops raises on unknown namespaces/ops
        return False


_OPS_PRESENT = _ops_present()


def onednn_enabled() -> bool:
    """Whether the oneDNN path may be used (switched on by default, off in `use_onednn(False)`)."""
    return getattr(_state, "enabled", True)


@contextlib.contextmanager
def use_onednn(enabled: bool):
    """Temporarily allow (True) or forbid (False) the oneDNN GEMM path in this thread."""
    previous = onednn_enabled()
    _state.enabled = bool(enabled)
    try:
        yield
    finally:
        _state.enabled = previous


def onednn_unavailable_reason(device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> str | None:
    """None when `Gemm` would use oneDNN for tensors of this device and dtype, else why not."""
    device = torch.device(device)
    if not _OPS_PRESENT:
        return "this torch build has no oneDNN linear ops (torch.ops.mkldnn._linear_pointwise)"
    if device.type != "cpu":
        return f"oneDNN linear runs on the CPU only (device is {device})"
    if dtype != torch.float32:
        return f"oneDNN linear does not take {dtype} (float32 only here)"
    if not onednn_enabled():
        return "switched off by use_onednn(False)"
    return None


class Gemm:
    """`y = x @ weight^T (+ bias) (+ add)` for a fixed `weight` (N, K), prepared once.

    `batch_size` is the expected number of rows of `x`; oneDNN picks its weight layout for
    it (any row count still works).  Calls never record autograd history.
    """

    def __init__(self, weight: torch.Tensor, batch_size: int | None = None):
        if weight.dim() != 2:
            raise ValueError(f"Gemm weight must be 2-D (N, K), got shape {tuple(weight.shape)}")
        self.out_features, self.in_features = weight.shape
        self.onednn = onednn_unavailable_reason(weight.device, weight.dtype) is None
        with torch.no_grad():
            if self.onednn:
                self._packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), batch_size)
            else:
                # BLAS is fastest with the right operand contiguous (measured: mm(x, W^T
                # contiguous) beats mm(x, W.t()) by about 10% on the step shape).
                self._weight_t = weight.detach().t().contiguous()

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None, add: torch.Tensor | None = None,
                 out: torch.Tensor | None = None) -> torch.Tensor:
        """x (M, K) -> (M, N).  `add` (M, N) is added; `out`, if given, receives the result
        (BLAS writes it directly; oneDNN allocates its result, so `out` costs a copy)."""
        if self.onednn:
            if add is not None:
                y = torch.ops.mkldnn._linear_pointwise.binary(x, add, self._packed, bias, "add")
            else:
                y = torch.ops.mkldnn._linear_pointwise(x, self._packed, bias, "none", [], "")
            if out is not None:
                out.copy_(y)
                return out
            return y
        if add is not None:
            if bias is not None:
                add = add + bias
            return torch.addmm(add, x, self._weight_t, out=out) if out is not None else torch.addmm(add, x, self._weight_t)
        if bias is not None:
            return torch.addmm(bias, x, self._weight_t, out=out) if out is not None else torch.addmm(bias, x, self._weight_t)
        return torch.mm(x, self._weight_t, out=out) if out is not None else torch.mm(x, self._weight_t)

    def __repr__(self) -> str:
        path = "oneDNN" if self.onednn else "BLAS"
        return f"Gemm({self.in_features} -> {self.out_features}, {path})"

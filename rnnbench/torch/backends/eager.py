"""`eager`: the custom LSTM/GRU written the way eager PyTorch runs fastest.

What it changes from `naive`: the input projection of all T steps is ONE GEMM
(`cell.project` over T*B rows), so each step multiplies only the recurrent part, with
ONE `addmm` against a weight transposed once per call (`cell.prepare`); the time loop
walks `x_proj.unbind(0)` (`cells.time_loop`); the gate math is fused as `rnnbench.torch.cells`
describes; the outputs are stacked once at the end.  Any cell with a torch step runs here.
"""

from __future__ import annotations

from rnnbench.core.capabilities import ANY_CELL, Capabilities

from ..cells import project_all, time_loop

CAPABILITIES = Capabilities(cells=ANY_CELL, proj_size=True)


def run_direction(cell, p, x, state, lengths):
    q = cell.prepare(p)
    return time_loop(cell.step, project_all(cell, x, q), state, q, lengths)

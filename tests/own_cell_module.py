"""The own-cell worked example (MGU, tests/own_cell_example.py) as a cell module.

Importing it registers the cell everywhere docs/own-cell.md does: the
catalogue, the NumPy reference, rnnbench.torch and rnnbench.jax.  Name it in
RNNBENCH_CELL_MODULES (or `rnnbench compare --cell-modules own_cell_module`) with tests/
on PYTHONPATH, and the study's workers and the asv suites can measure `mgu`
(tests/study/test_study.py, tests/benchmarks/test_asv.py).  Only subprocesses import it: in the pytest
process the cell stays registered by test_own_cell.py's fixtures alone.
"""

import rnnbench.jax
import rnnbench.torch
from rnnbench import reference
from rnnbench.core.catalogue import register_cell
from own_cell_example import MGU, mgu_step_jax, mgu_step, mgu_step_torch

register_cell(MGU)
reference.register_cell_step(MGU.name, mgu_step)
rnnbench.torch.register_cell(MGU.name, mgu_step_torch)
rnnbench.jax.register_cell(MGU.name, mgu_step_jax)

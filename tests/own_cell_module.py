"""The own-cell worked example (MGU, tests/own_cell_example.py) as a cell module.

Importing it registers the cell everywhere docs/own-cell.md does: the
catalogue, the NumPy reference, torch_impl and jax_impl.  Name it in
RNNBENCH_CELL_MODULES (or `rnnbench compare --cell-modules own_cell_module`) with tests/
on PYTHONPATH, and the study's workers and the asv suites can measure `mgu`
(tests/shared/test_study.py, tests/cross/test_asv.py).  Only subprocesses import it: in the pytest
process the cell stays registered by test_own_cell.py's fixtures alone.
"""

import jax_impl
import torch_impl
from shared import reference
from shared.cells import register_cell
from own_cell_example import MGU, jax_impl_mgu_step, mgu_step, torch_impl_mgu_step

register_cell(MGU)
reference.register_cell_step(MGU.name, mgu_step)
torch_impl.register_cell(MGU.name, torch_impl_mgu_step)
jax_impl.register_cell(MGU.name, jax_impl_mgu_step)

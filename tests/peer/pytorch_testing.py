"""PyTorch's own test helpers (`torch.testing._internal`), imported without side effects.

`common_utils` calls `torch.backends.disable_global_flags()` at import, which would change
the rest of the suite's process: the flag is restored right after.  (It also needs the
`expecttest` package, a test dependency pinned in requirements.txt.)
"""

import torch

_FLAG = "__allow_nonbracketed_mutation_flag"
_before = torch.backends.__dict__.get(_FLAG, True)
try:
    from torch.testing._internal import common_modules, common_utils  # noqa: F401
finally:
    torch.backends.__dict__[_FLAG] = _before

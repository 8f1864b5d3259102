"""What the tests share: where the repository and the tests are.

Tools are a package (`tools/`, run as `python -m tools.NAME`): a test imports one as
`from tools import NAME`, nothing loads a file by path.
"""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

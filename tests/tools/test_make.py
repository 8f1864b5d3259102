"""The two commands' Makefile: what it composes (make -n prints the commands without running them)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from tests.support import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make here")


def _dry_run(*args: str) -> str:
    proc = subprocess.run(["make", "-n", "-B", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_torch_index_installs_torch_from_that_index_first_and_nothing_else_from_it():
    torch = next(line.split("==")[1] for line in (ROOT / "requirements.txt").read_text().splitlines()
                 if line.startswith("torch=="))
    lines = _dry_run("venv", "TORCH_INDEX=https://example.invalid/whl/cpu").splitlines()
    pinned = f"pip install --quiet --index-url https://example.invalid/whl/cpu torch=={torch}"
    assert [i for i, line in enumerate(lines) if pinned in line] == \
        [next(i for i, line in enumerate(lines) if "-r requirements.txt" in line) - 1]
    assert sum("--index-url" in line for line in lines) == 1
    assert not any("--index-url" in line for line in _dry_run("venv").splitlines())


def test_make_test_uses_both_cores_and_make_run_says_where_rnnbench_is():
    assert "pytest -n auto --dist loadfile" in _dry_run("test")
    run = _dry_run("run")
    assert "rnnbench.cli compare" in run and ".venv/bin/rnnbench" in run


def test_xdist_hands_files_out_in_the_conftest_order(tmp_path):
    """With the Makefile's pytest arguments a worker takes the files in the order the conftest
    sorts them (xdist's default reorders them by their number of tests): here one worker, and a
    conftest that puts the one-test file first, before a file of five."""
    args = re.search(r"PYTEST_ARGS \?= (.*)", (ROOT / "Makefile").read_text()).group(1).split()
    args = [a for a in args if a not in ("-n", "auto")]
    (tmp_path / "test_many.py").write_text("import pytest\n@pytest.mark.parametrize('i', range(5))\n"
                                           "def test_many(i):\n    open('order.txt', 'a').write('many ')\n")
    (tmp_path / "test_few.py").write_text("def test_few():\n    open('order.txt', 'a').write('few ')\n")
    (tmp_path / "conftest.py").write_text("def pytest_collection_modifyitems(items):\n"
                                          "    items.sort(key=lambda item: item.path.name != 'test_few.py')\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "1", *args, "-p", "no:cacheprovider", "-q"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "order.txt").read_text().split() == ["few"] + ["many"] * 5


def test_the_longest_first_files_exist():
    """tests/conftest.py starts these files first; a renamed one would silently start last."""
    from tests.conftest import LONGEST_FIRST
    from tests.support import ROOT

    assert [p for p in LONGEST_FIRST if not (ROOT / p).is_file()] == []

"""The two commands' Makefile: what it composes (make -n prints the commands without running them)."""

from __future__ import annotations

import shutil
import subprocess

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


def test_the_longest_first_files_exist():
    """tests/conftest.py starts these files first; a renamed one would silently start last."""
    from tests.conftest import LONGEST_FIRST
    from tests.support import ROOT

    assert [p for p in LONGEST_FIRST if not (ROOT / p).is_file()] == []

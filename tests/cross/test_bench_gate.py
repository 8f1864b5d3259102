"""The asv gate (`make bench-compare`, scripts/bench_compare.sh) catches a planted regression.

In a throw-away clone: a commit that sleeps 20 ms in the eager rung's direction function
must be reported (exactly that benchmark slower) and fail the gate; a commit that changes
nothing measured must pass it.  asv builds its virtualenv from the pinned requirements in
the clone (pip's cache makes it a minute) and runs one benchmark per rung: about 3 minutes
in all, so this runs once, small.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = r"RatioToNative.track_train_ratio\('torch.(eager|jit)', 'lstm', 'quick', 'float32'\)"

pytestmark = pytest.mark.skipif(not (ROOT / ".git").exists() or shutil.which("git") is None,
                                reason="the gate benchmarks commits: needs git and this repository's history")


def _git(clone: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=clone, check=True, capture_output=True, text=True).stdout


def _gate(clone: Path, base: str, head: str, home: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, HOME=str(home), BENCH=BENCH, ASV=f"{sys.executable} -m asv")
    return subprocess.run(["bash", "scripts/bench_compare.sh", base, head], cwd=clone, env=env, capture_output=True,
                          text=True, timeout=900)


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    path = tmp_path_factory.mktemp("gate") / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(path)], check=True)
    _git(path, "config", "user.email", "gate@test")
    _git(path, "config", "user.name", "gate test")
    return path


def test_dirty_tree_and_unknown_revision_are_refused(clone, tmp_path):
    proc = _gate(clone, "no-such-rev", "HEAD", tmp_path)
    assert proc.returncode == 2 and "unknown revision 'no-such-rev'" in proc.stderr
    (clone / "README.md").write_text((clone / "README.md").read_text() + "\n")
    proc = _gate(clone, "HEAD~1", "HEAD", tmp_path)
    assert proc.returncode == 2 and "uncommitted changes" in proc.stderr
    _git(clone, "checkout", "README.md")


def test_the_gate_fails_on_a_planted_slowdown_and_passes_an_unchanged_commit(clone, tmp_path):
    base = _git(clone, "rev-parse", "HEAD").strip()
    eager = clone / "torch_impl" / "backends" / "eager.py"
    text = eager.read_text()
    start = text.index("def run_direction(")
    body = text.index(":\n", start) + 2
    eager.write_text(text[:body] + "    import time; time.sleep(0.02)  # planted slowdown\n" + text[body:])
    _git(clone, "commit", "-qam", "planted slowdown")
    slow = _gate(clone, base, "HEAD", tmp_path)
    out = slow.stdout + slow.stderr
    assert slow.returncode != 0, out
    changed = re.findall(r"^\|\s*\+\s*\|.*\| (rnn\.\S+\(.*\)) \|$", out, re.M)
    assert changed == ["rnn.RatioToNative.track_train_ratio('torch.eager', 'lstm', 'quick', 'float32')"], out
    assert "PERFORMANCE DECREASED" in out

    _git(clone, "reset", "-q", "--hard", base)
    (clone / "docs" / "asv.md").write_text((clone / "docs" / "asv.md").read_text() + "\n")
    _git(clone, "commit", "-qam", "a change nothing measures")
    same = _gate(clone, base, "HEAD", tmp_path)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "PERFORMANCE DECREASED" not in same.stdout

#!/usr/bin/env bash
# The asv regression gate: `asv continuous BASE HEAD`; exits non-zero, with asv's table, when
# a benchmark got slower at HEAD (asv's Mann-Whitney U test on the two commits' samples says
# they differ, and the medians differ by more than FACTOR) or failed at HEAD.
#
#   tools/bench_compare.sh BASE [HEAD]          (make bench-compare BASE=<rev> [HEAD=<rev>])
#
# Environment (docs/asv.md, "The regression gate"):
#   BENCH   asv's -b regex; default the gate set: PairedRatio.track_train_ratio (paired
#           rung/nn.LSTM train-step ratios, many samples per process) of the LSTM for
#           torch.eager, torch.jit, torch.bptt, torch.cell_loop, jax.scan and jax.bptt, on the
#           quick workload and M50 (T=50,B=32,I=H=256, where the GEMMs dominate)
#   FACTOR  smallest change of the median called a change (default 1.06)
#   ROUNDS  processes per commit and benchmark, interleaved between the commits (default 3)
#   RNNBENCH_THREADS  intra-op threads (default 1: a parallel region of two threads on two
#           cores stalls whenever another process takes a core; one thread only shares time)
#   RNNBENCH_PROFILE (default quick), RNNBENCH_DTYPES (default float32), ASV (default the venv's asv)
# tools/gate_power.py measures how often this catches a planted slowdown and how often it
# fails an unchanged commit.  asv builds one virtualenv from the pinned requirements (the
# first run takes minutes) and installs each commit into it.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE="${1:-}"
HEAD="${2:-HEAD}"
ASV="${ASV:-.venv/bin/python -m asv}"
FACTOR="${FACTOR:-1.06}"
ROUNDS="${ROUNDS:-3}"
GATE_SET="PairedRatio\\.track_train_ratio\\('(torch\\.(eager|jit|bptt|cell_loop)|jax\\.(scan|bptt))', 'lstm'"
BENCH="${BENCH:-$GATE_SET}"
die() { echo "bench-compare: $*" >&2; exit 2; }

[ -n "$BASE" ] || die "BASE is required: make bench-compare BASE=<rev> [HEAD=<rev>], e.g. BASE=main~1 or BASE=origin/main"
for rev in "$BASE" "$HEAD"; do
    git rev-parse --verify --quiet "$rev^{commit}" >/dev/null \
        || die "unknown revision '$rev': git cannot find it here (fetch it, or check the name with git log --oneline)"
done
if ! git diff --quiet || ! git diff --cached --quiet; then
    die "the working tree has uncommitted changes; asv benchmarks commits, not the working tree: commit or stash them first"
fi
[ "$(git rev-parse "$BASE^{commit}")" != "$(git rev-parse "$HEAD^{commit}")" ] \
    || die "BASE and HEAD are the same commit ($(git rev-parse --short "$HEAD")): nothing to compare"

$ASV machine --yes >/dev/null
export RNNBENCH_PROFILE="${RNNBENCH_PROFILE:-quick}" RNNBENCH_DTYPES="${RNNBENCH_DTYPES:-float32}" \
    RNNBENCH_THREADS="${RNNBENCH_THREADS:-1}"
# every suite's parameter lists pinned to the working tree's: asv picks a combination by index at
# each commit, and BASE's lists may differ (benchmarks/rnn.py, _pinned)
[ -x .venv/bin/python ] && PY="${PYTHON:-.venv/bin/python}" || PY="${PYTHON:-python3}"
RNNBENCH_ASV_PARAMS="$(PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" benchmarks/rnn.py --params)" \
    || die "benchmarks/rnn.py --params failed (above): the suite does not import in the working tree"
export RNNBENCH_ASV_PARAMS
echo "bench-compare: $BASE..$HEAD, factor $FACTOR, $ROUNDS rounds, benchmarks /$BENCH/," \
     "profile $RNNBENCH_PROFILE, dtypes $RNNBENCH_DTYPES, $RNNBENCH_THREADS thread(s)"
started=$(date +%s)
# --interleave-rounds alternates the two commits' processes, which commit goes first changing
# from round to round, so a slow spell of the machine falls on both.  A benchmark that crashes is
# recorded as failed for that commit and the others still run, but asv continuous then stops
# before its comparison: the comparison of what ran is made here with asv compare.
log=$(mktemp); trap 'rm -f "$log"' EXIT
set +e
$ASV continuous --factor "$FACTOR" --split --interleave-rounds -a rounds="$ROUNDS" --show-stderr \
    -b "$BENCH" "$BASE" "$HEAD" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
if [ "$status" != 0 ] && ! grep -q "BENCHMARKS NOT SIGNIFICANTLY CHANGED\|PERFORMANCE DECREASED\|PERFORMANCE INCREASED" "$log"; then
    echo "bench-compare: a benchmark failed (above); comparing the ones that ran at both commits:"
    $ASV compare --factor "$FACTOR" --split "$BASE" "$HEAD" 2>&1 | tee "$log"
    # asv's marks: + slower, ! fails at HEAD but ran at BASE
    if grep -qE '^\| *[+!] *\|' "$log"; then
        echo "PERFORMANCE DECREASED (or a benchmark that ran at BASE fails at HEAD)."
        status=1
    else
        echo "Nothing that ran at BASE got slower or fails at HEAD."
        status=0
    fi
fi
# A benchmark with no result at BASE is not compared: say so rather than pass in silence.
missing=$(python3 -m tools.asv_results .asv/results "$(git rev-parse "$BASE^{commit}")" \
          "$(git rev-parse "$HEAD^{commit}")" "$BENCH")
check=$?
set -e
if [ "$check" = 2 ]; then
    echo "bench-compare: no previous results: nothing measured at HEAD has a result at BASE ($BASE)," >&2
    echo "  so nothing was compared. The benchmarks matching /$BENCH/ failed or did not exist at BASE" >&2
    echo "  (asv's log above says why): choose a BASE where they run, or a BENCH that existed there." >&2
    [ -n "$missing" ] && echo "$missing" | sed 's/^/  no result at BASE: /' >&2
    exit 2
elif [ "$check" = 1 ]; then
    echo "bench-compare: not compared (no result at BASE $BASE; they failed or did not exist there):" >&2
    echo "$missing" | sed 's/^/  /' >&2
fi
echo "bench-compare: done in $(( $(date +%s) - started )) s"
exit $status

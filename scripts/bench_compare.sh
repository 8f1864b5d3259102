#!/usr/bin/env bash
# The asv regression gate: `asv continuous BASE HEAD` on one profile; exits non-zero, with
# asv's table, when a benchmark got slower than FACTOR or failed at HEAD.
#
#   scripts/bench_compare.sh BASE [HEAD]          (make bench-compare BASE=<rev> [HEAD=<rev>])
#
# Environment: FACTOR (default 1.5: above the 1.36 max/min of the ratio benchmarks over four
# runs of one commit, scripts/gate_noise.py; docs/asv.md), BENCH (asv's -b regex; default the
# same-process ratio benchmarks, whose spread is smaller than the absolute times' 1.53), RNNBENCH_PROFILE (default quick), RNNBENCH_DTYPES (default
# float32), ASV (default the venv's asv).  asv builds one virtualenv from the pinned
# requirements (the first run takes minutes) and installs each commit into it.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE="${1:-}"
HEAD="${2:-HEAD}"
ASV="${ASV:-.venv/bin/python -m asv}"
FACTOR="${FACTOR:-1.5}"
BENCH="${BENCH:-RatioToNative.track_train_ratio}"
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
echo "bench-compare: $BASE..$HEAD, factor $FACTOR, benchmarks /$BENCH/, profile ${RNNBENCH_PROFILE:-quick}"
# --interleave-rounds alternates the two commits' processes.  A benchmark that crashes is
# recorded as failed for that commit and the others still run, but asv continuous then stops
# before its comparison: the comparison of what ran is made here with asv compare.
log=$(mktemp); trap 'rm -f "$log"' EXIT
set +e
RNNBENCH_PROFILE="${RNNBENCH_PROFILE:-quick}" RNNBENCH_DTYPES="${RNNBENCH_DTYPES:-float32}" \
    $ASV continuous --factor "$FACTOR" --split --interleave-rounds -a rounds=2 --show-stderr \
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
missing=$(python3 scripts/asv_results.py .asv/results "$(git rev-parse "$BASE^{commit}")" \
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
exit $status

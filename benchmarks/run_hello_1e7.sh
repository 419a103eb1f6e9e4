#!/bin/sh
# The 10^7-toy hello campaign end to end on this machine (2 cores), then its summary; both
# timed by /usr/bin/time -v (wall clock, CPU, peak RSS of the largest process). Needs a
# quiet machine: about 30-60 min of both cores (docs/running-1e7-toys.md).
#
# Usage: sh benchmarks/run_hello_1e7.sh [STORE] [TOYS]     (default /tmp/hello_1e7.zarr, 10000000)
# Output: benchmarks/out/hello_1e7_run.txt and hello_1e7_summary.txt (the time -v reports).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STORE=${1:-/tmp/hello_1e7.zarr}
TOYS=${2:-10000000}
OUT="$ROOT/benchmarks/out"
mkdir -p "$OUT"
PY="$ROOT/.venv/bin/python"
# resumable: running the same command again finishes an interrupted campaign
/usr/bin/time -v "$PY" -m toyengine run "$ROOT/studies/examples/hello.yaml" \
    --store "$STORE" --toys "$TOYS" --workers 2 --yes \
    2> "$OUT/hello_1e7_run.txt"
/usr/bin/time -v "$PY" -m toyengine summary "$STORE" \
    > "$OUT/hello_1e7_summary_text.txt" 2> "$OUT/hello_1e7_summary.txt"
grep -E "Elapsed|User time|System time|Maximum resident" "$OUT/hello_1e7_run.txt" \
    "$OUT/hello_1e7_summary.txt"

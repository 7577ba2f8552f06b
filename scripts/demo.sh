#!/usr/bin/env bash
# The main job on the embedded tiny model: set up, build, write the tiny checkpoint, and benchmark it in process in
# MLPerf's Server scenario (LoadGen's rules, with a 20 s minimum duration instead of 600 s). Prints LoadGen's
# summary, the verdict with its reasons, and the path of the HTML report.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build/moeserve make-tiny --out build/tiny-model --force
# Exit 1 is an INVALID verdict, a result like VALID (a run this short rarely meets early stopping); 2 and 130
# are not (moeserve bench --help lists the exit codes).
status=0
build/moeserve bench --model build/tiny-model --scenario server --dataset synthetic --synthetic-samples 64 \
  --synthetic-input normal:128:32 --synthetic-output normal:32:8 --performance-sample-count 64 \
  --target-qps 6 --min-duration 20 --min-query-count 128 --output-dir build/bench-tiny || status=$?
[ "$status" -le 1 ]

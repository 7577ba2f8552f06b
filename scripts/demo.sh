#!/usr/bin/env bash
# The main job on the embedded tiny model: set up, build, write the tiny checkpoint, and find the highest Server
# target_qps this machine holds VALID under MLPerf's rules (moeserve bench --find-peak: short probes that bracket
# and bisect the qps, then one confirming run at full settings; a few minutes on two cores). Prints LoadGen's
# summary of the confirming run, the verdict with its reasons, the peak with its tokens/s, and the HTML report.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build/moeserve make-tiny --out build/tiny-model --force
# The confirming run needs 512 queries: LoadGen's early stopping wants at least 459 under both bounds before a
# run at p99 can be VALID. Exit 1 is an INVALID verdict (on a machine too busy to hold even the lowest probe), a
# result like VALID; 2 and 130 are not (moeserve bench --help lists the exit codes).
status=0
build/moeserve bench --model build/tiny-model --scenario server --dataset synthetic --synthetic-samples 64 \
  --synthetic-input normal:64:16 --synthetic-output normal:16:4 --performance-sample-count 64 \
  --find-peak --target-qps 2 --find-peak-step 0.5 --find-peak-probe-duration 10 \
  --min-duration 20 --min-query-count 512 --output-dir build/bench-tiny || status=$?
[ "$status" -le 1 ]

#!/usr/bin/env bash
# Issue 13's throughput measurement in one script, for one H200 (the device tool): `moeserve bench` Offline on the
# synthetic gpt-oss-120b at TensorRT-LLM's three published single-H200 shapes (1,000 / 1,000, 8,192 / 1,024,
# 1,024 / 8,192; docs/source/developer-guide/perf-overview.md) and at the MLPerf shape (prompts normal:5000:2000,
# outputs normal:1278:247: the performance set's mean prompt length and the reference run's output mean and
# standard deviation), with the near-uniform router of random weights and with a Zipf-skewed one; then
# step_breakdown's per-kernel-class view of the same shapes. Every figure lands in $OUT/results.tar.gz:
# moeserve_result.json, mlperf_log_summary.txt and the report of each run, named by scenario, shape and router,
# and the breakdown JSON; a table is printed last.
#   RUNS       "NAME:INPUT:OUTPUT:SAMPLES ..." (default below: 1,024 samples of 1,000 / 1,000, one full batch at
#              max_num_seqs 1,024; 512 at the MLPerf shape, two refills of the ~290 sequences the bf16 KV pool holds
#              at ~6.3k tokens, so that the run is bound by the pool, not by its sample count; see PERF.md)
#   ROUTERS    "uniform zipf:1" (default)
#   BREAKDOWN  step_breakdown arguments ("" skips it), run for each of BREAKDOWN_ROUTERS (default "uniform")
#   ENGINE     extra engine flags for every bench run (e.g. "--max-num-seqs 512")
#   T_RUN      seconds each bench run may take (default 600)
# Binaries from `BUILD_CUDA=1 scripts/build_static.sh` (build-cuda-static/), carried to the GPU host.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/moeserve-throughput}
BIN=${BIN:-build-cuda-static}
mkdir -p "$OUT/results"
for dir in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir:${LD_LIBRARY_PATH:-}"
done
RUNS=${RUNS:-"1000x1000:1000:1000:1024 mlperf:normal:5000:2000:normal:1278:247:512"}
ROUTERS=${ROUTERS:-"uniform zipf:1"}
BREAKDOWN=${BREAKDOWN-"--decode 1@2048,256@2048,1024@1500,160@5600 --prefill 1x8192,8x1024 --mixed 512@1500+7680"}
date -u +%FT%TZ | tee "$OUT/results/date.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/results/gpu.txt"

for run in $RUNS; do
  name=${run%%:*}
  rest=${run#*:}
  # INPUT and OUTPUT are N or DIST:A:B; SAMPLES is last.
  samples=${rest##*:}
  lengths=${rest%:*}
  if [[ $lengths == normal:* || $lengths == uniform:* ]]; then
    input=$(echo "$lengths" | cut -d: -f1-3)
    output=$(echo "$lengths" | cut -d: -f4-)
  else
    input=${lengths%%:*}
    output=${lengths#*:}
  fi
  for router in $ROUTERS; do
    tag="offline-$name-${router/:/}"
    dir="$OUT/results/$tag"
    start=$(date +%s)
    # shellcheck disable=SC2086
    timeout "${T_RUN:-600}" "$BIN/moeserve" bench --synthetic gpt-oss-120b --synthetic-router "$router" --device cuda \
      --benchmark gpt-oss-120b --scenario offline --dataset synthetic --synthetic-samples "$samples" \
      --synthetic-input "$input" --synthetic-output "$output" --performance-sample-count "$samples" \
      --min-query-count "$samples" --min-duration 0 --target-qps 1 --no-progress --output-dir "$dir" ${ENGINE:-} \
      > "$dir.log" 2>&1
    echo "$tag: input $input, output $output, $samples samples: exit $?, $(( $(date +%s) - start )) s" \
      | tee -a "$OUT/results/runs.txt"
  done
done

if [ -n "$BREAKDOWN" ]; then
  for router in ${BREAKDOWN_ROUTERS:-uniform}; do
    # shellcheck disable=SC2086
    timeout "${T_RUN:-600}" "$BIN/step_breakdown" --synthetic-router "$router" $BREAKDOWN \
      --json "$OUT/results/breakdown-${router/:/}.json" > "$OUT/results/breakdown-${router/:/}.log" 2>&1
    echo "breakdown $router: exit $?"
  done
fi

tar -czf "$OUT/results.tar.gz" -C "$OUT" results
echo "==== breakdowns"
cat "$OUT"/results/breakdown-*.log 2>/dev/null | grep -E "^\||^[a-z]|wall" | head -150
echo "==== Offline (moeserve bench)"
cat "$OUT/results/runs.txt"
python3 benchmarks/cuda/summarize_offline.py "$OUT"/results/offline-*/moeserve_result.json

#!/usr/bin/env bash
# Issue 15's latency measurement in one script, for one H200 (the device tool): single-user speed and MLPerf's
# Interactive scenario on the synthetic gpt-oss-120b, each without and with EAGLE-3 speculation.
#   1. cuda_bench: decode steps at batch 1 / 8 / 64 @ 2k (graphed), beside the byte floor.
#   2. SingleStream at the MLPerf shape (prompts normal:5000:2000, outputs normal:1278:247): LoadGen's p90
#      latency and tokens/s of one request at a time.
#   3. Interactive at the MLPerf shape with the slo scheduler (p99 TTFT <= 2 s, TPOT <= 15 ms): the highest VALID
#      target_qps by `moeserve bench --find-peak` (bracket, bisect, confirm at full settings), its tokens/s.
# "With EAGLE-3" is the synthetic draft head on the GPU (random weights of the gpt-oss-120b head's shape) with the
# engine's test switch accepting each draft position with probability ACCEPTANCE (default 0.68: NVIDIA's
# gpt-oss-120b-Eagle3-v3 reports a mean acceptance length of 2.95 at k = 7, which a per-position rate of 0.68
# gives): labelled as such in every result, never a measured acceptance.
# Every figure lands in $OUT/latency.tar.gz (each run's moeserve_result.json, LoadGen summary and report, the
# cuda_bench JSON); a table is printed last.
#   K (7) ACCEPTANCE (0.68)  SS_QUERIES (SingleStream min query count, 33)  SS_SECONDS (min duration, 60)
#   SS_EXPECTED_MS (SingleStream's expected latency, 5000: a query at the MLPerf shape takes ~4.9 s at batch 1).
#   With equal issue LoadGen raises SingleStream's min query count to 2 x duration / expected latency and then to
#   the next multiple of the set size above it (a whole set more when already a multiple): 33 with a set of 32
#   gives 64 queries, the fewest LoadGen's early stopping accepts. Left at LoadGen's 10 ms the count became 12,032
#   (2026-12-02: 74 queries in 370 s, INVALID on min queries).
#   QPS_START (Interactive's first probe, 0.3)  PROBE_SECONDS (60)  CONFIRM_SECONDS (min duration, 300)
#   SET_SIZE (performance sample count, 32)  ENGINE (extra engine flags)  MODES ("plain eagle3")  STAGES
#   ("cuda_bench singlestream interactive")  MODEL ("--synthetic gpt-oss-120b --device cuda")  INPUT / OUTPUT (the
#   MLPerf shape's length distributions; smaller ones and MODEL="--model DIR --device cpu" try the script on a CPU)
# Binaries from `BUILD_CUDA=1 scripts/build_static.sh` (build-cuda-static/), carried to the GPU host.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
OUT=${OUT:-/tmp/moeserve-latency}
BIN=${BIN:-build-cuda-static}
mkdir -p "$OUT/latency"
for dir in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir:${LD_LIBRARY_PATH:-}"
done
K=${K:-7}
ACCEPTANCE=${ACCEPTANCE:-0.68}
STAGES=${STAGES:-"cuda_bench singlestream interactive"}
MODES=${MODES:-"plain eagle3"}
read -r -a MODEL_FLAGS <<< "${MODEL:---synthetic gpt-oss-120b --device cuda}"
SHAPE=("${MODEL_FLAGS[@]}" --benchmark gpt-oss-120b --dataset synthetic
       --synthetic-samples "${SET_SIZE:-32}" --synthetic-input "${INPUT:-normal:5000:2000}"
       --synthetic-output "${OUTPUT:-normal:1278:247}" --performance-sample-count "${SET_SIZE:-32}" --no-progress)
spec_flags() {
  [ "$1" = eagle3 ] && printf '%s\n' --speculative-config \
    "{\"method\": \"eagle3\", \"model\": \"synthetic\", \"num_speculative_tokens\": $K, \"test_acceptance_rate\": $ACCEPTANCE}"
}
date -u +%FT%TZ | tee "$OUT/latency/date.txt"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/latency/gpu.txt"

if [[ " $STAGES " == *" cuda_bench "* ]]; then
  "$BIN/cuda_bench" --synthetic gpt-oss-120b --decode-batches 1,8,64 --prefill none \
    --json "$OUT/latency/cuda-bench.json" > "$OUT/latency/cuda-bench.log" 2>&1
  echo "cuda_bench: exit $?" >> "$OUT/latency/runs.txt"
fi

for mode in $MODES; do
  mapfile -t spec < <(spec_flags "$mode")
  if [[ " $STAGES " == *" singlestream "* ]]; then
    dir="$OUT/latency/singlestream-mlperf-$mode"
    # shellcheck disable=SC2086
    timeout "${T_RUN:-600}" "$BIN/moeserve" bench "${SHAPE[@]}" --scenario singlestream \
      --min-query-count "${SS_QUERIES:-33}" --min-duration "${SS_SECONDS:-60}" \
      --single-stream-expected-latency "${SS_EXPECTED_MS:-5000}" --output-dir "$dir" "${spec[@]}" \
      ${ENGINE:-} > "$dir.log" 2>&1
    echo "singlestream $mode: exit $?" >> "$OUT/latency/runs.txt"
  fi
  if [[ " $STAGES " == *" interactive "* ]]; then
    dir="$OUT/latency/interactive-mlperf-$mode"
    # shellcheck disable=SC2086
    timeout "${T_RUN:-1200}" "$BIN/moeserve" bench "${SHAPE[@]}" --scenario interactive --scheduler slo \
      --find-peak --target-qps "${QPS_START:-0.3}" --find-peak-probe-duration "${PROBE_SECONDS:-60}" \
      --min-duration "${CONFIRM_SECONDS:-300}" --output-dir "$dir" "${spec[@]}" ${ENGINE:-} > "$dir.log" 2>&1
    echo "interactive $mode: exit $?" >> "$OUT/latency/runs.txt"
  fi
done

tar -czf "$OUT/latency.tar.gz" -C "$OUT" latency
echo "==== cuda_bench"
grep -E "^\| decode" "$OUT/latency/cuda-bench.log" 2>/dev/null
echo "==== moeserve bench (acceptance by the test switch at $ACCEPTANCE per position, k = $K, where eagle3)"
python3 - "$OUT"/latency/*/moeserve_result.json <<'EOF'
import json, sys
print("| run | validity | tokens/s | p90 latency s / p99 TTFT s | p99 TPOT ms | find-peak |")
print("|---|---|---|---|---|---|")
for path in sys.argv[1:]:
    try:
        r = json.load(open(path))
    except (OSError, ValueError) as e:
        print(f"| {path} | unreadable: {e} | | | | |")
        continue
    res = r["result"]
    name = path.split("/")[-2]
    tps = res.get("completed_tokens_per_second", res.get("tokens_per_second", 0))
    if "singlestream" in name:
        lat = f"{res.get('latency_ns', {}).get('p90', 0) / 1e9:.2f}"
    else:
        lat = f"{res.get('ttft_ns', {}).get('p99', 0) / 1e9:.2f}"
    tpot = res.get("tpot_ns", {}).get("p99", 0) / 1e6
    peak = r.get("find_peak", {}).get("outcome", "-")
    print(f"| {name} | {res.get('validity')} | {tps:.0f} | {lat} | {tpot:.1f} | {peak} |")
EOF
cat "$OUT/latency/runs.txt"

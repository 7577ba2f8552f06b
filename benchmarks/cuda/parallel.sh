#!/usr/bin/env bash
# Issue 20's multi-GPU measurement in one script, for a host of 2-8 H200s (the device tool's nvidia-h200-x2/x4/x8):
#   1. proof: runner_cuda_test's NCCL collectives over every GPU and the split CUDA runner against the CPU runner
#      (ranks sharing one GPU, then NCCL over several with graphs);
#   2. cuda_bench on the synthetic gpt-oss-120b at --tensor-parallel-size 1 and each N in SIZES that the host has:
#      decode at batch 1 / 8 / 64 @ 2k, beside N times one GPU's byte floor (an upper bound: every GPU also reads
#      the whole embedding and unembedding);
#      and with --enable-expert-parallel (whole experts a GPU) at each N > 1, to say which layout wins where;
#   3. moeserve bench Offline at 1,000 / 1,000 at the largest N, tokens/s per GPU against one GPU's.
# Logs and JSONs under $OUT/parallel (tarred); a table printed last. NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
#   SIZES ("2 4 8")  OFFLINE_SAMPLES (1,000 / 1,000 samples, 1024)  STAGES ("tests cuda_bench offline")
# Binaries from `BUILD_CUDA=1 scripts/build_static.sh` (build-cuda-static/), carried to the GPU host; NCCL from the
# host's Python venv (site-packages/nvidia/nccl/lib), opened by moeserve at run time.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
OUT=${OUT:-/tmp/moeserve-parallel}
BIN=${BIN:-build-cuda-static}
mkdir -p "$OUT/parallel"
for dir in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib \
           /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir:${LD_LIBRARY_PATH:-}"
done
export NCCL_NVLS_ENABLE=0
STAGES=${STAGES:-"tests cuda_bench offline"}
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
date -u +%FT%TZ | tee "$OUT/parallel/date.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/parallel/gpu.txt"
nvidia-smi topo -m > "$OUT/parallel/topology.txt" 2>&1
sizes=(1)
for n in ${SIZES:-2 4 8}; do [ "$n" -le "$gpus" ] && sizes+=("$n"); done

if [[ " $STAGES " == *" tests "* ]]; then
  test_bin=$BIN/runner_cuda_test  # a carried, flat bin/ holds it beside moeserve
  [ -x "$test_bin" ] || test_bin=$BIN/tests/runner/cuda/runner_cuda_test
  "$test_bin" --gtest_filter='NcclGroup*:*TensorParallelCuda*' \
    > "$OUT/parallel/tests.log" 2>&1
  echo "tests: exit $?" >> "$OUT/parallel/runs.txt"
fi

if [[ " $STAGES " == *" cuda_bench "* ]]; then
  for n in "${sizes[@]}"; do
    "$BIN/cuda_bench" --synthetic gpt-oss-120b --tensor-parallel-size "$n" --decode-batches 1,8,64 --prefill 1x8192 \
      --json "$OUT/parallel/cuda-bench-tp$n.json" > "$OUT/parallel/cuda-bench-tp$n.log" 2>&1
    echo "cuda_bench tp$n: exit $?" >> "$OUT/parallel/runs.txt"
    [ "$n" -gt 1 ] || continue
    # The other layout at the same size: whole experts a GPU (attention still split), to say which wins where.
    "$BIN/cuda_bench" --synthetic gpt-oss-120b --tensor-parallel-size "$n" --enable-expert-parallel \
      --decode-batches 1,8,64 --prefill 1x8192 --json "$OUT/parallel/cuda-bench-ep$n.json" \
      > "$OUT/parallel/cuda-bench-ep$n.log" 2>&1
    echo "cuda_bench ep$n: exit $?" >> "$OUT/parallel/runs.txt"
  done
fi

if [[ " $STAGES " == *" offline "* ]]; then
  for n in 1 "${sizes[-1]}"; do
    dir="$OUT/parallel/offline-1000-1000-tp$n"
    timeout "${T_RUN:-900}" "$BIN/moeserve" bench --synthetic gpt-oss-120b --device cuda --tensor-parallel-size "$n" \
      --benchmark gpt-oss-120b --scenario offline --dataset synthetic --synthetic-samples "${OFFLINE_SAMPLES:-1024}" \
      --synthetic-input 1000 --synthetic-output 1000 --performance-sample-count "${OFFLINE_SAMPLES:-1024}" \
      --min-query-count "${OFFLINE_SAMPLES:-1024}" --min-duration 0 --target-qps 1 --no-progress --output-dir "$dir" \
      > "$dir.log" 2>&1
    echo "offline tp$n: exit $?" >> "$OUT/parallel/runs.txt"
  done
fi

tar -czf "$OUT/parallel.tar.gz" -C "$OUT" parallel
echo
cat "$OUT/parallel/runs.txt"
grep -h "PASSED\|FAILED" "$OUT/parallel/tests.log" 2>/dev/null | tail -3
for n in "${sizes[@]}"; do
  echo "--- tensor parallel $n"
  grep -h "^| decode\|^| prefill" "$OUT/parallel/cuda-bench-tp$n.log" 2>/dev/null
  [ -f "$OUT/parallel/cuda-bench-ep$n.log" ] && echo "--- expert parallel $n" &&
    grep -h "^| decode\|^| prefill" "$OUT/parallel/cuda-bench-ep$n.log"
done
grep -h "Tokens per second\|Result is" "$OUT"/parallel/offline-*/mlperf_log_summary.txt 2>/dev/null

#!/usr/bin/env bash
# One run on an H200 host: check the CUDA runner, then time it. Stages (STAGES, in order):
#   tests     every CUDA test: kernels against the CPU reference ops, the runner against the CPU runner
#   bench20   cuda_bench on a synthetic gpt-oss-20b (decode batch 1/8/64/256 at 2k context, prefill 1x8k, 16x1k)
#   bench120  the same on a synthetic gpt-oss-120b
#   spec      speculative decoding's cost on a synthetic gpt-oss-120b with the synthetic EAGLE-3 head: verify steps
#             against decode steps, then tokens/s through the engine at batch 1/8/32, k = 1/3/7, acceptance
#             0.5/0.7/0.9 (docs/PERF.md)
#   sanitize  compute-sanitizer memcheck and racecheck (SANITIZERS) over the kernel tests
#   attention attention_bench: decode attention alone (batch 1..1,024, contexts 1k-8k, bf16 and fp8 KV), prefill 1 x 8k
#   moe       moe_bench: every expert GEMM path at 1..1,024 rows per expert, uniform and skewed (MOE_ARGS: more flags)
#   breakdown step_breakdown (BREAKDOWN_ARGS): GPU time by kernel class beside each class's floor
#   throughput benchmarks/cuda/throughput.sh (its RUNS / ROUTERS / ENGINE variables): moeserve bench Offline
#   server    benchmarks/cuda/server_search.sh: the highest VALID Server target_qps at the MLPerf shape
#   deepseek  deepseek_layer_bench: one DeepSeek-R1 dense and one MoE layer at full width (decode batch 1..1,024 @ 2k,
#             prefill 1 x 4k and 16 x 1k) beside their floors, for each routed-expert version in DEEPSEEK_EXPERTS
#             (default "v1 v2"), then deepseek_projection's 8 x H200 projection from each (issue 17); MLA prefill in
#             the runner's default form, expanded (MOESERVE_DEEPSEEK_MLA_PREFILL=absorbed in the environment for the
#             other)
#   deepseek-prefill  deepseek_layer_bench's prefill rows (1 x 4k, 16 x 1k) with the routed experts' version 2 (the
#             runner's default, named here all the same), once with each MLA prefill form in MLA_PREFILL_FORMS
#             (default "absorbed expanded"; the runner's default is expanded), for the per-layer A/B
#   mla-attention  the same prefill rows in the expanded form with --breakdown (each layer's kernel classes beside
#             their floors), once with each MLA prefill attention kernel in MLA_ATTENTION_VERSIONS (default "v1 v2
#             v3": mma.sync; wgmma, 64 rows a block; wgmma, 128 rows in two warpgroups)
# Each stage runs under a time limit (T_TESTS, T_BENCH, T_SANITIZE seconds) so a hang cannot eat the lease.
# Binaries come from BUILD_CUDA=1 scripts/build_static.sh (built here when missing: the GPU host has no
# development packages, so build elsewhere and carry build-cuda-static). Logs and JSON go to $OUT; a summary
# (error bounds, test verdicts, speed tables) is printed last. The runner tests' tiny checkpoints include the
# tokenizer, so they need o200k_base.tiktoken (scripts/setup.sh fetches it into build/): carry it to
# $BIN/o200k_base.tiktoken or set MOESERVE_O200K_RANKS.
set -uo pipefail
cd "$(dirname "$0")/../.."
FINAL_OUT=${OUT:-/tmp/moeserve-cuda}
OUT=$FINAL_OUT/run  # everything goes here, then into one archive ($FINAL_OUT/run.tar.gz) and a summary
mkdir -p "$OUT"
BIN=${BIN:-build-cuda-static}
# Binaries may travel as one archive (the device tool carries at most 64 MiB): BIN_ARCHIVE=FILE.tar.xz holding bin/.
if [ -n "${BIN_ARCHIVE:-}" ]; then
  mkdir -p "$BIN" && tar -xJf "$BIN_ARCHIVE" -C "$BIN" --strip-components=1 && mkdir -p "$BIN/tests/runner/cuda" &&
    mv -f "$BIN/runner_cuda_test" "$BIN/tests/runner/cuda/" 2>/dev/null
fi
TEST=$BIN/tests/runner/cuda/runner_cuda_test
[ -x $BIN/cuda_bench ] || BUILD_CUDA=1 scripts/build_static.sh
for dir in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir:${LD_LIBRARY_PATH:-}"
done
export MOESERVE_O200K_RANKS=${MOESERVE_O200K_RANKS:-$PWD/$BIN/o200k_base.tiktoken}
date -u +%FT%TZ | tee "$OUT/date.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"

for stage in ${STAGES:-tests bench20 bench120 sanitize}; do
  start=$(date +%s)
  case $stage in
    tests) timeout ${T_TESTS:-900} $TEST ${TEST_FILTER:+--gtest_filter=$TEST_FILTER} > "$OUT/tests.log" 2>&1 ;;
    bench20) timeout ${T_BENCH:-600} $BIN/cuda_bench --synthetic gpt-oss-20b --json "$OUT/bench-20b.json" ${BENCH_ARGS:-} > "$OUT/bench-20b.log" 2>&1 ;;
    bench120) timeout ${T_BENCH:-600} $BIN/cuda_bench --synthetic gpt-oss-120b --json "$OUT/bench-120b.json" ${BENCH_ARGS:-} > "$OUT/bench-120b.log" 2>&1 ;;
    spec) timeout ${T_BENCH:-600} $BIN/cuda_bench --synthetic gpt-oss-120b --decode-batches 1 --prefill none \
            --verify-tokens 2,4,8 --spec-batches 1,8,32 --spec-engine-batches 1,8,32 --spec-k 1,3,7 \
            --spec-acceptance 0.5,0.7,0.9 --json "$OUT/bench-spec.json" > "$OUT/bench-spec.log" 2>&1 ;;
    attention) timeout ${T_BENCH:-600} $BIN/attention_bench --json "$OUT/attention.json" > "$OUT/attention.log" 2>&1 ;;
    moe) timeout ${T_BENCH:-600} $BIN/moe_bench --json "$OUT/moe.json" ${MOE_ARGS:-} > "$OUT/moe.log" 2>&1 ;;
    breakdown) timeout ${T_BENCH:-600} $BIN/step_breakdown ${BREAKDOWN_ARGS:---decode 1@2048,256@2048,1024@1500} \
                 --json "$OUT/breakdown.json" > "$OUT/breakdown.log" 2>&1 ;;
    throughput) OUT=$OUT/throughput BIN=$BIN benchmarks/cuda/throughput.sh > "$OUT/throughput.log" 2>&1 ;;
    server) OUT=$OUT/server BIN=$BIN benchmarks/cuda/server_search.sh > "$OUT/server.log" 2>&1 ;;
    deepseek)
      for version in ${DEEPSEEK_EXPERTS:-v1 v2}; do
        MOESERVE_DEEPSEEK_EXPERTS=$version timeout ${T_BENCH:-600} $BIN/deepseek_layer_bench \
          --json "$OUT/deepseek-layers-$version.json" > "$OUT/deepseek-layers-$version.log" 2>&1
        echo "deepseek_layer_bench experts $version: exit $?" >> "$OUT/deepseek.log"
      done ;;
    deepseek-prefill)
      for form in ${MLA_PREFILL_FORMS:-absorbed expanded}; do
        MOESERVE_DEEPSEEK_EXPERTS=v2 MOESERVE_DEEPSEEK_MLA_PREFILL=$form timeout ${T_BENCH:-600} $BIN/deepseek_layer_bench \
          --decode-batches 1 --verify-tokens 0 --prefill 1x4096,16x1024 --json "$OUT/deepseek-prefill-$form.json" \
          > "$OUT/deepseek-prefill-$form.log" 2>&1
        echo "deepseek_layer_bench prefill $form: exit $?" >> "$OUT/deepseek.log"
      done ;;
    mla-attention)
      for version in ${MLA_ATTENTION_VERSIONS:-v1 v2 v3}; do
        MOESERVE_MLA_PREFILL_ATTENTION=$version timeout ${T_BENCH:-600} $BIN/deepseek_layer_bench --decode-batches 1 \
          --verify-tokens 0 --prefill 1x4096,16x1024 --reps 5 --breakdown \
          --json "$OUT/deepseek-mla-attention-$version.json" > "$OUT/deepseek-mla-attention-$version.log" 2>&1
        echo "deepseek_layer_bench MLA prefill attention $version: exit $?" >> "$OUT/deepseek.log"
      done ;;
    sanitize)
      for tool in ${SANITIZERS:-memcheck racecheck}; do
        timeout ${T_SANITIZE:-600} compute-sanitizer --tool $tool --error-exitcode 9 $TEST \
          --gtest_filter="${SANITIZE_FILTER:-CudaKernels*:CudaAttention*:CudaMoe*}" > "$OUT/sanitize-$tool.log" 2>&1
        echo "compute-sanitizer $tool: exit $?" >> "$OUT/sanitize.log"
      done ;;
  esac
  echo "stage $stage: exit $?, $(( $(date +%s) - start )) s" | tee -a "$OUT/stages.log"
done

echo "==== summary"
cat "$OUT/stages.log"
[ -f "$OUT/tests.log" ] && grep -hE "error-bound|greedy|^\[  (FAILED|PASSED|SKIPPED) \]|Failure|error:" "$OUT/tests.log" | head -120
[ -f "$OUT/sanitize.log" ] && cat "$OUT/sanitize.log" && grep -h "ERROR SUMMARY" "$OUT"/sanitize-*.log
for f in "$OUT"/bench-*.log; do [ -f "$f" ] && grep -vE "^\s+(decode|prefill)" "$f"; done
for f in attention moe; do [ -f "$OUT/$f.log" ] && echo "==== $f" && tail -${TABLE_LINES:-40} "$OUT/$f.log"; done
[ -f "$OUT/breakdown.log" ] && grep -E "^\||^[a-z]|wall" "$OUT/breakdown.log"
[ -f "$OUT/throughput.log" ] && sed -n '/==== Offline/,$p' "$OUT/throughput.log"
[ -f "$OUT/server.log" ] && sed -n '/==== Server/,$p' "$OUT/server.log"
[ -f "$OUT/deepseek.log" ] && cat "$OUT/deepseek.log" && tail -${TABLE_LINES:-40} "$OUT"/deepseek-layers-*.log "$OUT"/deepseek-prefill-*.log "$OUT"/deepseek-mla-attention-*.log 2>/dev/null
tar -czf "$FINAL_OUT/run.tar.gz" -C "$FINAL_OUT" run && rm -rf "$OUT"
exit 0

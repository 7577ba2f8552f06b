#!/usr/bin/env bash
# Runs each libFuzzer target (fuzz/) for a bounded time; CI runs them briefly (scripts/test.sh).
#   FUZZ_SECONDS=N     seconds per target (default 60)
#   FUZZ_TARGETS="..." which targets (default: all of the table below that the build has)
#   BUILD_DIR=...      where the ordinary build keeps o200k_base.tiktoken (default build; scripts/setup.sh makes it)
# Builds with clang into build-fuzz/ (ASan, UBSan and libFuzzer's coverage); findings land in build-fuzz/findings/
# and make the script fail.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
ranks="${BUILD_DIR:-build}/o200k_base.tiktoken"
[ -f "$ranks" ] || { echo "fuzz: $ranks is missing: run scripts/setup.sh first" >&2; exit 1; }
command -v clang++ >/dev/null 2>&1 || {
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq clang >/dev/null
}
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DMOESERVE_FUZZ=ON -DMOESERVE_CUDA=OFF -DMOESERVE_O200K_RANKS="$(realpath "$ranks")" \
  -DMOESERVE_DEEPSEEK_TOKENIZER_DIR="$(realpath -m "${BUILD_DIR:-build}/deepseek-r1-tokenizer")" \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" >/dev/null

# target | seed files | libFuzzer's -max_len [| more libFuzzer flags]
table=(
  "openai_request_fuzz|tests/fixtures/openai_requests/*.json|65536|-dict=fuzz/openai_request.dict"
  "tokenizer_fuzz|tests/fixtures/harmony/*.txt tests/tokenizer/corpus_seed.txt|4096"
  "harmony_parser_fuzz|tests/fixtures/harmony/*.txt tests/tokenizer/corpus_seed.txt|4096"
  "http_request_fuzz|tests/fixtures/http/*.req|8192"
  "sandbox_fuzz|tests/fixtures/sandbox_fuzz/*.bin|4096"
  "attn_fuzz|tests/fixtures/attn/*.bin|4096"
  "moegemm_fuzz|tests/fixtures/moegemm/*.bin|256"
  "config_fuzz|tests/fixtures/loaders/config/*|8192"
  "safetensors_fuzz|tests/fixtures/loaders/safetensors/*|8192"
  "parquet_fuzz|tests/bench/fixtures/parquet/*|8192"
  "bench_fuzz|tests/fixtures/bench_fuzz/*.bin|4096"
  "deepseek_fuzz|tests/fixtures/deepseek_fuzz/*.bin|4096"
)
# The safetensors target writes each input to a file: on tmpfs where there is one.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ]; then export TMPDIR=/dev/shm; fi
available=$(cmake --build build-fuzz --target help | sed -n 's/^\([a-z_]*_fuzz\):.*/\1/p')
mkdir -p build-fuzz/findings
for row in "${table[@]}"; do
  IFS='|' read -r target seeds max_len flags <<<"$row"
  if [ -n "${FUZZ_TARGETS:-}" ] && [[ " $FUZZ_TARGETS " != *" $target "* ]]; then continue; fi
  if ! grep -qx "$target" <<<"$available"; then echo "fuzz: $target is not in this build (skipped)"; continue; fi
  cmake --build build-fuzz --target "$target"
  corpus="build-fuzz/corpus/$target"
  mkdir -p "$corpus"
  # shellcheck disable=SC2086
  cp $seeds "$corpus"/
  echo "fuzz: $target for ${seconds}s"
  # shellcheck disable=SC2086
  "build-fuzz/fuzz/$target" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=4096 ${flags:-} \
    -artifact_prefix=build-fuzz/findings/"$target"- -print_final_stats=1 "$corpus"
done
echo "fuzz: no crashes"

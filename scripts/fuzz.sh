#!/usr/bin/env bash
# Runs each libFuzzer target (fuzz/) for a bounded time: not part of CI's default run.
#   FUZZ_SECONDS=N   seconds per target (default 60)
#   BUILD_DIR=...    where the ordinary build keeps o200k_base.tiktoken (default build; scripts/setup.sh makes it)
# Builds with clang into build-fuzz/ (ASan, UBSan and libFuzzer's coverage); findings land in build-fuzz/findings/.
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
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" >/dev/null
cmake --build build-fuzz --target tokenizer_fuzz harmony_parser_fuzz
mkdir -p build-fuzz/findings
for target in tokenizer_fuzz harmony_parser_fuzz; do
  corpus="build-fuzz/corpus/$target"
  mkdir -p "$corpus"
  cp tests/fixtures/harmony/*.txt tests/tokenizer/corpus_seed.txt "$corpus"/
  echo "fuzz: $target for ${seconds}s"
  "build-fuzz/fuzz/$target" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=4096 \
    -artifact_prefix=build-fuzz/findings/"$target"- -print_final_stats=1 "$corpus"
done
# bench_fuzz: the bench's reading of server responses, seeded with streams of both APIs (tests/fixtures/bench_fuzz).
cmake --build build-fuzz --target bench_fuzz
mkdir -p build-fuzz/corpus/bench_fuzz
cp tests/fixtures/bench_fuzz/*.bin build-fuzz/corpus/bench_fuzz/
echo "fuzz: bench_fuzz for ${seconds}s"
build-fuzz/fuzz/bench_fuzz -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=4096 \
  -artifact_prefix=build-fuzz/findings/bench_fuzz- -print_final_stats=1 build-fuzz/corpus/bench_fuzz
echo "fuzz: no crashes"

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
deepseek_tokenizer="${BUILD_DIR:-build}/deepseek-r1-tokenizer"
[ -f "$deepseek_tokenizer/tokenizer.json" ] || { echo "fuzz: $deepseek_tokenizer is missing: run scripts/setup.sh first" >&2; exit 1; }
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DMOESERVE_FUZZ=ON -DMOESERVE_CUDA=OFF -DMOESERVE_O200K_RANKS="$(realpath "$ranks")" \
  -DMOESERVE_DEEPSEEK_TOKENIZER_DIR="$(realpath "$deepseek_tokenizer")" \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" >/dev/null
cmake --build build-fuzz --target tokenizer_fuzz harmony_parser_fuzz
# attn: the step metadata (needs the CUDA toolkit's headers; fuzz/CMakeLists.txt skips it without them).
attn_targets=()
if cmake --build build-fuzz --target help | grep -q '^attn_fuzz:'; then
  cmake --build build-fuzz --target attn_fuzz
  attn_targets=(attn_fuzz)
fi
mkdir -p build-fuzz/findings
for target in tokenizer_fuzz harmony_parser_fuzz "${attn_targets[@]}"; do
  corpus="build-fuzz/corpus/$target"
  mkdir -p "$corpus"
  case "$target" in
    attn_fuzz) cp tests/fixtures/attn/*.bin "$corpus"/ ;;
    *) cp tests/fixtures/harmony/*.txt tests/tokenizer/corpus_seed.txt "$corpus"/ ;;
  esac
  echo "fuzz: $target for ${seconds}s"
  "build-fuzz/fuzz/$target" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=4096 \
    -artifact_prefix=build-fuzz/findings/"$target"- -print_final_stats=1 "$corpus"
done
# sandbox: the LiveCodeBench report and output comparisons, seeded from tests/fixtures/sandbox_fuzz.
cmake --build build-fuzz --target sandbox_fuzz
mkdir -p build-fuzz/corpus/sandbox_fuzz
cp tests/fixtures/sandbox_fuzz/*.bin build-fuzz/corpus/sandbox_fuzz/
echo "fuzz: sandbox_fuzz for ${seconds}s"
build-fuzz/fuzz/sandbox_fuzz -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=4096 \
  -artifact_prefix=build-fuzz/findings/sandbox_fuzz- -print_final_stats=1 build-fuzz/corpus/sandbox_fuzz
# deepseek: config.json, R1's tokenizer and replies, merges-list tokenizer.json; seeds in tests/fixtures/deepseek_fuzz.
cmake --build build-fuzz --target deepseek_fuzz
mkdir -p build-fuzz/corpus/deepseek_fuzz
cp tests/fixtures/deepseek_fuzz/*.bin build-fuzz/corpus/deepseek_fuzz/
echo "fuzz: deepseek_fuzz for ${seconds}s"
build-fuzz/fuzz/deepseek_fuzz -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=4096 \
  -artifact_prefix=build-fuzz/findings/deepseek_fuzz- -print_final_stats=1 build-fuzz/corpus/deepseek_fuzz
echo "fuzz: no crashes"

#!/usr/bin/env bash
# Tokenizer encode throughput, moeserve beside tiktoken (npm, WASM), both single-threaded on the same corpus.
# Run after scripts/setup.sh. BUILD_DIR selects the build (default build).
set -euo pipefail
cd "$(dirname "$0")/../.."
build_dir=${BUILD_DIR:-build}
cmake --build "$build_dir" --target tokenizer_encode_bench >/dev/null
corpus=$(mktemp --suffix=.txt)
trap 'rm -f "$corpus"' EXIT
"$build_dir/benchmarks/tokenizer/tokenizer_encode_bench" --write-corpus "$corpus"
echo "corpus: tests/tokenizer/corpus.h, $(stat -c %s "$corpus") bytes; $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $(date -u +%Y-%m-%d)"
"$build_dir/benchmarks/tokenizer/tokenizer_encode_bench" --corpus "$corpus"
node benchmarks/tokenizer/tiktoken_bench.mjs "$corpus"

#!/usr/bin/env bash
# Sets up and builds like scripts/setup.sh, then runs every test (ctest) with one job per core.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"
# The engine's randomised stress test runs again under AddressSanitizer and UBSan.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DMOESERVE_SANITIZE=ON -DMOESERVE_CUDA=OFF >/dev/null
cmake --build build-asan --target engine_stress_test runner_kv_blocks_test
build-asan/tests/engine/engine_stress_test
build-asan/tests/runner/runner_kv_blocks_test
# Every libFuzzer target briefly (clang, ASan and UBSan; scripts/fuzz.sh runs them for longer by hand).
FUZZ_SECONDS=${FUZZ_SECONDS:-10} scripts/fuzz.sh

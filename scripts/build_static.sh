#!/usr/bin/env bash
# A statically linked, portable (x86-64-v3) moeserve in build-static/, for machines without the project's
# Debian packages (the GPU host). CUDA sources are built only when BUILD_CUDA=1.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-static -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOESERVE_MARCH=x86-64-v3 \
  -DMOESERVE_CUDA="$([ "${BUILD_CUDA:-0}" = 1 ] && echo ON || echo OFF)" \
  -DCMAKE_EXE_LINKER_FLAGS="-static" -DOPENSSL_USE_STATIC_LIBS=TRUE -DMOESERVE_FMT_HEADER_ONLY=ON >/dev/null
cmake --build build-static --target moeserve

#!/usr/bin/env bash
# A statically linked, portable (x86-64-v3) moeserve in build-static/, for machines without the project's
# Debian packages (the GPU host). With BUILD_CUDA=1: build-cuda-static/ with the CUDA runner, its tests
# (runner_cuda_test) and benchmark (cuda_bench); these link glibc and cuBLASLt dynamically (a static
# program cannot load cuBLASLt, which comes with the GPU host's CUDA) and everything else statically.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${BUILD_CUDA:-0}" = 1 ]; then
  cmake -S . -B build-cuda-static -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOESERVE_MARCH=x86-64-v3 -DMOESERVE_CUDA=ON \
    -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" -DOPENSSL_USE_STATIC_LIBS=TRUE \
    -DMOESERVE_FMT_HEADER_ONLY=ON -DMOESERVE_STATIC_LIBS=ON >/dev/null
  targets=${TARGETS:-moeserve runner_cuda_test cuda_bench}
  cmake --build build-cuda-static --target $targets
  exit 0
fi
cmake -S . -B build-static -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOESERVE_MARCH=x86-64-v3 -DMOESERVE_CUDA=OFF \
  -DCMAKE_EXE_LINKER_FLAGS="-static" -DOPENSSL_USE_STATIC_LIBS=TRUE -DMOESERVE_FMT_HEADER_ONLY=ON \
  -DMOESERVE_STATIC_LIBS=ON >/dev/null
cmake --build build-static --target ${TARGETS:-moeserve}

#!/usr/bin/env bash
# CPU runner and engine figures on a quiet machine (the GPU host's CPU, via the device tool): generate_bench.sh
# with the runner pinned to 2 cores (like the CI machine) and to all cores, engine_throughput on the tiny model
# pinned to 2 cores, and the host's memory copy bandwidth (the roofline of memory-bound CPU decode).
#   build here first: scripts/build_static.sh plus `cmake --build build-static --target engine_throughput`
#   carry: build-static/moeserve, build-static/benchmarks/engine/engine_throughput, build/o200k_base.tiktoken
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp}
export MOESERVE_O200K_RANKS=$PWD/build/o200k_base.tiktoken
root=/dev/shm/moeserve-bench
cores=$(nproc)
{
  echo "== host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $cores cores, $(date -u +%FT%TZ)"
  echo "== memory copy bandwidth (torch, bytes read + written)"
  python3 - <<'PY' || echo "(no torch: bandwidth not measured)"
import time, torch
src = torch.rand(1 << 29)  # 2 GiB of fresh random floats
dst = torch.empty_like(src)
for threads in (1, 2, 16):
    torch.set_num_threads(threads)
    dst.copy_(src)
    best = min((lambda t0: (dst.copy_(src), time.perf_counter() - t0)[1])(time.perf_counter()) for _ in range(5))
    print(f"copy threads={threads}: {2 * src.numel() * 4 / best / 1e9:.1f} GB/s")
PY
  for threads in 2 "$cores"; do
    echo "== generate_bench.sh, runner threads $threads pinned to cores 0-$((threads - 1))"
    THREADS=$threads MOESERVE="taskset -c 0-$((threads - 1)) build-static/moeserve" benchmarks/cpu/generate_bench.sh "$root"
  done
  echo "== engine_throughput on the tiny model, 2 threads pinned to cores 0-1"
  taskset -c 0-1 build-static/benchmarks/engine/engine_throughput --model "$root/tiny" --threads 2 \
    --concurrency 1,4,16,64 --shared-prefix 1000
} 2>&1 | tee "$out/cpu_bench.log"

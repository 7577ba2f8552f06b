// Thin wrappers over the sm_90a instructions of the warp-specialised expert GEMMs: mbarriers (the producer /
// consumer hand-off), the async-proxy fence, cp.async of 4 bytes, register reallocation between warpgroups, and
// wgmma (fence, commit, wait, and m64nNk16 bf16 -> fp32 with operands from shared memory or A from registers).
// PTX ISA 9.7.13.15 (mbarrier), 9.7.15 (wgmma), 9.7.19.5 (setmaxnreg).
#pragma once

#include <cstdint>
#include <type_traits>

#include "runner/cuda/device_common.cuh"
#include "runner/cuda/moe_layout.h"
#include "runner/cuda/moe_plan.h"
#include "runner/cuda/sm90.cuh"  // named barriers

namespace moeserve::cuda {

// ---- mbarrier -----------------------------------------------------------------------------------------------------
__device__ __forceinline__ void mbarrier_init(uint64_t* barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(barrier)), "r"(arrivals) : "memory");
}
// Makes the initialisations visible before any thread uses the barriers (with the __syncthreads that follows).
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// Arrive (release: this thread's prior memory accesses are visible to whoever sees the phase complete).
__device__ __forceinline__ void mbarrier_arrive(uint64_t* barrier) {
  asm volatile("{\n .reg .b64 state;\n mbarrier.arrive.shared::cta.b64 state, [%0];\n}" ::"r"(shared_address(barrier))
               : "memory");
}
// The barrier's current phase also waits for every cp.async this thread issued so far: its pending count is raised by
// one now and lowered when those copies have landed (cp.async.mbarrier.arrive without .noinc: no net arrival), and
// the copies' data is visible to the threads that then see the phase complete (PTX ISA 9.7.9.25.3.2).
__device__ __forceinline__ void cp_async_mbarrier_arrive(uint64_t* barrier) {
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];" ::"r"(shared_address(barrier)) : "memory");
}
__device__ __forceinline__ bool mbarrier_try_wait(uint64_t* barrier, uint32_t parity) {
  uint32_t done = 0;
  asm volatile(
      "{\n .reg .pred complete;\n mbarrier.try_wait.parity.shared::cta.b64 complete, [%1], %2, 10000000;\n"
      " selp.u32 %0, 1, 0, complete;\n}"
      : "=r"(done)
      : "r"(shared_address(barrier)), "r"(parity)
      : "memory");
  return done != 0;
}
// Waits (acquire) until the phase of parity `parity` has completed. A fresh barrier is in phase 0, and parity 1
// names the phase before it, which counts as complete: a producer's first wait on an empty slot passes at once.
__device__ __forceinline__ void mbarrier_wait(uint64_t* barrier, uint32_t parity) {
  while (!mbarrier_try_wait(barrier, parity)) {
  }
}
// The same, but a phase that has not completed after ~2^36 cycles (over 30 s; a pipeline step takes microseconds)
// means a broken hand-off: the kernel traps, so the launch fails with an error instead of hanging the process.
// Not inside a wgmma pipeline whose A operand comes from registers: there ptxas then serialises the wgmmas (C7513).
__device__ __forceinline__ void mbarrier_wait_or_trap(uint64_t* barrier, uint32_t parity) {
  if (mbarrier_try_wait(barrier, parity)) return;
  const long long start = clock64();
  while (!mbarrier_try_wait(barrier, parity))
    if (clock64() - start > (1ll << 36)) __trap();
}

// Orders this thread's prior generic-proxy shared-memory writes (st.shared, and cp.async data it waited for)
// before later async-proxy accesses such as wgmma's operand reads (PTX ISA 9.7.15.4).
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// ---- the stage ring ------------------------------------------------------------------------------------------------
// The first swizzle-atom boundary of the dynamic shared memory (whose size carries kSwizzleAtomBytes of slack):
// wgmma's 128-byte swizzle wants its tiles 1024-byte aligned.
__device__ __forceinline__ unsigned char* swizzle_aligned(unsigned char* dynamic_shared) {
  return dynamic_shared + ((kSwizzleAtomBytes - (shared_address(dynamic_shared) & (kSwizzleAtomBytes - 1))) &
                           (kSwizzleAtomBytes - 1));
}

// `stages` pairs of stage barriers: full[i] completes when `producers` threads arrived (the stage is filled),
// empty[i] when `consumers` arrivals came (a lane per warp, or every thread: it was read). Every thread of the CTA
// calls it: it ends in __syncthreads.
__device__ __forceinline__ void init_stage_barriers(uint64_t* full, uint64_t* empty, int stages, int producers,
                                                    int consumers) {
  if (threadIdx.x == 0) {
    for (int i = 0; i < stages; ++i) {
      mbarrier_init(&full[i], producers);
      mbarrier_init(&empty[i], consumers);
    }
    mbarrier_init_fence();
  }
  __syncthreads();
}

// A persistent CTA takes items blockIdx.x, blockIdx.x + gridDim.x, ... below `items`: this many.
__device__ __forceinline__ int cta_item_count(int items) {
  const int first = static_cast<int>(blockIdx.x);
  return items > first ? (items - first + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x) : 0;
}

// A persistent expert GEMM's work item: row tile `item / weight_tiles` of the launch's tiles (moe_class_tile_count:
// all of the grouping's, or one class's; rows of one expert, at most tile_rows) x weight rows from
// (item % weight_tiles) * weight_rows.
struct MoeItem {
  int expert, row0, rows;
  int64_t n0;
};
__device__ __forceinline__ MoeItem moe_item_at(const MoeGemmParams& p, int item, int weight_tiles, int tile_rows,
                                               int weight_rows) {
  const int tile = item / weight_tiles + moe_class_tile_base(p.routing);
  MoeItem it;
  it.expert = p.routing.tile_expert[tile];
  it.row0 = p.routing.tile_row0[tile];
  it.rows = min(tile_rows, p.routing.expert_offsets[it.expert + 1] - it.row0);
  it.n0 = static_cast<int64_t>(item % weight_tiles) * weight_rows;
  return it;
}

// The launchers' common start: the shape check, nothing to do for no rows, then launch(std::bool_constant<swiglu>).
template <typename Launch>
void launch_checked(const char* kernel, const MoeGemmParams& p, Launch&& launch) {
  check_moe_gemm_shape(kernel, p.rows, p.w.out_features, p.w.in_features, p.routing.num_experts);
  if (p.rows == 0) return;
  if (p.swiglu)
    launch(std::true_type{});
  else
    launch(std::false_type{});
}

// Lets kernel kKernel use `bytes` of dynamic shared memory on the current device (cuda_check.h: once per kernel
// and device).
template <auto kKernel>
void allow_dynamic_shared_memory(int bytes) {
  allow_dynamic_shared_memory(reinterpret_cast<const void*>(kKernel), bytes);
}

// ---- cp.async --------------------------------------------------------------------------------------------------------
// 4 bytes global -> shared through L1, to a shared-space address; `bytes` 0 zero-fills (`source` is not read).
__device__ __forceinline__ void cp_async_4_to(uint32_t destination, const void* source, uint32_t bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(destination), "l"(source), "r"(bytes));
}
// The same to a generic pointer into shared memory; zero-filled when !valid.
__device__ __forceinline__ void cp_async_4(void* destination, const void* source, bool valid) {
  cp_async_4_to(shared_address(destination), source, valid ? 4 : 0);
}
// 16 bytes to a shared-space address. No memory clobber, so that loads of shared memory may move above it: a caller
// orders it before a hand-off by an asm volatile (an mbarrier arrive), which the compiler keeps in order.
__device__ __forceinline__ void st_shared_16(uint32_t destination, uint32_t v0, uint32_t v1, uint32_t v2, uint32_t v3) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(destination), "r"(v0), "r"(v1), "r"(v2), "r"(v3));
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait_pending() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// ---- register reallocation ---------------------------------------------------------------------------------------
// Every warp of a warpgroup must run the same one; the kernel needs __launch_bounds__(threads, 1) so that ptxas
// knows the register count at entry (otherwise it ignores setmaxnreg).
template <int kRegisters>
__device__ __forceinline__ void warpgroup_registers_release() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void warpgroup_registers_claim() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// ---- wgmma -------------------------------------------------------------------------------------------------------------
// Before the first wgmma of a batch whose accumulator or A registers other instructions touched.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accesses of these registers across a wgmma issue or wait (they are written
// asynchronously; the asm statements above do not name them).
template <int kCount>
__device__ __forceinline__ void wgmma_fence_registers(float (&registers)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(registers[i])::"memory");
}
template <int kArrays, int kCount>
__device__ __forceinline__ void wgmma_fence_registers(float (&registers)[kArrays][kCount]) {
#pragma unroll
  for (int i = 0; i < kArrays; ++i) wgmma_fence_registers(registers[i]);
}

// d (+)= a * b for m64 n{N} k16, bf16 operands, fp32 accumulators; a and b K-major in shared memory (descriptors).
// accumulate = false overwrites d. Fragment of d: register 4j + 2h + i holds row g + 8h of the warp's 16 rows,
// column 8j + 2c + i (g = lane / 4, c = lane % 4; CuTe's CLayout_64xN).
__device__ __forceinline__ void wgmma_m64n192k16_ss(float (&d)[96], uint64_t a, uint64_t b, bool accumulate);
// The same for m64 n192 k32 with e4m3 operands (FP8 has no transposed forms: both K-major, as here).
__device__ __forceinline__ void wgmma_m64n192k32_e4m3_ss(float (&d)[96], uint64_t a, uint64_t b, bool accumulate);
// m64 n128 k16, bf16, both operands in shared memory (the grouped GEMM's 256-row tiles).
__device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[64], uint64_t a, uint64_t b, bool accumulate);

// The same with A from registers (four bf16x2: rows g / g + 8, k pairs c / c + 4), for n = 8, 16, 32, 64, 128.
template <int kN>
__device__ __forceinline__ void wgmma_m64k16_rs(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t b,
                                                bool accumulate);

}  // namespace moeserve::cuda

#include "runner/cuda/moe_wgmma_instructions.cuh"

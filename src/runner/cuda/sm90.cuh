// Hopper (sm_90a) instructions the prefill attention kernel uses, as thin wrappers: warpgroup matrix products
// (wgmma) with operand B in shared memory behind a matrix descriptor, the mbarriers of a producer/consumer
// pipeline, register reallocation between warpgroups (setmaxnreg) and the proxy fence that makes ordinary
// shared-memory stores visible to wgmma. Facts from the PTX ISA (9.0), "Asynchronous Warpgroup Level Matrix
// Multiply-Accumulate Instructions", "mbarrier" and "membar/fence".
#pragma once

#include <cstdint>

#include "runner/cuda/device_common.cuh"

namespace moeserve::cuda::sm90 {

// ---- mbarriers (shared memory, CTA scope) ----------------------------------------------------------------------
__device__ __forceinline__ void mbarrier_init(uint64_t* barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(barrier)), "r"(arrivals) : "memory");
}
// Makes the initialised barriers visible to the other threads (and the async proxy) before they use them.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival, with release semantics: the caller's earlier memory accesses happen before the phase completes.
__device__ __forceinline__ void mbarrier_arrive(uint64_t* barrier) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(shared_address(barrier))
               : "memory");
}
// Waits (acquire) until the phase of the given parity has completed. The loop stays inside one asm block, so the
// threads leave it together as far as the compiler sees (the wgmma that follow must be issued converged).
__device__ __forceinline__ void mbarrier_wait(uint64_t* barrier, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1, 10000000;\n"
      "@!done bra wait;\n}\n" ::"r"(shared_address(barrier)),
      "r"(parity)
      : "memory");
}

// Generic-proxy writes to shared memory (st.shared, cp.async) made visible to the async proxy, which wgmma reads
// through; the writing thread runs it after its writes have landed and before it signals the consumers.
__device__ __forceinline__ void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// ---- named barriers (bar 0 is __syncthreads') ------------------------------------------------------------------
// bar.sync waits until `threads` threads (a multiple of 32) have reached barrier `id` by bar.sync or bar.arrive;
// bar.arrive counts the caller without waiting. Two warpgroups take turns with them (one syncs, the other arrives).
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- registers per thread for the warpgroup that runs it (all its warps run the same one) ----------------------
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// ---- cp.async groups -----------------------------------------------------------------------------------------------
template <int kPending>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// ---- wgmma --------------------------------------------------------------------------------------------------------
// Shared-memory matrix descriptor for the 128-byte swizzle: rows of 128 bytes whose 16-byte chunks are permuted as
// chunk ^ (row % 8) within each 1024-byte group of 8 rows (groups 1024-byte aligned). Fields: start address, leading
// and stride byte offsets (all >> 4), swizzle mode 1 (128B) in bits 62-63. With K-major operands (rows along N) the
// stride offset is the distance between 8-row groups and the leading offset is unused; with MN-major operands
// (rows along K) the stride offset is the distance between 8-row groups of K and the leading offset the distance
// between 64-element column groups, unused when N is 64 (CUTLASS's canonical GMMA layouts, cute/atom/
// mma_traits_sm90_gmma.hpp, describe the same).
__device__ __forceinline__ uint64_t sw128_descriptor(uint32_t shared_byte_address, uint32_t stride_bytes) {
  return static_cast<uint64_t>((shared_byte_address & 0x3ffffu) >> 4) | static_cast<uint64_t>(1) << 16 |
         static_cast<uint64_t>(stride_bytes >> 4) << 32 | static_cast<uint64_t>(1) << 62;
}

// Orders this warpgroup's register accesses before the wgmma that follow (accumulators, A fragments).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most kPending committed groups of this warpgroup are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Ties registers to this point of the instruction stream, so the compiler neither reads accumulators before the
// wgmma_wait that completes them nor moves their updates across it.
template <int N>
__device__ __forceinline__ void fence_registers(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_registers(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// The 16-bit input type of a wgmma: bf16, or fp16 (the prefill attention over an fp8 cache: e4m3 values are exact
// in fp16 and convert to it in one instruction).
#define MOESERVE_WGMMA_M64N128K16(TYPE)                                                                               \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                                        \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " "                                                    \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                           \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                                  \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                                  \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"                                    \
  "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
#define MOESERVE_WGMMA_M64N64K16_MN_MAJOR_B(TYPE)                                                                     \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                                        \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " "                                                     \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                           \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"                                    \
  "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"

#define MOESERVE_WGMMA_M64N64K16(TYPE)                                                                                \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                                        \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " "                                                     \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                           \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"                                    \
  "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"

// MOESERVE_WGMMA_D64 stays defined: moe_wgmma_instructions.cuh's m64n128 shared-memory wgmma uses it too.
#define MOESERVE_WGMMA_D64                                                                                            \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),                     \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),               \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),             \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),             \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),             \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),             \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),             \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define MOESERVE_WGMMA_D32                                                                                            \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),                     \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),               \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),             \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
// d (64 x 128, fp32) = a (64 x 16, registers) * b (16 x 128) [+ d], a and b bf16 (kF16: fp16): b K-major (row n
// holds its 16 k values) behind descriptor `b`. Fragments: warp w of the warpgroup holds rows 16w..16w+15; lane
// (g = lane / 4, c = lane % 4) holds d[4j + e] = row g + 8 (e / 2), column 8j + 2c + e % 2, and a = {row g, k
// 2c..2c+1; row g + 8, k 2c..; row g, k 8 + 2c..; row g + 8, k 8 + 2c..} as 16-bit pairs (the m16n8k16 fragments of
// mma.sync, per warp).
template <bool kF16 = false>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], const uint32_t (&a)[4], uint64_t b,
                                                 uint32_t accumulate) {
  if constexpr (kF16)
    asm volatile(MOESERVE_WGMMA_M64N128K16("f16")
                 : MOESERVE_WGMMA_D64
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
  else
    asm volatile(MOESERVE_WGMMA_M64N128K16("bf16")
                 : MOESERVE_WGMMA_D64
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}

// d (64 x 64, fp32) += a (64 x 16, registers) * b (16 x 64), bf16 (kF16: fp16): b MN-major (row k holds its 64 n
// values, the transposed operand) behind descriptor `b`. Fragments as above with 8 column blocks.
template <bool kF16 = false>
__device__ __forceinline__ void wgmma_m64n64k16_mn_major_b(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (kF16)
    asm volatile(MOESERVE_WGMMA_M64N64K16_MN_MAJOR_B("f16")
                 : MOESERVE_WGMMA_D32
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1u));
  else
    asm volatile(MOESERVE_WGMMA_M64N64K16_MN_MAJOR_B("bf16")
                 : MOESERVE_WGMMA_D32
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1u));
}
// d (64 x 64, fp32) = a (64 x 16, registers) * b (16 x 64) [+ d], bf16: b K-major (row n holds its 16 k values)
// behind descriptor `b`, as wgmma_m64n128k16 with 8 column blocks (the MLA prefill attention's S over 64 keys).
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], const uint32_t (&a)[4], uint64_t b,
                                                uint32_t accumulate) {
  asm volatile(MOESERVE_WGMMA_M64N64K16("bf16")
               : MOESERVE_WGMMA_D32
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}
#undef MOESERVE_WGMMA_M64N128K16
#undef MOESERVE_WGMMA_M64N64K16
#undef MOESERVE_WGMMA_M64N64K16_MN_MAJOR_B
#undef MOESERVE_WGMMA_D32

}  // namespace moeserve::cuda::sm90

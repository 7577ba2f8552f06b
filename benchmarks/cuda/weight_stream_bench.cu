// How fast can a decode expert kernel stream MXFP4 weights, by the layout they sit in? A standalone probe of the
// memory side of moe_decode_mma.cu (no tensor work): CTAs of 256 threads, two an SM, each streaming one 256-row slice
// of an expert matrix through a 4-stage shared-memory ring in 128-k chunks (64 bytes of each row a chunk, plus the
// rows' scale bytes), with an optional dependent arithmetic chain per chunk standing in for the conversion.
//   strided: today's layout, row-major [row][90 blocks x 16 bytes], scales [row][90 bytes]; a chunk is 256 pieces of
//            64 bytes 1,440 bytes apart, and its scales 256 requests of two aligned 4-byte words (moe_decode_mma.cu).
//   tiled:   the same bytes permuted so that each (slice, chunk) is one contiguous run: [256 rows x 64 bytes] then
//            [256 rows x 4 scale bytes]; copied with the same 16-byte cp.async pieces.
//   bulk:    the tiled layout, each chunk by one cp.async.bulk (TMA, 1-D) completing on an mbarrier.
//   read:    every byte once by ld.global.v4 over a grid-stride loop (the read ceiling of this run).
// Prints GB/s of weight + scale bytes per pattern and work level. Build: nvcc -O3 -arch=sm_90a -std=c++20.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(x)                                                                                          \
  do {                                                                                                    \
    cudaError_t e_ = (x);                                                                                 \
    if (e_ != cudaSuccess) {                                                                              \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));              \
      std::exit(1);                                                                                       \
    }                                                                                                     \
  } while (0)

namespace {

constexpr int kThreads = 256, kSliceRows = 256, kStages = 4, kChunkBlocks = 4;
constexpr int kChunkWeightBytes = kSliceRows * kChunkBlocks * 16;  // 16 KB
constexpr int kChunkScaleBytes = kSliceRows * kChunkBlocks;        // 1 KB (tiled); strided uses 2 KB of words
constexpr int kStageBytes = 20 * 1024;                             // as decode_mma's 8-row stage (16 + 2 + 2 KB)

__device__ __forceinline__ uint32_t smem(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void cp16(void* d, const void* s) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem(d)), "l"(s));
}
__device__ __forceinline__ void cp4(void* d, const void* s) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem(d)), "l"(s));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;" ::); }
template <int N>
__device__ __forceinline__ void wait_pending() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

// The stand-in for a chunk's conversion: `work` dependent FMAs on this thread's word of the stage.
__device__ __forceinline__ float consume(const uint8_t* stage, int work, float acc) {
  const uint4 v = reinterpret_cast<const uint4*>(stage)[threadIdx.x];
  float x = __uint_as_float((v.x ^ v.y ^ v.z ^ v.w) & 0x3f800000u);
  for (int i = 0; i < work; ++i) x = fmaf(x, 0.999f, 1e-3f);
  return acc + x;
}

// The cp.async ring both row-order kernels run: stages - 1 chunks in flight, a barrier a chunk (decode_mma's loop).
template <typename Copy>
__device__ __forceinline__ void stream_ring(const uint8_t* shared, int chunks, Copy& copy, int work, float* sink) {
  float acc = 0;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < chunks) copy(s);
    commit();
  }
  for (int chunk = 0; chunk < chunks; ++chunk) {
    wait_pending<kStages - 2>();
    __syncthreads();
    if (chunk + kStages - 1 < chunks) copy(chunk + kStages - 1);
    commit();
    acc = consume(shared + (chunk % kStages) * kStageBytes, work, acc);
  }
  if (acc == 12345.0f) *sink = acc;
}

// rows: all experts' rows stacked (a multiple of 256 here); blocks: 90 per row (K = 2,880).
__global__ void __launch_bounds__(kThreads, 2)
    strided_kernel(const uint8_t* w, const uint8_t* scales, int blocks_per_row, int work, float* sink) {
  extern __shared__ __align__(128) uint8_t shared[];
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kSliceRows;
  const int chunks = (blocks_per_row + kChunkBlocks - 1) / kChunkBlocks;
  auto copy = [&](int chunk) {
    uint8_t* stage = shared + (chunk % kStages) * kStageBytes;
    const int kb = chunk * kChunkBlocks;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = threadIdx.x + kThreads * j, r = i / 4, c = i % 4;
      if (kb + c < blocks_per_row) cp16(stage + i * 16, w + ((row0 + r) * blocks_per_row + kb + c) * 16);
    }
    const uintptr_t first = reinterpret_cast<uintptr_t>(scales + (row0 + threadIdx.x) * blocks_per_row + kb);
    const uint8_t* word = reinterpret_cast<const uint8_t*>(first & ~uintptr_t{3});
    cp4(stage + kChunkWeightBytes + threadIdx.x * 8, word);
    cp4(stage + kChunkWeightBytes + threadIdx.x * 8 + 4, word + 4);
  };
  stream_ring(shared, chunks, copy, work, sink);
}

// Tiled: slice s, chunk c starts at (s * chunks + c) * (16 KB + 1 KB) (every chunk of a 90-block row is padded to 4
// blocks here: the probe's question is the access pattern, not the last chunk's bytes).
__global__ void __launch_bounds__(kThreads, 2)
    tiled_kernel(const uint8_t* w, int blocks_per_row, int work, float* sink) {
  extern __shared__ __align__(128) uint8_t shared[];
  const int chunks = (blocks_per_row + kChunkBlocks - 1) / kChunkBlocks;
  const uint8_t* base = w + static_cast<int64_t>(blockIdx.x) * chunks * (kChunkWeightBytes + kChunkScaleBytes);
  auto copy = [&](int chunk) {
    uint8_t* stage = shared + (chunk % kStages) * kStageBytes;
    const uint8_t* src = base + static_cast<int64_t>(chunk) * (kChunkWeightBytes + kChunkScaleBytes);
#pragma unroll
    for (int j = 0; j < 4; ++j) cp16(stage + (threadIdx.x + kThreads * j) * 16, src + (threadIdx.x + kThreads * j) * 16);
    if (threadIdx.x < kChunkScaleBytes / 16)
      cp16(stage + kChunkWeightBytes + threadIdx.x * 16, src + kChunkWeightBytes + threadIdx.x * 16);
  };
  stream_ring(shared, chunks, copy, work, sink);
}

__device__ __forceinline__ void mbar_init(uint64_t* b, uint32_t n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem(b)), "r"(n) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint64_t* b, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
      : "=r"(done)
      : "r"(smem(b)), "r"(parity)
      : "memory");
  return done != 0;
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem(dst)),
               "l"(src), "r"(bytes), "r"(smem(bar))
               : "memory");
}

__global__ void __launch_bounds__(kThreads, 2)
    bulk_kernel(const uint8_t* w, int blocks_per_row, int work, float* sink) {
  extern __shared__ __align__(128) uint8_t shared[];
  __shared__ uint64_t full[kStages];
  const int chunks = (blocks_per_row + kChunkBlocks - 1) / kChunkBlocks;
  constexpr uint32_t kBytes = kChunkWeightBytes + kChunkScaleBytes;
  const uint8_t* base = w + static_cast<int64_t>(blockIdx.x) * chunks * kBytes;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(&full[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  auto copy = [&](int chunk) {
    if (threadIdx.x != 0) return;
    const int s = chunk % kStages;
    mbar_expect_tx(&full[s], kBytes);
    bulk_copy(shared + s * kStageBytes, base + static_cast<int64_t>(chunk) * kBytes, kBytes, &full[s]);
  };
  float acc = 0;
  for (int s = 0; s < kStages - 1 && s < chunks; ++s) copy(s);
  for (int chunk = 0; chunk < chunks; ++chunk) {
    while (!mbar_try_wait(&full[chunk % kStages], (chunk / kStages) & 1)) {
    }
    __syncthreads();  // every thread is done with chunk - 1's stage, which the next copy overwrites
    if (chunk + kStages - 1 < chunks) copy(chunk + kStages - 1);
    acc = consume(shared + (chunk % kStages) * kStageBytes, work, acc);
  }
  if (acc == 12345.0f) *sink = acc;
}

__global__ void read_kernel(const uint4* p, int64_t n, float* sink) {
  uint32_t x = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcs(p + i);
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == 0x12345678u) *sink = static_cast<float>(x);
}

__global__ void fill_kernel(uint32_t* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    p[i] = h ^ (h >> 13);
  }
}

template <typename F>
float time_ms(F&& launch, int reps) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  launch();  // warm-up
  CHECK(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) launch();
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  CHECK(cudaGetLastError());
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms / reps;
}

}  // namespace

int main(int argc, char** argv) {
  // One layer's mlp1 of gpt-oss-120b: 128 experts x 5,760 rows x K 2,880 (90 MXFP4 blocks a row); 5,760 is not a
  // multiple of 256, so the probe takes 128 x 5,632 rows (22 whole slices an expert).
  const int experts = argc > 1 ? std::atoi(argv[1]) : 128;
  const int rows_per_expert = 5632, blocks_per_row = 90;
  const int64_t rows = static_cast<int64_t>(experts) * rows_per_expert;
  const int slices = static_cast<int>(rows / kSliceRows);
  const int chunks = (blocks_per_row + kChunkBlocks - 1) / kChunkBlocks;
  const int64_t w_bytes = rows * blocks_per_row * 16, s_bytes = rows * blocks_per_row;
  const int64_t tiled_bytes = static_cast<int64_t>(slices) * chunks * (kChunkWeightBytes + kChunkScaleBytes);
  const double useful = static_cast<double>(w_bytes + s_bytes);
  uint8_t *w, *s, *t;
  float* sink;
  CHECK(cudaMalloc(&w, w_bytes));
  CHECK(cudaMalloc(&s, s_bytes + 8));
  CHECK(cudaMalloc(&t, tiled_bytes));
  CHECK(cudaMalloc(&sink, 4));
  fill_kernel<<<1024, 256>>>(reinterpret_cast<uint32_t*>(w), w_bytes / 4, 1u);
  fill_kernel<<<1024, 256>>>(reinterpret_cast<uint32_t*>(s), s_bytes / 4, 2u);
  fill_kernel<<<1024, 256>>>(reinterpret_cast<uint32_t*>(t), tiled_bytes / 4, 3u);
  CHECK(cudaDeviceSynchronize());
  const int smem_bytes = kStages * kStageBytes;
  CHECK(cudaFuncSetAttribute(strided_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  CHECK(cudaFuncSetAttribute(tiled_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  CHECK(cudaFuncSetAttribute(bulk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int reps = 20;
  const float read_ms =
      time_ms([&] { read_kernel<<<prop.multiProcessorCount * 8, 512>>>(reinterpret_cast<const uint4*>(t), tiled_bytes / 16, sink); },
              reps);
  const double read_gbs = tiled_bytes / (read_ms * 1e6);
  std::printf("device %s, %d SMs; %d experts x %d rows x %d blocks: %.3f GB of weights + scales, %d slices\n", prop.name,
              prop.multiProcessorCount, experts, rows_per_expert, blocks_per_row, useful / 1e9, slices);
  std::printf("read ceiling (ld.global.v4, grid-stride): %.1f GB/s\n", read_gbs);
  std::printf("| pattern | work (FMAs a chunk a thread) | us | GB/s | of read ceiling |\n|---|---|---|---|---|\n");
  for (int work : {0, 32, 64, 128}) {
    const float a = time_ms([&] { strided_kernel<<<slices, kThreads, smem_bytes>>>(w, s, blocks_per_row, work, sink); }, reps);
    const float b = time_ms([&] { tiled_kernel<<<slices, kThreads, smem_bytes>>>(t, blocks_per_row, work, sink); }, reps);
    const float c = time_ms([&] { bulk_kernel<<<slices, kThreads, smem_bytes>>>(t, blocks_per_row, work, sink); }, reps);
    struct Row {
      const char* name;
      float ms;
      double bytes;
    };
    for (const Row& r : {Row{"strided", a, useful}, Row{"tiled", b, static_cast<double>(tiled_bytes)},
                         Row{"bulk", c, static_cast<double>(tiled_bytes)}}) {
      const double gbs = r.bytes / (r.ms * 1e6);
      std::printf("| %s | %d | %.1f | %.1f | %.0f%% |\n", r.name, work, r.ms * 1e3, gbs, 100.0 * gbs / read_gbs);
    }
  }
  return 0;
}

// Row gathers: the token embedding lookup (to the fp32 residual stream) and the gather of the rows whose
// logits are wanted. CPU reference: CpuRunner::forward's embedding loop (x[t] = embedding.at(id, i)).
#include "runner/cuda/device_common.cuh"
#include "runner/cuda/launch.cuh"

namespace moeserve::cuda {
namespace {

template <typename W>
__global__ void embedding_kernel(const W* table, int64_t H, const int32_t* ids, float* x) {
  pdl_prologue();
  const W* row = table + static_cast<int64_t>(ids[blockIdx.x]) * H;
  float* out = x + static_cast<int64_t>(blockIdx.x) * H;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) out[i] = to_float(row[i]);
}

template <typename T>
__global__ void gather_rows_kernel(const T* src, int64_t H, const int32_t* rows, T* dst) {
  pdl_prologue();
  const T* row = src + static_cast<int64_t>(rows[blockIdx.x]) * H;
  T* out = dst + static_cast<int64_t>(blockIdx.x) * H;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) out[i] = row[i];
}

}  // namespace

void launch_embedding(cudaStream_t stream, Precision table_type, const void* table, int64_t H, const int32_t* ids,
                      int T, float* x) {
  if (T == 0) return;
  if (table_type == Precision::bf16)
    MOESERVE_CUDA_CHECK(
        cuda_launch(embedding_kernel<bf16>, T, 256, 0, stream, static_cast<const bf16*>(table), H, ids, x));
  else
    MOESERVE_CUDA_CHECK(
        cuda_launch(embedding_kernel<float>, T, 256, 0, stream, static_cast<const float*>(table), H, ids, x));
}

void launch_gather_rows(cudaStream_t stream, Precision type, const void* src, int64_t H, const int32_t* rows, int R,
                        void* dst) {
  if (R == 0) return;
  if (type == Precision::bf16)
    MOESERVE_CUDA_CHECK(cuda_launch(gather_rows_kernel<bf16>, R, 256, 0, stream, static_cast<const bf16*>(src), H, rows,
                                    static_cast<bf16*>(dst)));
  else
    MOESERVE_CUDA_CHECK(cuda_launch(gather_rows_kernel<float>, R, 256, 0, stream, static_cast<const float*>(src), H,
                                    rows, static_cast<float*>(dst)));
}

}  // namespace moeserve::cuda

// KV slots copied within one sequence's block table (ModelRunner::move_kv_slots: a verified tree's accepted path
// moved to contiguous positions). Grid: (layer of the group, K or V, KV head); a block walks the moves in order and
// its threads copy the row's 4-byte words (bf16, f32 and fp8 rows alike: an fp8 row keeps its layer's scale). A
// thread copies the same words of every move, so a move that reads an earlier move's destination sees it without
// synchronisation.
// CPU reference: CpuRunner::move_kv_slots.
#include "runner/cuda/device_common.cuh"
#include "runner/cuda/launch.cuh"

namespace moeserve::cuda {
namespace {

__global__ void move_kv_slots_kernel(KvMoveParams p, int element_bytes) {
  pdl_prologue();
  const int layer = blockIdx.x, which = blockIdx.y, head = blockIdx.z;
  const int row_words = p.kv.head_dim * element_bytes / 4;
  uint32_t* cache = static_cast<uint32_t*>(p.kv.base);
  for (int m = 0; m < p.num_moves; ++m) {
    const int64_t from = kv_table_offset(p.kv, p.block_table, layer, which, head, p.moves[2 * m]);
    const int64_t to = kv_table_offset(p.kv, p.block_table, layer, which, head, p.moves[2 * m + 1]);
    if (from < 0 || to < 0) continue;  // the host checked every moved slot has a block
    const uint32_t* src = cache + from * element_bytes / 4;
    uint32_t* dst = cache + to * element_bytes / 4;
    for (int w = threadIdx.x; w < row_words; w += blockDim.x) dst[w] = src[w];
  }
}

}  // namespace

void launch_move_kv_slots(cudaStream_t stream, const KvMoveParams& params) {
  if (params.num_moves == 0 || params.group_layers == 0) return;
  const dim3 grid(params.group_layers, 2, params.kv.kv_heads);
  MOESERVE_CUDA_CHECK(cuda_launch(move_kv_slots_kernel, grid, 32, 0, stream, params,
                                  static_cast<int>(kv_element_bytes(params.kv.dtype))));
}

}  // namespace moeserve::cuda

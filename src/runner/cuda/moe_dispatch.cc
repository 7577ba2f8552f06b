// One home for "run path P": the runner, the kernel tests and moe_bench all launch the MoE paths through here.
#include <string>
#include <vector>

#include "runner/cuda/cuda_check.h"
#include "runner/cuda/kernels.h"

namespace moeserve::cuda {
namespace {

// prefill_wgmma_split: the grouped GEMM over the split grouping's 128-row tiles (class 0), then decode_mma over its
// 32-row tiles (class 1), each launch reading only its class (moe_class_tile_count) and writing its own rows.
// prefill_wgmma_hot (hot): the same with the grouped GEMM's hot experts dequantised once (params.hot).
void launch_split(cudaStream_t stream, const MoeGemmParams& params, bool hot) {
  check_moe_gemm_shape(hot ? "moe_prefill_wgmma_hot" : "moe_prefill_wgmma_split", params.rows, params.w.out_features,
                       params.w.in_features, params.routing.num_experts);
  if (params.rows == 0) return;
  MoeGemmParams wide = params, narrow = params;
  wide.routing.tile_class = 0;
  narrow.routing.tile_class = 1;
  if (hot)
    launch_moe_prefill_wgmma_hot(stream, wide);
  else
    launch_moe_prefill_wgmma(stream, wide);
  const int narrow_tiles =
      moe_split_class_max_tiles(params.rows, 1, params.routing.mixed.split_max, params.routing.num_experts);
  if (narrow_tiles > 0) launch_moe_decode_mma_tiles(stream, narrow, kMoeSplitSmallTileRows, narrow_tiles);
}

}  // namespace

void launch_moe_path(cudaStream_t stream, MoePath path, Precision type, const MoeGemmParams& params) {
  if (params.x_fp8 != nullptr && !moe_path_takes_fp8(path))
    fail_cuda("launch_moe_path",
              (std::string("FP8 activations are for the decode_mma and prefill_wgmma paths (plain, split, hot), not ") + moe_path_name(path)).c_str(),
              __FILE__, __LINE__);
  if (params.out_bf16 && (params.swiglu || type != Precision::bf16 || !moe_path_writes_bf16(path)))
    fail_cuda("launch_moe_path",
              (std::string("bf16 rows out are for the second projection in bf16 on the decode_mma and prefill_wgmma "
                           "paths, not ") + (params.swiglu ? "the first projection" : moe_path_name(path))).c_str(),
              __FILE__, __LINE__);
  switch (path) {
    case MoePath::reference: return launch_moe_reference(stream, type, params);
    case MoePath::decode_x1: return launch_moe_decode(stream, params, 1);
    case MoePath::decode_x2: return launch_moe_decode(stream, params, 2);
    case MoePath::decode_wgmma_n16:
    case MoePath::decode_wgmma_n32:
    case MoePath::decode_wgmma_n64:
    case MoePath::wgmma_rs_n128: return launch_moe_decode_wgmma(stream, params, moe_rows_per_tile(path));
    case MoePath::decode_mma_n8:
    case MoePath::decode_mma_n16:
    case MoePath::decode_mma_n32:
    case MoePath::decode_mma_n64:
    case MoePath::decode_mma_mixed: return launch_moe_decode_mma(stream, params, moe_rows_per_tile(path));
    case MoePath::prefill_mma: return launch_moe_prefill(stream, params);
    case MoePath::prefill_wgmma: return launch_moe_prefill_wgmma(stream, params);
    case MoePath::prefill_wgmma_m256: return launch_moe_prefill_wgmma_m256(stream, params);
    case MoePath::prefill_wgmma_deep: return launch_moe_prefill_wgmma_deep(stream, params);
    case MoePath::prefill_wgmma_split: return launch_split(stream, params, false);
    case MoePath::prefill_wgmma_hot: return launch_split(stream, params, true);
  }
}

int device_multiprocessors() {
  // Filled on first use per device; a launch is enqueued from the thread that owns the runner.
  thread_local std::vector<int> counts;
  int device = 0;
  MOESERVE_CUDA_CHECK(cudaGetDevice(&device));
  if (static_cast<int>(counts.size()) <= device) counts.resize(device + 1, 0);
  if (counts[device] == 0)
    MOESERVE_CUDA_CHECK(cudaDeviceGetAttribute(&counts[device], cudaDevAttrMultiProcessorCount, device));
  return counts[device];
}

}  // namespace moeserve::cuda

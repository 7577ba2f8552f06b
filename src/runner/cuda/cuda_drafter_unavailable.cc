// The CUDA drafter factories of a build without CUDA.
#include "runner/cuda/cuda_drafter_factory.h"
#include "util/error.h"

namespace moeserve {

std::unique_ptr<speculative::Drafter> make_cuda_eagle3_drafter(std::shared_ptr<const speculative::Eagle3Checkpoint>,
                                                               speculative::Eagle3Target, const CudaDrafterOptions&) {
  fail("EAGLE-3 drafter on the GPU: moeserve was built without CUDA");
}

std::unique_ptr<speculative::Drafter> make_synthetic_cuda_eagle3_drafter(const ModelConfig&, const CudaDrafterOptions&,
                                                                         uint64_t) {
  fail("synthetic EAGLE-3 drafter: moeserve was built without CUDA");
}

std::unique_ptr<speculative::Drafter> make_cuda_mtp_drafter(std::shared_ptr<const deepseek_v3::Checkpoint>,
                                                            ModelRunner&, const CudaDrafterOptions&) {
  fail("MTP drafter on the GPU: moeserve was built without CUDA");
}

}  // namespace moeserve

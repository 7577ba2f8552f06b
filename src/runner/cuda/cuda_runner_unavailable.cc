// The CUDA runner factories of a build without CUDA.
#include "runner/cuda/cuda_runner_factory.h"
#include "util/error.h"

namespace moeserve {

bool cuda_runner_available() { return false; }

std::unique_ptr<ModelRunner> make_cuda_runner(std::shared_ptr<const Checkpoint>, const CudaRunnerOptions&) {
  fail("--device cuda: moeserve was built without CUDA");
}

std::unique_ptr<ModelRunner> make_synthetic_cuda_runner(const std::string& shape, uint64_t, const CudaRunnerOptions&) {
  fail("--synthetic {}: moeserve was built without CUDA", shape);
}

std::unique_ptr<ModelRunner> make_deepseek_cuda_runner(std::shared_ptr<const deepseek_v3::Checkpoint>,
                                                       const CudaRunnerOptions&) {
  fail("--device cuda: moeserve was built without CUDA");
}

std::unique_ptr<ModelRunner> make_synthetic_deepseek_cuda_runner(const std::string& shape, int, uint64_t,
                                                                 const CudaRunnerOptions&) {
  fail("--synthetic {}: moeserve was built without CUDA", shape);
}

}  // namespace moeserve

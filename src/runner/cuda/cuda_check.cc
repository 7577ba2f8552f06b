#include "runner/cuda/cuda_check.h"

#include "util/error.h"

namespace moeserve::cuda {

void fail_cuda(const char* call, const char* message, const char* file, int line) {
  fail("CUDA: {} failed: {} ({}:{})", call, message, file, line);
}

}  // namespace moeserve::cuda

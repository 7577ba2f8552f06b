// The ranks of a tensor-parallel CUDA runner: which device each runs on and the communicator it sums through,
// whose collectives go on the stream the rank's runner gives it (so they are ordered with its kernels and captured
// into its graphs). NcclGroup (nccl_group.h) is the product's, one rank a GPU; a test may give ranks that share one.
#pragma once

#include <cuda_runtime.h>

#include "runner/parallel/communicator.h"

namespace moeserve::cuda {

class DeviceRankGroup {
 public:
  virtual ~DeviceRankGroup() = default;
  virtual int size() const = 0;
  virtual int device(int rank) const = 0;
  virtual Communicator& rank(int rank) = 0;
  // Rank `rank`'s collectives are enqueued on `stream` from now on.
  virtual void use_stream(int rank, cudaStream_t stream) = 0;
  // Whether the collectives can be captured into CUDA graphs.
  virtual bool graph_capturable() const = 0;
};

}  // namespace moeserve::cuda

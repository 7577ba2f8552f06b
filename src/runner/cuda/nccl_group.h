// One rank per local GPU, all driven by one process (a thread per GPU, as TensorParallelCpuRunner drives its CPU
// ranks): the NCCL implementation of the Communicator (runner/parallel/communicator.h). Its collectives take device
// memory of the rank's GPU and are enqueued on the rank's stream, in order with the rest of the rank's work, so CUDA
// graphs can capture them. One process rather than one per GPU: the engine, scheduler and KV manager stay single,
// and ncclCommInitAll needs no bootstrap of unique ids between processes.
//
// NCCL is opened at run time (libnccl.so.2, found on the library path), not linked: the binaries start, and run on
// one GPU, where NCCL is absent; a group names the library when it cannot be opened. NVLink multicast (NVLS) is
// left off, as the lent multi-GPU machines require: NCCL_NVLS_ENABLE=0 unless the environment sets it.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "runner/cuda/device_rank_group.h"
#include "runner/parallel/communicator.h"

namespace moeserve::cuda {

class NcclGroup : public DeviceRankGroup {
 public:
  // Ranks in the order of `devices` (CUDA device ordinals, distinct).
  explicit NcclGroup(const std::vector<int>& devices);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int size() const override;
  // Rank r's communicator; its collectives run on stream(r) and need device r current.
  Communicator& rank(int r) override;
  int device(int r) const override;
  // The group's own stream of rank r until use_stream() gives another.
  cudaStream_t stream(int r) const;
  void use_stream(int r, cudaStream_t stream) override;
  bool graph_capturable() const override { return true; }

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace moeserve::cuda

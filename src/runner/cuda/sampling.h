// The sampling launchers' choice between one block a row and a cluster of blocks a row (sampling.cu), and the two
// paths by name for tests and benchmarks. launch_argmax and launch_sample (kernels.h) apply the rule.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runner/cuda/kernels.h"

namespace moeserve::cuda {

// Blocks that share a row for a batch of `rows` (1: one block a row). One block per row leaves SMs idle while rows
// are fewer than SMs; then each row goes to a cluster of 2, 4, 8 or 16 blocks: the largest size of which the device
// keeps `rows` clusters resident at once (cudaOccupancyMaxActiveClusters: two 512-thread blocks an SM, a cluster
// within one GPC), so the batch runs in one wave on as many SMs as it can use. Greedy rows and rows that only set a
// temperature take the clusters; rows with top-k, top-p or min-p run on one block in either case.
int sampling_cluster_blocks(int rows);
// Clusters of `blocks` blocks (2, 4, 8 or 16) the device keeps resident at once (0: none, or another size).
int sampling_resident_clusters(int blocks);
// launch_argmax and launch_sample with `blocks` blocks a row (1, or a cluster size the device holds) instead of the
// rule's: tests and benchmarks set the paths side by side.
void launch_argmax_split(cudaStream_t stream, const float* logits, int R, int V, int32_t* out, int blocks);
void launch_sample_split(cudaStream_t stream, const float* logits, int V, const SampleRow* rows, int n, int32_t* out,
                         int blocks);

}  // namespace moeserve::cuda

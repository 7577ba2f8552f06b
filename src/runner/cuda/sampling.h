// The sampling launchers' choice between one block a row and a cluster of blocks a row (sampling.cu), and the two
// paths by name for tests and benchmarks. launch_argmax and launch_sample (kernels.h) apply the rule.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runner/cuda/kernels.h"

namespace moeserve::cuda {

// Blocks that share a row for a batch of `rows` (1: one block a row). One block per row leaves SMs idle while rows
// are fewer than SMs; then a row goes to a cluster of 2..16 blocks, the most that keep rows x blocks within one
// wave of two blocks an SM (the kernels' occupancy) and that the device's GPCs hold: on an H200 (132 SMs, clusters
// of 16) 16 blocks for 1..16 rows, 8 to 33, 4 to 66, 2 to 132, one block beyond. Greedy rows and rows that only set
// a temperature take the clusters; rows with top-k, top-p or min-p run on one block in either case.
int sampling_cluster_blocks(int rows);
// launch_argmax and launch_sample with `blocks` blocks a row (1, or a cluster: a power of 2 up to 16, where the
// device holds it) instead of the rule's: tests and benchmarks set the two paths side by side.
void launch_argmax_split(cudaStream_t stream, const float* logits, int R, int V, int32_t* out, int blocks);
void launch_sample_split(cudaStream_t stream, const float* logits, int V, const SampleRow* rows, int n, int32_t* out,
                         int blocks);

}  // namespace moeserve::cuda

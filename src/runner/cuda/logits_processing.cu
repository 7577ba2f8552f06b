// Logits processing and logprobs on the GPU (logits_processing.h has the order of a step's launches).
// CPU references: moeserve::apply_logit_edits (sampling/logits_processing.cc) and moeserve::token_logprobs
// (sampling/logprobs.cc); tests/runner/cuda/logits_processing_test.cc checks these kernels against them.
//
// Row logprobs: one block of 256 threads per row. The log-sum-exp is the CPU's: the float max, then the sum of
// exp(double(x - max)) (in another order, so equal to ~1e-13 relative, not bit for bit). The top k: each thread
// keeps a sorted list of its best k (it visits ids in ascending order and inserts only above its k-th, so equal
// values keep the lower id first), then k rounds of a block-wide best over the threads' heads, each round's winner
// popping its head; so the result is the first k of (value descending, id ascending), the CPU's order.
// Edits: one block per row; a thread per edit (tokens are distinct, so no two threads write one logit), then the
// mask over the row.
#include <cfloat>
#include <climits>
#include <cmath>

#include "runner/cuda/device_common.cuh"
#include "runner/cuda/launch.cuh"
#include "runner/cuda/logits_processing.h"

namespace moeserve::cuda {
namespace {

constexpr int kThreads = 256;

struct Candidate {
  float value;
  int id;
};

__device__ __forceinline__ bool better(const Candidate& a, const Candidate& b) {
  return a.value > b.value || (a.value == b.value && a.id < b.id);
}

__device__ Candidate block_best(Candidate c) {
  __shared__ Candidate partial[kThreads / 32];
  for (int offset = 16; offset > 0; offset >>= 1) {
    Candidate other{__shfl_xor_sync(0xffffffffu, c.value, offset), __shfl_xor_sync(0xffffffffu, c.id, offset)};
    if (better(other, c)) c = other;
  }
  __syncthreads();  // partial[] may still be read by the previous call
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = c;
  __syncthreads();
  Candidate best = partial[0];
  for (int w = 1; w < kThreads / 32; ++w)
    if (better(partial[w], best)) best = partial[w];
  return best;
}

template <typename T, typename Op>
__device__ T block_reduce(T v, Op op) {
  __shared__ T partial[kThreads / 32];
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  __syncthreads();
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  T result = partial[0];
  for (int w = 1; w < kThreads / 32; ++w) result = op(result, partial[w]);
  return result;
}

__global__ void __launch_bounds__(kThreads) row_logprobs_kernel(const float* logits, int V, const LogprobRow* rows,
                                                                LogprobResult* results) {
  pdl_prologue();
  const LogprobRow r = rows[blockIdx.x];
  const float* row = logits + static_cast<int64_t>(r.row) * V;
  const int k = r.top_k;

  Candidate mine[kMaxTopLogprobs];
  int held = 0;
  float max_local = -INFINITY;
  for (int i = threadIdx.x; i < V; i += kThreads) {
    const float x = row[i];
    max_local = fmaxf(max_local, x);
    if (k == 0 || (held == k && !(x > mine[k - 1].value))) continue;
    int at = held < k ? held++ : k - 1;  // the slot freed for the newcomer, then shifted up into place
    while (at > 0 && x > mine[at - 1].value) {
      mine[at] = mine[at - 1];
      --at;
    }
    mine[at] = {x, i};
  }
  const float max_logit = block_reduce(max_local, [](float a, float b) { return fmaxf(a, b); });
  double sum_local = 0.0;
  for (int i = threadIdx.x; i < V; i += kThreads) sum_local += exp(static_cast<double>(row[i] - max_logit));
  const double sum = block_reduce(sum_local, [](double a, double b) { return a + b; });
  const double lse = static_cast<double>(max_logit) + log(sum);

  int head = 0;
  for (int j = 0; j < k; ++j) {
    const Candidate offer = head < held ? mine[head] : Candidate{-INFINITY, INT_MAX};
    const Candidate best = block_best(offer);
    if (head < held && mine[head].id == best.id) ++head;
    if (threadIdx.x == 0) {
      results[blockIdx.x].top_tokens[j] = best.id;
      results[blockIdx.x].top_logprobs[j] = static_cast<float>(static_cast<double>(best.value) - lse);
    }
  }
  if (threadIdx.x == 0) results[blockIdx.x].log_sum_exp = lse;
}

__global__ void __launch_bounds__(kThreads) logit_edits_kernel(float* logits, int V, const EditRow* rows,
                                                               const LogitEdit* edits, const uint32_t* masks,
                                                               float* originals) {
  pdl_prologue();
  const EditRow r = rows[blockIdx.x];
  float* row = logits + static_cast<int64_t>(r.row) * V;
  for (int j = threadIdx.x; j < r.num_edits; j += kThreads) {
    const LogitEdit e = edits[r.first_edit + j];
    originals[r.first_edit + j] = row[e.token];
    row[e.token] = edited_logit(row[e.token], e);
  }
  if (r.mask_offset < 0) return;
  __syncthreads();
  const uint32_t* mask = masks + r.mask_offset;
  for (int i = threadIdx.x; i < V; i += kThreads)
    if (!token_allowed(mask, i)) row[i] = -INFINITY;
}

__global__ void chosen_logprobs_kernel(const float* logits, int V, const LogprobRow* rows, int n,
                                       const LogitEdit* edits, const float* originals, const int32_t* sampled,
                                       LogprobResult* results) {
  pdl_prologue();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const LogprobRow r = rows[i];
  const int32_t token = r.token >= 0 ? r.token : sampled[r.row];
  float raw = logits[static_cast<int64_t>(r.row) * V + token];
  for (int j = 0; j < r.num_edits; ++j)  // an edited token's logit changed in place: its raw value was kept
    if (edits[r.first_edit + j].token == token) raw = originals[r.first_edit + j];
  results[i].token = token;
  results[i].logprob = static_cast<float>(static_cast<double>(raw) - results[i].log_sum_exp);
}

}  // namespace

void launch_row_logprobs(cudaStream_t stream, const float* logits, int V, const LogprobRow* rows, int n,
                         LogprobResult* results) {
  if (n == 0) return;
  MOESERVE_CUDA_CHECK(cuda_launch(row_logprobs_kernel, n, kThreads, 0, stream, logits, V, rows, results));
}

void launch_logit_edits(cudaStream_t stream, float* logits, int V, const EditRow* rows, int n, const LogitEdit* edits,
                        const uint32_t* masks, float* originals) {
  if (n == 0) return;
  MOESERVE_CUDA_CHECK(
      cuda_launch(logit_edits_kernel, n, kThreads, 0, stream, logits, V, rows, edits, masks, originals));
}

void launch_chosen_logprobs(cudaStream_t stream, const float* logits, int V, const LogprobRow* rows, int n,
                            const LogitEdit* edits, const float* originals, const int32_t* sampled,
                            LogprobResult* results) {
  if (n == 0) return;
  MOESERVE_CUDA_CHECK(cuda_launch(chosen_logprobs_kernel, (n + 127) / 128, 128, 0, stream, logits, V, rows, n, edits,
                                  originals, sampled, results));
}

}  // namespace moeserve::cuda

// The end of a CUDA runner's step, after the unembedding and every row's argmax (kernels.h launch_argmax) are
// enqueued: the real logits rows' logits processing, non-greedy draws and logprobs on the device
// (logits_processing.h, sampling.cu), then the tokens, logits and logprobs back into a ForwardOutput. The same
// rules as CudaRunner::forward's rows (which keeps its own copy of them until its asynchronous-scheduling work
// lands and can take this class): an edited greedy row takes its argmax again, scored prompt rows neither draw
// nor advance the stream, only LogprobResult leaves the GPU.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "runner/cuda/device_buffer.h"
#include "runner/cuda/logits_processing.h"
#include "runner/cuda/step_metadata.h"

namespace moeserve::cuda {

class LogitsRows {
 public:
  LogitsRows() = default;
  ~LogitsRows();
  LogitsRows(const LogitsRows&) = delete;
  LogitsRows& operator=(const LogitsRows&) = delete;

  // Enqueues the processing of the real rows of `rows` (StepMetadata::rows: real rows first, graph padding's after)
  // over logits [R, vocab] (edited in place) and sampled [R] (every row's argmax in, the drawn tokens out), copies
  // the results back, synchronises `stream` and fills `output` (rows, sampled, logits when return_logits,
  // logprobs).
  void finish_step(cudaStream_t stream, const std::vector<StepRow>& rows, int vocab, float* logits, int32_t* sampled,
                   bool return_logits, ForwardOutput& output);

 private:
  struct Work {
    std::vector<SampleRow> sample_rows;
    std::vector<bool> draws;  // per row: it draws a token (scored prompt rows do not)
    std::vector<EditRow> edit_rows;
    std::vector<LogitEdit> edits;
    std::vector<uint32_t> masks;
    std::vector<int32_t> greedy_edited;  // rows whose argmax is taken again after their edits
    std::vector<LogprobRow> logprob_rows;
    std::vector<LogprobResult> results;
  };
  static Work plan(const std::vector<StepRow>& rows, int vocab);
  void process(cudaStream_t stream, Work& work, int vocab, float* logits, int32_t* sampled);
  void sample(cudaStream_t stream, const std::vector<SampleRow>& sample_rows, int vocab, const float* logits,
              int32_t* sampled);

  SampleRow* sample_staging_ = nullptr;  // pinned host copy of the step's sample rows
  size_t sample_staging_bytes_ = 0;
  DeviceBuffer sample_rows_, edit_rows_, edits_, edit_originals_, masks_, logprob_rows_, logprob_results_;
};

}  // namespace moeserve::cuda

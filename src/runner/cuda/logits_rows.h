// The end of a CUDA runner's step, after the unembedding and every row's argmax (kernels.h launch_argmax) are
// enqueued: the real logits rows' logits processing, non-greedy draws and logprobs on the device
// (logits_processing.h, sampling.cu), then the tokens, logits and logprobs back into a ForwardOutput. One set of
// rules for both CUDA runners (cuda_runner.h, deepseek_cuda_runner.h): an edited greedy row takes its argmax
// again, scored prompt rows neither draw nor advance the stream, only LogprobResult leaves the GPU.
//
// Split like ModelRunner::launch / collect (runner.h): plan on the host, launch enqueues the processing and the
// copies back, collect fills the output once the stream has passed them. One set of pinned buffers: a launch
// comes only after the previous step's collect, which waited for every copy of that step, so no host buffer is
// rewritten under a step still reading or writing it.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "runner/cuda/device_buffer.h"
#include "runner/cuda/logits_processing.h"
#include "runner/cuda/step_metadata.h"

namespace moeserve::cuda {

// Fails unless the step's allowed-token mask has a bit for each of `vocab` tokens.
void check_allowed_tokens(const SequenceStep& step, int vocab);

class LogitsRows {
 public:
  LogitsRows() = default;
  ~LogitsRows();
  LogitsRows(const LogitsRows&) = delete;
  LogitsRows& operator=(const LogitsRows&) = delete;

  // What a step's real rows ask for, from plan() until collect().
  struct Work {
    std::vector<SampleRow> sample_rows;
    std::vector<bool> draws;  // per row: it draws a token (scored prompt rows do not)
    std::vector<EditRow> edit_rows;
    std::vector<LogitEdit> edits;
    std::vector<uint32_t> masks;
    std::vector<int32_t> greedy_edited;  // rows whose argmax is taken again after their edits
    std::vector<LogprobRow> logprob_rows;
    std::vector<LogprobResult> results;
    std::vector<float> logits;  // [rows, vocab] when the step returns logits
    int64_t rows() const { return static_cast<int64_t>(draws.size()); }
    // Whether the processing reads the rows' logits (edits and masks, logprobs, draws), not only their argmax.
    bool reads_logits() const { return !edit_rows.empty() || !logprob_rows.empty() || !sample_rows.empty(); }
  };
  // The real rows of `rows` (StepMetadata::rows: real rows first, graph padding's after).
  static Work plan(const std::vector<StepRow>& rows, int vocab);
  // Enqueues the processing over logits [R, vocab] (edited in place) and sampled [R] (every row's argmax in, the
  // drawn tokens out), then the copies back: the tokens into pinned memory (asynchronous), the logprob results and,
  // when return_logits, the logits into work's pageable vectors (the copy waits for the step).
  void launch(cudaStream_t stream, Work& work, int vocab, float* logits, int32_t* sampled, bool return_logits);
  // Once the stream has passed launch's copies: the output's rows, sampled, logits and logprobs.
  void collect(Work& work, ForwardOutput& output) const;
  // plan, launch, synchronise `stream`, collect: a step not split into launch and collect.
  void finish_step(cudaStream_t stream, const std::vector<StepRow>& rows, int vocab, float* logits, int32_t* sampled,
                   bool return_logits, ForwardOutput& output);

 private:
  void process(cudaStream_t stream, Work& work, int vocab, float* logits, int32_t* sampled);
  void sample(cudaStream_t stream, const std::vector<SampleRow>& sample_rows, int vocab, const float* logits,
              int32_t* sampled);

  SampleRow* sample_staging_ = nullptr;  // pinned host copy of the step's sample rows
  size_t sample_staging_bytes_ = 0;
  int32_t* sampled_host_ = nullptr;  // the sampled tokens come back here: asynchronous only into pinned memory
  int64_t sampled_host_rows_ = 0;
  DeviceBuffer sample_rows_, edit_rows_, edits_, edit_originals_, masks_, logprob_rows_, logprob_results_;
};

}  // namespace moeserve::cuda

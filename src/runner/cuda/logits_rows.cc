#include "runner/cuda/logits_rows.h"

#include <algorithm>

#include "util/error.h"

namespace moeserve::cuda {

void check_allowed_tokens(const SequenceStep& step, int vocab) {
  MOESERVE_CHECK(static_cast<int64_t>(step.allowed_tokens.size()) * 32 >= static_cast<int64_t>(vocab),
                 "allowed-token mask of {} words for {} tokens", step.allowed_tokens.size(), vocab);
}

LogitsRows::~LogitsRows() {
  if (sample_staging_ != nullptr) cudaFreeHost(sample_staging_);
  if (sampled_host_ != nullptr) cudaFreeHost(sampled_host_);
}

LogitsRows::Work LogitsRows::plan(const std::vector<StepRow>& rows, int vocab) {
  Work work;
  int64_t R = 0;
  int32_t k = 0;  // the row's index among its step's logits rows
  for (const StepRow& row : rows) {
    if (row.step == nullptr) break;
    const SequenceStep& step = *row.step;
    k = R > 0 && rows[R - 1].step == &step ? k + 1 : 0;
    const auto r = static_cast<int32_t>(R++);
    const bool draws = row_samples(step, k);
    work.draws.push_back(draws);
    const bool scored = !step.logprob_tokens.empty() && step.logprob_tokens[k] >= 0;
    const auto first_edit = static_cast<int32_t>(work.edits.size());
    const bool edited = draws && (!step.logit_edits.empty() || !step.allowed_tokens.empty());
    if (edited) {
      EditRow edit{r, first_edit, static_cast<int32_t>(step.logit_edits.size()), -1};
      work.edits.insert(work.edits.end(), step.logit_edits.begin(), step.logit_edits.end());
      if (!step.allowed_tokens.empty()) {
        check_allowed_tokens(step, vocab);
        edit.mask_offset = static_cast<int64_t>(work.masks.size());
        work.masks.insert(work.masks.end(), step.allowed_tokens.begin(), step.allowed_tokens.end());
      }
      work.edit_rows.push_back(edit);
      if (step.sampling->greedy()) work.greedy_edited.push_back(r);
    }
    if (step.top_logprobs >= 0 && (scored || draws))
      work.logprob_rows.push_back({r, scored ? step.logprob_tokens[k] : -1, step.top_logprobs,
                                   edited ? first_edit : 0, edited ? static_cast<int32_t>(step.logit_edits.size()) : 0});
    if (draws && !step.sampling->greedy()) work.sample_rows.push_back({r, row.sample_index, *step.sampling});
  }
  return work;
}

void LogitsRows::launch(cudaStream_t stream, Work& work, int vocab, float* logits, int32_t* sampled,
                        bool return_logits) {
  process(stream, work, vocab, logits, sampled);
  const int64_t R = work.rows();
  if (R > sampled_host_rows_) {
    if (sampled_host_ != nullptr) MOESERVE_CUDA_CHECK(cudaFreeHost(sampled_host_));
    sampled_host_rows_ = std::max<int64_t>(R, 1024);
    MOESERVE_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&sampled_host_), sampled_host_rows_ * 4));
  }
  if (R > 0) MOESERVE_CUDA_CHECK(cudaMemcpyAsync(sampled_host_, sampled, R * 4, cudaMemcpyDeviceToHost, stream));
  if (return_logits && R > 0) {
    work.logits.resize(R * vocab);
    MOESERVE_CUDA_CHECK(cudaMemcpyAsync(work.logits.data(), logits, R * vocab * 4, cudaMemcpyDeviceToHost, stream));
  }
}

void LogitsRows::collect(Work& work, ForwardOutput& output) const {
  const int64_t R = work.rows();
  output.rows = R;
  output.logits = std::move(work.logits);
  output.sampled.assign(R, -1);
  for (int64_t r = 0; r < R; ++r)
    if (work.draws[r]) output.sampled[r] = sampled_host_[r];
  output.logprobs.clear();
  if (work.logprob_rows.empty()) return;
  output.logprobs.resize(R);
  for (size_t i = 0; i < work.logprob_rows.size(); ++i) {
    const LogprobResult& result = work.results[i];
    TokenLogprobs& out = output.logprobs[work.logprob_rows[i].row];
    out.chosen = {result.token, result.logprob};
    for (int j = 0; j < work.logprob_rows[i].top_k; ++j)
      out.top.push_back({result.top_tokens[j], result.top_logprobs[j]});
  }
}

void LogitsRows::finish_step(cudaStream_t stream, const std::vector<StepRow>& rows, int vocab, float* logits,
                             int32_t* sampled, bool return_logits, ForwardOutput& output) {
  Work work = plan(rows, vocab);
  launch(stream, work, vocab, logits, sampled, return_logits);
  MOESERVE_CUDA_CHECK(cudaStreamSynchronize(stream));
  collect(work, output);
}

void LogitsRows::process(cudaStream_t stream, Work& work, int vocab, float* logits, int32_t* sampled) {
  auto upload_vector = [&](DeviceBuffer& buffer, const auto& values) {
    using T = typename std::decay_t<decltype(values)>::value_type;
    buffer.grow(std::max<size_t>(values.size(), 1) * sizeof(T));
    // From pageable memory: the copy has taken the values when it returns.
    if (!values.empty())
      MOESERVE_CUDA_CHECK(
          cudaMemcpyAsync(buffer.get(), values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
  };
  const int logprob_rows = static_cast<int>(work.logprob_rows.size());
  if (logprob_rows > 0) {
    upload_vector(logprob_rows_, work.logprob_rows);
    logprob_results_.grow(logprob_rows * sizeof(LogprobResult));
    launch_row_logprobs(stream, logits, vocab, logprob_rows_.as<LogprobRow>(), logprob_rows,
                        logprob_results_.as<LogprobResult>());
  }
  upload_vector(edits_, work.edits);
  edit_originals_.grow(std::max<size_t>(work.edits.size(), 1) * sizeof(float));
  if (!work.edit_rows.empty()) {
    upload_vector(edit_rows_, work.edit_rows);
    upload_vector(masks_, work.masks);
    launch_logit_edits(stream, logits, vocab, edit_rows_.as<EditRow>(), static_cast<int>(work.edit_rows.size()),
                       edits_.as<LogitEdit>(), masks_.as<uint32_t>(), edit_originals_.as<float>());
    for (const int32_t r : work.greedy_edited)  // the argmax of the step was of the unedited row
      launch_argmax(stream, logits + static_cast<int64_t>(r) * vocab, 1, vocab, sampled + r);
  }
  sample(stream, work.sample_rows, vocab, logits, sampled);
  if (logprob_rows > 0) {
    launch_chosen_logprobs(stream, logits, vocab, logprob_rows_.as<LogprobRow>(), logprob_rows, edits_.as<LogitEdit>(),
                           edit_originals_.as<float>(), sampled, logprob_results_.as<LogprobResult>());
    work.results.resize(logprob_rows);
    // Only these leave the GPU: per row its token, its logprob and the top k (at most 20).
    MOESERVE_CUDA_CHECK(cudaMemcpyAsync(work.results.data(), logprob_results_.get(),
                                        logprob_rows * sizeof(LogprobResult), cudaMemcpyDeviceToHost, stream));
  }
}

void LogitsRows::sample(cudaStream_t stream, const std::vector<SampleRow>& sample_rows, int vocab, const float* logits,
                        int32_t* sampled) {
  if (sample_rows.empty()) return;
  const size_t bytes = sample_rows.size() * sizeof(SampleRow);
  if (bytes > sample_staging_bytes_) {
    if (sample_staging_ != nullptr) MOESERVE_CUDA_CHECK(cudaFreeHost(sample_staging_));
    sample_staging_bytes_ = std::max(bytes, size_t{256} * sizeof(SampleRow));
    MOESERVE_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&sample_staging_), sample_staging_bytes_));
    sample_rows_.grow(sample_staging_bytes_);
  }
  // The pinned copy is read by the transfer after this returns: the next step's rows overwrite it only after this
  // step's collect (see the header).
  std::copy(sample_rows.begin(), sample_rows.end(), sample_staging_);
  MOESERVE_CUDA_CHECK(cudaMemcpyAsync(sample_rows_.get(), sample_staging_, bytes, cudaMemcpyHostToDevice, stream));
  launch_sample(stream, logits, vocab, sample_rows_.as<SampleRow>(), static_cast<int>(sample_rows.size()), sampled);
}

}  // namespace moeserve::cuda

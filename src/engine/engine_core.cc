#include "engine/engine_core.h"

#include <algorithm>

#include "engine/sampler.h"
#include "util/error.h"

namespace moeserve {
namespace {

int64_t kv_blocks_for(ModelRunner& runner, const EngineConfig& config) {
  int64_t bytes = config.kv_cache_bytes;
  if (config.kv_cache_fraction > 0) {
    MOESERVE_CHECK(config.kv_cache_fraction <= 1.0, "KV cache fraction {} must be in (0, 1]", config.kv_cache_fraction);
    MOESERVE_CHECK(runner.device_memory_free() > 0,
                   "the {} runner has no device memory to take a fraction of; give the KV budget in bytes",
                   runner.name());
    bytes = static_cast<int64_t>(config.kv_cache_fraction * static_cast<double>(runner.device_memory_free()));
  }
  if (bytes > 0) {
    const int64_t blocks = bytes / static_cast<int64_t>(runner.kv_block_bytes(config.block_size));
    MOESERVE_CHECK(blocks > 0, "a KV budget of {} bytes holds no block of {} bytes", bytes,
                   runner.kv_block_bytes(config.block_size));
    return blocks;
  }
  MOESERVE_CHECK(config.num_kv_blocks > 0, "engine config needs a KV fraction, a byte budget or a block count");
  return config.num_kv_blocks;
}

// Allocates the runner's pool before the block manager is built, so both agree on its size.
int64_t allocate_pool(ModelRunner& runner, const EngineConfig& config) {
  MOESERVE_CHECK(config.block_size > 0, "block size must be positive");
  const int64_t blocks = kv_blocks_for(runner, config);
  runner.allocate_kv_cache({config.block_size, blocks});
  return blocks;
}

}  // namespace

EngineCore::EngineCore(ModelRunner& runner, EngineConfig config, NowFn now)
    : runner_(runner),
      config_(config),
      now_(std::move(now)),
      kv_(kv_groups_of(runner.config()), runner.config().sliding_window, allocate_pool(runner, config),
          config.block_size, config.prefix_caching),
      cost_(config.initial_step_cost),
      scheduler_(config.scheduler, kv_, cost_) {
  metrics_.kv_blocks_total = kv_.pool().num_blocks();
}

std::string EngineCore::capacity_summary() const {
  const int64_t blocks = kv_.pool().num_blocks();
  const double mib = static_cast<double>(blocks) * runner_.kv_block_bytes(config_.block_size) / (1 << 20);
  // A token needs one slot in every KV group; sliding groups give blocks back, so this is a lower bound.
  const int64_t tokens = blocks * config_.block_size / kv_.num_groups();
  return fmt::format("KV cache: {} blocks of {} tokens ({:.1f} MiB), holds at least {} tokens of context", blocks,
                     config_.block_size, mib, tokens);
}

int64_t EngineCore::max_sequence_tokens() const {
  int64_t lo = 0, hi = runner_.config().max_position_embeddings;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (kv_.blocks_needed(mid) <= kv_.pool().num_blocks())
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

void EngineCore::validate(const RequestSpec& spec) const {
  const ModelConfig& c = runner_.config();
  MOESERVE_CHECK(!spec.prompt.empty(), "the prompt is empty");
  for (size_t i = 0; i < spec.prompt.size(); ++i)
    MOESERVE_CHECK(spec.prompt[i] >= 0 && spec.prompt[i] < c.vocab_size,
                   "prompt token {} (at index {}) is outside the vocabulary of {}", spec.prompt[i], i, c.vocab_size);
  MOESERVE_CHECK(spec.max_tokens >= 1, "max_tokens {} must be at least 1", spec.max_tokens);
  const int64_t total = static_cast<int64_t>(spec.prompt.size()) + spec.max_tokens;
  MOESERVE_CHECK(total <= c.max_position_embeddings, "prompt of {} tokens plus max_tokens {} exceeds the context of {}",
                 spec.prompt.size(), spec.max_tokens, c.max_position_embeddings);
  MOESERVE_CHECK(kv_.blocks_needed(total) <= kv_.pool().num_blocks(),
                 "prompt of {} tokens plus max_tokens {} needs {} KV blocks; the pool has {}", spec.prompt.size(),
                 spec.max_tokens, kv_.blocks_needed(total), kv_.pool().num_blocks());
  validate_sampling_params(spec.sampling);
}

void EngineCore::add_request(uint64_t id, RequestSpec spec, EventCallback on_event) {
  validate(spec);
  MOESERVE_CHECK(!sequences_.contains(id), "request id {} is already in use", id);
  auto seq = std::make_unique<Sequence>();
  seq->id = id;
  seq->tokens = spec.prompt;
  seq->prompt_length = static_cast<int>(spec.prompt.size());
  seq->timing.arrival = spec.arrival.value_or(now_());
  seq->timing.prompt_tokens = seq->prompt_length;
  seq->spec = std::move(spec);
  seq->on_event = std::move(on_event);
  scheduler_.add(seq.get());
  sequences_.emplace(id, std::move(seq));
}

void EngineCore::cancel(uint64_t id) {
  auto it = sequences_.find(id);
  if (it != sequences_.end()) it->second->cancel_requested = true;
}

void EngineCore::record_finish_metrics(const Sequence& seq, FinishReason reason) {
  ++metrics_.finished[reason];
  const RequestTiming& t = seq.timing;
  if (t.first_scheduled) metrics_.queue_time.observe(t.queue_seconds());
  if (t.first_token) metrics_.ttft.observe(t.ttft_seconds());
  if (t.output_tokens >= 2) metrics_.tpot.observe(t.tpot_seconds());
  if (t.finished) metrics_.e2e_latency.observe(std::chrono::duration<double>(*t.finished - t.arrival).count());
}

void EngineCore::finish(Sequence& seq, FinishReason reason, std::vector<int32_t> tokens, std::string error) {
  kv_.release(seq);
  scheduler_.remove(&seq);
  seq.status = SequenceStatus::finished;
  RequestEvent event;
  event.request_id = seq.id;
  event.tokens = std::move(tokens);
  event.time = now_();
  event.finish = reason;
  event.error = std::move(error);
  seq.timing.finished = event.time;
  record_finish_metrics(seq, reason);
  auto owned = std::move(sequences_.at(seq.id));
  sequences_.erase(owned->id);
  if (owned->on_event) owned->on_event(event);
}

EngineMetrics EngineCore::metrics() const {
  EngineMetrics snapshot = metrics_;
  snapshot.running = scheduler_.num_running();
  snapshot.waiting = scheduler_.num_waiting();
  snapshot.kv_blocks_in_use = kv_.pool().num_in_use();
  snapshot.prefix_queried_tokens = kv_.prefix_queried_tokens();
  snapshot.prefix_hit_tokens = kv_.prefix_hit_tokens();
  return snapshot;
}

void EngineCore::update_gauges() {
  metrics_.running = scheduler_.num_running();
  metrics_.waiting = scheduler_.num_waiting();
  metrics_.kv_blocks_in_use = kv_.pool().num_in_use();
  metrics_.prefix_queried_tokens = kv_.prefix_queried_tokens();
  metrics_.prefix_hit_tokens = kv_.prefix_hit_tokens();
}

StepReport EngineCore::step() {
  StepReport report;
  std::vector<Sequence*> cancelled;
  for (auto& [id, seq] : sequences_)
    if (seq->cancel_requested) cancelled.push_back(seq.get());
  for (Sequence* seq : cancelled) finish(*seq, FinishReason::cancelled, {});

  SchedulerOutput plan = scheduler_.schedule(now_());
  report.preempted = static_cast<int>(plan.preempted.size());
  metrics_.preemptions += plan.preempted.size();
  if (plan.chunks.empty()) {
    update_gauges();
    return report;
  }

  ForwardBatch batch;
  batch.return_logits = false;
  for (const ScheduledChunk& chunk : plan.chunks) {
    Sequence& seq = *chunk.seq;
    SequenceStep step;
    step.tokens = std::span(seq.tokens).subspan(seq.num_computed, chunk.num_tokens);
    step.start_position = seq.num_computed;
    for (const auto& table : seq.block_tables) step.block_tables.emplace_back(table);
    step.num_logits = chunk.samples ? 1 : 0;
    step.sampling = &seq.spec.sampling;
    step.sample_index = static_cast<uint64_t>(seq.num_generated());
    batch.sequences.push_back(std::move(step));
  }
  const auto started = Clock::now();
  try {
    runner_.forward(batch, output_);
  } catch (const std::exception& e) {
    // The step failed as a whole: its requests end with the error, the engine carries on with the others.
    for (const ScheduledChunk& chunk : plan.chunks) finish(*chunk.seq, FinishReason::error, {}, e.what());
    update_gauges();
    return report;
  }
  report.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  report.sequences = static_cast<int>(plan.chunks.size());
  report.decode_tokens = plan.decode_tokens;
  report.prefill_tokens = plan.prefill_tokens;

  const TimePoint produced = now_();
  const int64_t max_context = runner_.config().max_position_embeddings;
  int64_t row = 0;
  for (const ScheduledChunk& chunk : plan.chunks) {
    Sequence& seq = *chunk.seq;
    metrics_.prompt_tokens_computed += std::clamp(seq.prompt_length - seq.num_computed, 0, chunk.num_tokens);
    seq.num_computed += chunk.num_tokens;
    if (!chunk.samples) {
      kv_.commit(seq);
      continue;
    }
    const int32_t token = output_.sampled.at(row++);
    seq.tokens.push_back(token);
    ++seq.timing.output_tokens;
    ++metrics_.generated_tokens;
    if (!seq.timing.first_token) seq.timing.first_token = produced;
    kv_.commit(seq);
    const auto& stops = seq.spec.stop_tokens;
    FinishReason reason = FinishReason::none;
    if (std::find(stops.begin(), stops.end(), token) != stops.end())
      reason = FinishReason::stop;
    else if (seq.num_generated() >= seq.spec.max_tokens || static_cast<int64_t>(seq.tokens.size()) >= max_context)
      reason = FinishReason::length;
    if (reason != FinishReason::none) {
      finish(seq, reason, {token});
      continue;
    }
    if (seq.on_event) seq.on_event(RequestEvent{seq.id, {token}, produced, FinishReason::none, {}});
  }

  ++metrics_.steps;
  metrics_.busy_seconds += report.seconds;
  metrics_.last_step_seconds = report.seconds;
  metrics_.last_step_tokens = report.decode_tokens + report.prefill_tokens;
  metrics_.step_time.observe(report.seconds);
  metrics_.tokens_per_step.observe(metrics_.last_step_tokens);
  update_gauges();
  if (config_.learn_step_cost) cost_.observe(report.decode_tokens, report.prefill_tokens, report.seconds);
  return report;
}

}  // namespace moeserve

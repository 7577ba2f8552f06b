#include "engine/engine_core.h"

#include <algorithm>

#include "engine/speculative/draft_round.h"
#include "engine/speculative/verifier.h"
#include "sampling/sampler.h"
#include "util/error.h"

namespace moeserve {
int64_t kv_blocks_for(const ModelRunner& runner, const EngineConfig& config) {
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

namespace {

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
      scheduler_(config.scheduler, kv_, cost_, output_lengths_) {
  metrics_.kv_blocks_total = kv_.pool().num_blocks();
  metrics_.block_size = config_.block_size;
  metrics_.prefix_caching = config_.prefix_caching;
  metrics_.request_prompt_tokens = Histogram(token_count_buckets(max_sequence_tokens()));
  metrics_.request_generation_tokens = Histogram(token_count_buckets(max_sequence_tokens()));
  if (config_.drafter) {
    aux_layers_ = config_.drafter->aux_layers();
    kv_.set_drafter(config_.drafter.get());
  }
}

std::string EngineCore::capacity_summary() const {
  const int64_t blocks = kv_.pool().num_blocks();
  const double mib = static_cast<double>(blocks) * runner_.kv_block_bytes(config_.block_size) / (1 << 20);
  // A token needs one slot in every KV group; sliding groups give blocks back, so this is a lower bound.
  const int64_t tokens = blocks * config_.block_size / kv_.num_groups();
  return fmt::format("KV cache: {} blocks of {} tokens ({:.1f} MiB), holds at least {} tokens of context", blocks,
                     config_.block_size, mib, tokens);
}

int64_t EngineCore::max_model_len() const {
  const int64_t context = runner_.config().max_position_embeddings;
  return config_.max_model_len > 0 ? std::min(config_.max_model_len, context) : context;
}

int64_t EngineCore::max_sequence_tokens() const {
  int64_t lo = 0, hi = max_model_len();
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
  MOESERVE_CHECK(total <= max_model_len(), "prompt of {} tokens plus max_tokens {} exceeds the context of {}",
                 spec.prompt.size(), spec.max_tokens, max_model_len());
  MOESERVE_CHECK(kv_.blocks_needed(total) <= kv_.pool().num_blocks(),
                 "prompt of {} tokens plus max_tokens {} needs {} KV blocks; the pool has {}", spec.prompt.size(),
                 spec.max_tokens, kv_.blocks_needed(total), kv_.pool().num_blocks());
  validate_sampling_params(spec.sampling);
  validate_logits_processing(spec.processing, c.vocab_size);
  MOESERVE_CHECK(spec.processing.min_tokens <= spec.max_tokens, "min_tokens {} is above max_tokens {}",
                 spec.processing.min_tokens, spec.max_tokens);
  MOESERVE_CHECK(!spec.grammar || spec.processing.min_tokens == 0,
                 "min_tokens cannot be combined with constrained decoding (a whole document may need a stop token)");
  MOESERVE_CHECK(spec.top_logprobs >= -1 && spec.top_logprobs <= kMaxTopLogprobs,
                 "top_logprobs {} must be in [0, {}] (or -1: none)", spec.top_logprobs, kMaxTopLogprobs);
  if (spec.speculation) {
    speculative::validate_draft_shape(*spec.speculation);
    MOESERVE_CHECK(spec.speculation->num_draft_tokens == 0 || config_.drafter,
                   "the request asks for speculative decoding but the engine has no drafter (--speculative-config)");
  }
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
  // Drafts are verified against the plain distribution, or a grammar's mask from the first token on: a request
  // whose draws are edited, that wants each token's logprobs, or whose grammar waits for a trigger, decodes one
  // token a step.
  const bool plain_draws = !spec.processing.active() && spec.top_logprobs < 0 && !spec.prompt_logprobs &&
                           (!spec.grammar || spec.grammar_trigger.empty());
  if (config_.drafter && plain_draws)
    seq->speculation = spec.speculation.value_or(config_.speculative.enabled() ? config_.speculative.shape()
                                                                                : speculative::DraftShape{});
  if (spec.processing.penalises()) seq->history = TokenHistory(spec.prompt);
  if (spec.prompt_logprobs) seq->prompt_logprobs.resize(spec.prompt.size() - 1);
  if (spec.grammar && spec.grammar_trigger.empty()) seq->grammar_state = spec.grammar->start();
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
  auto seconds = [](TimePoint from, TimePoint to) { return std::chrono::duration<double>(to - from).count(); };
  if (t.first_scheduled && t.first_token) metrics_.prefill_time.observe(seconds(*t.first_scheduled, *t.first_token));
  if (t.first_token && t.last_token) metrics_.decode_time.observe(seconds(*t.first_token, *t.last_token));
  if (t.first_scheduled && t.last_token) metrics_.inference_time.observe(seconds(*t.first_scheduled, *t.last_token));
  metrics_.request_prompt_tokens.observe(static_cast<double>(seq.prompt_length));
  metrics_.request_generation_tokens.observe(static_cast<double>(t.output_tokens));
  if (t.finished) metrics_.e2e_latency.observe(std::chrono::duration<double>(*t.finished - t.arrival).count());
}

void EngineCore::finish(Sequence& seq, FinishReason reason, RequestEvent event) {
  kv_.release(seq);
  if (seq.speculates()) config_.drafter->release(seq.id);
  scheduler_.remove(&seq);
  if ((reason == FinishReason::stop || reason == FinishReason::length) && may_stop_early(seq.spec))
    output_lengths_.observe(seq.num_generated());
  seq.status = SequenceStatus::finished;
  event.request_id = seq.id;
  event.time = now_();
  event.finish = reason;
  seq.timing.finished = event.time;
  record_finish_metrics(seq, reason);
  retired_.push_back(std::move(sequences_.at(seq.id)));
  sequences_.erase(seq.id);
  if (seq.on_event) seq.on_event(event);
}

void EngineCore::finish_with_error(Sequence& seq, std::string error) {
  RequestEvent event;
  event.error = std::move(error);
  finish(seq, FinishReason::error, std::move(event));
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

bool EngineCore::emit(Sequence& seq, const std::vector<int32_t>& tokens, std::vector<TokenLogprobs> logprobs,
                      TimePoint produced) {
  const auto& stops = seq.spec.stop_tokens;
  RequestEvent event;
  event.request_id = seq.id;
  event.time = produced;
  if (!seq.timing.first_token) {
    seq.timing.first_token = produced;
    event.prompt_logprobs = std::move(seq.prompt_logprobs);
  }
  if (seq.timing.last_token)
    metrics_.inter_token_latency.observe(std::chrono::duration<double>(produced - *seq.timing.last_token).count());
  seq.timing.last_token = produced;
  for (size_t i = 0; i < tokens.size(); ++i) {
    seq.tokens.push_back(tokens[i]);
    if (seq.spec.processing.penalises()) seq.history.add_output(tokens[i]);
    ++seq.timing.output_tokens;
    ++metrics_.generated_tokens;
    FinishReason reason = FinishReason::none;
    const bool stop_token = std::find(stops.begin(), stops.end(), tokens[i]) != stops.end();
    if (!stop_token && seq.spec.grammar && !advance_grammar(seq, tokens[i])) {
      finish_with_error(seq, fmt::format("constrained decoding: token {} is outside the grammar", tokens[i]));
      return true;
    }
    const bool document_whole = seq.grammar_state && seq.spec.grammar->complete(*seq.grammar_state);
    if (stop_token || (document_whole && stops.empty()))
      reason = FinishReason::stop;
    else if (reached_length(seq))
      reason = FinishReason::length;
    if (reason != FinishReason::none) {
      // Whatever an accepted run holds past the end is dropped.
      const auto kept = static_cast<std::ptrdiff_t>(i) + 1;
      event.tokens.assign(tokens.begin(), tokens.begin() + kept);
      if (!logprobs.empty()) event.logprobs.assign(logprobs.begin(), logprobs.begin() + kept);
      finish(seq, reason, std::move(event));
      return true;
    }
  }
  event.tokens = tokens;
  event.logprobs = std::move(logprobs);
  if (seq.on_event) seq.on_event(event);
  return false;
}

std::vector<LogitEdit> EngineCore::next_logit_edits(const Sequence& seq) const {
  const LogitsProcessing& p = seq.spec.processing;
  if (!p.active()) return {};
  const bool hold_stops = seq.num_generated() < p.min_tokens;
  return logit_edits(p, seq.history, hold_stops ? std::span<const int32_t>(seq.spec.stop_tokens) : std::span<const int32_t>());
}

namespace {

// What a request's grammar allows in `state`: its mask, or once the document is whole the stop tokens.
std::shared_ptr<const structured::TokenMask> grammar_mask(const RequestSpec& spec, const structured::MatcherState& state,
                                                          int64_t vocab) {
  const structured::TokenGrammar& grammar = *spec.grammar;
  if (!grammar.complete(state)) return grammar.mask(state);
  auto stops_only = std::make_shared<structured::TokenMask>((vocab + 31) / 32, 0);
  for (int32_t t : spec.stop_tokens) (*stops_only)[t >> 5] |= 1u << (t & 31);
  return stops_only;
}

// A constrained draft's verify rows under the grammar: row 0 masked at the sequence's state, row 1 + i at the state
// after the path to node i (a node whose token the grammar refuses gets a row that allows nothing, and is never
// accepted: its parent's row gave it no probability).
std::vector<float> masked_draft_rows(const Sequence& seq, std::span<const float> logits, int64_t vocab) {
  const speculative::DraftTree& draft = seq.draft;
  std::vector<structured::MatcherState> states(draft.size() + 1);
  states[0] = *seq.grammar_state;
  for (size_t i = 0; i < draft.size(); ++i) {
    states[i + 1] = states[static_cast<size_t>(draft.parent[i] + 1)];
    seq.spec.grammar->advance(states[i + 1], draft.tokens[i]);
  }
  std::vector<float> rows(logits.begin(), logits.end());
  for (size_t r = 0; r < states.size(); ++r)
    apply_logit_edits(std::span(rows).subspan(r * vocab, vocab), {}, *grammar_mask(seq.spec, states[r], vocab));
  return rows;
}

}  // namespace

std::shared_ptr<const structured::TokenMask> EngineCore::allowed_tokens(const Sequence& seq) const {
  if (!seq.grammar_state) return nullptr;
  return grammar_mask(seq.spec, *seq.grammar_state, runner_.config().vocab_size);
}

bool EngineCore::advance_grammar(Sequence& seq, int32_t token) {
  if (seq.grammar_state) return seq.spec.grammar->advance(*seq.grammar_state, token);
  const auto& trigger = seq.spec.grammar_trigger;
  const auto n = static_cast<std::ptrdiff_t>(trigger.size());
  if (seq.num_generated() >= n && std::equal(trigger.begin(), trigger.end(), seq.tokens.end() - n))
    seq.grammar_state = seq.spec.grammar->start();
  return true;
}

void EngineCore::gather_prompt_logprobs(Sequence& seq, int32_t start, int64_t first_row, int64_t rows) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t predicted = start + i + 1;  // the position whose token row i scores
    if (predicted < seq.prompt_length) seq.prompt_logprobs[predicted - 1] = output_.logprobs.at(first_row + i);
  }
}

std::vector<int32_t> EngineCore::verify(Sequence& seq, int64_t first_row, int64_t rows, int64_t first_token_row,
                                        std::vector<int64_t>& fed_rows) {
  const speculative::DraftTree& draft = seq.draft;
  const int64_t vocab = runner_.config().vocab_size;
  const auto sample_index = static_cast<uint64_t>(seq.num_generated());
  // A constrained draft is checked against the grammar's mask at every node (from the logits: the runner's greedy
  // tokens are unmasked).
  std::span<const float> row_logits;
  std::vector<float> masked;
  if (!seq.spec.sampling.greedy() || seq.grammar_state) {
    row_logits = std::span(output_.logits).subspan(first_row * vocab, rows * vocab);
    if (seq.grammar_state) row_logits = masked = masked_draft_rows(seq, row_logits, vocab);
  }
  const speculative::Verdict verdict =
      row_logits.empty()
          ? speculative::verify_draft_greedy(draft, std::span(output_.sampled).subspan(first_row, rows),
                                             seq.spec.sampling, sample_index, config_.speculative.test_acceptance_rate)
          : speculative::verify_draft(draft, row_logits, vocab, seq.spec.sampling, sample_index,
                                      config_.speculative.test_acceptance_rate);
  // Node i was computed at slot root + 1 + i; the path's node at depth j + 1 belongs at position root + 1 + j. A
  // chain's path is already in place; a tree's is moved there (in order: a move never overwrites a later source).
  const int32_t root = seq.num_computed;
  std::vector<KvSlotMove> moves;
  fed_rows.assign(1, first_token_row);
  for (size_t j = 0; j < verdict.path.size(); ++j) {
    const int32_t node = verdict.path[j];
    if (node != static_cast<int32_t>(j)) moves.push_back({root + 1 + node, root + 1 + static_cast<int32_t>(j)});
    fed_rows.push_back(first_token_row + 1 + node);
  }
  if (!moves.empty()) {
    std::vector<std::span<const int32_t>> tables(seq.block_tables.begin(), seq.block_tables.end());
    runner_.move_kv_slots(tables, moves);
  }
  seq.num_computed = root + 1 + static_cast<int>(verdict.path.size());
  kv_.truncate(seq);

  ++metrics_.spec_drafts;
  metrics_.spec_draft_tokens += draft.size();
  metrics_.spec_accepted_tokens += verdict.path.size();
  // Every drafted depth gets a counter, so that positions nothing was accepted at read 0 rather than missing.
  auto& per_position = metrics_.spec_accepted_per_position;
  per_position.resize(std::max(per_position.size(), speculative::draft_depth(draft)), 0);
  for (size_t j = 0; j < verdict.path.size(); ++j) ++per_position[j];
  return verdict.tokens;
}

speculative::DraftShape EngineCore::next_draft_shape(const Sequence& seq) const {
  speculative::DraftShape shape = seq.speculation;
  // A verify step emits up to depth + 1 tokens and writes tree-size slots past the root; neither may pass
  // max_tokens or the context, and all of it must fit one step's token budget.
  const int slots = static_cast<int>(std::min<int64_t>(
      runner_.config().max_position_embeddings - static_cast<int64_t>(seq.tokens.size()),
      config_.scheduler.max_batched_tokens - 1));
  const int depth = std::min({shape.num_draft_tokens, seq.spec.max_tokens - seq.num_generated() - 1, slots});
  shape.num_draft_tokens = std::max(depth, 0);
  if (!shape.is_chain()) shape.total_tokens = std::min(shape.total_tokens, slots);
  if (seq.num_uncomputed() != 1 || (!shape.is_chain() && shape.total_tokens == 0))
    shape.num_draft_tokens = 0;  // mid-prefill, or no room: only extend the drafter's state
  return shape;
}

bool EngineCore::reached_length(const Sequence& seq) const {
  return seq.num_generated() >= seq.spec.max_tokens ||
         static_cast<int64_t>(seq.tokens.size()) >= runner_.config().max_position_embeddings;
}

void EngineCore::prepare(const SchedulerOutput& plan, PreparedStep& prepared) const {
  ForwardBatch& batch = prepared.batch;
  batch.return_logits = false;
  prepared.verify_tokens.assign(plan.chunks.size(), {});
  prepared.verify_parents.assign(plan.chunks.size(), {});
  prepared.logit_edits.assign(plan.chunks.size(), {});
  prepared.logprob_tokens.assign(plan.chunks.size(), {});
  prepared.allowed.assign(plan.chunks.size(), nullptr);
  for (size_t c = 0; c < plan.chunks.size(); ++c) {
    const ScheduledChunk& chunk = plan.chunks[c];
    Sequence& seq = *chunk.seq;
    SequenceStep step;
    step.tokens = std::span(seq.tokens).subspan(seq.num_computed, chunk.num_tokens);
    step.start_position = seq.num_computed;
    for (const auto& table : seq.block_tables) step.block_tables.emplace_back(table);
    step.num_logits = chunk.samples ? 1 : 0;
    step.sampling = &seq.spec.sampling;
    step.sample_index = static_cast<uint64_t>(seq.num_generated());
    if (seq.spec.top_logprobs >= 0 || seq.wants_prompt_logprobs()) step.top_logprobs = std::max(seq.spec.top_logprobs, 0);
    if (seq.wants_prompt_logprobs()) {
      // Every row: position p scores the prompt's token p + 1; the row past the prompt's end samples.
      std::vector<int32_t>& next = prepared.logprob_tokens[c];
      for (int i = 0; i < chunk.num_tokens; ++i) {
        const int64_t predicted = static_cast<int64_t>(seq.num_computed) + i + 1;
        next.push_back(predicted < seq.prompt_length ? seq.tokens[predicted] : -1);
      }
      step.num_logits = chunk.num_tokens;
      step.logprob_tokens = next;
    }
    if (chunk.samples) {
      prepared.logit_edits[c] = next_logit_edits(seq);
      step.logit_edits = prepared.logit_edits[c];
      prepared.allowed[c] = allowed_tokens(seq);
      if (prepared.allowed[c]) step.allowed_tokens = *prepared.allowed[c];
    }
    if (chunk.num_draft > 0) {
      // A verify step's tokens: the last committed token (the root) and the draft; parents for a tree.
      std::vector<int32_t>& tokens = prepared.verify_tokens[c];
      tokens = {seq.tokens.back()};
      tokens.insert(tokens.end(), seq.draft.tokens.begin(), seq.draft.tokens.end());
      prepared.verify_parents[c] = speculative::verify_tree_parents(seq.draft);
      step.tokens = tokens;
      step.tree_parent = prepared.verify_parents[c];
      step.num_logits = 1 + chunk.num_draft;
      if (!seq.spec.sampling.greedy() || seq.grammar_state) {
        step.sampling = nullptr;  // verified here, from the logits (under the grammar's masks when constrained)
        step.allowed_tokens = {};
        batch.return_logits = true;
      }  // greedy: verified from the runner's greedy token of every row (no logits copied back)
    }
    if (seq.speculates()) batch.capture_layers = aux_layers_;
    batch.sequences.push_back(std::move(step));
  }
}

void EngineCore::update(const ScheduledStep& step) {
  const SchedulerOutput& plan = step.plan;
  const PreparedStep& prepared = step.prepared;
  const TimePoint produced = now_();
  std::optional<speculative::DraftRound> round;
  if (std::any_of(plan.chunks.begin(), plan.chunks.end(), [](const ScheduledChunk& c) { return c.seq->speculates(); }))
    round.emplace(*config_.drafter, output_.captured, runner_.config().hidden_size);
  int64_t row = 0, token_row = 0;
  std::vector<int64_t> fed_rows;
  for (size_t c = 0; c < plan.chunks.size(); ++c) {
    const ScheduledChunk& chunk = plan.chunks[c];
    Sequence& seq = *chunk.seq;
    const int32_t start = step.starts[c];
    const int64_t logits_rows = prepared.batch.sequences[c].num_logits;
    const int64_t step_tokens = chunk.num_tokens + chunk.num_draft;
    metrics_.prompt_tokens_computed += std::clamp(seq.prompt_length - start, 0, chunk.num_tokens);
    std::vector<int32_t> emitted;
    std::vector<TokenLogprobs> logprobs;
    if (chunk.num_draft > 0) {
      try {
        emitted = verify(seq, row, step_tokens, token_row, fed_rows);
      } catch (const std::exception& e) {
        finish_with_error(seq, e.what());
        row += step_tokens;
        token_row += step_tokens;
        continue;
      }
      row += step_tokens;
    } else {
      if (chunk.samples) seq.tokens.pop_back();  // advance()'s placeholder; emit appends the token in its place
      if (seq.wants_prompt_logprobs()) gather_prompt_logprobs(seq, start, row, logits_rows);
      fed_rows.resize(chunk.num_tokens);
      for (int i = 0; i < chunk.num_tokens; ++i) fed_rows[i] = token_row + i;
      if (chunk.samples) {
        const int64_t sampled_row = row + logits_rows - 1;
        emitted = {output_.sampled.at(sampled_row)};
        if (seq.spec.top_logprobs >= 0) logprobs = {output_.logprobs.at(sampled_row)};
      }
      row += logits_rows;
    }
    token_row += step_tokens;
    seq.draft = {};
    if (!emitted.empty() && emit(seq, emitted, std::move(logprobs), produced)) continue;
    if (chunk.num_draft > 0) kv_.commit(seq);  // the accepted path (advance() committed the other chunks)
    if (seq.speculates()) round->add(seq, start, fed_rows, next_draft_shape(seq));
  }
  if (round && !round->empty()) {
    try {
      round->propose();
    } catch (const std::exception& e) {
      // The drafter's state for these sequences is unknown now: end them with the error, as a failed step does.
      for (Sequence* seq : round->sequences()) finish_with_error(*seq, fmt::format("drafter: {}", e.what()));
    }
  }
}

void EngineCore::record_step(const StepReport& report) {
  ++metrics_.steps;
  metrics_.busy_seconds += report.seconds;
  metrics_.last_step_seconds = report.seconds;
  metrics_.last_step_tokens = report.decode_tokens + report.prefill_tokens;
  metrics_.step_time.observe(report.seconds);
  metrics_.tokens_per_step.observe(metrics_.last_step_tokens);
  if (config_.learn_step_cost) cost_.observe(report.decode_tokens, report.prefill_tokens, report.seconds);
}

}  // namespace moeserve

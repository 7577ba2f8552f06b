#include "server/stats_logger.h"

#include <fmt/format.h>

#include "util/log.h"

namespace moeserve::server {

std::optional<std::string> stats_line(const EngineMetrics& before, const EngineMetrics& now, double seconds) {
  const uint64_t prompt = now.prompt_tokens_computed - before.prompt_tokens_computed;
  const uint64_t generated = now.generated_tokens - before.generated_tokens;
  if (prompt == 0 && generated == 0 && now.running == 0 && now.waiting == 0) return std::nullopt;
  const uint64_t queried = now.prefix_queried_tokens - before.prefix_queried_tokens;
  const uint64_t hits = now.prefix_hit_tokens - before.prefix_hit_tokens;
  const double per_second = seconds > 0 ? 1 / seconds : 0;
  std::string line = fmt::format(
      "Avg prompt throughput: {:.1f} tokens/s, Avg generation throughput: {:.1f} tokens/s, Running: {} reqs, "
      "Waiting: {} reqs, GPU KV cache usage: {:.1f}%, Prefix cache hit rate: {:.1f}%",
      static_cast<double>(prompt) * per_second, static_cast<double>(generated) * per_second, now.running, now.waiting,
      100 * now.kv_usage(), queried ? 100.0 * static_cast<double>(hits) / queried : 0.0);
  const uint64_t drafts = now.spec_drafts - before.spec_drafts;
  if (drafts > 0)
    line += fmt::format(", Mean acceptance length: {:.2f}",
                        1.0 + static_cast<double>(now.spec_accepted_tokens - before.spec_accepted_tokens) / drafts);
  return line;
}

StatsLogger::StatsLogger(std::shared_ptr<const Engine> engine, std::chrono::milliseconds interval)
    : engine_(std::move(engine)), interval_(interval), thread_([this] { run(); }) {}

StatsLogger::~StatsLogger() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void StatsLogger::run() {
  EngineMetrics before = engine_->metrics();
  auto since = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, interval_, [this] { return stopping_; })) {
    const EngineMetrics now = engine_->metrics();
    const auto at = std::chrono::steady_clock::now();
    if (const auto line = stats_line(before, now, std::chrono::duration<double>(at - since).count()))
      log_info("{}", *line);
    before = now;
    since = at;
  }
}

}  // namespace moeserve::server

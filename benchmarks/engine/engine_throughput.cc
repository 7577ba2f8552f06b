// Engine throughput on the CPU runner: output tokens/s against concurrency (closed loop: C requests in flight,
// a new one submitted as each finishes), and the prefix-cache speed-up for requests sharing a long prefix.
// Prompts are fresh random token ids on every run.
//   engine_throughput --model DIR [--concurrency 1,4,16,64] [--prompt 128] [--output 128] [--requests-per-slot 2]
//                     [--shared-prefix 1000]
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "model/gpt_oss/checkpoint.h"
#include "runner/cpu/cpu_runner.h"

using namespace moeserve;

namespace {

std::vector<int32_t> random_tokens(std::mt19937& rng, int n) {
  std::uniform_int_distribution<int32_t> id(0, 199997);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = id(rng);
  return t;
}

struct Closed {
  double seconds = 0;
  int64_t output_tokens = 0;
};

// Keeps `concurrency` requests in flight until `total` have finished.
Closed closed_loop(Engine& engine, int concurrency, int total, const std::function<RequestSpec()>& make) {
  std::mutex mutex;
  std::condition_variable done_cv;
  int submitted = 0, finished = 0;
  int64_t tokens = 0;
  std::function<void()> submit_one;
  const auto start = Clock::now();
  submit_one = [&] {
    RequestSpec spec = make();
    engine.submit(std::move(spec), [&](const RequestEvent& e) {
      std::lock_guard lock(mutex);
      tokens += static_cast<int64_t>(e.tokens.size());
      if (e.finish == FinishReason::none) return;
      ++finished;
      done_cv.notify_all();
    });
  };
  {
    std::unique_lock lock(mutex);
    while (finished < total) {
      while (submitted - finished < concurrency && submitted < total) {
        ++submitted;
        lock.unlock();
        submit_one();
        lock.lock();
      }
      done_cv.wait(lock, [&] { return finished >= total || (submitted < total && submitted - finished < concurrency); });
    }
  }
  Closed r;
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.output_tokens = tokens;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"engine throughput on the CPU runner"};
  std::string model;
  std::vector<int> concurrency = {1, 4, 16, 64};
  int prompt = 128, output = 128, per_slot = 2, shared = 1000;
  size_t threads = 0;
  app.add_option("--model", model)->required();
  app.add_option("--concurrency", concurrency)->delimiter(',');
  app.add_option("--prompt", prompt);
  app.add_option("--output", output);
  app.add_option("--requests-per-slot", per_slot);
  app.add_option("--shared-prefix", shared);
  app.add_option("--threads", threads);
  CLI11_PARSE(app, argc, argv);

  auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(model));
  std::mt19937 rng(std::random_device{}());
  fmt::print("concurrency  requests  output tok/s  (prompt {} + output {} tokens each)\n", prompt, output);
  for (int c : concurrency) {
    EngineConfig config;
    config.num_kv_blocks = static_cast<int64_t>(c) * ((prompt + output) / 16 + 2) * 2 + 64;
    config.scheduler.max_num_seqs = c;
    config.scheduler.max_batched_tokens = 2048;
    Engine engine(std::make_shared<CpuRunner>(checkpoint, threads), config);
    const int total = std::max(c * per_slot, 8);
    Closed r = closed_loop(engine, c, total, [&] {
      RequestSpec spec;
      spec.prompt = random_tokens(rng, prompt);
      spec.max_tokens = output;
      spec.sampling.seed = rng();
      return spec;
    });
    fmt::print("{:>11}  {:>8}  {:>12.1f}\n", c, total, r.output_tokens / r.seconds);
  }

  // Prefix cache: sequential requests, each a shared prefix plus a fresh 32-token question, 16 output tokens.
  const auto prefix = random_tokens(rng, shared);
  for (bool caching : {false, true}) {
    EngineConfig config;
    config.num_kv_blocks = 2 * ((shared + 64) / 16 + 4) + 64;
    config.prefix_caching = caching;
    Engine engine(std::make_shared<CpuRunner>(checkpoint, threads), config);
    const int total = 8;
    Closed r = closed_loop(engine, 1, total, [&] {
      RequestSpec spec;
      spec.prompt = prefix;
      auto q = random_tokens(rng, 32);
      spec.prompt.insert(spec.prompt.end(), q.begin(), q.end());
      spec.max_tokens = 16;
      return spec;
    });
    auto m = engine.metrics();
    fmt::print("shared {}-token prefix, prefix caching {:>3}: {:.3f} s per request, mean TTFT {:.3f} s, hit rate {:.2f}\n",
               shared, caching ? "on" : "off", r.seconds / total, m.ttft.sum() / m.ttft.count(), m.prefix_hit_rate());
  }
  return 0;
}

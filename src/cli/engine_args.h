// The engine options shared by the subcommands that serve requests (serve, bench, eval, generate): KV budget,
// block size, batch limits, scheduling policy and its targets, prefix caching, speculative decoding.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "cli/runner_args.h"
#include "engine/engine_core.h"

namespace moeserve::cli {

struct EngineArgs {
  EngineConfig config;
  std::string kv_cache_size;  // "4GiB", "512MiB", bytes
  std::string scheduler = "fcfs";
  bool no_prefix_caching = false;
  std::string speculative_config;  // JSON (engine/speculative/speculative_config.h)
};

void add_engine_options(CLI::App* command, EngineArgs& args);
// The engine config after parsing; the KV budget defaults to a fraction of device memory on a GPU runner and to
// 1 GiB of host memory on the CPU runner. With --speculative-config, the drafter is built too: an EAGLE-3 head
// (on the GPU beside the CUDA runner, else on the CPU; its KV pool holding as many tokens as the target's; "model":
// "synthetic" gives the GPU a random head of gpt-oss-120b's shape) or the test drafter named by the method.
EngineConfig engine_config(const EngineArgs& args, const OpenedRunner& opened);
// "4GiB", "512MiB", "1.5G", "1000000" -> bytes; an Error naming the text otherwise.
int64_t parse_byte_size(const std::string& text);

}  // namespace moeserve::cli

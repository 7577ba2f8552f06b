// The engine options shared by the subcommands that serve requests (serve, bench): KV budget, block size,
// batch limits, scheduling policy and its targets, prefix caching.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "engine/engine_core.h"

namespace moeserve::cli {

struct EngineArgs {
  EngineConfig config;
  std::string kv_cache_size;  // "4GiB", "512MiB", bytes
  std::string scheduler = "fcfs";
  bool no_prefix_caching = false;
};

void add_engine_options(CLI::App* command, EngineArgs& args);
// The engine config after parsing; the KV budget defaults to a fraction of device memory on a GPU runner and to
// 1 GiB of host memory on the CPU runner.
EngineConfig engine_config(const EngineArgs& args, bool device_runner);
// "4GiB", "512MiB", "1.5G", "1000000" -> bytes; an Error naming the text otherwise.
int64_t parse_byte_size(const std::string& text);

}  // namespace moeserve::cli

#include "runner/cuda/programmatic_launch.h"

#include <atomic>
#include <cstdlib>
#include <string_view>

#include "util/error.h"

namespace moeserve::cuda {
namespace {

// -1: not decided yet (MOESERVE_PDL is read at the first query); else 0 or 1.
std::atomic<int> programmatic_launch{-1};

}  // namespace

bool parse_programmatic_launch_env(const char* value) {
  if (value == nullptr) return false;
  const std::string_view text(value);
  if (text.empty() || text == "0") return false;
  if (text == "1") return true;
  fail("MOESERVE_PDL='{}': expected 1 (programmatic dependent launch on) or 0 (off)", text);
}

bool programmatic_launch_enabled() {
  int state = programmatic_launch.load(std::memory_order_relaxed);
  if (state < 0) {
    const int from_env = parse_programmatic_launch_env(std::getenv("MOESERVE_PDL")) ? 1 : 0;
    // A set_programmatic_launch() racing with this first read wins.
    programmatic_launch.compare_exchange_strong(state, from_env, std::memory_order_relaxed);
    state = programmatic_launch.load(std::memory_order_relaxed);
  }
  return state == 1;
}

void set_programmatic_launch(bool enabled) { programmatic_launch.store(enabled ? 1 : 0, std::memory_order_relaxed); }

}  // namespace moeserve::cuda

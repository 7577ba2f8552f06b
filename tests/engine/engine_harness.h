// Runs requests through an EngineCore step by step, adding each at its arrival step, and collects their streams.
#pragma once

#include <map>
#include <stdexcept>
#include <vector>

#include "engine/engine_core.h"

namespace moeserve::testing {

struct Arrival {
  int step = 0;  // added before this step runs
  RequestSpec spec;
};

struct Collected {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::none;
  int events = 0;
};

// ids are the indices of `arrivals`; `between_steps(step)` runs after each step (cancellations, clock moves).
inline std::map<uint64_t, Collected> run_requests(EngineCore& core, const std::vector<Arrival>& arrivals,
                                                  const std::function<void(int)>& between_steps = {}) {
  std::map<uint64_t, Collected> out;
  size_t added = 0;
  for (int step = 0; added < arrivals.size() || core.has_work(); ++step) {
    if (step > 200000) throw std::runtime_error("engine made no progress in 200000 steps");
    for (size_t i = 0; i < arrivals.size(); ++i) {
      if (arrivals[i].step != step) continue;
      core.add_request(i, arrivals[i].spec, [&out](const RequestEvent& e) {
        Collected& c = out[e.request_id];
        ++c.events;
        c.tokens.insert(c.tokens.end(), e.tokens.begin(), e.tokens.end());
        if (e.finish != FinishReason::none) c.finish = e.finish;
      });
      ++added;
    }
    core.step();
    if (between_steps) between_steps(step);
  }
  return out;
}

}  // namespace moeserve::testing

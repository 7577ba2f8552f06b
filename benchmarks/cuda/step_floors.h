// The floor of each kernel class of a forward step: the larger of (bytes it must move over the copy bandwidth)
// and (FLOPs it must do over the bf16 matrix rate), from the step's batch as the runner sees it. Bytes count each
// weight once, each expert the step touches once, each sequence's visible keys and values once; FLOPs are the
// multiply-adds of the step's tokens (x 2). Classes with no meaningful floor (grouping, metadata) get 0.
#pragma once

#include <array>

#include "bench_common.h"
#include "runner/cuda/kernel_timer.h"
#include "runner/runner.h"

namespace moeserve::bench_cuda {

struct ClassCost {
  double bytes = 0, flops = 0;
};
using StepCosts = std::array<ClassCost, cuda::kKernelClasses>;

// touched_experts: experts per layer that got at least one row (measured, or E (1 - (1 - k/E)^T) for uniform
// routing).
StepCosts step_costs(const ModelConfig& c, const ForwardBatch& batch, double touched_experts);
double uniform_touched_experts(const ModelConfig& c, int tokens);
double floor_ms(const ClassCost& cost, const Ceilings& ceilings);

}  // namespace moeserve::bench_cuda

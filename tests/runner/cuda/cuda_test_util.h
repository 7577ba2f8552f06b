// Helpers for the CUDA tests: device presence (tests skip without one), random inputs, conversions to and from
// the device's element types, relative errors with their bounds printed so logs state what was measured, and a
// device copy of a step's metadata built by the runner's own StepMetadata.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "runner/cuda/device_buffer.h"
#include "runner/cuda/kernels.h"
#include "runner/cuda/step_metadata.h"

namespace moeserve::testing {

bool cuda_device_present();

#define MOESERVE_REQUIRE_CUDA()                                                           \
  do {                                                                                    \
    if (!::moeserve::testing::cuda_device_present()) GTEST_SKIP() << "no CUDA device"; \
  } while (false)

std::vector<float> random_floats(std::mt19937& rng, size_t n, float mean = 0.0f, float std = 1.0f);

// ||out - ref|| / ||ref||.
double relative_error(const std::vector<float>& out, const std::vector<float>& ref);

// EXPECT_LE(error, bound), and a line "error-bound <what>: <error> (bound <bound>)" for the logs.
void expect_error_within(const std::string& what, double error, double bound);

// Values as the device holds them: bf16 rounds, f32 does not.
std::vector<float> round_to(cuda::Precision precision, const std::vector<float>& values);
cuda::DeviceBuffer upload_as(cuda::Precision precision, const std::vector<float>& values);
std::vector<float> download_as(cuda::Precision precision, const void* device, size_t count);

const char* precision_name(cuda::Precision precision);

// fp8 e4m3 as the device stores it (value / scale, rounded to nearest, saturated to +-448; scale_of(i) is
// element i's scale) and the values it stands for (stored * scale).
std::vector<uint8_t> to_e4m3(const std::vector<float>& values, const std::function<float(size_t)>& scale_of);
std::vector<float> from_e4m3(const std::vector<uint8_t>& stored, const std::function<float(size_t)>& scale_of);

// Block tables for sequences that read positions [max(0, start - window + 1), end) (window 0: from 0): distinct
// shuffled blocks for those, -1 (given back) before them. *num_blocks is the pool size they need.
std::vector<std::vector<int32_t>> scattered_tables(std::mt19937& rng, const std::vector<int>& starts,
                                                   const std::vector<int>& ends, int window, int block_size,
                                                   int64_t* num_blocks);

// A step's metadata on the device (prefill_min_rows as StepMetadata::build takes it).
struct DeviceStep {
  cuda::StepMetadata meta;
  cuda::DeviceBuffer buffer;
  cuda::StepView view;
  DeviceStep(const ForwardBatch& batch, const ModelConfig& config, const KvCacheLayout& kv, int prefill_min_rows);
};

}  // namespace moeserve::testing

#include "cuda_test_util.h"

#include <cuda_fp8.h>

#include <cmath>
#include <cstdio>
#include <numeric>

#include "util/bfloat16.h"

namespace moeserve::testing {

bool cuda_device_present() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

std::vector<float> random_floats(std::mt19937& rng, size_t n, float mean, float std) {
  std::normal_distribution<float> normal(mean, std);
  std::vector<float> values(n);
  for (auto& v : values) v = normal(rng);
  return values;
}

double relative_error(const std::vector<float>& out, const std::vector<float>& ref) {
  EXPECT_EQ(out.size(), ref.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < std::min(out.size(), ref.size()); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    diff += (static_cast<double>(out[i]) - ref[i]) * (static_cast<double>(out[i]) - ref[i]);
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(diff / norm);
}

void expect_error_within(const std::string& what, double error, double bound) {
  std::printf("error-bound %s: %.3e (bound %.0e)\n", what.c_str(), error, bound);
  EXPECT_LE(error, bound) << what;
}

std::vector<float> round_to(cuda::Precision precision, const std::vector<float>& values) {
  if (precision == cuda::Precision::f32) return values;
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = bf16_to_float(float_to_bf16(values[i]));
  return out;
}

cuda::DeviceBuffer upload_as(cuda::Precision precision, const std::vector<float>& values) {
  if (precision == cuda::Precision::f32) return cuda::to_device(values);
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = float_to_bf16(values[i]);
  return cuda::to_device(bits);
}

std::vector<float> download_as(cuda::Precision precision, const void* device, size_t count) {
  if (precision == cuda::Precision::f32) return cuda::to_host<float>(device, count);
  std::vector<uint16_t> bits = cuda::to_host<uint16_t>(device, count);
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}

const char* precision_name(cuda::Precision precision) { return precision == cuda::Precision::bf16 ? "bf16" : "f32"; }

std::vector<uint8_t> to_e4m3(const std::vector<float>& values, const std::function<float(size_t)>& scale_of) {
  std::vector<uint8_t> stored(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    stored[i] = __nv_cvt_float_to_fp8(values[i] / scale_of(i), __NV_SATFINITE, __NV_E4M3);
  return stored;
}

std::vector<float> from_e4m3(const std::vector<uint8_t>& stored, const std::function<float(size_t)>& scale_of) {
  std::vector<float> values(stored.size());
  for (size_t i = 0; i < stored.size(); ++i)
    values[i] = __half2float(__half(__nv_cvt_fp8_to_halfraw(stored[i], __NV_E4M3))) * scale_of(i);
  return values;
}

std::vector<std::vector<int32_t>> scattered_tables(std::mt19937& rng, const std::vector<int>& starts,
                                                   const std::vector<int>& ends, int window, int block_size,
                                                   int64_t* num_blocks) {
  std::vector<std::pair<int, int>> ranges;  // [first block, end block) of each sequence
  int total = 0;
  for (size_t s = 0; s < starts.size(); ++s) {
    const int first = window > 0 ? std::max(0, starts[s] - window + 1) / block_size : 0;
    const int last = (ends[s] + block_size - 1) / block_size;
    ranges.emplace_back(first, last);
    total += last - first;
  }
  std::vector<int32_t> pool(total);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<std::vector<int32_t>> tables;
  int next = 0;
  for (auto [first, last] : ranges) {
    std::vector<int32_t> table(last, -1);
    for (int b = first; b < last; ++b) table[b] = pool[next++];
    tables.push_back(std::move(table));
  }
  *num_blocks = total;
  return tables;
}

DeviceStep::DeviceStep(const ForwardBatch& batch, const ModelConfig& config, const KvCacheLayout& kv,
                       int prefill_min_rows) {
  meta.build(batch, config, kv_groups_of(config), kv, 0, 0, 0, prefill_min_rows);
  buffer = cuda::to_device(meta.host());
  view = meta.view(buffer.as<int32_t>());
}

}  // namespace moeserve::testing

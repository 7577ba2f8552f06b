// The NCCL communicator (runner/cuda/nccl_group.h) over every visible GPU, one thread a rank as the parallel runners
// drive it: the all-reduce gives every rank the exact sum (small integers, exact in fp32) and the all-gather the
// ranks' pieces in rank order. On one GPU this proves the library loading and the calls; on several, the exchange.
#include <gtest/gtest.h>

#include <thread>

#include "runner/cuda/cuda_check.h"
#include "runner/cuda/nccl_group.h"
#include "runner/cuda/cuda_test_util.h"
#include "util/error.h"

namespace moeserve::cuda {
namespace {

TEST(NcclGroup, AllReduceAndAllGatherOverEveryVisibleGpu) {
  MOESERVE_REQUIRE_CUDA();
  int count = 0;
  MOESERVE_CUDA_CHECK(cudaGetDeviceCount(&count));
  std::vector<int> devices(count);
  for (int d = 0; d < count; ++d) devices[d] = d;
  NcclGroup group(devices);
  ASSERT_EQ(group.size(), count);
  constexpr size_t kCount = 1 << 16;
  std::vector<std::vector<float>> reduced(count), gathered(count);
  std::vector<std::thread> threads;
  for (int r = 0; r < count; ++r)
    threads.emplace_back([&, r] {
      MOESERVE_CUDA_CHECK(cudaSetDevice(group.device(r)));
      std::vector<float> host(kCount);
      for (size_t i = 0; i < kCount; ++i) host[i] = static_cast<float>((r + 1) * static_cast<int>(i % 97));
      float *data = nullptr, *all = nullptr;
      MOESERVE_CUDA_CHECK(cudaMalloc(&data, kCount * sizeof(float)));
      MOESERVE_CUDA_CHECK(cudaMalloc(&all, count * 4 * sizeof(float)));
      MOESERVE_CUDA_CHECK(cudaMemcpy(data, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice));
      group.rank(r).all_reduce_sum({data, kCount});
      group.rank(r).all_gather(std::as_bytes(std::span<const float>(data, 4)),
                               std::as_writable_bytes(std::span<float>(all, count * 4)));
      MOESERVE_CUDA_CHECK(cudaStreamSynchronize(group.stream(r)));
      reduced[r].resize(kCount);
      gathered[r].resize(count * 4);
      MOESERVE_CUDA_CHECK(cudaMemcpy(reduced[r].data(), data, kCount * sizeof(float), cudaMemcpyDeviceToHost));
      MOESERVE_CUDA_CHECK(cudaMemcpy(gathered[r].data(), all, count * 4 * sizeof(float), cudaMemcpyDeviceToHost));
      cudaFree(data);
      cudaFree(all);
    });
  for (auto& t : threads) t.join();
  const int ranks_sum = count * (count + 1) / 2;
  for (int r = 0; r < count; ++r) {
    for (size_t i = 0; i < kCount; ++i)
      ASSERT_EQ(reduced[r][i], static_cast<float>(ranks_sum * static_cast<int>(i % 97))) << "rank " << r << " " << i;
    for (int j = 0; j < count * 4; ++j)  // every rank's first 4 reduced values
      ASSERT_EQ(gathered[r][j], static_cast<float>(ranks_sum * (j % 4))) << "rank " << r << " gathered " << j;
  }
}

TEST(NcclGroup, ADeviceListedTwiceIsRefused) {
  MOESERVE_REQUIRE_CUDA();
  const std::vector<int> twice{0, 0};
  EXPECT_THROW(NcclGroup group(twice), moeserve::Error);
}

}  // namespace
}  // namespace moeserve::cuda

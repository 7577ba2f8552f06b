// Owning device memory (cudaMalloc / cudaFree), movable, never copied. Contents are undefined after
// allocation; grow() reallocates without keeping them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "runner/cuda/cuda_check.h"

namespace moeserve::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { allocate(bytes); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      ptr_ = std::exchange(other.ptr_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

  // Makes the buffer at least `bytes` large; returns true when it was reallocated (old pointers are invalid).
  bool grow(size_t bytes) {
    if (bytes <= bytes_) return false;
    release();
    allocate(bytes);
    return true;
  }

 private:
  void allocate(size_t bytes) {
    if (bytes == 0) return;
    MOESERVE_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
    bytes_ = bytes;
  }
  void release() {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }

  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Copies a host vector into a new device buffer (synchronously).
template <typename T>
DeviceBuffer to_device(const std::vector<T>& values) {
  DeviceBuffer buffer(values.size() * sizeof(T));
  if (!values.empty()) MOESERVE_CUDA_CHECK(cudaMemcpy(buffer.get(), values.data(), buffer.bytes(), cudaMemcpyHostToDevice));
  return buffer;
}

// Copies `count` elements of a device array back to the host (synchronously).
template <typename T>
std::vector<T> to_host(const void* device, size_t count) {
  std::vector<T> values(count);
  if (count > 0) MOESERVE_CUDA_CHECK(cudaMemcpy(values.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost));
  return values;
}

}  // namespace moeserve::cuda

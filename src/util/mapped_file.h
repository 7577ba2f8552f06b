// A read-only memory mapping of a whole file; the pages stay in the page cache, not in the heap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace moeserve {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace moeserve

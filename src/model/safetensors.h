// safetensors files: strict reading (mmap, header validated before any tensor is touched) and deterministic
// writing (tensors in name order, contiguous, header padded to 8 bytes as the reference library does).
// Format: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}, __metadata__},
// then the data buffer; offsets are relative to the buffer and must tile it exactly.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "util/mapped_file.h"

namespace moeserve {

enum class DType { BF16, F16, F32, U8, I32, I64, BOOL, F8_E4M3 };  // BOOL: one byte, 0 or 1; F8_E4M3: model/fp8_blocks.h

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

struct TensorView {
  std::string name;
  std::string file;  // where it came from, for error messages
  DType dtype = DType::U8;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;

  int64_t numel() const;
  std::string describe() const;  // "name [a, b] BF16 in file"
};

// One safetensors file, mapped and validated.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return file_.path(); }

 private:
  MappedFile file_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint directory: one model.safetensors, a sharded set named by
// model.safetensors.index.json, or (original layout) every *.safetensors in the directory.
class TensorStore {
 public:
  static TensorStore open_directory(const std::string& dir);

  const TensorView* find(const std::string& name) const;
  const TensorView& get(const std::string& name) const;  // fails naming the directory when absent
  std::vector<std::string> names() const;
  const std::vector<std::string>& files() const { return files_; }
  const std::string& directory() const { return directory_; }

 private:
  std::string directory_;
  std::vector<std::string> files_;
  std::vector<std::unique_ptr<SafetensorsFile>> mapped_;
  std::map<std::string, const TensorView*> by_name_;
};

// A tensor to write: its bytes come from fill(), called once, in name order, so a large checkpoint is written
// tensor by tensor without holding it all in memory.
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::function<std::vector<uint8_t>()> fill;
};

void write_safetensors(const std::string& path, std::vector<TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace moeserve

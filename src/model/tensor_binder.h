// Binding a checkpoint's tensors by name with their shape and dtype checked, remembering which were used so that
// leftovers (tensors the config does not account for) are reported. GPT-OSS checkpoints and EAGLE-3 draft heads
// are both bound through it.
#pragma once

#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "model/safetensors.h"
#include "model/weights.h"

namespace moeserve {

class TensorBinder {
 public:
  explicit TensorBinder(const TensorStore& store) : store_(store) {}

  // The tensor `name`, which must have exactly `shape` and one of `dtypes`; fails naming the tensor and file.
  const TensorView& tensor(const std::string& name, const std::vector<int64_t>& shape,
                           std::initializer_list<DType> dtypes);
  bool has(const std::string& name) const { return store_.find(name) != nullptr; }

  // A bf16 or f32 [rows, cols] matrix, read in place.
  Matrix matrix(const std::string& name, int64_t rows, int64_t cols);
  // A bf16 or f32 [size] vector, converted to floats.
  std::vector<float> vector(const std::string& name, int64_t size);
  // A contiguous row range of a [rows, cols] matrix (the original layout's fused qkv).
  static Matrix matrix_rows(const TensorView& view, int64_t first_row, int64_t rows);
  static std::vector<float> to_floats(const TensorView& view, int64_t offset, int64_t count);

  // Fails for the first tensor of the store that was not bound; `model` says what the config describes
  // ("a GPT-OSS model", "an EAGLE-3 draft head").
  void check_all_used(const std::string& model) const;

 private:
  const TensorStore& store_;
  std::set<std::string> used_;
};

}  // namespace moeserve

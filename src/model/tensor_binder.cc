#include "model/tensor_binder.h"

#include <fmt/ranges.h>

#include "util/bfloat16.h"
#include "util/error.h"

namespace moeserve {

const TensorView& TensorBinder::tensor(const std::string& name, const std::vector<int64_t>& shape,
                                       std::initializer_list<DType> dtypes) {
  const TensorView& view = store_.get(name);
  MOESERVE_CHECK(view.shape == shape, "{}: expected shape [{}] from config.json", view.describe(),
                 fmt::join(shape, ", "));
  bool dtype_ok = false;
  for (DType d : dtypes) dtype_ok = dtype_ok || view.dtype == d;
  MOESERVE_CHECK(dtype_ok, "{}: dtype {} is not allowed here", view.describe(), dtype_name(view.dtype));
  used_.insert(name);
  return view;
}

Matrix TensorBinder::matrix(const std::string& name, int64_t rows, int64_t cols) {
  const TensorView& view = tensor(name, {rows, cols}, {DType::BF16, DType::F32});
  return Matrix{view.dtype, view.bytes.data(), rows, cols};
}

std::vector<float> TensorBinder::vector(const std::string& name, int64_t size) {
  const TensorView& view = tensor(name, {size}, {DType::BF16, DType::F32});
  return to_floats(view, 0, size);
}

Matrix TensorBinder::matrix_rows(const TensorView& view, int64_t first_row, int64_t rows) {
  int64_t cols = view.shape[1];
  return Matrix{view.dtype, view.bytes.data() + first_row * cols * static_cast<int64_t>(dtype_size(view.dtype)), rows,
                cols};
}

std::vector<float> TensorBinder::to_floats(const TensorView& view, int64_t offset, int64_t count) {
  std::vector<float> out(count);
  for (int64_t i = 0; i < count; ++i) {
    int64_t j = offset + i;
    out[i] = view.dtype == DType::BF16 ? bf16_to_float(reinterpret_cast<const uint16_t*>(view.bytes.data())[j])
                                       : reinterpret_cast<const float*>(view.bytes.data())[j];
  }
  return out;
}

void TensorBinder::check_all_used(const std::string& model) const {
  for (const auto& name : store_.names())
    MOESERVE_CHECK(used_.contains(name), "{}: not part of {} with this config.json", store_.get(name).describe(),
                   model);
}

}  // namespace moeserve

#include "deepseek_test_util.h"

#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <mutex>

#include "test_util.h"
#include "util/files.h"

namespace moeserve::testing {

std::string tiny_deepseek_model(const deepseek_v3::TinyOptions& o) {
  static std::mutex mutex;
  static std::map<std::string, std::string> made;
  const std::string key = fmt::format("{}-{}-{}-{}-{}-{}", o.seed, o.layers, o.vocab, o.shards, o.fp8, o.shape);
  std::lock_guard lock(mutex);
  if (auto it = made.find(key); it != made.end()) return it->second;
  const std::string dir = temp_dir("tiny-deepseek");
  deepseek_v3::make_tiny_checkpoint(o, dir);
  made[key] = dir;
  return dir;
}

std::shared_ptr<const deepseek_v3::Checkpoint> small_deepseek_checkpoint() {
  static const std::shared_ptr<const deepseek_v3::Checkpoint> checkpoint = [] {
    deepseek_v3::TinyOptions o;
    o.vocab = 1024;
    return std::shared_ptr<const deepseek_v3::Checkpoint>(deepseek_v3::Checkpoint::open(tiny_deepseek_model(o)));
  }();
  return checkpoint;
}

TensorToWrite tensor_of(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  return {name, dtype, std::move(shape), [bytes = std::move(bytes)] { return bytes; }};
}

std::string edited_deepseek_copy(const std::string& dir, const std::function<void(nlohmann::json&)>& edit_config,
                                 const std::function<void(std::vector<TensorToWrite>&)>& edit_tensors) {
  namespace fs = std::filesystem;
  const std::string out = temp_dir("deepseek-edit");
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".json") fs::copy(entry.path(), out + "/" + entry.path().filename().string());
  nlohmann::json config = read_json_file(dir + "/config.json");
  if (edit_config) edit_config(config);
  write_text_file(out + "/config.json", config.dump(2));
  const SafetensorsFile file(dir + "/model.safetensors");
  std::vector<TensorToWrite> tensors;
  for (const auto& [name, view] : file.tensors())
    tensors.push_back(tensor_of(name, view.dtype, view.shape, std::vector<uint8_t>(view.bytes.begin(), view.bytes.end())));
  if (edit_tensors) edit_tensors(tensors);
  write_safetensors(out + "/model.safetensors", std::move(tensors));
  return out;
}

}  // namespace moeserve::testing

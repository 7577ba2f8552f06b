// The tiny target (small vocabulary, so tests stay fast) and tiny EAGLE-3 draft heads for it, made once per
// process, and edited copies of a head.
#pragma once

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/eagle3/checkpoint.h"
#include "model/eagle3/make_tiny.h"
#include "model/gpt_oss/checkpoint.h"
#include "test_util.h"
#include "util/bfloat16.h"
#include "util/files.h"

namespace moeserve::speculative::testing {

inline TinyModelOptions tiny_target_options() {
  TinyModelOptions o;
  o.vocab = 512;
  return o;
}

inline std::shared_ptr<const Checkpoint> tiny_target() {
  static std::shared_ptr<const Checkpoint> target =
      Checkpoint::open(moeserve::testing::tiny_model(tiny_target_options()));
  return target;
}

inline std::string tiny_draft_dir(const TinyEagle3Options& o) {
  static std::map<std::string, std::string> made;
  const std::string key = o.names + std::to_string(o.seed) + "-" + std::to_string(o.draft_vocab) +
                          (o.input_norm ? "-norm" : "");
  auto it = made.find(key);
  if (it != made.end()) return it->second;
  std::string dir = moeserve::testing::temp_dir("eagle3");
  make_tiny_eagle3(o, moeserve::testing::tiny_model(tiny_target_options()), dir);
  return made[key] = dir;
}

inline TinyEagle3Options draft_options(const std::string& names = "midlayer", bool input_norm = false) {
  TinyEagle3Options o;
  o.draft_vocab = 128;
  o.names = names;
  o.input_norm = input_norm;
  return o;
}

// A copy of a draft directory with its tensors and config.json edited (either edit may be empty).
inline std::string edited_copy(const std::string& from,
                               const std::function<void(std::vector<TensorToWrite>&)>& edit_tensors,
                               const std::function<void(nlohmann::json&)>& edit_config = {}) {
  const std::string dir = moeserve::testing::temp_dir("eagle3-edit");
  nlohmann::json config = read_json_file(from + "/config.json");
  if (edit_config) edit_config(config);
  write_text_file(dir + "/config.json", config.dump(2));
  auto file = std::make_shared<SafetensorsFile>(from + "/model.safetensors");
  std::vector<TensorToWrite> tensors;
  for (const auto& [name, view] : file->tensors()) {
    const TensorView* source = &view;
    tensors.push_back({name, view.dtype, view.shape, [file, source] {
                         return std::vector<uint8_t>(source->bytes.begin(), source->bytes.end());
                       }});
  }
  if (edit_tensors) edit_tensors(tensors);
  write_safetensors(dir + "/model.safetensors", std::move(tensors));
  return dir;
}

inline void drop(std::vector<TensorToWrite>& tensors, const std::string& name) {
  std::erase_if(tensors, [&](const TensorToWrite& t) { return t.name == name; });
}

// The other branches of the format: a full-vocabulary head without lm_head and d2t (the target's unembedding
// stands in), every weight in f32, its own embed_tokens (random), and norm_before_residual.
inline std::string full_vocab_head_dir() {
  static const std::string dir = edited_copy(
      tiny_draft_dir(draft_options()),
      [](std::vector<TensorToWrite>& tensors) {
        drop(tensors, "lm_head.weight");
        drop(tensors, "d2t");
        for (TensorToWrite& t : tensors) {
          if (t.dtype != DType::BF16) continue;
          t.dtype = DType::F32;
          t.fill = [bf16 = t.fill] {
            const std::vector<uint8_t> in = bf16();
            std::vector<uint8_t> out(in.size() * 2);
            for (size_t i = 0; i < in.size() / 2; ++i) {
              const float value = bf16_to_float(static_cast<uint16_t>(in[2 * i] | in[2 * i + 1] << 8));
              std::memcpy(out.data() + 4 * i, &value, 4);
            }
            return out;
          };
        }
        tensors.push_back({"embed_tokens.weight", DType::F32, {512, 64}, [] {
                             std::vector<float> values(512 * 64);
                             for (size_t i = 0; i < values.size(); ++i)
                               values[i] = static_cast<float>((i * 7919) % 1000) / 500.0f - 1.0f;
                             const auto* bytes = reinterpret_cast<const uint8_t*>(values.data());
                             return std::vector<uint8_t>(bytes, bytes + values.size() * sizeof(float));
                           }});
      },
      [](nlohmann::json& config) {
        config["draft_vocab_size"] = 512;
        config["norm_before_residual"] = true;
      });
  return dir;
}

}  // namespace moeserve::speculative::testing

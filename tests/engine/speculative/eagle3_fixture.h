// The tiny target (small vocabulary, so tests stay fast) and tiny EAGLE-3 draft heads for it, made once per
// process.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "engine/speculative/eagle3_checkpoint.h"
#include "model/checkpoint.h"
#include "model/make_tiny_eagle3.h"
#include "test_util.h"

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

}  // namespace moeserve::speculative::testing

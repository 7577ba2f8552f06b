// Stop strings over streamed text (OpenAI's `stop`): text is released as it arrives, except what may be the
// start of a stop string, which is held until the next text settles it; the first complete stop string ends the
// text there (it is not returned) and nothing after it is released.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moeserve::server {

class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Appends text; returns what can be released now.
  std::string push(std::string_view text);
  // The end of the text: releases what was held (nothing once a stop string was hit).
  std::string flush();
  bool hit() const { return hit_; }
  // Whether a stop string occurs in text, starting at `from` or later.
  bool occurs_in(std::string_view text, size_t from) const;
  size_t longest() const;

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool hit_ = false;
};

}  // namespace moeserve::server

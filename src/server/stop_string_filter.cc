#include "server/stop_string_filter.h"

#include <algorithm>

namespace moeserve::server {

std::string StopStringFilter::push(std::string_view text) {
  if (hit_) return {};
  held_ += text;
  size_t cut = std::string::npos;
  for (const auto& s : stops_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    hit_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  // Keep the longest end of the held text that begins some stop string.
  size_t keep = 0;
  for (const auto& s : stops_)
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n)
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

bool StopStringFilter::occurs_in(std::string_view text, size_t from) const {
  return std::any_of(stops_.begin(), stops_.end(), [&](const std::string& s) { return text.find(s, from) != std::string_view::npos; });
}

size_t StopStringFilter::longest() const {
  size_t longest = 0;
  for (const auto& s : stops_) longest = std::max(longest, s.size());
  return longest;
}

std::string StopStringFilter::flush() {
  std::string out = hit_ ? std::string() : std::move(held_);
  held_.clear();
  return out;
}

}  // namespace moeserve::server

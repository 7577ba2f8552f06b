#include "util/json_parse.h"

#include <algorithm>
#include <vector>

#include "util/error.h"

namespace moeserve {
namespace {

using nlohmann::json;

// Builds the DOM as nlohmann's own parser does (a stack of the open containers), refusing a container opened
// max_depth levels down, and naming the path of the value being read when the text is malformed.
class DomBuilder final : public nlohmann::json_sax<json> {
 public:
  DomBuilder(std::string_view text, const std::string& where, int max_depth)
      : text_(text), where_(where), max_depth_(static_cast<size_t>(max_depth)) {}

  json take() { return std::move(root_); }

  bool null() override { return add(nullptr); }
  bool boolean(bool v) override { return add(v); }
  bool number_integer(number_integer_t v) override { return add(v); }
  bool number_unsigned(number_unsigned_t v) override { return add(v); }
  bool number_float(number_float_t v, const string_t&) override { return add(v); }
  bool string(string_t& v) override { return add(std::move(v)); }
  bool binary(binary_t& v) override { return add(json::binary(std::move(v))); }
  bool start_object(std::size_t) override { return open(json::object()); }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool key(string_t& k) override {
    keys_.back() = std::move(k);
    return true;
  }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    // nlohmann's parse errors carry their line and column; its number overflow (1e400) does not.
    const bool has_position = dynamic_cast<const json::parse_error*>(&e) != nullptr;
    fail("{} is not valid JSON: {}{}{}", where_, at_path(), json_error_detail(e),
         has_position ? "" : position_text(position));
  }

 private:
  json* place(json value) {
    if (stack_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    json& slot = parent[keys_.back()];
    slot = std::move(value);
    return &slot;
  }
  bool add(json value) {
    place(std::move(value));
    return true;
  }
  bool open(json container) {
    MOESERVE_CHECK(stack_.size() < max_depth_, "{}: {}JSON nested deeper than {} levels", where_, at_path(),
                   max_depth_);
    stack_.push_back(place(std::move(container)));
    keys_.emplace_back();
    return true;
  }
  bool close() {
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }

  // "rope_scaling.factor: ", "eos_token_id[2]: ", or "" at the top level.
  std::string at_path() const {
    std::string path;
    for (size_t i = 0; i < stack_.size(); ++i) {
      const json& container = *stack_[i];
      if (container.is_array()) {
        // An ancestor's current element is its last; the innermost array's is the one being read.
        const size_t index = i + 1 < stack_.size() ? container.size() - 1 : container.size();
        path += fmt::format("[{}]", index);
      } else {
        path += (path.empty() ? "" : ".") + keys_[i];
      }
    }
    // A path a thousand levels deep says no more than its start.
    constexpr size_t kShown = 100;
    if (path.size() > kShown) path = path.substr(0, kShown) + "...";
    return path.empty() ? path : path + ": ";
  }

  std::string position_text(size_t position) const {
    const auto end = static_cast<std::ptrdiff_t>(std::min(position, text_.size()));
    return fmt::format(" (line {})", 1 + std::count(text_.begin(), text_.begin() + end, '\n'));
  }

  std::string_view text_;
  const std::string& where_;
  size_t max_depth_;
  json root_;
  std::vector<json*> stack_;
  std::vector<std::string> keys_;  // per open container: an object's current key
};

}  // namespace

std::string json_error_detail(const nlohmann::json::exception& e) {
  const std::string what = e.what();
  const size_t prefix_end = what.rfind("] ", what.find(' '));
  return what.starts_with("[json.exception.") && prefix_end != std::string::npos ? what.substr(prefix_end + 2) : what;
}

json parse_json(std::string_view text, const std::string& where, int max_depth) {
  DomBuilder builder(text, where, max_depth);
  json::sax_parse(text, &builder);
  return builder.take();
}

}  // namespace moeserve

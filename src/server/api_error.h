// Errors returned to API clients in OpenAI's shape: {"error": {"message", "type", "param", "code"}} with an HTTP
// status. Thrown by request parsing and handlers, turned into a response at one place.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <stdexcept>
#include <string>

namespace moeserve::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(unsigned status, std::string message, std::string type = "invalid_request_error",
           std::optional<std::string> param = std::nullopt, std::optional<std::string> code = std::nullopt)
      : std::runtime_error(message), status_(status), type_(std::move(type)), param_(std::move(param)),
        code_(std::move(code)) {}

  unsigned status() const { return status_; }
  nlohmann::json to_json() const {
    return {{"error",
             {{"message", what()},
              {"type", type_},
              {"param", param_ ? nlohmann::json(*param_) : nlohmann::json(nullptr)},
              {"code", code_ ? nlohmann::json(*code_) : nlohmann::json(nullptr)}}}};
  }

 private:
  unsigned status_;
  std::string type_;
  std::optional<std::string> param_;
  std::optional<std::string> code_;
};

inline ApiError bad_request(std::string message, std::optional<std::string> param = std::nullopt) {
  return ApiError(400, std::move(message), "invalid_request_error", std::move(param));
}

}  // namespace moeserve::server

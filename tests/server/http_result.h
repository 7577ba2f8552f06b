// A Beast response as the server tests look at it (HttpResult: status, lower-case header names, body).
#pragma once

#include <boost/beast/http.hpp>

#include <algorithm>
#include <cctype>

#include "server/http_client.h"

namespace moeserve::testing {

inline HttpResult to_http_result(const boost::beast::http::response<boost::beast::http::string_body>& response) {
  HttpResult result;
  result.status = response.result_int();
  for (const auto& field : response) {
    std::string name(field.name_string());
    std::transform(name.begin(), name.end(), name.begin(), ::tolower);
    result.headers[name] = std::string(field.value());
  }
  result.body = response.body();
  return result;
}

}  // namespace moeserve::testing

// A client connection for the transport tests that sends any bytes at all and reads what comes back: responses
// one at a time (parsed by Beast, what follows kept for the next, so pipelined replies read in order), or
// everything until the server closes. Every read waits at most the connection's timeout.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "server/http_client.h"

namespace moeserve::testing {

class RawConnection {
 public:
  explicit RawConnection(uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(10));
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  // False when the server has closed the connection (or reset it).
  bool send(std::string_view bytes);
  // The next response (an interim 100 Continue is one); status 0 when none came whole before the server closed
  // or the timeout passed. A response to HEAD has no body: say so.
  HttpResult read_response(bool to_head = false);
  // What arrives until the server closes; nothing when it did not close within the timeout.
  std::optional<std::string> read_until_close();
  // The socket, for a second thread that writes while this one reads.
  int native_handle();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One HTTP/1.1 request as bytes, with Content-Length when it has a body.
std::string request_bytes(const std::string& method, const std::string& target, const std::string& body = {},
                          const std::string& extra_headers = {});

}  // namespace moeserve::testing

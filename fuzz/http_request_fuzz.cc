// libFuzzer target for the HTTP request reader as the server runs it: the input is what a client sends on one
// connection, delivered in reads of a size its first byte chooses (1 to 255 bytes; 0: as much as there is room
// for), parsed after each read, requests taken one after another as from a keep-alive connection. The limits are
// small so the fuzzer reaches them. Beyond not crashing, every run checks what the server relies on: no exception
// escapes, what waits unparsed never exceeds the head limit, the reader never asks for bytes it has no room for, a
// request it gives keeps the field and body limits, a refusal has a status of the documented set and a message;
// and how the bytes were split into reads changes nothing: the same requests, the same refusal, the same wait.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "server/http_request_reader.h"

namespace {

using moeserve::server::HttpLimits;
using moeserve::server::HttpRequestReader;

constexpr HttpLimits kLimits{.max_header_bytes = 512, .max_header_fields = 8, .max_body_bytes = 1024};

void require(bool condition) {
  if (!condition) std::abort();
}

// What a connection's bytes came to: each request (method, target, version, fields, body) and the refusal status.
struct Reading {
  std::vector<std::string> requests;
  unsigned refusal = 0;
  bool awaiting = false;  // the input ended inside a request
  bool operator==(const Reading&) const = default;
};

Reading read_connection(std::string_view stream, size_t read_size) {
  HttpRequestReader reader(kLimits);
  Reading out;
  size_t delivered = 0;
  while (true) {
    const auto progress = reader.parse();
    require(reader.buffered() <= kLimits.max_header_bytes);
    switch (progress) {
      case HttpRequestReader::Progress::complete: {
        const auto request = reader.release();
        require(request.body().size() <= kLimits.max_body_bytes);
        require(static_cast<size_t>(std::distance(request.begin(), request.end())) <= kLimits.max_header_fields);
        std::string summary = std::string(request.method_string()) + ' ' + std::string(request.target()) + ' ' +
                              std::to_string(request.version()) + '\n';
        for (const auto& field : request)
          summary += std::string(field.name_string()) + ':' + std::string(field.value()) + '\n';
        out.requests.push_back(summary + request.body());
        reader.next_request();
        break;
      }
      case HttpRequestReader::Progress::failed: {
        const auto& failure = reader.failure();
        require(failure.status == 400 || failure.status == 413 || failure.status == 431 || failure.status == 501);
        require(!failure.message.empty());
        out.refusal = failure.status;
        return out;
      }
      case HttpRequestReader::Progress::header_done:
        require(reader.request().version() == 10 || reader.request().version() == 11);
        break;
      case HttpRequestReader::Progress::need_more: {
        if (delivered == stream.size()) {
          out.awaiting = reader.started();
          return out;
        }
        const auto room = reader.prepare();
        require(room.size() > 0);
        const size_t n = std::min({read_size, room.size(), stream.size() - delivered});
        std::memcpy(room.data(), stream.data() + delivered, n);
        reader.commit(n);
        delivered += n;
        break;
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t read_size = data[0] == 0 ? SIZE_MAX : data[0];
  const std::string_view stream(reinterpret_cast<const char*>(data + 1), size - 1);
  require(read_connection(stream, read_size) == read_connection(stream, SIZE_MAX));
  return 0;
}

// libFuzzer target for the HTTP request reader as the server runs it: the input is what a client sends on one
// connection, delivered in reads of a size its first byte chooses (1 to 255 bytes, or all at once for 0), parsed
// after each read, requests taken one after another as from a keep-alive connection. The limits are small so the
// fuzzer reaches them. Beyond not crashing, every run checks what the server relies on: no exception escapes,
// what waits unparsed never exceeds the head limit, the reader never asks for bytes it has no room for, a request
// it gives keeps the field and body limits, and a refusal has a status of the documented set and a message.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string_view>

#include "server/http_request_reader.h"

namespace {

using moeserve::server::HttpLimits;
using moeserve::server::HttpRequestReader;

void require(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t read_size = data[0] == 0 ? SIZE_MAX : data[0];
  const std::string_view stream(reinterpret_cast<const char*>(data + 1), size - 1);
  const HttpLimits limits{.max_header_bytes = 512, .max_header_fields = 8, .max_body_bytes = 1024};
  HttpRequestReader reader(limits);
  size_t delivered = 0;
  while (true) {
    const auto progress = reader.parse();
    require(reader.buffered() <= limits.max_header_bytes);
    switch (progress) {
      case HttpRequestReader::Progress::complete: {
        const auto request = reader.release();
        require(request.body().size() <= limits.max_body_bytes);
        require(static_cast<size_t>(std::distance(request.begin(), request.end())) <= limits.max_header_fields);
        reader.next_request();
        break;
      }
      case HttpRequestReader::Progress::failed: {
        const auto& failure = reader.failure();
        require(failure.status == 400 || failure.status == 413 || failure.status == 431 || failure.status == 501);
        require(!failure.message.empty());
        return 0;
      }
      case HttpRequestReader::Progress::header_done:
        require(reader.request().version() == 10 || reader.request().version() == 11);
        break;
      case HttpRequestReader::Progress::need_more: {
        if (delivered == stream.size()) return 0;
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

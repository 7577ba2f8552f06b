// libFuzzer target: the Parquet reader (footer, Thrift metadata, schema, page headers, codecs, levels and
// values) on arbitrary bytes, read in memory as the reader reads a mapped file. Every column is read as the
// reader allows its type; each read returns rows or fails with an Error, never crashes or allocates past the
// reader's limits.
#include <cstddef>
#include <cstdint>
#include <span>

#include "bench/parquet/reader.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moeserve;
  namespace parquet = bench::parquet;
  const auto attempt = [](auto&& f) {
    try {
      f();
    } catch (const Error&) {
    }
  };
  attempt([&] {
    const parquet::File file("fuzz.parquet", std::span(data, size));
    for (const parquet::LeafColumn& column : file.leaves()) {
      attempt([&] { (void)file.read_int_lists(column.top_level_name); });
      attempt([&] { (void)file.read_string_lists(column.top_level_name); });
      attempt([&] { (void)file.read_strings(column.top_level_name); });
    }
  });
  return 0;
}

// libFuzzer target: the Parquet reader (footer, Thrift metadata, schema, page headers, codecs, levels and
// values) on arbitrary bytes written to a file. Every column is read as the reader allows its type; each read
// returns rows or fails with an Error, never crashes or allocates past the reader's limits.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>

#include "bench/parquet/reader.h"
#include "util/error.h"
#include "util/files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moeserve;
  namespace parquet = bench::parquet;
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("parquet_fuzz." + std::to_string(::getpid()) + ".parquet")).string();
  write_file(path, std::span(data, size));
  try {
    const parquet::File file(path);
    for (const parquet::LeafColumn& column : file.leaves()) {
      const auto read = [&](auto&& f) {
        try {
          f();
        } catch (const Error&) {
        }
      };
      read([&] { (void)file.read_int_lists(column.top_level_name); });
      read([&] { (void)file.read_string_lists(column.top_level_name); });
      read([&] { (void)file.read_strings(column.top_level_name); });
    }
  } catch (const Error&) {
  }
  return 0;
}

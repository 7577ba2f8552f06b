// A Parquet reader for the subset of the format the MLPerf datasets (and SPEED-Bench) use: top-level columns
// that are flat (strings, integers) or lists of integers or strings, in any number of row groups, with data
// pages v1 or v2, PLAIN or dictionary encoding and UNCOMPRESSED, SNAPPY, GZIP or ZSTD pages. Debian ships no
// Arrow; this stands on libthrift (the footer and page headers), snappy, zlib and zstd. Anything outside the
// subset is an error naming the file, the column and the feature.
//
// Lists are read from their leaf column's repetition and definition levels, so both the standard three-level
// LIST layout (pyarrow: optional group x (LIST) { repeated group list { optional int32 element } }) and a bare
// repeated field (repeated int32 x) work.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bench/parquet/metadata.h"
#include "util/mapped_file.h"

namespace moeserve::bench::parquet {

// A leaf column and the levels its path implies.
struct LeafColumn {
  std::string top_level_name;  // the first element of its path: what a dataset calls the column
  std::vector<std::string> path;
  Type type = Type::boolean;
  int max_definition_level = 0;
  int max_repetition_level = 0;
  // The definition level at which the repeated node exists: below it a list is null or empty, from it on up to
  // max_definition_level - 1 an element is null.
  int repeated_definition_level = 0;
};

// The bounds a file is held to, checked before anything is allocated from the file's own numbers: far above the
// MLPerf datasets (thousands of rows, tens of millions of tokens; writers cut pages at 1 MiB), far below what
// would exhaust memory. RLE runs and dictionaries let a few bytes claim millions of values, so what a column may
// decode to is also bounded by the file's size: kExpansion per byte of the file (with a floor for small files),
// never more than the absolute limit. Past one, the error names the file, the column and the limit.
struct Limits {
  static constexpr uint64_t kPageBytes = uint64_t{256} << 20;        // one page, uncompressed
  static constexpr uint64_t kColumnValues = uint64_t{1} << 26;       // one column's levels over all row groups
  static constexpr uint64_t kColumnStringBytes = uint64_t{1} << 30;  // one column's strings, as decoded
  static constexpr uint64_t kExpansion = 1024;
  static constexpr uint64_t kSmallFileValues = uint64_t{1} << 20;
  static constexpr uint64_t kSmallFileBytes = uint64_t{16} << 20;  // string bytes or page bytes
  static constexpr int kSchemaDepth = 16;                          // a LIST column nests three levels

  // min(absolute, max(floor, kExpansion * file_bytes)).
  static uint64_t for_file(uint64_t absolute, uint64_t floor, uint64_t file_bytes);
};

class File {
 public:
  explicit File(const std::string& path);
  // A file already in memory (`bytes` must outlive the File); `name` stands for its path in errors.
  File(const std::string& name, std::span<const uint8_t> bytes);

  int64_t num_rows() const { return metadata_.num_rows; }
  const std::vector<LeafColumn>& leaves() const { return leaves_; }
  bool has_column(std::string_view name) const { return leaf(name) != nullptr; }
  const std::string& created_by() const { return metadata_.created_by; }

  // A list<int32> or list<int64> column (or a repeated integer field), one vector per row; null lists read as
  // empty. Fails for null elements.
  std::vector<std::vector<int64_t>> read_int_lists(std::string_view name) const;
  // A list<string> column (or a repeated BYTE_ARRAY field), one vector per row; null lists read as empty. Fails
  // for null elements.
  std::vector<std::vector<std::string>> read_string_lists(std::string_view name) const;
  // A BYTE_ARRAY column, one string per row; null reads as "".
  std::vector<std::string> read_strings(std::string_view name) const;

 private:
  // Levels and non-null values of one leaf over all row groups, in row order.
  struct ColumnData {
    std::vector<uint8_t> repetition_levels;  // levels are at most Limits::kSchemaDepth
    std::vector<uint8_t> definition_levels;
    std::vector<int64_t> ints;
    std::vector<std::string> strings;
    uint64_t string_bytes = 0;
  };
  explicit File(std::unique_ptr<MappedFile> file);
  const LeafColumn* leaf(std::string_view name) const;
  const LeafColumn& require_leaf(std::string_view name) const;
  // The rows of a list column from its levels, taking non-null elements from `values` in order.
  template <typename T>
  std::vector<std::vector<T>> assemble_lists(const LeafColumn& column, const ColumnData& data,
                                             std::vector<T>& values) const;
  ColumnData read_column(const LeafColumn& column) const;
  void read_chunk(const LeafColumn& column, const ColumnChunk& chunk, ColumnData& out) const;

  std::unique_ptr<MappedFile> file_;  // absent for a file given as bytes
  std::span<const uint8_t> bytes_;
  std::string path_;
  FileMetaData metadata_;
  std::vector<LeafColumn> leaves_;
};

}  // namespace moeserve::bench::parquet

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

class File {
 public:
  explicit File(const std::string& path);

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
    std::vector<uint32_t> repetition_levels;
    std::vector<uint32_t> definition_levels;
    std::vector<int64_t> ints;
    std::vector<std::string> strings;
  };
  const LeafColumn* leaf(std::string_view name) const;
  const LeafColumn& require_leaf(std::string_view name) const;
  // The rows of a list column from its levels, taking non-null elements from `values` in order.
  template <typename T>
  std::vector<std::vector<T>> assemble_lists(const LeafColumn& column, const ColumnData& data,
                                             std::vector<T>& values) const;
  ColumnData read_column(const LeafColumn& column) const;
  void read_chunk(const LeafColumn& column, const ColumnChunk& chunk, ColumnData& out) const;

  std::unique_ptr<MappedFile> file_;
  std::string path_;
  FileMetaData metadata_;
  std::vector<LeafColumn> leaves_;
};

}  // namespace moeserve::bench::parquet

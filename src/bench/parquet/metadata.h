// Parquet's Thrift structures, the subset a reader of flat and list columns needs, decoded with libthrift's
// compact protocol (the encoding Parquet uses for its footer and page headers). Field ids and enum values follow
// parquet-format's parquet.thrift; fields we do not use are skipped, so files from newer writers still read.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace moeserve::bench::parquet {

enum class Type : int32_t {
  boolean = 0,
  int32 = 1,
  int64 = 2,
  int96 = 3,
  float_ = 4,
  double_ = 5,
  byte_array = 6,
  fixed_len_byte_array = 7
};
enum class Repetition : int32_t { required = 0, optional = 1, repeated = 2 };
enum class Codec : int32_t {
  uncompressed = 0,
  snappy = 1,
  gzip = 2,
  lzo = 3,
  brotli = 4,
  lz4 = 5,
  zstd = 6,
  lz4_raw = 7
};
enum class Encoding : int32_t {
  plain = 0,
  plain_dictionary = 2,
  rle = 3,
  bit_packed = 4,
  delta_binary_packed = 5,
  delta_length_byte_array = 6,
  delta_byte_array = 7,
  rle_dictionary = 8,
  byte_stream_split = 9
};
enum class PageType : int32_t { data_page = 0, index_page = 1, dictionary_page = 2, data_page_v2 = 3 };

const char* type_name(Type type);
const char* codec_name(Codec codec);
const char* encoding_name(Encoding encoding);

struct SchemaElement {
  std::string name;
  bool has_type = false;  // leaves have a physical type, groups do not
  Type type = Type::boolean;
  Repetition repetition = Repetition::required;
  int32_t num_children = 0;
  int32_t converted_type = -1;  // parquet ConvertedType (0 UTF8, 3 LIST, ...); -1 when absent
};

struct ColumnChunk {
  Type type = Type::boolean;
  Codec codec = Codec::uncompressed;
  std::vector<std::string> path;
  int64_t num_values = 0;
  int64_t data_page_offset = 0;
  int64_t dictionary_page_offset = -1;  // -1 when absent
  int64_t total_compressed_size = 0;
};

struct RowGroup {
  int64_t num_rows = 0;
  std::vector<ColumnChunk> columns;
};

struct FileMetaData {
  int32_t version = 0;
  std::vector<SchemaElement> schema;  // depth-first, the root first
  int64_t num_rows = 0;
  std::vector<RowGroup> row_groups;
  std::string created_by;
};

struct PageHeader {
  PageType type = PageType::data_page;
  int32_t uncompressed_size = 0;
  int32_t compressed_size = 0;
  int32_t num_values = 0;  // data pages: levels (rows and list elements, nulls included); dictionary: entries
  Encoding encoding = Encoding::plain;
  Encoding definition_level_encoding = Encoding::rle;
  Encoding repetition_level_encoding = Encoding::rle;
  // Data page v2: the level sections' lengths (stored uncompressed, before the values) and whether the values
  // are compressed.
  int32_t definition_levels_length = 0;
  int32_t repetition_levels_length = 0;
  bool values_compressed = true;
};

// The footer's FileMetaData; `where` names the file in errors.
FileMetaData read_file_metadata(std::span<const uint8_t> bytes, const std::string& where);
// A page header at the start of `bytes`; sets `header_size` to its encoded length.
PageHeader read_page_header(std::span<const uint8_t> bytes, size_t& header_size, const std::string& where);

}  // namespace moeserve::bench::parquet

#include "bench/parquet/reader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "bench/parquet/encoding.h"
#include "util/error.h"

namespace moeserve::bench::parquet {
namespace {

constexpr char kMagic[] = "PAR1";

// Depth-first over the schema, accumulating the levels each node adds, collecting the leaves.
void collect_leaves(const std::vector<SchemaElement>& schema, size_t& index, std::vector<std::string> path,
                    int definition, int repetition, int repeated_definition, std::vector<LeafColumn>& leaves,
                    const std::string& where) {
  MOESERVE_CHECK(index < schema.size(), "{}: the schema's groups name more children than it has elements", where);
  MOESERVE_CHECK(path.size() < static_cast<size_t>(Limits::kSchemaDepth), "{}: the schema nests deeper than {} levels",
                 where, Limits::kSchemaDepth);
  const SchemaElement& e = schema[index];
  MOESERVE_CHECK(e.num_children >= 0 && static_cast<size_t>(e.num_children) < schema.size() - index,
                 "{}: schema element '{}' has {} children but only {} elements follow it", where, e.name,
                 e.num_children, schema.size() - index - 1);
  const bool root = index == 0;
  ++index;
  if (!root) {
    path.push_back(e.name);
    if (e.repetition != Repetition::required) ++definition;
    if (e.repetition == Repetition::repeated) {
      ++repetition;
      repeated_definition = definition;
    }
  }
  if (!root && e.num_children == 0) {
    leaves.push_back({path.front(), path, e.type, definition, repetition, repeated_definition});
    return;
  }
  for (int32_t c = 0; c < e.num_children; ++c)
    collect_leaves(schema, index, path, definition, repetition, repeated_definition, leaves, where);
}

// Levels as stored: each checked against the column's maximum, which also fits it in a byte.
void append_levels(const std::vector<uint32_t>& levels, int max_level, std::vector<uint8_t>& out,
                   const std::string& where, const char* what) {
  for (uint32_t level : levels) {
    MOESERVE_CHECK(level <= static_cast<uint32_t>(max_level), "{}: {} level {} exceeds the column's maximum {}", where,
                   what, level, max_level);
    out.push_back(static_cast<uint8_t>(level));
  }
}

// A page's levels: stored with a 4-byte length prefix in data pages v1.
std::span<const uint8_t> prefixed_section(std::span<const uint8_t> data, size_t& offset, const std::string& where) {
  MOESERVE_CHECK(offset + 4 <= data.size(), "{}: truncated level section", where);
  uint32_t length = 0;
  std::memcpy(&length, data.data() + offset, 4);
  offset += 4;
  MOESERVE_CHECK(offset + length <= data.size(), "{}: level section of {} bytes past the page end", where, length);
  const auto section = data.subspan(offset, length);
  offset += length;
  return section;
}

}  // namespace

uint64_t Limits::for_file(uint64_t absolute, uint64_t floor, uint64_t file_bytes) {
  const uint64_t scaled = file_bytes > absolute / kExpansion ? absolute : file_bytes * kExpansion;
  return std::min(absolute, std::max(floor, scaled));
}

File::File(const std::string& path) : File(std::make_unique<MappedFile>(path)) {}

File::File(std::unique_ptr<MappedFile> file) : File(file->path(), file->bytes()) { file_ = std::move(file); }

File::File(const std::string& name, std::span<const uint8_t> bytes) : bytes_(bytes), path_(name) {
  const std::string& path = path_;
  MOESERVE_CHECK(bytes.size() >= 12 && std::memcmp(bytes.data(), kMagic, 4) == 0 &&
                     std::memcmp(bytes.data() + bytes.size() - 4, kMagic, 4) == 0,
                 "{}: not a Parquet file (no PAR1 magic)", path);
  uint32_t footer_length = 0;
  std::memcpy(&footer_length, bytes.data() + bytes.size() - 8, 4);
  // In 64 bits: a length of 0xffffffff plus the 12 bytes of magic and length must not wrap around.
  MOESERVE_CHECK(uint64_t{footer_length} + 12 <= bytes.size(), "{}: footer length {} exceeds the file", path,
                 footer_length);
  metadata_ = read_file_metadata(bytes.subspan(bytes.size() - 8 - footer_length, footer_length), path);
  MOESERVE_CHECK(!metadata_.schema.empty(), "{}: empty schema", path);
  MOESERVE_CHECK(metadata_.num_rows >= 0, "{}: negative row count {}", path, metadata_.num_rows);
  size_t index = 0;
  collect_leaves(metadata_.schema, index, {}, 0, 0, 0, leaves_, path);
}

const LeafColumn* File::leaf(std::string_view name) const {
  const LeafColumn* found = nullptr;
  for (const LeafColumn& c : leaves_) {
    if (c.top_level_name != name) continue;
    MOESERVE_CHECK(found == nullptr, "{}: column '{}' is a struct or map; only flat and list columns are supported",
                   path_, name);
    found = &c;
  }
  return found;
}

const LeafColumn& File::require_leaf(std::string_view name) const {
  const LeafColumn* c = leaf(name);
  if (c == nullptr) {
    std::vector<std::string> names;
    for (const LeafColumn& l : leaves_) names.push_back(l.top_level_name);
    fail("{}: no column '{}' (columns: {})", path_, name, fmt::join(names, ", "));
  }
  return *c;
}

File::ColumnData File::read_column(const LeafColumn& column) const {
  ColumnData data;
  for (const RowGroup& group : metadata_.row_groups) {
    const ColumnChunk* chunk = nullptr;
    for (const ColumnChunk& c : group.columns)
      if (c.path == column.path) chunk = &c;
    MOESERVE_CHECK(chunk != nullptr, "{}: a row group lacks column {}", path_, fmt::join(column.path, "."));
    read_chunk(column, *chunk, data);
  }
  return data;
}

void File::read_chunk(const LeafColumn& column, const ColumnChunk& chunk, ColumnData& out) const {
  const std::string where = fmt::format("{} column {}", path_, fmt::join(column.path, "."));
  const std::span<const uint8_t> bytes = bytes_;
  const uint64_t max_values = Limits::for_file(Limits::kColumnValues, Limits::kSmallFileValues, bytes.size());
  const uint64_t max_string_bytes =
      Limits::for_file(Limits::kColumnStringBytes, Limits::kSmallFileBytes, bytes.size());
  const uint64_t max_page_bytes = Limits::for_file(Limits::kPageBytes, Limits::kSmallFileBytes, bytes.size());
  MOESERVE_CHECK(chunk.num_values >= 0 &&
                     static_cast<uint64_t>(chunk.num_values) <= max_values - out.definition_levels.size(),
                 "{}: more than {} values (the reader's limit for a file of {} bytes)", where, max_values,
                 bytes.size());
  const bool has_dictionary_page =
      chunk.dictionary_page_offset > 0 && chunk.dictionary_page_offset < chunk.data_page_offset;
  auto pos = static_cast<size_t>(has_dictionary_page ? chunk.dictionary_page_offset : chunk.data_page_offset);
  std::vector<int64_t> dictionary_ints;
  std::vector<std::string> dictionary_strings;
  const bool strings = column.type == Type::byte_array;
  const auto add_string = [&](std::string value) {
    out.string_bytes += value.size();
    MOESERVE_CHECK(out.string_bytes <= max_string_bytes,
                   "{}: more than {} bytes of strings (the reader's limit for a file of {} bytes)", where,
                   max_string_bytes, bytes.size());
    out.strings.push_back(std::move(value));
  };
  int64_t levels_read = 0;
  while (levels_read < chunk.num_values) {
    MOESERVE_CHECK(pos < bytes.size(), "{}: pages run past the end of the file", where);
    size_t header_size = 0;
    const PageHeader h = read_page_header(bytes.subspan(pos), header_size, where);
    MOESERVE_CHECK(h.compressed_size >= 0 && pos + header_size + static_cast<size_t>(h.compressed_size) <= bytes.size(),
                   "{}: page of {} bytes past the end of the file", where, h.compressed_size);
    MOESERVE_CHECK(h.uncompressed_size >= 0 && static_cast<uint64_t>(h.uncompressed_size) <= max_page_bytes,
                   "{}: a page of {} bytes uncompressed (the reader's limit for a file of {} bytes is {})", where,
                   h.uncompressed_size, bytes.size(), max_page_bytes);
    MOESERVE_CHECK(h.num_values >= 0, "{}: a page of {} values", where, h.num_values);
    const auto page = bytes.subspan(pos + header_size, static_cast<size_t>(h.compressed_size));
    pos += header_size + static_cast<size_t>(h.compressed_size);
    if (h.type == PageType::index_page) continue;
    if (h.type == PageType::dictionary_page) {
      MOESERVE_CHECK(h.encoding == Encoding::plain || h.encoding == Encoding::plain_dictionary,
                     "{}: dictionary page encoded {}", where, encoding_name(h.encoding));
      const std::vector<uint8_t> data = decompress(chunk.codec, page, static_cast<size_t>(h.uncompressed_size), where);
      const auto count = static_cast<size_t>(h.num_values);
      if (strings) {
        dictionary_strings = decode_plain_byte_arrays(data, count, where);
      } else {
        dictionary_ints = decode_plain_ints(column.type, data, count, where);
      }
      continue;
    }
    MOESERVE_CHECK(h.type == PageType::data_page || h.type == PageType::data_page_v2, "{}: unknown page type {}", where,
                   static_cast<int>(h.type));
    MOESERVE_CHECK(h.num_values <= chunk.num_values - levels_read,
                   "{}: a page of {} values where the column chunk has {} left", where, h.num_values,
                   chunk.num_values - levels_read);
    const auto count = static_cast<size_t>(h.num_values);
    std::span<const uint8_t> repetition_section, definition_section, values_section;
    std::vector<uint8_t> decompressed;
    if (h.type == PageType::data_page) {
      decompressed = decompress(chunk.codec, page, static_cast<size_t>(h.uncompressed_size), where);
      size_t offset = 0;
      const std::span<const uint8_t> data(decompressed);
      for (auto [max_level, encoding, section] :
           {std::tuple{column.max_repetition_level, h.repetition_level_encoding, &repetition_section},
            std::tuple{column.max_definition_level, h.definition_level_encoding, &definition_section}}) {
        if (max_level == 0) continue;
        MOESERVE_CHECK(encoding == Encoding::rle, "{}: levels encoded {} (only RLE is supported)", where,
                       encoding_name(encoding));
        *section = prefixed_section(data, offset, where);
      }
      values_section = data.subspan(offset);
    } else {
      MOESERVE_CHECK(h.repetition_levels_length >= 0 && h.definition_levels_length >= 0,
                     "{}: negative level section lengths", where);
      const auto rep_length = static_cast<size_t>(h.repetition_levels_length);
      const auto def_length = static_cast<size_t>(h.definition_levels_length);
      MOESERVE_CHECK(rep_length + def_length <= page.size() &&
                         rep_length + def_length <= static_cast<size_t>(h.uncompressed_size),
                     "{}: level sections exceed the page", where);
      repetition_section = page.subspan(0, rep_length);
      definition_section = page.subspan(rep_length, def_length);
      const auto compressed_values = page.subspan(rep_length + def_length);
      const size_t values_size = static_cast<size_t>(h.uncompressed_size) - rep_length - def_length;
      decompressed = h.values_compressed ? decompress(chunk.codec, compressed_values, values_size, where)
                                         : std::vector<uint8_t>(compressed_values.begin(), compressed_values.end());
      values_section = decompressed;
    }
    const size_t first_level = out.definition_levels.size();
    if (column.max_repetition_level > 0) {
      append_levels(decode_rle_hybrid(repetition_section, bit_width_of(column.max_repetition_level), count, where),
                    column.max_repetition_level, out.repetition_levels, where, "repetition");
    } else {
      out.repetition_levels.resize(out.repetition_levels.size() + count, 0);
    }
    if (column.max_definition_level > 0) {
      append_levels(decode_rle_hybrid(definition_section, bit_width_of(column.max_definition_level), count, where),
                    column.max_definition_level, out.definition_levels, where, "definition");
    } else {
      out.definition_levels.resize(out.definition_levels.size() + count, 0);
    }
    size_t present = 0;
    for (size_t i = first_level; i < out.definition_levels.size(); ++i)
      present += out.definition_levels[i] == column.max_definition_level;

    if (h.encoding == Encoding::plain) {
      if (strings) {
        for (std::string& v : decode_plain_byte_arrays(values_section, present, where)) add_string(std::move(v));
      } else {
        auto v = decode_plain_ints(column.type, values_section, present, where);
        out.ints.insert(out.ints.end(), v.begin(), v.end());
      }
    } else if (h.encoding == Encoding::plain_dictionary || h.encoding == Encoding::rle_dictionary) {
      MOESERVE_CHECK(!values_section.empty() || present == 0, "{}: empty dictionary-encoded page", where);
      const std::vector<uint32_t> indices =
          present == 0 ? std::vector<uint32_t>{}
                       : decode_rle_hybrid(values_section.subspan(1), values_section[0], present, where);
      const size_t dictionary_size = strings ? dictionary_strings.size() : dictionary_ints.size();
      for (uint32_t i : indices) {
        MOESERVE_CHECK(i < dictionary_size, "{}: dictionary index {} of {} entries", where, i, dictionary_size);
        if (strings) {
          add_string(dictionary_strings[i]);
        } else {
          out.ints.push_back(dictionary_ints[i]);
        }
      }
    } else {
      fail("{}: values encoded {} (PLAIN and dictionary encodings are supported)", where, encoding_name(h.encoding));
    }
    levels_read += h.num_values;
  }
}

template <typename T>
std::vector<std::vector<T>> File::assemble_lists(const LeafColumn& c, const ColumnData& data,
                                                 std::vector<T>& values) const {
  MOESERVE_CHECK(c.max_repetition_level == 1, "{}: column '{}' is not a list (repetition level {})", path_,
                 c.top_level_name, c.max_repetition_level);
  std::vector<std::vector<T>> rows;
  size_t next_value = 0;
  for (size_t i = 0; i < data.definition_levels.size(); ++i) {
    if (data.repetition_levels[i] == 0) rows.emplace_back();
    MOESERVE_CHECK(!rows.empty(), "{}: column '{}' does not start a row at its first value (repetition level {})",
                   path_, c.top_level_name, data.repetition_levels[i]);
    const auto d = static_cast<int>(data.definition_levels[i]);
    if (d == c.max_definition_level) {
      MOESERVE_CHECK(next_value < values.size(), "{}: column '{}' has fewer values than its levels", path_,
                     c.top_level_name);
      rows.back().push_back(std::move(values[next_value++]));
    } else {
      MOESERVE_CHECK(d < c.repeated_definition_level, "{}: column '{}' row {} holds a null element", path_,
                     c.top_level_name, rows.size() - 1);
    }
  }
  MOESERVE_CHECK(static_cast<int64_t>(rows.size()) == num_rows(), "{}: column '{}' has {} rows, the file {}", path_,
                 c.top_level_name, rows.size(), num_rows());
  return rows;
}

std::vector<std::vector<int64_t>> File::read_int_lists(std::string_view name) const {
  const LeafColumn& c = require_leaf(name);
  MOESERVE_CHECK(c.type == Type::int32 || c.type == Type::int64, "{}: column '{}' holds {}, not integers", path_, name,
                 type_name(c.type));
  ColumnData data = read_column(c);
  return assemble_lists(c, data, data.ints);
}

std::vector<std::vector<std::string>> File::read_string_lists(std::string_view name) const {
  const LeafColumn& c = require_leaf(name);
  MOESERVE_CHECK(c.type == Type::byte_array, "{}: column '{}' holds {}, not strings", path_, name, type_name(c.type));
  ColumnData data = read_column(c);
  return assemble_lists(c, data, data.strings);
}

std::vector<std::string> File::read_strings(std::string_view name) const {
  const LeafColumn& c = require_leaf(name);
  MOESERVE_CHECK(c.type == Type::byte_array && c.max_repetition_level == 0,
                 "{}: column '{}' is not a string column ({}, repetition level {})", path_, name, type_name(c.type),
                 c.max_repetition_level);
  ColumnData data = read_column(c);
  std::vector<std::string> rows;
  size_t next_value = 0;
  for (uint8_t d : data.definition_levels) {
    const bool present = d == c.max_definition_level;
    MOESERVE_CHECK(!present || next_value < data.strings.size(), "{}: column '{}' has fewer values than its levels",
                   path_, name);
    rows.push_back(present ? std::move(data.strings[next_value++]) : "");
  }
  MOESERVE_CHECK(static_cast<int64_t>(rows.size()) == num_rows(), "{}: column '{}' has {} rows, the file {}", path_,
                 name, rows.size(), num_rows());
  return rows;
}

}  // namespace moeserve::bench::parquet

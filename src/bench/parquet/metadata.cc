#include "bench/parquet/metadata.h"

#include <thrift/TConfiguration.h>
#include <thrift/protocol/TCompactProtocol.h>
#include <thrift/transport/TBufferTransports.h>

#include <climits>
#include <memory>

#include "util/error.h"

namespace moeserve::bench::parquet {

const char* type_name(Type type) {
  static const char* const names[] = {"BOOLEAN", "INT32",  "INT64",      "INT96",
                                      "FLOAT",   "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
  const auto i = static_cast<size_t>(type);
  return i < std::size(names) ? names[i] : "unknown type";
}

const char* codec_name(Codec codec) {
  static const char* const names[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"};
  const auto i = static_cast<size_t>(codec);
  return i < std::size(names) ? names[i] : "unknown codec";
}

const char* encoding_name(Encoding encoding) {
  static const char* const names[] = {
      "PLAIN",          "GROUP_VAR_INT",       "PLAIN_DICTIONARY",        "RLE",
      "BIT_PACKED",     "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
      "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"};
  const auto i = static_cast<size_t>(encoding);
  return i < std::size(names) ? names[i] : "unknown encoding";
}

namespace {

using apache::thrift::protocol::TType;
using Buffer = apache::thrift::transport::TMemoryBuffer;
using Protocol = apache::thrift::protocol::TCompactProtocolT<Buffer>;

// Reads a struct's fields, handing each (id, type) to `on_field`, which reads the value or skips it.
template <typename OnField>
void read_struct(Protocol& p, OnField&& on_field) {
  std::string name;
  TType type = apache::thrift::protocol::T_STOP;
  int16_t id = 0;
  p.readStructBegin(name);
  while (true) {
    p.readFieldBegin(name, type, id);
    if (type == apache::thrift::protocol::T_STOP) break;
    on_field(id, type);
    p.readFieldEnd();
  }
  p.readStructEnd();
}

template <typename OnElement>
void read_list(Protocol& p, OnElement&& on_element) {
  TType element_type = apache::thrift::protocol::T_STOP;
  uint32_t size = 0;
  p.readListBegin(element_type, size);
  for (uint32_t i = 0; i < size; ++i) on_element(element_type);
  p.readListEnd();
}

int32_t i32(Protocol& p) {
  int32_t v = 0;
  p.readI32(v);
  return v;
}
int64_t i64(Protocol& p) {
  int64_t v = 0;
  p.readI64(v);
  return v;
}
std::string str(Protocol& p) {
  std::string v;
  p.readString(v);
  return v;
}

SchemaElement read_schema_element(Protocol& p, const std::string& where) {
  SchemaElement e;
  read_struct(p, [&](int16_t id, TType type) {
    switch (id) {
      case 1:
        e.has_type = true;
        e.type = static_cast<Type>(i32(p));
        break;
      case 3: {
        const int32_t repetition = i32(p);
        MOESERVE_CHECK(repetition >= 0 && repetition <= 2, "{}: unknown field repetition {}", where, repetition);
        e.repetition = static_cast<Repetition>(repetition);
        break;
      }
      case 4:
        e.name = str(p);
        break;
      case 5:
        e.num_children = i32(p);
        break;
      case 6:
        e.converted_type = i32(p);
        break;
      default:
        p.skip(type);
    }
  });
  return e;
}

ColumnChunk read_column_metadata(Protocol& p) {
  ColumnChunk c;
  read_struct(p, [&](int16_t id, TType type) {
    switch (id) {
      case 1:
        c.type = static_cast<Type>(i32(p));
        break;
      case 3:
        read_list(p, [&](TType) { c.path.push_back(str(p)); });
        break;
      case 4:
        c.codec = static_cast<Codec>(i32(p));
        break;
      case 5:
        c.num_values = i64(p);
        break;
      case 7:
        c.total_compressed_size = i64(p);
        break;
      case 9:
        c.data_page_offset = i64(p);
        break;
      case 11:
        c.dictionary_page_offset = i64(p);
        break;
      default:
        p.skip(type);
    }
  });
  return c;
}

ColumnChunk read_column_chunk(Protocol& p, const std::string& where) {
  ColumnChunk c;
  bool has_metadata = false;
  read_struct(p, [&](int16_t id, TType type) {
    if (id == 1) {
      MOESERVE_CHECK(false, "{}: column data in another file (file_path) is not supported", where);
    } else if (id == 3) {
      c = read_column_metadata(p);
      has_metadata = true;
    } else {
      p.skip(type);
    }
  });
  MOESERVE_CHECK(has_metadata, "{}: a column chunk has no metadata (encrypted files are not supported)", where);
  return c;
}

RowGroup read_row_group(Protocol& p, const std::string& where) {
  RowGroup g;
  read_struct(p, [&](int16_t id, TType type) {
    if (id == 1) {
      read_list(p, [&](TType) { g.columns.push_back(read_column_chunk(p, where)); });
    } else if (id == 3) {
      g.num_rows = i64(p);
    } else {
      p.skip(type);
    }
  });
  return g;
}

// Runs `read` over `bytes` with a compact protocol, turning Thrift's exceptions into errors that name `where`.
template <typename Read>
void decode(std::span<const uint8_t> bytes, const std::string& where, const char* what, Read&& read,
            size_t* consumed = nullptr) {
  try {
    auto config = std::make_shared<apache::thrift::TConfiguration>(INT_MAX);
    auto buffer = std::make_shared<Buffer>(const_cast<uint8_t*>(bytes.data()), static_cast<uint32_t>(bytes.size()),
                                           Buffer::OBSERVE, config);
    // No string or list can be longer than the bytes it is read from: Thrift allocates a string's declared
    // length before reading it, so the limits keep a hostile length from allocating gigabytes. (Nesting is
    // bounded by the configuration's recursion limit, which skip() honours.)
    const auto limit = static_cast<int32_t>(bytes.size());
    Protocol protocol(buffer, limit, limit);
    read(protocol);
    if (consumed) *consumed = bytes.size() - buffer->available_read();
  } catch (const apache::thrift::TException& e) {
    fail("{}: malformed {}: {}", where, what, e.what());
  }
}

}  // namespace

FileMetaData read_file_metadata(std::span<const uint8_t> bytes, const std::string& where) {
  FileMetaData m;
  decode(bytes, where, "file metadata", [&](Protocol& p) {
    read_struct(p, [&](int16_t id, TType type) {
      switch (id) {
        case 1:
          m.version = i32(p);
          break;
        case 2:
          read_list(p, [&](TType) { m.schema.push_back(read_schema_element(p, where)); });
          break;
        case 3:
          m.num_rows = i64(p);
          break;
        case 4:
          read_list(p, [&](TType) { m.row_groups.push_back(read_row_group(p, where)); });
          break;
        case 6:
          m.created_by = str(p);
          break;
        default:
          p.skip(type);
      }
    });
  });
  return m;
}

PageHeader read_page_header(std::span<const uint8_t> bytes, size_t& header_size, const std::string& where) {
  // A header is small; a window keeps Thrift's buffer within 32-bit sizes on large files.
  constexpr size_t kWindow = 64u << 20;
  PageHeader h;
  decode(
      bytes.first(std::min(bytes.size(), kWindow)), where, "page header",
      [&](Protocol& p) {
        read_struct(p, [&](int16_t id, TType type) {
          switch (id) {
            case 1:
              h.type = static_cast<PageType>(i32(p));
              break;
            case 2:
              h.uncompressed_size = i32(p);
              break;
            case 3:
              h.compressed_size = i32(p);
              break;
            case 5:  // DataPageHeader
            case 7:  // DictionaryPageHeader
              read_struct(p, [&](int16_t field, TType field_type) {
                switch (field) {
                  case 1:
                    h.num_values = i32(p);
                    break;
                  case 2:
                    h.encoding = static_cast<Encoding>(i32(p));
                    break;
                  case 3:
                    if (id == 5) {
                      h.definition_level_encoding = static_cast<Encoding>(i32(p));
                    } else {
                      p.skip(field_type);
                    }
                    break;
                  case 4:
                    if (id == 5) {
                      h.repetition_level_encoding = static_cast<Encoding>(i32(p));
                    } else {
                      p.skip(field_type);
                    }
                    break;
                  default:
                    p.skip(field_type);
                }
              });
              break;
            case 8:  // DataPageHeaderV2
              read_struct(p, [&](int16_t field, TType field_type) {
                switch (field) {
                  case 1:
                    h.num_values = i32(p);
                    break;
                  case 4:
                    h.encoding = static_cast<Encoding>(i32(p));
                    break;
                  case 5:
                    h.definition_levels_length = i32(p);
                    break;
                  case 6:
                    h.repetition_levels_length = i32(p);
                    break;
                  case 7: {
                    bool v = true;
                    p.readBool(v);
                    h.values_compressed = v;
                    break;
                  }
                  default:
                    p.skip(field_type);
                }
              });
              break;
            default:
              p.skip(type);
          }
        });
      },
      &header_size);
  return h;
}

}  // namespace moeserve::bench::parquet

#include "bench/parquet/encoding.h"

#include <snappy.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace moeserve::bench::parquet {
namespace {

std::vector<uint8_t> inflate_gzip(std::span<const uint8_t> compressed, size_t uncompressed_size,
                                  const std::string& where) {
  std::vector<uint8_t> out(uncompressed_size);
  z_stream stream{};
  // 32 + MAX_WBITS: a gzip member (what Parquet's GZIP codec writes) or a zlib stream, detected from the header.
  MOESERVE_CHECK(inflateInit2(&stream, 32 + MAX_WBITS) == Z_OK, "{}: zlib did not initialise", where);
  stream.next_in = const_cast<Bytef*>(compressed.data());
  stream.avail_in = static_cast<uInt>(compressed.size());
  stream.next_out = out.data();
  stream.avail_out = static_cast<uInt>(out.size());
  const int status = inflate(&stream, Z_FINISH);
  const size_t produced = stream.total_out;
  inflateEnd(&stream);
  MOESERVE_CHECK(status == Z_STREAM_END && produced == uncompressed_size,
                 "{}: GZIP page did not inflate to {} bytes (zlib status {}, {} bytes)", where, uncompressed_size,
                 status, produced);
  return out;
}

uint64_t read_varint(std::span<const uint8_t> data, size_t& pos, const std::string& where) {
  uint64_t value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    MOESERVE_CHECK(pos < data.size(), "{}: truncated varint in RLE data", where);
    const uint8_t byte = data[pos++];
    value |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) return value;
  }
  fail("{}: varint longer than 64 bits in RLE data", where);
}

}  // namespace

std::vector<uint8_t> decompress(Codec codec, std::span<const uint8_t> compressed, size_t uncompressed_size,
                                const std::string& where) {
  switch (codec) {
    case Codec::uncompressed:
      MOESERVE_CHECK(compressed.size() == uncompressed_size, "{}: uncompressed page of {} bytes, header says {}", where,
                     compressed.size(), uncompressed_size);
      return {compressed.begin(), compressed.end()};
    case Codec::snappy: {
      size_t length = 0;
      const auto* in = reinterpret_cast<const char*>(compressed.data());
      MOESERVE_CHECK(snappy::GetUncompressedLength(in, compressed.size(), &length) && length == uncompressed_size,
                     "{}: SNAPPY page does not declare {} bytes", where, uncompressed_size);
      std::vector<uint8_t> out(length);
      MOESERVE_CHECK(snappy::RawUncompress(in, compressed.size(), reinterpret_cast<char*>(out.data())),
                     "{}: corrupt SNAPPY page", where);
      return out;
    }
    case Codec::gzip:
      return inflate_gzip(compressed, uncompressed_size, where);
    case Codec::zstd: {
      std::vector<uint8_t> out(uncompressed_size);
      const size_t n = ZSTD_decompress(out.data(), out.size(), compressed.data(), compressed.size());
      MOESERVE_CHECK(!ZSTD_isError(n) && n == uncompressed_size, "{}: ZSTD page did not decompress to {} bytes: {}",
                     where, uncompressed_size, ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short");
      return out;
    }
    default:
      fail("{}: compression {} is not supported (UNCOMPRESSED, SNAPPY, GZIP and ZSTD are)", where, codec_name(codec));
  }
}

int bit_width_of(uint32_t max_value) {
  int width = 0;
  while (max_value > 0) {
    ++width;
    max_value >>= 1;
  }
  return width;
}

std::vector<uint32_t> decode_rle_hybrid(std::span<const uint8_t> data, int bit_width, size_t count,
                                        const std::string& where) {
  MOESERVE_CHECK(bit_width >= 0 && bit_width <= 32, "{}: bit width {} in RLE data", where, bit_width);
  std::vector<uint32_t> values;
  values.reserve(count);
  size_t pos = 0;
  const size_t value_bytes = (static_cast<size_t>(bit_width) + 7) / 8;
  while (values.size() < count) {
    const uint64_t header = read_varint(data, pos, where);
    if (header & 1) {
      // Bit-packed: (header >> 1) groups of 8 values, least significant bit first.
      const size_t groups = header >> 1;
      const size_t bytes = groups * static_cast<size_t>(bit_width);
      MOESERVE_CHECK(pos + bytes <= data.size(), "{}: bit-packed run past the end of its data", where);
      const size_t n = groups * 8;
      const uint64_t mask = bit_width == 0 ? 0 : (~uint64_t{0} >> (64 - bit_width));
      for (size_t i = 0; i < n && values.size() < count; ++i) {
        // A value spans at most 5 bytes (32 bits at a bit offset up to 7): load up to 8 and shift.
        const size_t bit = i * static_cast<size_t>(bit_width);
        const size_t first = bit / 8;
        uint64_t word = 0;
        std::memcpy(&word, data.data() + pos + first, std::min<size_t>(8, bytes - first));
        values.push_back(static_cast<uint32_t>((word >> (bit % 8)) & mask));
      }
      pos += bytes;
    } else {
      // RLE: one value, little-endian in ceil(bit_width / 8) bytes, repeated (header >> 1) times.
      const size_t run = header >> 1;
      MOESERVE_CHECK(pos + value_bytes <= data.size(), "{}: RLE run past the end of its data", where);
      uint32_t v = 0;
      for (size_t b = 0; b < value_bytes; ++b) v |= static_cast<uint32_t>(data[pos + b]) << (8 * b);
      pos += value_bytes;
      for (size_t i = 0; i < run && values.size() < count; ++i) values.push_back(v);
      MOESERVE_CHECK(run > 0, "{}: empty RLE run", where);
    }
  }
  return values;
}

std::vector<int64_t> decode_plain_ints(Type type, std::span<const uint8_t> data, size_t count,
                                       const std::string& where) {
  const size_t width = type == Type::int32 ? 4 : type == Type::int64 ? 8 : 0;
  MOESERVE_CHECK(width > 0, "{}: expected INT32 or INT64 values, the column holds {}", where, type_name(type));
  MOESERVE_CHECK(data.size() >= count * width, "{}: {} PLAIN values need {} bytes, the page has {}", where, count,
                 count * width, data.size());
  std::vector<int64_t> values(count);
  for (size_t i = 0; i < count; ++i) {
    if (width == 4) {
      int32_t v = 0;
      std::memcpy(&v, data.data() + i * 4, 4);  // Parquet is little-endian, as is every host we build for
      values[i] = v;
    } else {
      std::memcpy(&values[i], data.data() + i * 8, 8);
    }
  }
  return values;
}

std::vector<std::string> decode_plain_byte_arrays(std::span<const uint8_t> data, size_t count,
                                                  const std::string& where) {
  std::vector<std::string> values;
  values.reserve(count);
  size_t pos = 0;
  for (size_t i = 0; i < count; ++i) {
    MOESERVE_CHECK(pos + 4 <= data.size(), "{}: truncated BYTE_ARRAY length", where);
    uint32_t length = 0;
    std::memcpy(&length, data.data() + pos, 4);
    pos += 4;
    MOESERVE_CHECK(pos + length <= data.size(), "{}: BYTE_ARRAY of {} bytes past the end of the page", where, length);
    values.emplace_back(reinterpret_cast<const char*>(data.data() + pos), length);
    pos += length;
  }
  return values;
}

}  // namespace moeserve::bench::parquet

#include "bench/parquet/encoding.h"

#include <snappy.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace moeserve::bench::parquet {
namespace {

// Streaming decompressors write into a buffer that grows with what they produce, up to the declared size: a page
// that declares 256 MiB but holds 40 bytes of garbage allocates next to nothing before it fails.
constexpr size_t kFirstOutputChunk = 1 << 16;

size_t grown(size_t current, size_t cap) {
  return std::min(cap, std::max(kFirstOutputChunk, current * 2));
}

std::vector<uint8_t> inflate_gzip(std::span<const uint8_t> compressed, size_t uncompressed_size,
                                  const std::string& where) {
  z_stream stream{};
  // 32 + MAX_WBITS: a gzip member (what Parquet's GZIP codec writes) or a zlib stream, detected from the header.
  MOESERVE_CHECK(inflateInit2(&stream, 32 + MAX_WBITS) == Z_OK, "{}: zlib did not initialise", where);
  stream.next_in = const_cast<Bytef*>(compressed.data());
  stream.avail_in = static_cast<uInt>(compressed.size());
  std::vector<uint8_t> out;
  int status = Z_OK;
  while (status == Z_OK && stream.total_out < uncompressed_size) {
    out.resize(grown(out.size(), uncompressed_size));
    stream.next_out = out.data() + stream.total_out;
    stream.avail_out = static_cast<uInt>(out.size() - stream.total_out);
    status = inflate(&stream, Z_NO_FLUSH);
  }
  // Output full and the stream not yet ended: one more byte of room tells a longer stream from the exact end.
  if (status == Z_OK) {
    uint8_t extra = 0;
    stream.next_out = &extra;
    stream.avail_out = 1;
    status = inflate(&stream, Z_NO_FLUSH);
  }
  const size_t produced = stream.total_out;
  inflateEnd(&stream);
  MOESERVE_CHECK(status == Z_STREAM_END && produced == uncompressed_size,
                 "{}: GZIP page did not inflate to {} bytes (zlib status {}, {} bytes)", where, uncompressed_size,
                 status, produced);
  out.resize(produced);
  return out;
}

std::vector<uint8_t> decompress_zstd(std::span<const uint8_t> compressed, size_t uncompressed_size,
                                     const std::string& where) {
  ZSTD_DStream* stream = ZSTD_createDStream();
  MOESERVE_CHECK(stream != nullptr, "{}: zstd did not initialise", where);
  ZSTD_inBuffer in{compressed.data(), compressed.size(), 0};
  std::vector<uint8_t> out;
  size_t produced = 0;
  size_t status = 0;
  // One byte past the declared size is room enough to see that a stream is too long.
  while (produced <= uncompressed_size) {
    if (produced == out.size()) out.resize(grown(out.size(), uncompressed_size + 1));
    ZSTD_outBuffer output{out.data(), out.size(), produced};
    const size_t consumed = in.pos;
    status = ZSTD_decompressStream(stream, &output, &in);
    const bool progress = output.pos != produced || in.pos != consumed;
    produced = output.pos;
    if (ZSTD_isError(status) || (status == 0 && in.pos == in.size) || !progress) break;  // error, done, truncated
  }
  ZSTD_freeDStream(stream);
  MOESERVE_CHECK(!ZSTD_isError(status) && status == 0 && produced == uncompressed_size && in.pos == in.size,
                 "{}: ZSTD page did not decompress to {} bytes: {}", where, uncompressed_size,
                 ZSTD_isError(status) ? ZSTD_getErrorName(status) : "wrong length");
  out.resize(produced);
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
      // Checked through without writing, so the output is allocated only for a stream that fills it.
      MOESERVE_CHECK(snappy::IsValidCompressedBuffer(in, compressed.size()), "{}: corrupt SNAPPY page", where);
      std::vector<uint8_t> out(length);
      MOESERVE_CHECK(snappy::RawUncompress(in, compressed.size(), reinterpret_cast<char*>(out.data())),
                     "{}: corrupt SNAPPY page", where);
      return out;
    }
    case Codec::gzip:
      return inflate_gzip(compressed, uncompressed_size, where);
    case Codec::zstd:
      return decompress_zstd(compressed, uncompressed_size, where);
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
  std::vector<uint32_t> values;  // not reserved for `count`: a page's count is the file's claim
  size_t pos = 0;
  const size_t value_bytes = (static_cast<size_t>(bit_width) + 7) / 8;
  while (values.size() < count) {
    const uint64_t header = read_varint(data, pos, where);
    if (header & 1) {
      // Bit-packed: (header >> 1) groups of 8 values, least significant bit first.
      const uint64_t groups = header >> 1;
      MOESERVE_CHECK(bit_width == 0 || groups <= (data.size() - pos) / static_cast<uint64_t>(bit_width),
                     "{}: bit-packed run past the end of its data", where);
      const size_t bytes = groups * static_cast<size_t>(bit_width);
      // Only the values still wanted are unpacked (a run may pad its last group, or claim 2^60 groups of width 0).
      const size_t n = std::min<uint64_t>(groups, (count - values.size() + 7) / 8) * 8;
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
  MOESERVE_CHECK(count <= data.size() / width, "{}: {} PLAIN values need more than the page's {} bytes", where,
                 count, data.size());
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
  // Each value has a 4-byte length: more than data.size() / 4 cannot be there (checked before reserving).
  MOESERVE_CHECK(count <= data.size() / 4, "{}: {} BYTE_ARRAY values need more than the page's {} bytes", where,
                 count, data.size());
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

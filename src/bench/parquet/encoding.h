// Parquet's value and level encodings that the reader supports: decompression (UNCOMPRESSED, SNAPPY, GZIP, ZSTD),
// the RLE / bit-packing hybrid (definition and repetition levels, dictionary indices) and PLAIN values.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "bench/parquet/metadata.h"

namespace moeserve::bench::parquet {

// Decompresses a page (or its values section) to exactly `uncompressed_size` bytes.
std::vector<uint8_t> decompress(Codec codec, std::span<const uint8_t> compressed, size_t uncompressed_size,
                                const std::string& where);

// Decodes `count` values of `bit_width` bits from the RLE / bit-packing hybrid encoding.
std::vector<uint32_t> decode_rle_hybrid(std::span<const uint8_t> data, int bit_width, size_t count,
                                        const std::string& where);

// The number of bits needed for values up to max_value (levels use this width).
int bit_width_of(uint32_t max_value);

// PLAIN values: INT32 and INT64 widened to int64, BYTE_ARRAY as strings. `data` holds at least `count` values.
std::vector<int64_t> decode_plain_ints(Type type, std::span<const uint8_t> data, size_t count,
                                       const std::string& where);
std::vector<std::string> decode_plain_byte_arrays(std::span<const uint8_t> data, size_t count,
                                                  const std::string& where);

}  // namespace moeserve::bench::parquet

// Small file helpers with errors that name the path.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <span>
#include <string>

namespace moeserve {

std::string read_text_file(const std::string& path);
nlohmann::json read_json_file(const std::string& path);
void write_file(const std::string& path, std::span<const uint8_t> bytes);
void write_text_file(const std::string& path, const std::string& text);
bool file_exists(const std::string& path);

// Hex SHA-256 of a file's bytes and of a byte range.
std::string sha256_file(const std::string& path);
std::string sha256_hex(std::span<const uint8_t> bytes);

}  // namespace moeserve

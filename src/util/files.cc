#include "util/files.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <system_error>

#include "util/bounded_read.h"
#include "util/error.h"
#include "util/json_parse.h"
#include "util/mapped_file.h"

namespace moeserve {

std::string read_text_file(const std::string& path, uint64_t max_bytes) { return read_bounded_file(path, max_bytes); }

nlohmann::json read_json_file(const std::string& path, uint64_t max_bytes) {
  return parse_json(read_bounded_file(path, max_bytes), path);
}

void write_file(const std::string& path, std::span<const uint8_t> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  MOESERVE_CHECK(out.good(), "cannot create {}: {}", path, std::strerror(errno));
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  MOESERVE_CHECK(out.good(), "cannot write {}: {}", path, std::strerror(errno));
}

void write_text_file(const std::string& path, const std::string& text) {
  write_file(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

// The error_code form: a path the filesystem cannot even look up (a name over NAME_MAX from a checkpoint's index, say)
// is not a file, where the throwing form would escape as a filesystem_error.
bool file_exists(const std::string& path) {
  std::error_code error;
  return std::filesystem::is_regular_file(path, error);
}

std::string sha256_hex(std::span<const uint8_t> bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  MOESERVE_CHECK(EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr) == 1,
                 "SHA-256 failed");
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

std::string sha256_file(const std::string& path) {
  MappedFile file(path);
  return sha256_hex(file.bytes());
}

}  // namespace moeserve

#include "eval/livecodebench.h"

#include <zlib.h>

#include <array>

#include "eval/json_lines.h"
#include "util/bounded_read.h"
#include "util/error.h"
#include "util/json_parse.h"

namespace moeserve::eval {
namespace {

std::string string_field(const nlohmann::json& row, const char* name) {
  auto it = row.find(name);
  if (it == row.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  return it->dump();
}

std::vector<LcbTest> tests_from_json(const nlohmann::json& list) {
  MOESERVE_CHECK(list.is_array(), "test cases are not a JSON list");
  std::vector<LcbTest> tests;
  for (const nlohmann::json& t : list) {
    MOESERVE_CHECK(t.is_object() && t.contains("input") && t.contains("output"),
                   "a test case lacks input or output: {}", t.dump().substr(0, 200));
    const auto text = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    tests.push_back({text(t["input"]), text(t["output"])});
  }
  return tests;
}

std::vector<LcbTest> tests_field(const nlohmann::json& row, const char* name, uint64_t max_tests_bytes) {
  auto it = row.find(name);
  if (it == row.end() || it->is_null()) return {};
  if (it->is_array()) return tests_from_json(*it);
  MOESERVE_CHECK(it->is_string(), "{} is neither a string nor a list", name);
  try {
    return decode_lcb_tests(it->get<std::string>(), max_tests_bytes);
  } catch (const Error& e) {
    fail("{}: {}", name, e.what());
  }
}

uint64_t little_endian(std::string_view bytes, size_t at, size_t width) {
  uint64_t v = 0;
  for (size_t i = 0; i < width; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[at + i])) << (8 * i);
  return v;
}

}  // namespace

std::vector<LcbTest> LcbProblem::all_tests() const {
  std::vector<LcbTest> tests = public_tests;
  tests.insert(tests.end(), private_tests.begin(), private_tests.end());
  return tests;
}

LcbProblem parse_lcb_problem(const nlohmann::json& row, uint64_t max_tests_bytes) {
  MOESERVE_CHECK(row.is_object(), "a LiveCodeBench row is not a JSON object");
  LcbProblem p;
  p.question_id = string_field(row, "question_id");
  MOESERVE_CHECK(!p.question_id.empty(), "a LiveCodeBench row has no question_id");
  try {
    p.question_title = string_field(row, "question_title");
    p.question_content = string_field(row, "question_content");
    p.platform = string_field(row, "platform");
    p.contest_id = string_field(row, "contest_id");
    p.contest_date = string_field(row, "contest_date");
    p.starter_code = string_field(row, "starter_code");
    p.difficulty = string_field(row, "difficulty");
    p.public_tests = tests_field(row, "public_test_cases", max_tests_bytes);
    p.private_tests = tests_field(row, "private_test_cases", max_tests_bytes);
    if (auto it = row.find("metadata"); it != row.end() && !it->is_null()) {
      const nlohmann::json metadata = it->is_string() ? parse_json(it->get<std::string>(), "metadata") : *it;
      if (metadata.contains("func_name") && metadata["func_name"].is_string()) {
        p.func_name = metadata["func_name"].get<std::string>();
      }
    }
  } catch (const nlohmann::json::exception& e) {
    fail("LiveCodeBench question {}: {}", p.question_id, json_error_detail(e));
  } catch (const Error& e) {
    fail("LiveCodeBench question {}: {}", p.question_id, e.what());
  }
  return p;
}

std::vector<LcbProblem> load_lcb_problems(const std::string& path, uint64_t max_tests_bytes) {
  std::vector<LcbProblem> problems;
  for_each_json_line(
      path, [&](const nlohmann::json& row, size_t) { problems.push_back(parse_lcb_problem(row, max_tests_bytes)); },
      JsonLinesLimits{kMaxLcbLineBytes, kMaxLcbFileBytes});
  return problems;
}

std::vector<LcbTest> decode_lcb_tests(std::string_view field, uint64_t max_tests_bytes) {
  // The release loader tries json.loads first and decompresses when that fails. Test lists are JSON arrays and
  // base64 never begins with '[' or '{', so the first character decides, and a malformed list is reported as
  // such instead of as bad base64.
  const size_t first = field.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && (field[first] == '[' || field[first] == '{'))
    return tests_from_json(parse_json(field, "the test cases"));
  return tests_from_json(
      parse_json(unpickle_string(zlib_inflate(base64_decode(field), max_tests_bytes)), "the unpickled test cases"));
}

std::string base64_decode(std::string_view text) {
  static const std::array<int8_t, 256> values = [] {
    std::array<int8_t, 256> v{};
    v.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) v[static_cast<uint8_t>(alphabet[i])] = static_cast<int8_t>(i);
    return v;
  }();
  std::string out;
  uint32_t buffer = 0;
  int bits = 0;
  size_t symbols = 0;
  size_t padding = 0;
  for (char c : text) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      ++padding;
      continue;
    }
    const int8_t v = values[static_cast<uint8_t>(c)];
    MOESERVE_CHECK(v >= 0 && padding == 0, "base64: unexpected character 0x{:02X}", static_cast<uint8_t>(c));
    buffer = (buffer << 6) | static_cast<uint32_t>(v);
    bits += 6;
    ++symbols;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xFF));
    }
  }
  MOESERVE_CHECK((symbols + padding) % 4 == 0 && symbols % 4 != 1, "base64: incorrect padding ({} symbols)",
                 symbols);
  return out;
}

std::string zlib_inflate(std::string_view compressed, uint64_t max_bytes) {
  MOESERVE_CHECK(compressed.size() <= UINT32_MAX, "zlib: {} bytes of compressed data is too many", compressed.size());
  z_stream stream{};
  MOESERVE_CHECK(inflateInit(&stream) == Z_OK, "zlib: cannot initialise");
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  stream.avail_in = static_cast<uInt>(compressed.size());
  std::string out;
  std::array<char, 1 << 16> chunk;
  int rc = Z_OK;
  while (rc == Z_OK) {
    stream.next_out = reinterpret_cast<Bytef*>(chunk.data());
    stream.avail_out = chunk.size();
    rc = inflate(&stream, Z_NO_FLUSH);
    const size_t produced = chunk.size() - stream.avail_out;
    if (out.size() + produced > max_bytes) {
      inflateEnd(&stream);
      fail("zlib: the data inflates to more than {} (the limit)", byte_size_text(max_bytes));
    }
    out.append(chunk.data(), produced);
    if (rc == Z_BUF_ERROR && stream.avail_in == 0) break;
  }
  inflateEnd(&stream);
  MOESERVE_CHECK(rc == Z_STREAM_END, "zlib: the data is not a complete zlib stream (code {})", rc);
  return out;
}

std::string unpickle_string(std::string_view pickle) {
  std::optional<std::string> value;
  size_t i = 0;
  const auto need = [&](uint64_t n, const char* what) {
    MOESERVE_CHECK(n <= pickle.size() - i, "pickle: truncated {} at byte {}", what, i);  // no i + n: it can wrap
  };
  while (true) {
    need(1, "opcode");
    const uint8_t op = static_cast<uint8_t>(pickle[i++]);
    size_t length = 0;
    switch (op) {
      case 0x80:  // PROTO
        need(1, "PROTO");
        MOESERVE_CHECK(pickle[i] >= 2 && pickle[i] <= 5, "pickle: protocol {} is not read", int(pickle[i]));
        ++i;
        continue;
      case 0x95:  // FRAME: the frame's length; its opcodes follow inline
        need(8, "FRAME");
        i += 8;
        continue;
      case 0x94:  // MEMOIZE
        continue;
      case 'q':  // BINPUT
        need(1, "BINPUT");
        ++i;
        continue;
      case 'r':  // LONG_BINPUT
        need(4, "LONG_BINPUT");
        i += 4;
        continue;
      case 0x8C:  // SHORT_BINUNICODE
        need(1, "SHORT_BINUNICODE");
        length = little_endian(pickle, i, 1);
        i += 1;
        break;
      case 'X':  // BINUNICODE
        need(4, "BINUNICODE");
        length = little_endian(pickle, i, 4);
        i += 4;
        break;
      case 0x8D:  // BINUNICODE8
        need(8, "BINUNICODE8");
        length = little_endian(pickle, i, 8);
        i += 8;
        break;
      case '.':  // STOP
        MOESERVE_CHECK(value.has_value(), "pickle: STOP before any string");
        return *value;
      default:
        fail("pickle: opcode 0x{:02X} at byte {} is not part of a pickled str", op, i - 1);
    }
    MOESERVE_CHECK(!value.has_value(), "pickle: more than one object");
    need(length, "string");
    value = std::string(pickle.substr(i, length));
    i += length;
  }
}

}  // namespace moeserve::eval

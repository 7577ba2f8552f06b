// Issue 14 for the bench's loaders: conf files, JSONL and synthetic datasets, PubMed, the Parquet reader, and the
// bounded reads under them. Every bad input is an Error naming the file and the line, field or column; streams
// and hostile sizes are refused at a stated limit before memory is spent on them.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "bench/conf_file.h"
#include "bench/dataset.h"
#include "bench/parquet/encoding.h"
#include "bench/parquet/reader.h"
#include "bench/pubmed.h"
#include "bench/settings.h"
#include "bench_test_util.h"
#include "error_checks.h"
#include "test_util.h"
#include "util/bounded_read.h"
#include "util/files.h"

namespace moeserve::bench {
namespace {

using testing::error_of;

const std::string kFixtures = MOESERVE_SOURCE_DIR "/tests/bench/fixtures/parquet/";

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A FIFO whose writer (opened read-write, so the reader always sees one) writes `line` until told to stop.
class EndlessFifo {
 public:
  explicit EndlessFifo(const std::string& line) : path_(moeserve::testing::temp_dir("fifo") + "/endless") {
    EXPECT_EQ(::mkfifo(path_.c_str(), 0600), 0);
    fd_ = ::open(path_.c_str(), O_RDWR | O_NONBLOCK);
    writer_ = std::thread([this, line] {
      while (!stop_) {
        if (::write(fd_, line.data(), line.size()) < 0) std::this_thread::yield();  // full: the reader drains it
      }
    });
  }
  ~EndlessFifo() {
    stop_ = true;
    writer_.join();
    ::close(fd_);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread writer_;
};

TEST(ConfFileLimits, NonFiniteAndOverflowingValuesNameFileLineAndKey) {
  EXPECT_EQ(error_of([] { ConfFile::parse("\ngpt-oss-120b.Server.target_qps = inf\n", "user.conf"); }),
            "user.conf:2: gpt-oss-120b.Server.target_qps = inf is not a finite number");
  EXPECT_EQ(error_of([] { ConfFile::parse("*.Offline.target_qps = 1e400\n", "user.conf"); }),
            "user.conf:1: *.Offline.target_qps = 1e400 is not a finite number");
  EXPECT_TRUE(contains(error_of([] { ConfFile::parse("*.*.min_duration = nan\n", "user.conf"); }), "not a finite"));
  const auto apply = [](const std::string& text) {
    TestSettings s;
    s.scenario = Scenario::server;
    apply_conf(ConfFile::parse(text, "user.conf"), "gpt-oss-120b", Scenario::server, ConfRole::user_conf, s);
  };
  // strtoull would read -1 as 2^64 - 1 and saturate past 2^64; ms would overflow in ns.
  EXPECT_EQ(error_of([&] { apply("*.*.min_query_count = -1\n"); }), "user.conf:1: *.*.min_query_count = -1 is negative");
  EXPECT_TRUE(contains(error_of([&] { apply("*.*.min_query_count = 99999999999999999999999\n"); }),
                       "user.conf:1: *.*.min_query_count = 99999999999999999999999 is out of range"));
  EXPECT_TRUE(contains(error_of([&] { apply("*.Server.target_latency = 100000000000000\n"); }),
                       "user.conf:1: *.Server.target_latency = 100000000000000 is out of range (at most"));
  TestSettings single;
  single.scenario = Scenario::single_stream;
  EXPECT_EQ(error_of([&] {
              apply_conf(ConfFile::parse("*.SingleStream.target_latency = 1e305\n", "user.conf"), "gpt-oss-120b",
                         Scenario::single_stream, ConfRole::user_conf, single);
            }),
            "user.conf:1: *.SingleStream.target_latency = 1e305 is out of range");  // 1e305 ms is inf ns
}

TEST(ConfFileLimits, StreamsAreReadUpToALimit) {
  EXPECT_EQ(error_of([] { ConfFile::read("/dev/zero"); }), "/dev/zero: larger than 1 MiB");
  {
    EndlessFifo fifo("# a comment, forever\n");
    EXPECT_EQ(error_of([&] { ConfFile::read(fifo.path()); }), fifo.path() + ": larger than 1 MiB");
  }
  // A FIFO nobody writes to reads as empty instead of blocking the open.
  const std::string fifo = moeserve::testing::temp_dir("fifo") + "/silent";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_TRUE(ConfFile::read(fifo).entries().empty());
  const std::string big = moeserve::testing::temp_dir("conf") + "/user.conf";
  write_text_file(big, std::string(ConfFile::kMaxBytes + 1, '\n'));
  EXPECT_EQ(error_of([&] { ConfFile::read(big); }), big + ": larger than 1 MiB (1048577 bytes)");
}

TEST(BoundedRead, LinesAndFilesHaveStatedLimits) {
  EXPECT_EQ(byte_size_text(kMiB), "1 MiB");
  EXPECT_EQ(byte_size_text(64 * kKiB), "64 KiB");
  EXPECT_EQ(byte_size_text(4 * kGiB), "4 GiB");
  EXPECT_EQ(byte_size_text(1000), "1000 bytes");
  const std::string path = moeserve::testing::temp_dir("lines") + "/lines.txt";
  write_text_file(path, "one\n\n" + std::string(100, 'x') + "\nlast");
  LineReader reader(path, 64, 1000);
  std::string line;
  ASSERT_TRUE(reader.next(line));
  EXPECT_EQ(line, "one");
  ASSERT_TRUE(reader.next(line));
  EXPECT_EQ(line, "");
  EXPECT_EQ(error_of([&] { reader.next(line); }), path + ":3: line longer than 64 bytes");
  LineReader wide(path, 1000, 1000);
  std::vector<std::string> lines;
  while (wide.next(line)) lines.push_back(line);
  EXPECT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines.back(), "last");  // the last line needs no newline
  EXPECT_EQ(wide.line_number(), 4u);
  EXPECT_EQ(error_of([&] { LineReader(path, 1000, 50); }), path + ": larger than 50 bytes (110 bytes)");
  EXPECT_EQ(error_of([] {
              LineReader zeros("/dev/zero", 1 << 20, 1 << 30);
              std::string l;
              zeros.next(l);
            }),
            "/dev/zero:1: line longer than 1 MiB");
  EXPECT_EQ(error_of([] { read_text_file("/tmp"); }), "cannot read /tmp: it is a directory");
}

TEST(JsonlDatasetLimits, FieldsAreCheckedAndNamed) {
  const std::string dir = moeserve::testing::temp_dir("jsonl");
  const auto load = [&](const std::string& text) {
    write_text_file(dir + "/d.jsonl", text);
    return error_of([&] { load_jsonl_dataset(dir + "/d.jsonl"); });
  };
  EXPECT_EQ(load("{\"input_tokens\": [1]}\n{\"input_tokens\": [1], \"output_tokens\": \"x\"}\n"),
            dir + "/d.jsonl:2: \"output_tokens\" has the wrong type (\"x\"); expected an integer");
  EXPECT_EQ(load("{\"input_tokens\": [1], \"output_tokens\": 0}\n"),
            dir + "/d.jsonl:1: output_tokens = 0 is out of range (1..1048576)");
  EXPECT_EQ(load("{\"input_tokens\": [1], \"output_tokens\": 1e12}\n"),
            dir + "/d.jsonl:1: output_tokens = 1000000000000.0 is out of range (-2147483648..2147483647)");
  EXPECT_TRUE(contains(load("{\"input_tokens\": [1, 2, 1e400]}\n"),
                       "d.jsonl:1 is not valid JSON: input_tokens[2]: number overflow parsing '1e400'"));
  EXPECT_TRUE(contains(load("{\"input_tokens\": [1], \"x\": " + std::string(100000, '[') + "}\n"),
                       "d.jsonl:1: x[0][0]"));
  EXPECT_EQ(load("{\"input_tokens\": [1], \"dataset\": 7}\n"),
            dir + "/d.jsonl:1: \"dataset\" has the wrong type (7); expected a string");
  EXPECT_EQ(error_of([] { load_jsonl_dataset("/dev/zero"); }), "/dev/zero is not a regular file");
}

TEST(SyntheticDatasetLimits, LengthsAreBounded) {
  SyntheticSpec spec;
  spec.samples = 1;
  for (const char* length : {"inf", "1e9", "normal:5000:1e300"}) {
    spec.input_length = length;
    EXPECT_TRUE(contains(error_of([&] { make_synthetic_dataset(spec); }), "is out of range (0..1048576)")) << length;
  }
  spec.input_length = "1e400";  // stod overflows
  EXPECT_TRUE(contains(error_of([&] { make_synthetic_dataset(spec); }), "'1e400' is not a number"));
}

TEST(PubMedLimits, RowErrorsNameFileAndLine) {
  const auto tokenizer = Tokenizer::o200k_harmony();
  const std::string path = moeserve::testing::temp_dir("pubmed") + "/p.jsonl";
  write_text_file(path, "{\"article_text\": [\"ok\"]}\n{\"article_text\": [\"bad \xff byte\"]}\n");
  EXPECT_TRUE(contains(error_of([&] { load_pubmed_dataset(path, *tokenizer); }),
                       path + ":2 is not valid JSON: article_text[0]: "));
  write_text_file(path, "{\"article_text\": [\"ok\"], \"abstract_text\": [1]}\n");
  EXPECT_EQ(error_of([&] { load_pubmed_dataset(path, *tokenizer); }),
            path + ":1: \"abstract_text\" holds a non-string");
  write_text_file(path, "{\"article_text\": " + std::string(1000, '[') + "}\n");
  EXPECT_TRUE(contains(error_of([&] { load_pubmed_dataset(path, *tokenizer); }), "nested deeper than 64 levels"));
}

// The fixture with bytes [at, at + patch.size()) replaced, as a new file.
std::string patched_fixture(const std::string& name, size_t at, const std::string& patch) {
  std::string bytes = read_text_file(kFixtures + name);
  bytes.replace(at, patch.size(), patch);
  const std::string path = moeserve::testing::temp_dir("parquet") + "/" + name;
  write_text_file(path, bytes);
  return path;
}

TEST(ParquetLimits, FooterLengthPastTheFileIsAnErrorNotAWrap) {
  const size_t size = std::filesystem::file_size(kFixtures + "arrow_v1_gzip.parquet");
  const std::string path = patched_fixture("arrow_v1_gzip.parquet", size - 8, "\xff\xff\xff\xff");
  EXPECT_EQ(moeserve::testing::error_under_memory_limit([&] { parquet::File file(path); }),
            path + ": footer length 4294967295 exceeds the file");
}

// Reads every column of the file as its type allows; returns how many reads failed with an Error. A crash or
// any other exception fails the test.
int read_everything(const std::string& bytes) {
  int errors = 0;
  const auto attempt = [&](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error&) {
      ++errors;
    }
  };
  attempt([&] {
    const parquet::File file("mutated.parquet", std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    for (const parquet::LeafColumn& c : file.leaves()) {
      attempt([&] { file.read_int_lists(c.top_level_name); });
      attempt([&] { file.read_string_lists(c.top_level_name); });
      attempt([&] { file.read_strings(c.top_level_name); });
    }
  });
  return errors;
}

TEST(ParquetLimits, EveryByteOfEveryFixtureMutatedReadsOrFailsCleanly) {
  // The measurement: 12 of 700 mutated files crashed. Here every byte of each fixture is flipped and set
  // to 0xff in turn (footers, page headers, levels, values, compressed data).
  size_t files = 0;
  int errors = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kFixtures)) {
    const std::string bytes = read_text_file(entry.path().string());
    EXPECT_EQ(read_everything(bytes), read_everything(read_text_file(entry.path().string())));  // deterministic
    for (size_t at = 0; at < bytes.size(); ++at) {
      for (const char value : {static_cast<char>(~bytes[at]), '\xff'}) {
        std::string mutated = bytes;
        mutated[at] = value;
        errors += read_everything(mutated);
        ++files;
      }
    }
  }
  EXPECT_GT(files, 30000u);
  EXPECT_GT(errors, 0);  // the mutations do reach the reader's checks
}

TEST(ParquetLimits, EncodingsRefuseCountsTheirDataCannotHold) {
  // A bit-packed run of 2^62 groups at width 32: the byte count would overflow 64 bits.
  const std::vector<uint8_t> bitpacked = {0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0, 0, 0, 0};
  EXPECT_TRUE(contains(error_of([&] { parquet::decode_rle_hybrid(bitpacked, 32, 8, "t"); }),
                       "bit-packed run past the end of its data"));
  // A count of 2^62 INT64 values: count * 8 would wrap to 0.
  const std::vector<uint8_t> eight(8, 0);
  EXPECT_TRUE(contains(error_of([&] { parquet::decode_plain_ints(parquet::Type::int64, eight, size_t{1} << 61, "t"); }),
                       "PLAIN values need more than the page's 8 bytes"));
  EXPECT_TRUE(contains(error_of([&] { parquet::decode_plain_byte_arrays(eight, size_t{1} << 40, "t"); }),
                       "BYTE_ARRAY values need more than the page's 8 bytes"));
  EXPECT_EQ(parquet::Limits::for_file(parquet::Limits::kColumnValues, parquet::Limits::kSmallFileValues, 100),
            parquet::Limits::kSmallFileValues);
  EXPECT_EQ(parquet::Limits::for_file(parquet::Limits::kColumnValues, parquet::Limits::kSmallFileValues, 10000),
            10000 * parquet::Limits::kExpansion);
  EXPECT_EQ(parquet::Limits::for_file(parquet::Limits::kColumnValues, parquet::Limits::kSmallFileValues, ~0ull),
            parquet::Limits::kColumnValues);
}

TEST(ParquetLimits, DecompressionIsCappedAtTheDeclaredSizeWithoutAllocatingIt) {
  // "a" compressed (python3 zlib.compress(b"a"); printf a | zstd -c), in pages that declare 200 MiB: each codec
  // fails before allocating what the page claims.
  const size_t declared = 200u << 20;
  const std::vector<uint8_t> gzip = {120, 156, 75, 4, 0, 0, 98, 0, 98};
  const std::vector<uint8_t> zstd = {0x28, 0xb5, 0x2f, 0xfd, 0x04, 0x58, 0x09, 0x00, 0x00, 0x61, 0x5b, 0x6e, 0x8c, 0xa9};
  for (const auto& [codec, data] : {std::pair{parquet::Codec::gzip, gzip}, std::pair{parquet::Codec::zstd, zstd}}) {
    const std::string error = moeserve::testing::error_under_memory_limit(
        [&] { parquet::decompress(codec, data, declared, "page"); }, 64 << 20);
    EXPECT_TRUE(contains(error, "page: ") && contains(error, "209715200 bytes")) << error;
  }
  EXPECT_EQ(parquet::decompress(parquet::Codec::zstd, zstd, 1, "page"), std::vector<uint8_t>{'a'});
  EXPECT_EQ(parquet::decompress(parquet::Codec::gzip, gzip, 1, "page"), std::vector<uint8_t>{'a'});
  // More output than declared is an error too.
  EXPECT_TRUE(contains(error_of([&] { parquet::decompress(parquet::Codec::zstd, zstd, 0, "page"); }),
                       "did not decompress to 0 bytes"));
  EXPECT_TRUE(contains(error_of([&] { parquet::decompress(parquet::Codec::gzip, gzip, 0, "page"); }),
                       "did not inflate to 0 bytes"));
}

}  // namespace
}  // namespace moeserve::bench

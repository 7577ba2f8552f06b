// Reading input files with a stated cap on what is read, so that a stream without end (/dev/zero, a FIFO, a
// pipe) or without newlines is refused with its limit named ("user.conf: larger than 1 MiB") instead of
// filling memory or reading forever. A FIFO is opened without waiting for a writer: with none, it reads as empty
// instead of hanging.
#pragma once

#include <cstdint>
#include <string>

namespace moeserve {

inline constexpr uint64_t kKiB = uint64_t{1} << 10;
inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kGiB = uint64_t{1} << 30;

// "1 MiB", "64 KiB", "3 GiB" for exact multiples, else "N bytes".
std::string byte_size_text(uint64_t bytes);

// An open file descriptor for reading; errors name the path.
class InputFile {
 public:
  explicit InputFile(const std::string& path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Up to `size` bytes into `buffer`; 0 at the end of the file.
  size_t read(char* buffer, size_t size);
  // The size of a regular file; -1 for a stream (FIFO, character device).
  int64_t regular_size() const { return regular_size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  int64_t regular_size_ = -1;
};

// The whole file, failing with "{path}: larger than {max_bytes}" before reading more than max_bytes + 1 bytes
// (a regular file's size is checked before anything is read).
std::string read_bounded_file(const std::string& path, uint64_t max_bytes);

// Lines of a text file, each at most max_line_bytes (without its '\n'), max_total_bytes in all.
class LineReader {
 public:
  LineReader(const std::string& path, uint64_t max_line_bytes, uint64_t max_total_bytes);

  // The next line without its '\n' (a final line without one included); false at the end of the file.
  bool next(std::string& line);
  // The 1-based number of the line `next` returned last.
  size_t line_number() const { return line_number_; }

 private:
  bool fill();

  InputFile file_;
  uint64_t max_line_bytes_;
  uint64_t max_total_bytes_;
  uint64_t total_ = 0;
  size_t line_number_ = 0;
  std::string buffer_;
  size_t start_ = 0;  // the unread part of buffer_ begins here
  bool eof_ = false;
};

}  // namespace moeserve

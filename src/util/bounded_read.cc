#include "util/bounded_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace moeserve {
namespace {

constexpr size_t kChunk = 64 * 1024;

// A regular file's size checked before anything is read from it.
void check_size(const InputFile& file, uint64_t max_bytes) {
  MOESERVE_CHECK(file.regular_size() < 0 || static_cast<uint64_t>(file.regular_size()) <= max_bytes,
                 "{}: larger than {} ({} bytes)", file.path(), byte_size_text(max_bytes), file.regular_size());
}

}  // namespace

std::string byte_size_text(uint64_t bytes) {
  if (bytes != 0 && bytes % kGiB == 0) return fmt::format("{} GiB", bytes / kGiB);
  if (bytes != 0 && bytes % kMiB == 0) return fmt::format("{} MiB", bytes / kMiB);
  if (bytes != 0 && bytes % kKiB == 0) return fmt::format("{} KiB", bytes / kKiB);
  return fmt::format("{} bytes", bytes);
}

InputFile::InputFile(const std::string& path) : path_(path) {
  // O_NONBLOCK only for the open: a FIFO without a writer opens at once (and reads as empty); reads block.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  MOESERVE_CHECK(fd_ >= 0, "cannot open {}: {}", path, std::strerror(errno));
  struct stat st{};
  const bool stat_ok = ::fstat(fd_, &st) == 0;
  const int err = errno;
  const int flags = ::fcntl(fd_, F_GETFL);
  if (!stat_ok || S_ISDIR(st.st_mode) || flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const std::string why = !stat_ok ? std::strerror(err) : S_ISDIR(st.st_mode) ? "it is a directory"
                                                                                 : std::strerror(errno);
    ::close(fd_);
    fail("cannot read {}: {}", path, why);
  }
  if (S_ISREG(st.st_mode)) regular_size_ = static_cast<int64_t>(st.st_size);
}

InputFile::~InputFile() { ::close(fd_); }

size_t InputFile::read(char* buffer, size_t size) {
  while (true) {
    const ssize_t n = ::read(fd_, buffer, size);
    if (n >= 0) return static_cast<size_t>(n);
    MOESERVE_CHECK(errno == EINTR, "cannot read {}: {}", path_, std::strerror(errno));
  }
}

std::string read_bounded_file(const std::string& path, uint64_t max_bytes) {
  InputFile file(path);
  check_size(file, max_bytes);
  std::string text;
  if (file.regular_size() > 0) text.reserve(static_cast<size_t>(file.regular_size()));
  while (true) {
    const size_t used = text.size();
    text.resize(used + kChunk);
    const size_t n = file.read(text.data() + used, kChunk);
    text.resize(used + n);
    if (n == 0) return text;
    MOESERVE_CHECK(text.size() <= max_bytes, "{}: larger than {}", path, byte_size_text(max_bytes));
  }
}

LineReader::LineReader(const std::string& path, uint64_t max_line_bytes, uint64_t max_total_bytes)
    : file_(path), max_line_bytes_(max_line_bytes), max_total_bytes_(max_total_bytes) {
  check_size(file_, max_total_bytes);
}

bool LineReader::fill() {
  if (start_ > 0) {
    buffer_.erase(0, start_);
    start_ = 0;
  }
  const size_t used = buffer_.size();
  buffer_.resize(used + kChunk);
  const size_t n = file_.read(buffer_.data() + used, kChunk);
  buffer_.resize(used + n);
  total_ += n;
  MOESERVE_CHECK(total_ <= max_total_bytes_, "{}: larger than {}", file_.path(), byte_size_text(max_total_bytes_));
  return n > 0;
}

bool LineReader::next(std::string& line) {
  size_t scanned = start_;  // buffer_[start_, scanned) holds no newline
  while (true) {
    const size_t newline = buffer_.find('\n', scanned);
    const size_t end = newline == std::string::npos ? buffer_.size() : newline;
    MOESERVE_CHECK(end - start_ <= max_line_bytes_, "{}:{}: line longer than {}", file_.path(), line_number_ + 1,
                   byte_size_text(max_line_bytes_));
    if (newline != std::string::npos || eof_) {
      if (newline == std::string::npos && start_ == buffer_.size()) return false;
      line.assign(buffer_, start_, end - start_);
      start_ = newline == std::string::npos ? end : end + 1;
      ++line_number_;
      return true;
    }
    scanned = buffer_.size() - start_;  // fill() moves the unread part to the front
    eof_ = !fill();
  }
}

}  // namespace moeserve

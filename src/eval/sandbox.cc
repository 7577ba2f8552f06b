#include "eval/sandbox.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>

#include "eval/sandbox_child.h"
#include "eval/sandbox_root.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve::eval {
namespace {

using sandbox_detail::ChildPlan;
using sandbox_detail::kRunUidCount;
using sandbox_detail::kRunUidFirst;
using sandbox_detail::kSandboxId;
using sandbox_detail::ReportRecord;
using sandbox_detail::SandboxRoot;
using Clock = std::chrono::steady_clock;

const char* stage_name(char stage) {
  switch (stage) {
    case 'c': return "creating the namespaces (clone)";
    case 'g': return "creating the id-map pipe";
    case 'u': return "writing the uid/gid maps";
    case 'p': return "making the mounts private";
    case 'v': return "entering the run's root (pivot_root)";
    case 'k': return "forking the program";
    case 'l': return "setting rlimits";
    case 'i': return "dropping to uid/gid 65534";
    case 'n': return "setting no_new_privs";
    case 'd': return "entering the work directory";
    case 'f': return "setting up stdin/stdout/stderr";
    default: return "setup";
  }
}

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    reset();
    fd_ = std::exchange(other.fd_, -1);
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

struct Pipe {
  Fd read;
  Fd write;
};

Pipe make_pipe() {
  int fds[2];
  MOESERVE_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "sandbox: pipe: {}", std::strerror(errno));
  return {Fd(fds[0]), Fd(fds[1])};
}

// The run's directory: removed, with whatever the program left in work/, when the run ends.
class RunDirectory {
 public:
  // owner: the host uid the program runs as, when work/ must be given to it (the evaluator is root).
  RunDirectory(const std::string& root, const std::vector<SandboxFile>& files, std::optional<uint32_t> owner) {
    std::string pattern = (std::filesystem::path(root) / "moeserve-sandbox-XXXXXX").string();
    MOESERVE_CHECK(::mkdtemp(pattern.data()) != nullptr, "sandbox: mkdtemp in {}: {}", root, std::strerror(errno));
    path_ = pattern;
    ::chmod(path_.c_str(), 0755);
    for (const SandboxFile& file : files) {
      MOESERVE_CHECK(!file.name.empty() && file.name.find('/') == std::string::npos && file.name != "." &&
                         file.name != ".." && file.name != "work",
                     "sandbox: bad file name \"{}\"", file.name);
      const std::string file_path = path_ + "/" + file.name;
      write_text_file(file_path, file.content);
      ::chmod(file_path.c_str(), 0644);
    }
    work_ = path_ + "/work";
    MOESERVE_CHECK(::mkdir(work_.c_str(), 0700) == 0, "sandbox: mkdir {}: {}", work_, std::strerror(errno));
    if (owner) {
      MOESERVE_CHECK(::chown(work_.c_str(), *owner, kSandboxId) == 0, "sandbox: chown {}: {}", work_,
                     std::strerror(errno));
    }
  }
  ~RunDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  const std::string& work() const { return work_; }

 private:
  std::string path_;
  std::string work_;
};

// C strings for execve, kept alive for the run.
struct CStrings {
  explicit CStrings(const std::vector<std::string>& strings) : storage(strings) {
    for (std::string& s : storage) pointers.push_back(s.data());
    pointers.push_back(nullptr);
  }
  std::vector<std::string> storage;
  std::vector<char*> pointers;
};

ChildPlan make_plan(Isolation isolation, const SandboxLimits& limits) {
  ChildPlan plan;
  const bool root = ::geteuid() == 0;
  if (isolation != Isolation::processes_only) {
    plan.clone_flags = CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS;
    plan.mount_namespace = true;
  }
  if (isolation == Isolation::namespaces) {
    plan.clone_flags |= CLONE_NEWUSER;
    plan.user_namespace = true;
    plan.deny_setgroups = !root;
  }
  plan.drop_to_sandbox_id = root || plan.user_namespace;
  plan.cpu_seconds = static_cast<rlim_t>(std::max(1.0, std::ceil(limits.cpu_seconds)));
  plan.memory_bytes = limits.memory_bytes;
  plan.file_size_bytes = limits.file_size_bytes;
  plan.max_processes = static_cast<rlim_t>(std::max(1, limits.max_processes));
  return plan;
}

// A uid for one run, from kRunUidFirst..+kRunUidCount. Random rather than counted so that evaluators in
// different processes rarely meet; two runs that did would only share their process count.
uint32_t pick_run_uid() {
  static std::mutex mutex;
  static std::mt19937_64 random{std::random_device{}()};
  const std::lock_guard lock(mutex);
  return kRunUidFirst + static_cast<uint32_t>(random() % kRunUidCount);
}

void append_capped(std::string& out, const char* data, size_t n, size_t cap) {
  if (out.size() < cap) out.append(data, std::min(n, cap - out.size()));
}

}  // namespace

std::string_view isolation_name(Isolation isolation) {
  switch (isolation) {
    case Isolation::namespaces: return "namespaces";
    case Isolation::root_namespaces: return "root-namespaces";
    case Isolation::processes_only: return "processes-only";
  }
  return "?";
}

std::string_view end_name(SandboxResult::End end) {
  switch (end) {
    case SandboxResult::End::exited: return "exited";
    case SandboxResult::End::signaled: return "signaled";
    case SandboxResult::End::timed_out: return "timed out";
    case SandboxResult::End::stopped: return "stopped";
    case SandboxResult::End::output_limit: return "output limit";
    case SandboxResult::End::failed_to_start: return "failed to start";
  }
  return "?";
}

std::string_view exposure_name(Exposure exposure) {
  switch (exposure) {
    case Exposure::host_processes: return "other processes' command lines under /proc";
    case Exposure::host_sockets: return "the host's UNIX sockets (path and abstract)";
    case Exposure::network: return "the network";
    case Exposure::shared_directories: return "writes to world-writable directories such as /tmp";
    case Exposure::evaluator_identity:
      return "the evaluator's own uid (signals and ptrace to its processes, its files)";
  }
  return "?";
}

Sandbox::Sandbox(SandboxOptions options) : options_(std::move(options)), isolation_(Isolation::processes_only) {
  if (options_.temp_root.empty()) options_.temp_root = std::filesystem::temp_directory_path().string();
  options_.read_only_paths = sandbox_detail::checked_read_only_paths(options_.read_only_paths);
  if (options_.strongest != Isolation::processes_only) {
    root_ = std::make_shared<const SandboxRoot>(options_.temp_root, options_.read_only_paths);
  }
  // Probe: the strongest mode in which a trivial program starts.
  static constexpr std::array<Isolation, 3> order = {Isolation::namespaces, Isolation::root_namespaces,
                                                     Isolation::processes_only};
  for (Isolation mode : order) {
    if (mode < options_.strongest) continue;
    if (mode == Isolation::root_namespaces && ::geteuid() != 0) {
      probe_failures_.push_back(fmt::format("{}: needs root", isolation_name(mode)));
      continue;
    }
    isolation_ = mode;
    if (mode == Isolation::processes_only) {
      root_.reset();
      break;
    }
    SandboxRequest probe;
    probe.argv = {"/bin/sh", "-c", "exit 0"};
    probe.limits.wall_seconds = 10;
    const SandboxResult result = run(probe);
    if (result.end == SandboxResult::End::exited && result.exit_code == 0) break;
    probe_failures_.push_back(fmt::format("{}: {}", isolation_name(mode),
                                          result.setup_error.empty() ? end_name(result.end) : result.setup_error));
  }
}

std::vector<Exposure> Sandbox::exposures() const {
  if (isolation_ != Isolation::processes_only) return {};
  std::vector<Exposure> exposures = {Exposure::host_processes, Exposure::host_sockets, Exposure::network,
                                     Exposure::shared_directories};
  if (::geteuid() != 0) exposures.push_back(Exposure::evaluator_identity);
  return exposures;
}

std::string Sandbox::summary() const {
  std::string text(isolation_name(isolation_));
  if (!probe_failures_.empty()) text += fmt::format(" ({})", fmt::join(probe_failures_, "; "));
  const std::vector<Exposure> exposed = exposures();
  for (size_t i = 0; i < exposed.size(); ++i) {
    text += fmt::format("{}{}", i == 0 ? "; NOT isolated from: " : ", ", exposure_name(exposed[i]));
  }
  return text;
}

SandboxResult Sandbox::run(const SandboxRequest& request, const LineHandler& on_line) const {
  MOESERVE_CHECK(!request.argv.empty() && request.argv[0].starts_with("/"),
                 "sandbox: the program must be an absolute path");
  const SandboxLimits& limits = request.limits;
  SandboxResult result;
  result.isolation = isolation_;
  const CStrings argv(request.argv);
  const CStrings envp({"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1"});
  ChildPlan plan = make_plan(isolation_, limits);
  const std::string tmpfs_options = fmt::format("size={},mode=0777", limits.file_size_bytes);
  // Root gives each run a uid of its own (kRunUidFirst...); in a user namespace the program still sees 65534.
  const bool root = ::geteuid() == 0;
  const uint32_t host_uid = root ? pick_run_uid() : ::geteuid();
  if (root && !plan.user_namespace) plan.program_uid = host_uid;
  const std::string uid_map = fmt::format("{} {} 1\n", kSandboxId, host_uid);
  const std::string gid_map = fmt::format("{} {} 1\n", kSandboxId, ::geteuid() == 0 ? kSandboxId : ::getegid());
  const RunDirectory directory(options_.temp_root, request.files,
                              root ? std::optional<uint32_t>(host_uid) : std::nullopt);
  plan.work_dir = directory.work().c_str();
  std::vector<sandbox_detail::MountStep> mounts;
  if (plan.mount_namespace) {
    MOESERVE_CHECK(root_ != nullptr, "sandbox: no root for the {} mode", isolation_name(isolation_));
    mounts = root_->steps(directory.path());
    plan.mounts = mounts.data();
    plan.mount_count = static_cast<uint16_t>(mounts.size());
    plan.work_dir = SandboxRoot::kWorkDirectory;
  }
  plan.tmpfs_options = tmpfs_options.c_str();
  plan.uid_map = uid_map.c_str();
  plan.gid_map = gid_map.c_str();
  plan.argv = argv.pointers.data();
  plan.envp = envp.pointers.data();

  Pipe control = make_pipe();
  Pipe report = make_pipe();
  Pipe out = make_pipe();
  Pipe err = make_pipe();
  plan.control_read = control.read.get();
  plan.report_write = report.write.get();
  plan.stdout_write = out.write.get();
  plan.stderr_write = err.write.get();

  const Clock::time_point start = Clock::now();
  const pid_t keeper = ::fork();
  MOESERVE_CHECK(keeper >= 0, "sandbox: fork: {}", std::strerror(errno));
  if (keeper == 0) sandbox_detail::run_keeper(plan);
  control.read.reset();
  report.write.reset();
  out.write.reset();
  err.write.reset();

  const Clock::time_point deadline = start + std::chrono::duration_cast<Clock::duration>(
                                                 std::chrono::duration<double>(limits.wall_seconds));
  std::optional<SandboxResult::End> ended_by_us;
  const auto stop = [&](SandboxResult::End why) {
    if (!ended_by_us) ended_by_us = why;
    control.write.reset();  // the keeper sees the pipe close and kills the tree
  };
  std::string partial_line;
  std::exception_ptr handler_error;
  const auto take_stdout = [&](const char* data, size_t n) {
    if (ended_by_us) return;
    if (!on_line) {
      append_capped(result.stdout_text, data, n, limits.max_stdout_bytes);
      if (result.stdout_text.size() >= limits.max_stdout_bytes) stop(SandboxResult::End::output_limit);
      return;
    }
    partial_line.append(data, n);
    size_t begin = 0;
    for (size_t newline; (newline = partial_line.find('\n', begin)) != std::string::npos; begin = newline + 1) {
      bool go_on = false;
      try {
        go_on = on_line(std::string_view(partial_line).substr(begin, newline - begin));
      } catch (...) {  // rethrown once the tree is gone
        handler_error = std::current_exception();
      }
      if (!go_on) {
        stop(SandboxResult::End::stopped);
        return;
      }
    }
    partial_line.erase(0, begin);
    if (partial_line.size() >= limits.max_stdout_bytes) stop(SandboxResult::End::output_limit);
  };

  std::array<pollfd, 2> fds = {pollfd{out.read.get(), POLLIN, 0}, pollfd{err.read.get(), POLLIN, 0}};
  std::array<char, 1 << 16> buffer;
  bool keeper_done = false;
  int keeper_status = 0;
  // Reads until the keeper is gone and the pipes are closed. After the keeper exits nothing of the run holds
  // them, but for a moment another thread's freshly forked keeper may: the drain is bounded.
  Clock::time_point drain_deadline = Clock::time_point::max();
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (!keeper_done && now >= deadline) stop(SandboxResult::End::timed_out);
    if (keeper_done && ((fds[0].fd < 0 && fds[1].fd < 0) || now >= drain_deadline)) break;
    if (::poll(fds.data(), fds.size(), 10) < 0 && errno != EINTR) ::usleep(10000);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = ::read(fds[i].fd, buffer.data(), buffer.size());
      if (n <= 0) {
        fds[i].fd = -1;
      } else if (i == 0) {
        take_stdout(buffer.data(), static_cast<size_t>(n));
      } else {
        append_capped(result.stderr_text, buffer.data(), static_cast<size_t>(n), limits.max_stderr_bytes);
      }
    }
    if (!keeper_done && ::waitpid(keeper, &keeper_status, WNOHANG) == keeper) {
      keeper_done = true;
      drain_deadline = Clock::now() + std::chrono::milliseconds(200);
    }
  }
  result.wall_seconds = std::chrono::duration<double>(Clock::now() - start).count();

  std::optional<int> program_status;
  ReportRecord record{};
  ::fcntl(report.read.get(), F_SETFL, O_NONBLOCK);
  while (::read(report.read.get(), &record, sizeof(record)) == static_cast<ssize_t>(sizeof(record))) {
    if (record.kind == 'S') {
      program_status = record.value;
    } else if (record.kind == 'E' && result.setup_error.empty()) {
      const std::string step = record.stage == 'm' && root_ != nullptr ? root_->describe(record.mount)
                                                                         : std::string(stage_name(record.stage));
      result.setup_error = fmt::format("{}: {}", step, std::strerror(record.value));
    } else if (record.kind == 'X' && result.setup_error.empty()) {
      result.setup_error = fmt::format("execve {}: {}", request.argv[0], std::strerror(record.value));
      if (record.value == ENOENT && plan.mount_namespace) {
        result.setup_error += fmt::format(" (the sandbox shows only {}; SandboxOptions::read_only_paths adds more)",
                                          root_->shown_paths());
      }
    }
  }
  if (ended_by_us) {
    result.end = *ended_by_us;
  } else if (!result.setup_error.empty()) {
    result.end = SandboxResult::End::failed_to_start;
  } else if (program_status && WIFEXITED(*program_status)) {
    result.end = SandboxResult::End::exited;
    result.exit_code = WEXITSTATUS(*program_status);
  } else if (program_status && WIFSIGNALED(*program_status)) {
    result.end = SandboxResult::End::signaled;
    result.signal = WTERMSIG(*program_status);
  } else {
    result.end = SandboxResult::End::failed_to_start;
    result.setup_error = fmt::format("the sandbox keeper ended without a report (status {})", keeper_status);
  }
  result.stdout_text += partial_line;
  if (handler_error) std::rethrow_exception(handler_error);
  return result;
}

}  // namespace moeserve::eval

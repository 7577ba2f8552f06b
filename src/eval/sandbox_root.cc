#include "eval/sandbox_root.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "eval/sandbox.h"
#include "util/error.h"

namespace moeserve::eval {
namespace sandbox_detail {
namespace {

constexpr std::array<const char*, 7> kSystemPaths = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"};
constexpr const char* kLoaderCache = "/etc/ld.so.cache";
constexpr std::array<const char*, 4> kDevices = {"/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"};
constexpr std::array<std::array<const char*, 2>, 4> kDeviceLinks = {{{"/dev/fd", "/proc/self/fd"},
                                                                     {"/dev/stdin", "/proc/self/fd/0"},
                                                                     {"/dev/stdout", "/proc/self/fd/1"},
                                                                     {"/dev/stderr", "/proc/self/fd/2"}}};

bool is_under(const std::string& path, const std::string& directory) {
  return path == directory || (path.starts_with(directory) && path[directory.size()] == '/');
}

// Mode 0755 whatever the umask: the program (another uid) must be able to walk the skeleton.
void make_directory(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) fail("sandbox: mkdir {}: {}", path, std::strerror(errno));
  MOESERVE_CHECK(::chmod(path.c_str(), 0755) == 0, "sandbox: chmod {}: {}", path, std::strerror(errno));
}

// skeleton + path, making every directory on the way. path is absolute.
std::string make_directories(const std::string& skeleton, const std::string& path) {
  std::string made = skeleton;
  for (size_t begin = 1; begin < path.size();) {
    size_t end = path.find('/', begin);
    if (end == std::string::npos) end = path.size();
    if (end > begin) {
      made.push_back('/');
      made.append(path, begin, end - begin);
      make_directory(made);
    }
    begin = end + 1;
  }
  return made;
}

std::string make_file(const std::string& skeleton, const std::string& path) {
  const std::filesystem::path host(path);
  const std::string made = make_directories(skeleton, host.parent_path().string()) + "/" + host.filename().string();
  const int fd = ::open(made.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  MOESERVE_CHECK(fd >= 0, "sandbox: creating {}: {}", made, std::strerror(errno));
  ::close(fd);
  return made;
}

void make_link(const std::string& skeleton, const std::string& path, const std::string& link_target) {
  const std::string made = skeleton + path;
  MOESERVE_CHECK(::symlink(link_target.c_str(), made.c_str()) == 0, "sandbox: symlink {}: {}", made,
                 std::strerror(errno));
}

}  // namespace

std::vector<std::string> checked_read_only_paths(const std::vector<std::string>& paths) {
  std::vector<std::string> canonical;
  for (const std::string& path : paths) {
    std::error_code error;
    const std::string resolved = std::filesystem::canonical(path, error).string();
    MOESERVE_CHECK(!error, "sandbox: read-only path {}: {}", path, error.message());
    MOESERVE_CHECK(resolved != "/" && !is_under(resolved, "/proc") && !is_under(resolved, "/dev"),
                   "sandbox: read-only path {} would show the host's {} to the program", path, resolved);
    canonical.push_back(resolved);
  }
  std::vector<std::string> kept;
  for (const std::string& path : canonical) {
    bool covered = is_sandbox_system_path(path);
    for (const std::string& other : canonical) covered = covered || (other != path && is_under(path, other));
    for (const std::string& other : kept) covered = covered || other == path;
    if (!covered) kept.push_back(path);
  }
  return kept;
}

SandboxRoot::SandboxRoot(const std::string& temp_root, const std::vector<std::string>& read_only_paths) {
  std::string pattern = (std::filesystem::path(temp_root) / "moeserve-sandbox-root-XXXXXX").string();
  MOESERVE_CHECK(::mkdtemp(pattern.data()) != nullptr, "sandbox: mkdtemp in {}: {}", temp_root, std::strerror(errno));
  skeleton_ = pattern;
  try {
    make_directory(skeleton_);
    add(MountStep::Kind::root, "", skeleton_);
    for (const char* system : kSystemPaths) {
      struct stat info {};
      if (::lstat(system, &info) != 0) continue;
      if (S_ISLNK(info.st_mode)) {
        std::error_code error;
        const std::filesystem::path link_target = std::filesystem::read_symlink(system, error);
        MOESERVE_CHECK(!error, "sandbox: readlink {}: {}", system, error.message());
        make_link(skeleton_, system, link_target.string());
      } else if (S_ISDIR(info.st_mode)) {
        add(MountStep::Kind::read_only, system, make_directories(skeleton_, system));
      }
    }
    struct stat info {};
    if (::stat(kLoaderCache, &info) == 0 && S_ISREG(info.st_mode)) {
      add(MountStep::Kind::read_only, kLoaderCache, make_file(skeleton_, kLoaderCache));
    }
    for (const std::string& path : read_only_paths) {
      const std::string target =
          std::filesystem::is_directory(path) ? make_directories(skeleton_, path) : make_file(skeleton_, path);
      add(MountStep::Kind::read_only, path, target);
    }
    for (const char* device : kDevices) {
      if (::stat(device, &info) == 0 && S_ISCHR(info.st_mode)) {
        add(MountStep::Kind::device, device, make_file(skeleton_, device));
      }
    }
    for (const auto& [path, link_target] : kDeviceLinks) make_link(skeleton_, path, link_target);
    add(MountStep::Kind::proc, "", make_directories(skeleton_, "/proc"));
    add(MountStep::Kind::read_only, "", make_directories(skeleton_, kRunDirectory));
    add(MountStep::Kind::work, "", skeleton_ + kWorkDirectory);  // inside the run's directory, once bound
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove_all(skeleton_, ignored);
    throw;
  }
}

SandboxRoot::~SandboxRoot() {
  std::error_code ignored;
  std::filesystem::remove_all(skeleton_, ignored);
}

std::vector<MountStep> SandboxRoot::steps(const std::string& run_dir) const {
  std::vector<MountStep> steps;
  for (const Mount& mount : mounts_) {
    const bool run_directory = mount.kind == MountStep::Kind::read_only && mount.source.empty();
    steps.push_back({mount.kind, run_directory ? run_dir.c_str() : mount.source.c_str(), mount.target.c_str()});
  }
  return steps;
}

void SandboxRoot::add(MountStep::Kind kind, std::string source, std::string target) {
  mounts_.push_back({kind, std::move(source), std::move(target)});
}

std::string SandboxRoot::describe(size_t i) const {
  if (i >= mounts_.size()) return "mounting";
  const Mount& mount = mounts_[i];
  switch (mount.kind) {
    case MountStep::Kind::root: return fmt::format("binding the run's root {}", mount.target);
    case MountStep::Kind::read_only:
      return mount.source.empty() ? "binding the run's directory read-only"
                                  : fmt::format("binding {} read-only", mount.source);
    case MountStep::Kind::device: return fmt::format("binding the device {}", mount.source);
    case MountStep::Kind::proc: return "mounting /proc";
    case MountStep::Kind::work: return "mounting the work tmpfs";
  }
  return "mounting";
}

std::string SandboxRoot::shown_paths() const {
  std::string shown;
  for (const Mount& mount : mounts_) {
    if (mount.kind != MountStep::Kind::read_only || mount.source.empty()) continue;
    shown += (shown.empty() ? "" : ", ") + mount.source;
  }
  return shown;
}

}  // namespace sandbox_detail

bool is_sandbox_system_path(const std::string& path) {
  for (const char* system : sandbox_detail::kSystemPaths) {
    if (sandbox_detail::is_under(path, system)) return true;
  }
  return false;
}

}  // namespace moeserve::eval

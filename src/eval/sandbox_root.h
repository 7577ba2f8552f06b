// The file system a run sees in the namespace modes (sandbox.h): a root of its own that shows, read-only, only
// what a program such as Python needs, and the run's directory, whose work/ is the one writable place. Nothing
// else of the host's tree is mounted, so no host file, UNIX socket, device or process directory is reachable:
//
//   /usr, /bin, /sbin, /lib, /lib32, /lib64, /libx32   the host's, read-only; one that is a symlink on the host
//                                                      (a merged /usr) is the same symlink
//   /etc/ld.so.cache                                   the dynamic loader's cache, read-only
//   each of SandboxOptions::read_only_paths            read-only, at its own path
//   /dev/null, /dev/zero, /dev/random, /dev/urandom    the host's devices; /dev/fd, stdin, stdout, stderr as links
//                                                      into /proc/self/fd
//   /proc                                              a procfs of the run's own PID namespace (sandbox_child.cc)
//   /sandbox                                           the run's directory, read-only, holding the request's
//                                                      files; /sandbox/work, the program's directory, a tmpfs
//
// Why /usr whole: by the Filesystem Hierarchy Standard (3.0, chapter 4) /usr is shareable, read-only data; the
// interpreter, the Python standard library and the shared libraries live there, and sockets and per-host state
// do not (they belong in /run, /tmp and /var). Nothing of /etc but the loader's cache: Python starts without it.
//
// The root is a skeleton of empty directories and files (the mount points) that a Sandbox makes once under its
// temp root and every run shares (removing a few dozen entries per run would cost ~30 ms on an ext4 /tmp); init
// performs the mounts in the run's private mount namespace and pivots into the root, so the host never sees
// them and the skeleton stays empty.
#pragma once

#include <string>
#include <vector>

#include "eval/sandbox_child.h"

namespace moeserve::eval::sandbox_detail {

// SandboxOptions::read_only_paths made canonical and checked: each must exist, and must be neither / nor in
// /proc or /dev (showing those would undo the isolation); ones under a system path or under another are dropped.
std::vector<std::string> checked_read_only_paths(const std::vector<std::string>& paths);

class SandboxRoot {
 public:
  // Where the run's directory appears inside.
  static constexpr const char* kRunDirectory = "/sandbox";
  static constexpr const char* kWorkDirectory = "/sandbox/work";

  // Makes the skeleton in a fresh directory under temp_root. read_only_paths: from checked_read_only_paths.
  SandboxRoot(const std::string& temp_root, const std::vector<std::string>& read_only_paths);
  ~SandboxRoot();  // removes the skeleton
  SandboxRoot(const SandboxRoot&) = delete;
  SandboxRoot& operator=(const SandboxRoot&) = delete;

  // The mounts for ChildPlan of a run whose directory (with a work/ inside) is run_dir, root first; they point
  // into this object and into run_dir, and are valid while both live.
  std::vector<MountStep> steps(const std::string& run_dir) const;
  // What step i does, for an error message ("binding /usr read-only").
  std::string describe(size_t i) const;
  // The host paths shown, for an error that a program is not among them.
  std::string shown_paths() const;

 private:
  struct Mount {
    MountStep::Kind kind;
    std::string source;  // empty for the run's directory, which differs per run
    std::string target;
  };
  void add(MountStep::Kind kind, std::string source, std::string target);

  std::string skeleton_;
  std::vector<Mount> mounts_;
};

}  // namespace moeserve::eval::sandbox_detail

// The processes a sandbox run forks (sandbox.h): the keeper, the namespace init and the program. They run between
// fork and exec in a copy of a multi-threaded evaluator, so they use only system calls: no allocation, no locks,
// no C++ library. Everything they need is prepared in a ChildPlan before the fork.
//
//   evaluator --fork--> keeper: new session, child subreaper; clones init with the namespaces of the isolation
//                       mode, writes its uid/gid maps, then waits for init to end or for the control pipe to
//                       close, and kills every descendant before it exits.
//   init:               in a mount namespace: makes every mount private, performs the mounts of the run's root
//                       (sandbox_root.h) and pivots into it, detaching the host's tree; forks the program, reaps
//                       until the program ends, reports its wait status and exits (which, as PID 1 of a PID
//                       namespace, kills what is left in it).
//   program:            rlimits, its uid and gid 65534, no_new_privs, work/ as cwd, fds 0-2 only, execve.
//
// Records the three write on the report pipe: 'E' a setup step failed (stage, mount step, errno), 'X' execve
// failed (errno), 'S' the program's wait status.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>

namespace moeserve::eval::sandbox_detail {

inline constexpr uint32_t kSandboxId = 65534;
// When the evaluator is root each run's program gets a uid of its own from this range (never a real account's),
// so that RLIMIT_NPROC, which the kernel counts per real uid, counts only that run's processes: concurrent runs
// (the LiveCodeBench runner's workers, or other evaluators) cannot starve one another of processes.
inline constexpr uint32_t kRunUidFirst = 2'000'000'000;
inline constexpr uint32_t kRunUidCount = 1u << 24;

struct ReportRecord {
  char kind;      // 'E', 'X' or 'S'
  char stage;     // for 'E': the step (see stage_name in sandbox.cc)
  uint16_t mount;  // for 'E' in stage 'm': the index of the mount step that failed
  int32_t value;  // errno, or the wait status
};

// One mount of the run's root, performed by init in its mount namespace (sandbox_root.h says what each shows).
struct MountStep {
  enum class Kind : char {
    root,       // target bound onto itself, read-only: the new root; first
    read_only,  // source (a directory tree or a file) bound at target, read-only, nosuid, nodev
    device,     // source (a device node) bound at target, read-only, nosuid, noexec
    proc,       // a procfs of the run's PID namespace at target; where the kernel refuses one, /proc stays empty
    work,       // a tmpfs at target (tmpfs_options): the one writable place
  };
  Kind kind;
  const char* source;  // read_only, device: the host path
  const char* target;  // the host path of the mount point, inside the root's skeleton
};

struct ChildPlan {
  unsigned long clone_flags = 0;  // namespaces to create (0: none)
  bool user_namespace = false;
  bool mount_namespace = false;
  bool drop_to_sandbox_id = false;  // setresuid(program_uid)/setresgid(65534) in the program
  uint32_t program_uid = kSandboxId; // as seen in the program's user namespace (the host's when there is none)
  bool deny_setgroups = false;      // an unprivileged writer of gid_map must deny setgroups first
  const char* work_dir = nullptr;   // the program's working directory (the same path inside the new root)
  const MountStep* mounts = nullptr;  // with mount_namespace: mounts[0] is the root, then what it shows
  uint16_t mount_count = 0;
  const char* tmpfs_options = nullptr;
  const char* uid_map = nullptr;
  const char* gid_map = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  rlim_t cpu_seconds = 1;
  rlim_t memory_bytes = 0;
  rlim_t file_size_bytes = 0;
  rlim_t max_processes = 1;
  // The evaluator's descriptors, moved to fixed numbers in the keeper.
  int control_read = -1;  // closes when the evaluator wants the run ended (or dies)
  int report_write = -1;
  int stdout_write = -1;
  int stderr_write = -1;
};

// Runs the keeper in a freshly forked child; never returns.
[[noreturn]] void run_keeper(const ChildPlan& plan);

}  // namespace moeserve::eval::sandbox_detail

// A sandbox for running untrusted programs (model-written code): one process tree per run, limited, isolated
// where the OS allows, and entirely gone when run() returns.
//
// Every run gets:
//   - a fresh directory (mkdtemp under the temp root; /sandbox as the program sees it in the namespace modes)
//     holding the request's files, readable only, and a work/ subdirectory that is the program's working
//     directory and the one place it may write;
//   - a cleared environment (PATH=/usr/bin:/bin, LANG=C.UTF-8, PYTHONDONTWRITEBYTECODE=1), stdin /dev/null,
//     no file descriptors but stdout and stderr (pipes the caller reads);
//   - rlimits on the program: RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NPROC, RLIMIT_NOFILE, RLIMIT_CORE = 0,
//     and no_new_privs;
//   - a wall-clock deadline, after which the whole tree is killed.
// Isolation, strongest first (isolation() says which this machine allows; each run uses the strongest):
//   namespaces:      new user, PID, network, mount, IPC and UTS namespaces. The program runs as uid/gid 65534
//                    (when the evaluator is root, a uid of the run's own on the host, see below; else the
//                    evaluator's own uid seen as 65534), so RLIMIT_NPROC holds even for root and its
//                    capabilities are gone after exec. Its root is a file system of its own (sandbox_root.h):
//                    only /usr and the other system directories read-only, four devices, the run's directory
//                    read-only with work/ a fresh tmpfs of file_size_bytes, and a /proc of its own PID namespace
//                    that shows only the program's processes (or, where the kernel refuses that mount, none), so
//                    no path leads to a host file, UNIX socket or process. The network namespace has no
//                    interface up (connect fails) and its own abstract socket names. The PID namespace dies
//                    with its init, taking every process in it along; signals and ptrace reach no host process.
//   root_namespaces: the same without a user namespace (the kernel refuses one but we are root): the program
//                    drops to the run's uid and gid 65534 itself.
//   processes_only:  rlimits, a new session, and the run's uid and gid 65534 when root; no network or filesystem
//                    isolation beyond file permissions. exposures() lists what the program can then reach.
// Run uids: when the evaluator is root, every run's program gets a host uid of its own, drawn at random from
// 2,000,000,000 + [0, 2^24) (no real account), because the kernel counts RLIMIT_NPROC per real uid: with one
// shared uid, concurrent runs (the LiveCodeBench runner's workers) would share one process budget and a fork
// bomb in one sample would fail another.
// In every mode a keeper process that is a child subreaper owns the tree: when the program ends, the caller
// stops it, or the deadline passes, it kills every descendant, including ones that left the process group or
// daemonised, and exits only when none is left. run() returns after the keeper is reaped, so nothing the
// program started outlives the verdict. If the evaluator dies, the keeper sees its control pipe close and
// does the same.
//
// Limits: memory is bounded per process (RLIMIT_AS), so a tree may use up to max_processes times that; no
// cgroup limits are set. A non-root evaluator's runs share its uid, so RLIMIT_NPROC counts all of them and its
// other processes too.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace moeserve::eval {
namespace sandbox_detail {
class SandboxRoot;
}

enum class Isolation { namespaces, root_namespaces, processes_only };
std::string_view isolation_name(Isolation isolation);

// What a program can reach when the isolation mode cannot keep it out (only processes_only has any).
enum class Exposure {
  host_processes,       // other processes' command lines and more under /proc (e.g. a server's --api-key)
  host_sockets,         // UNIX sockets on the host's file system and abstract ones
  network,              // TCP/UDP to the host's loopback and beyond
  shared_directories,   // writes wherever any user may write, e.g. /tmp
  evaluator_identity,   // the evaluator's uid: signals and ptrace to its processes, writes to its files
};
std::string_view exposure_name(Exposure exposure);

struct SandboxLimits {
  double wall_seconds = 10;                       // deadline for the whole run
  double cpu_seconds = 10;                        // RLIMIT_CPU of the program (rounded up to whole seconds)
  uint64_t memory_bytes = 4ull << 30;             // RLIMIT_AS, per process
  uint64_t file_size_bytes = 64ull << 20;         // RLIMIT_FSIZE; also the size of the work/ tmpfs
  int max_processes = 16;                         // RLIMIT_NPROC (threads count)
  size_t max_stdout_bytes = 256ull << 20;         // stdout beyond this stops the run (output_limit)
  size_t max_stderr_bytes = 64 << 10;             // stderr beyond this is read and dropped
};

struct SandboxFile {
  std::string name;  // a plain file name, no directories
  std::string content;
};

struct SandboxRequest {
  std::vector<std::string> argv;  // argv[0] is an absolute path; relative arguments resolve in work/
  std::vector<SandboxFile> files;  // written beside work/, readable by the program as ../name
  SandboxLimits limits;
};

struct SandboxResult {
  enum class End { exited, signaled, timed_out, stopped, output_limit, failed_to_start };
  End end = End::failed_to_start;
  int exit_code = -1;  // when exited
  int signal = 0;      // when signaled
  std::string stdout_text;  // what on_line did not take (all of it when no on_line is given)
  std::string stderr_text;  // the first max_stderr_bytes
  std::string setup_error;  // when failed_to_start: the step and errno
  double wall_seconds = 0;
  Isolation isolation = Isolation::processes_only;
};
std::string_view end_name(SandboxResult::End end);

// True when the absolute path lies under the system directories (/usr, /bin, /sbin, /lib, /lib32, /lib64,
// /libx32) that every namespace-mode run shows read-only (sandbox_root.h).
bool is_sandbox_system_path(const std::string& path);

// Called with each complete stdout line (without "\n") as it arrives; returning false stops the run at once.
using LineHandler = std::function<bool(std::string_view line)>;

struct SandboxOptions {
  std::string temp_root;  // default: the system temp directory
  // The strongest isolation to try; tests force weaker modes to check that they too hold.
  Isolation strongest = Isolation::namespaces;
  // More host paths (directories or files) the namespace modes show read-only at their own path, e.g. a Python
  // installed outside /usr; each must exist, and must be neither / nor in /proc or /dev.
  std::vector<std::string> read_only_paths;
};

class Sandbox {
 public:
  explicit Sandbox(SandboxOptions options = {});

  // The isolation runs get on this machine (probed once, by starting a process in each mode).
  Isolation isolation() const { return isolation_; }
  // What programs can reach in that mode; empty in the namespace modes.
  std::vector<Exposure> exposures() const;
  // One line for the user: the mode, why stronger modes were not had, and every exposure, e.g.
  // "processes-only (namespaces: creating the namespaces (clone): Operation not permitted); NOT isolated: ...".
  std::string summary() const;

  // Thread-safe: runs may proceed in parallel from several threads.
  SandboxResult run(const SandboxRequest& request, const LineHandler& on_line = {}) const;

 private:
  SandboxOptions options_;
  Isolation isolation_;
  std::vector<std::string> probe_failures_;  // "mode: why", for each stronger mode that did not start
  std::shared_ptr<const sandbox_detail::SandboxRoot> root_;  // the namespace modes' root, shared by every run
};

}  // namespace moeserve::eval

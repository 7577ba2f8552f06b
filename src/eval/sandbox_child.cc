#include "eval/sandbox_child.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

namespace moeserve::eval::sandbox_detail {
namespace {

// The keeper's fixed descriptors.
constexpr int kControl = 3;
constexpr int kReport = 4;
constexpr int kStdout = 5;
constexpr int kStderr = 6;

void report(char kind, char stage, int value, uint16_t mount = 0) {
  const ReportRecord record{kind, stage, mount, value};
  [[maybe_unused]] ssize_t written = write(kReport, &record, sizeof(record));
}

[[noreturn]] void fail_setup(char stage, uint16_t mount = 0) {
  report('E', stage, errno, mount);
  _exit(127);
}

// fork/clone without glibc's fork handlers, which may take locks another thread of the evaluator held.
pid_t raw_clone(unsigned long flags) {
  return static_cast<pid_t>(syscall(SYS_clone, flags | SIGCHLD, nullptr, nullptr, nullptr, nullptr));
}

void sleep_ms(long ms) {
  timespec t{0, ms * 1000000};
  nanosleep(&t, nullptr);
}

// Appends the decimal digits of value to out (which has room), returns the new end.
char* append_number(char* out, long value) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0);
  while (n > 0) *out++ = digits[--n];
  return out;
}

char* append_text(char* out, const char* text) {
  while (*text) *out++ = *text++;
  return out;
}

bool write_proc_file(pid_t pid, const char* name, const char* content) {
  char path[64];
  char* end = append_text(append_number(append_text(path, "/proc/"), pid), "/");
  *append_text(end, name) = '\0';
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t length = 0;
  while (content[length]) ++length;
  const bool ok = write(fd, content, length) == static_cast<ssize_t>(length);
  close(fd);
  return ok;
}

// The parent pid in /proc/<pid>/stat, or -1.
long parent_of(const char* pid_name) {
  char path[64];
  *append_text(append_text(append_text(path, "/proc/"), pid_name), "/stat") = '\0';
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buffer[512];
  const ssize_t n = read(fd, buffer, sizeof(buffer) - 1);
  close(fd);
  if (n <= 0) return -1;
  buffer[n] = '\0';
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so search from its last ')'.
  const char* p = nullptr;
  for (ssize_t i = n - 1; i >= 0; --i) {
    if (buffer[i] == ')') {
      p = buffer + i;
      break;
    }
  }
  if (p == nullptr || p[1] != ' ' || p[2] == '\0' || p[3] != ' ') return -1;
  long ppid = 0;
  for (p += 4; *p >= '0' && *p <= '9'; ++p) ppid = ppid * 10 + (*p - '0');
  return ppid;
}

// SIGKILL to every process whose parent is the keeper (orphans of the tree are reparented to it).
void kill_own_children() {
  const int dir = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;
  const long self = getpid();
  alignas(8) char buffer[8192];
  for (;;) {
    const long n = syscall(SYS_getdents64, dir, buffer, sizeof(buffer));
    if (n <= 0) break;
    for (long offset = 0; offset < n;) {
      struct Entry {
        uint64_t inode;
        int64_t next;
        unsigned short length;
        unsigned char type;
        char name[1];
      };
      const auto* entry = reinterpret_cast<const Entry*>(buffer + offset);
      offset += entry->length;
      if (entry->name[0] < '1' || entry->name[0] > '9') continue;
      if (parent_of(entry->name) != self) continue;
      long pid = 0;
      for (const char* c = entry->name; *c; ++c) pid = pid * 10 + (*c - '0');
      kill(static_cast<pid_t>(pid), SIGKILL);
    }
  }
  close(dir);
}

[[noreturn]] void run_program(const ChildPlan& plan) {
  const auto limit = [](int resource, rlim_t soft, rlim_t hard) {
    const rlimit value{soft, hard};
    if (setrlimit(resource, &value) != 0) fail_setup('l');
  };
  limit(RLIMIT_CORE, 0, 0);
  limit(RLIMIT_CPU, plan.cpu_seconds, plan.cpu_seconds + 1);  // SIGXCPU at the soft limit, SIGKILL one later
  limit(RLIMIT_AS, plan.memory_bytes, plan.memory_bytes);
  limit(RLIMIT_FSIZE, plan.file_size_bytes, plan.file_size_bytes);
  limit(RLIMIT_NOFILE, 64, 64);
  limit(RLIMIT_NPROC, plan.max_processes, plan.max_processes);
  if (plan.drop_to_sandbox_id) {
    // Raw system calls: glibc's wrappers would signal the evaluator's other threads, which are not here.
    if (syscall(SYS_setgroups, 0, nullptr) != 0 && !plan.deny_setgroups) fail_setup('i');
    if (syscall(SYS_setresgid, kSandboxId, kSandboxId, kSandboxId) != 0) fail_setup('i');
    if (syscall(SYS_setresuid, plan.program_uid, plan.program_uid, plan.program_uid) != 0) fail_setup('i');
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail_setup('n');
  if (chdir(plan.work_dir) != 0) fail_setup('d');
  const int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(kStdout, 1) < 0 || dup2(kStderr, 2) < 0) fail_setup('f');
  if (null_fd > 2) close(null_fd);
  close(kStdout);
  close(kStderr);
  close(kControl);
  fcntl(kReport, F_SETFD, FD_CLOEXEC);  // closed by a successful exec
  execve(plan.argv[0], plan.argv, plan.envp);
  report('X', 0, errno);
  _exit(127);
}

bool set_attributes(const char* target, unsigned int flags, uint64_t attributes) {
  mount_attr attr{};
  attr.attr_set = attributes;
  return mount_setattr(AT_FDCWD, target, flags, &attr, sizeof(attr)) == 0;
}

// Attributes are set on each new mount after it is made (a bind mount takes its source's at first); adding
// flags is allowed even on mounts a user namespace has locked.
bool perform(const MountStep& step, const char* tmpfs_options) {
  constexpr uint64_t kReadOnly = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  switch (step.kind) {
    case MountStep::Kind::root:
      return mount(step.target, step.target, nullptr, MS_BIND, nullptr) == 0 &&
             set_attributes(step.target, 0, kReadOnly);
    case MountStep::Kind::read_only:
      return mount(step.source, step.target, nullptr, MS_BIND | MS_REC, nullptr) == 0 &&
             set_attributes(step.target, AT_RECURSIVE, kReadOnly);
    case MountStep::Kind::device:  // nodev would make the node unusable; writes to a device ignore read-only
      return mount(step.source, step.target, nullptr, MS_BIND, nullptr) == 0 &&
             set_attributes(step.target, 0, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC);
    case MountStep::Kind::proc:
      // subset=pid: only process directories; hidepid=invisible: only processes the program may ptrace, so not
      // init (another uid, or not dumpable). A kernel that refuses (a container's masked /proc defeats the
      // check that an unprivileged procfs reveals nothing new) leaves /proc empty, which hides just as well.
      mount("proc", step.target, "proc", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "subset=pid,hidepid=invisible");
      return true;
    case MountStep::Kind::work:
      return mount("tmpfs", step.target, "tmpfs", MS_NOSUID | MS_NODEV, tmpfs_options) == 0;
  }
  return false;
}

// Builds the run's root from its mount steps and pivots into it, then detaches the host's tree, so no path
// leads to a host file, socket or device the steps did not name. pivot_root(".", ".") stacks the old root on
// the new one and umount2(".") takes it away (pivot_root(2), NOTES).
void enter_root(const ChildPlan& plan) {
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail_setup('p');
  for (uint16_t i = 0; i < plan.mount_count; ++i) {
    if (!perform(plan.mounts[i], plan.tmpfs_options)) fail_setup('m', i);
  }
  if (chdir(plan.mounts[0].target) != 0 || syscall(SYS_pivot_root, ".", ".") != 0 || umount2(".", MNT_DETACH) != 0 ||
      chdir("/") != 0) {
    fail_setup('v');
  }
}

[[noreturn]] void run_init(const ChildPlan& plan, int go_read) {
  if (plan.user_namespace) {
    char go = 0;
    ssize_t n;
    do {
      n = read(go_read, &go, 1);
    } while (n < 0 && errno == EINTR);
    if (n != 1) _exit(127);  // the keeper could not map our ids and has reported why
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  prctl(PR_SET_DUMPABLE, 0);
  setpgid(0, 0);
  if (plan.mount_namespace) enter_root(plan);
  const pid_t program = raw_clone(0);
  if (program < 0) fail_setup('k');
  if (program == 0) run_program(plan);
  for (;;) {
    int status = 0;
    const pid_t reaped = waitpid(-1, &status, 0);
    if (reaped == program) {
      report('S', 0, status);
      _exit(0);
    }
    if (reaped < 0 && errno != EINTR) _exit(0);
  }
}

void move_descriptors(const ChildPlan& plan) {
  const int wanted[4] = {plan.control_read, plan.report_write, plan.stdout_write, plan.stderr_write};
  int high[4];
  for (int i = 0; i < 4; ++i) high[i] = fcntl(wanted[i], F_DUPFD, 64);
  for (int i = 0; i < 4; ++i) {
    if (high[i] < 0 || dup2(high[i], kControl + i) < 0) _exit(126);
  }
  close_range(kStderr + 1, ~0u, 0);
}

// Waits for init to end (leaving it unreaped, so its pid and process group stay reserved) or for the control
// pipe to say stop. A pidfd of init turns readable when it ends (Linux 5.3); without one, it looks every 10 ms.
void supervise(pid_t init) {
  const int init_fd = static_cast<int>(syscall(SYS_pidfd_open, init, 0));
  pollfd fds[2] = {{kControl, POLLIN, 0}, {init_fd, POLLIN, 0}};  // poll skips a negative fd
  for (;;) {
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(init), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == init) break;
    if (poll(fds, 2, init_fd >= 0 ? -1 : 10) > 0 && fds[0].revents != 0) break;
  }
  if (init_fd >= 0) close(init_fd);
}

// pid_namespace: init is PID 1 of one, so its death kills every process of the run and orphans went to init,
// never here: waiting for init is enough. Without one, orphans of the tree are the keeper's children (it is
// a subreaper) and are killed until none is left.
[[noreturn]] void kill_everything(pid_t init, bool pid_namespace) {
  kill(-init, SIGKILL);  // init's process group: the program and what it forked without leaving the group
  kill(init, SIGKILL);
  for (;;) {
    if (!pid_namespace) kill_own_children();
    int status = 0;
    const pid_t reaped = waitpid(-1, &status, pid_namespace ? 0 : WNOHANG);
    if (reaped > 0) continue;
    if (reaped < 0 && errno == ECHILD) _exit(0);
    if (reaped < 0 && errno == EINTR) continue;
    sleep_ms(1);
  }
}

}  // namespace

void run_keeper(const ChildPlan& plan) {
  setsid();
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  move_descriptors(plan);
  int go[2] = {-1, -1};
  if (plan.user_namespace && pipe2(go, O_CLOEXEC) != 0) fail_setup('g');
  const pid_t init = raw_clone(plan.clone_flags);
  if (init < 0) fail_setup('c');
  if (init == 0) run_init(plan, go[0]);
  if (plan.user_namespace) {
    close(go[0]);
    const bool mapped = (!plan.deny_setgroups || write_proc_file(init, "setgroups", "deny")) &&
                        write_proc_file(init, "uid_map", plan.uid_map) &&
                        write_proc_file(init, "gid_map", plan.gid_map);
    if (mapped) {
      [[maybe_unused]] ssize_t n = write(go[1], "g", 1);
    } else {
      report('E', 'u', errno);
    }
    close(go[1]);
  }
  supervise(init);
  kill_everything(init, (plan.clone_flags & CLONE_NEWPID) != 0);
}

}  // namespace moeserve::eval::sandbox_detail

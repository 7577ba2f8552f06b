// Programs that try to get out of the sandbox, one test per way out, in every isolation mode: each attempt must
// fail, except where the mode lists it among its exposures (processes-only cannot keep some out, and says so),
// and no process of the run may outlive the verdict (SandboxTest::run_python checks).
// Safe for the machine even if the sandbox failed: the targets are a sleeper, listeners and directories the
// test makes itself; kill(-1) runs only where the program cannot reach the evaluator's uid; the fork bomb is
// bounded by its own loop count.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <chrono>
#include <cstring>
#include <sstream>

#include "eval/sandbox_fixture.h"

namespace moeserve::eval {
namespace {

using namespace sandbox_testing;

// A listening socket of the host's; the program gets client_args to connect with (kConnect).
class HostListener {
 public:
  static HostListener tcp_loopback() {
    HostListener listener(AF_INET);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    listener.listen_at(reinterpret_cast<sockaddr*>(&address), sizeof(address));
    socklen_t length = sizeof(address);
    ::getsockname(listener.fd_, reinterpret_cast<sockaddr*>(&address), &length);
    listener.client_args = {"inet", "127.0.0.1", std::to_string(ntohs(address.sin_port))};
    return listener;
  }
  // name: a path, or "@name" for an abstract socket (Linux: a name whose first byte is NUL).
  static HostListener unix_socket(const std::string& name) {
    HostListener listener(AF_UNIX);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, name.data(), std::min(name.size(), sizeof(address.sun_path) - 1));
    if (name.starts_with("@")) address.sun_path[0] = '\0';
    listener.listen_at(reinterpret_cast<sockaddr*>(&address),
                       static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size()));
    if (!name.starts_with("@")) ::chmod(name.c_str(), 0777);  // anyone may connect, as the issue's socket
    listener.client_args = {"unix", name};
    return listener;
  }
  HostListener(HostListener&& other) noexcept
      : client_args(std::move(other.client_args)), fd_(std::exchange(other.fd_, -1)) {}
  ~HostListener() {
    if (fd_ >= 0) ::close(fd_);
  }

  bool someone_connected() const {
    const int client = ::accept(fd_, nullptr, nullptr);
    if (client >= 0) ::close(client);
    return client >= 0;
  }

  std::vector<std::string> client_args;

 private:
  explicit HostListener(int family) : fd_(::socket(family, SOCK_STREAM | SOCK_NONBLOCK, 0)) {}
  void listen_at(const sockaddr* address, socklen_t length) {
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(::bind(fd_, address, length), 0) << std::strerror(errno);
    EXPECT_EQ(::listen(fd_, 4), 0) << std::strerror(errno);
  }
  int fd_ = -1;
};

// argv: inet HOST PORT | unix PATH-or-@ABSTRACT. Prints "connected" or "blocked ERRNO".
constexpr const char* kConnect =
    "import socket, sys\n"
    "if sys.argv[1] == 'inet':\n"
    "    family, address = socket.AF_INET, (sys.argv[2], int(sys.argv[3]))\n"
    "else:\n"
    "    family, address = socket.AF_UNIX, sys.argv[2].replace('@', '\\0', 1)\n"
    "s = socket.socket(family, socket.SOCK_STREAM)\n"
    "s.settimeout(2)\n"
    "try:\n"
    "    s.connect(address)\n"
    "    print('connected')\n"
    "except OSError as e:\n"
    "    print('blocked', e.errno)\n";

class SandboxEscapeTest : public SandboxTest {
 protected:
  // An attempt may succeed only where the sandbox says it cannot keep it out.
  void expect_held(bool escaped, Exposure exposure, const std::string& attempt) const {
    EXPECT_FALSE(escaped && !exposes(exposure))
        << attempt << " got through " << isolation_name(GetParam()) << " isolation, which does not list "
        << exposure_name(exposure) << " among its exposures";
  }

  void expect_cannot_connect(const HostListener& listener, Exposure exposure, const std::string& attempt) {
    const Outcome run = run_python(kConnect, short_limits(10), listener.client_args);
    ASSERT_EQ(run.result.end, SandboxResult::End::exited) << run.result.setup_error << run.result.stderr_text;
    expect_held(run.result.stdout_text == "connected\n" || listener.someone_connected(), exposure, attempt);
    if (!exposes(exposure)) {
      EXPECT_TRUE(run.result.stdout_text.starts_with("blocked")) << run.result.stdout_text;
    }
  }
};

TEST_P(SandboxEscapeTest, CannotReadOtherProcessesCommandLinesOrEnvironments) {
  const HostSleeper sleeper;
  ASSERT_TRUE(sleeper.alive());
  // The evaluator's own command line (argv[0] is this test binary): the one a serve --api-key would leak.
  const std::string evaluator = read_proc_file("/proc/self/cmdline").c_str();
  const Outcome run = run_python(
      "import os, sys\nseen = []\n"
      "names = ['/proc/%s/%s' % (p, w) for p in ('1', sys.argv[1]) for w in ('cmdline', 'environ')]\n"
      "try:\n"
      "    names += ['/proc/%s/%s' % (p, w) for p in os.listdir('/proc') if p.isdigit()\n"
      "              for w in ('cmdline', 'environ')]\n"
      "except OSError:\n    pass\n"
      "for name in names:\n    try:\n        seen.append(open(name, 'rb').read().decode(errors='replace'))\n"
      "    except OSError:\n        pass\nprint(seen)",
      short_limits(10), {std::to_string(sleeper.pid())});
  ASSERT_EQ(run.result.end, SandboxResult::End::exited) << run.result.setup_error << run.result.stderr_text;
  expect_held(run.result.stdout_text.find(sleeper.secret()) != std::string::npos, Exposure::host_processes,
              "reading a host process's command line or environment");
  expect_held(run.result.stdout_text.find(evaluator) != std::string::npos, Exposure::host_processes,
              "reading the evaluator's command line");
  EXPECT_TRUE(sleeper.alive());
}

TEST_P(SandboxEscapeTest, ProcShowsOnlyTheRunsOwnProcesses) {
  if (!has_namespaces()) GTEST_SKIP() << "processes-only isolation shows the host's /proc";
  // The program and a child of it; every process listed must be one of them (the same command line).
  const Outcome run = run_python(
      "import os, time\nif os.fork() == 0:\n    time.sleep(30)\n    os._exit(0)\n"
      "mounted = os.path.exists('/proc/self')\n"
      "pids = [p for p in os.listdir('/proc') if p.isdigit()] if mounted else []\n"
      "own = open('/proc/self/cmdline').read() if mounted else ''\n"
      "mine = [p for p in pids if open('/proc/%s/cmdline' % p).read() == own]\n"
      "print(len(pids), len(mine), mounted)",
      short_limits(10));
  std::istringstream fields(run.result.stdout_text);
  int listed = -1, marked = -1;
  std::string proc_mounted;
  fields >> listed >> marked >> proc_mounted;
  EXPECT_EQ(listed, marked) << run.result.stdout_text << run.result.stderr_text;
  if (proc_mounted == "True") {
    EXPECT_EQ(listed, 2) << "the program and its child, nothing else (not init)";
  } else {
    EXPECT_EQ(listed, 0);  // the kernel refused a /proc of the run's own: none at all
  }
}

TEST_P(SandboxEscapeTest, CannotConnectToAHostUnixSocket) {
  const std::string directory = moeserve::testing::temp_dir("sandbox-socket");
  ::chmod(directory.c_str(), 0777);
  expect_cannot_connect(HostListener::unix_socket(directory + "/server.sock"), Exposure::host_sockets,
                        "connecting to a world-writable UNIX socket of the host");
}

TEST_P(SandboxEscapeTest, CannotConnectToAnAbstractSocket) {
  expect_cannot_connect(HostListener::unix_socket(fmt::format("@{}", new_marker())), Exposure::host_sockets,
                        "connecting to an abstract UNIX socket of the host");
}

TEST_P(SandboxEscapeTest, CannotConnectToTheNetwork) {
  expect_cannot_connect(HostListener::tcp_loopback(), Exposure::network,
                        "a TCP connection to a listener on the host's loopback");
}

TEST_P(SandboxEscapeTest, CannotTraceHostProcesses) {
  const HostSleeper sleeper;
  ASSERT_TRUE(sleeper.alive());
  // PTRACE_ATTACH (16) on the sleeper, the program's parent and pid 1.
  const Outcome run = run_python(
      "import ctypes, os, sys\nlibc = ctypes.CDLL(None, use_errno=True)\n"
      "libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]\n"
      "for pid in (int(sys.argv[1]), os.getppid(), 1):\n"
      "    print('attached' if libc.ptrace(16, pid, None, None) == 0 else 'refused')",
      short_limits(10), {std::to_string(sleeper.pid())});
  ASSERT_EQ(run.result.end, SandboxResult::End::exited) << run.result.setup_error << run.result.stderr_text;
  const bool attached = run.result.stdout_text.find("attached") != std::string::npos;
  expect_held(attached, Exposure::evaluator_identity, "ptrace of a host process");
  if (!exposes(Exposure::evaluator_identity)) {
    EXPECT_EQ(run.result.stdout_text, "refused\nrefused\nrefused\n");
  }
  EXPECT_EQ(sleeper.tracer(), "0");
  EXPECT_TRUE(sleeper.alive());
}

TEST_P(SandboxEscapeTest, CannotSignalTheEvaluatorOrHostProcesses) {
  if (exposes(Exposure::evaluator_identity)) {
    GTEST_SKIP() << "the program runs as the evaluator's uid here (the mode says so): kill(-1) would end the test";
  }
  const HostSleeper sleeper;
  ASSERT_TRUE(sleeper.alive());
  // SIGKILL to the evaluator, the sleeper, its parent (init, or the keeper's child), and every process it may.
  const Outcome run = run_python(
      "import os, signal, sys\n"
      "for pid in (int(sys.argv[1]), int(sys.argv[2]), os.getppid(), -1):\n"
      "    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\nprint('alive')",
      short_limits(10), {std::to_string(::getpid()), std::to_string(sleeper.pid())});
  // Had its parent died, the run would not end with the program's own exit status.
  EXPECT_EQ(run.result.end, SandboxResult::End::exited) << end_name(run.result.end) << run.result.setup_error;
  EXPECT_EQ(run.result.exit_code, 0);
  EXPECT_EQ(run.result.stdout_text, "alive\n");
  EXPECT_TRUE(sleeper.alive());
}

TEST_P(SandboxEscapeTest, CannotWriteOutsideItsDirectory) {
  const std::string owned = moeserve::testing::temp_dir("sandbox-private");  // the evaluator's, mode 0700
  const std::string shared = moeserve::testing::temp_dir("sandbox-shared");
  ::chmod(shared.c_str(), 01777);  // like /tmp: anyone may write
  const std::string name = fmt::format("/{}.txt", new_marker());
  struct Target {
    std::string path;
    Exposure exposure;  // what a mode must declare where the write succeeds
  };
  std::vector<Target> targets = {{owned + name, Exposure::evaluator_identity},
                                 {shared + name, Exposure::shared_directories},
                                 {std::filesystem::temp_directory_path().string() + name, Exposure::shared_directories},
                                 {std::string(MOESERVE_SOURCE_DIR) + name, Exposure::evaluator_identity}};
  if (const char* home = std::getenv("HOME")) {
    targets.push_back({std::string(home) + name, Exposure::evaluator_identity});
  }
  std::vector<std::string> args;
  for (const Target& target : targets) args.push_back(target.path);
  const Outcome run = run_python(
      "import sys\nfor path in sys.argv[1:]:\n    try:\n        open(path, 'w').write('escaped')\n"
      "        print('wrote')\n    except OSError:\n        print('blocked')\n"
      "open('inside.txt', 'w').write('fine')\nprint('inside ok')",
      short_limits(10), args);
  ASSERT_EQ(run.result.end, SandboxResult::End::exited) << run.result.setup_error << run.result.stderr_text;
  EXPECT_NE(run.result.stdout_text.find("inside ok"), std::string::npos) << run.result.stdout_text;
  for (const Target& target : targets) {
    std::error_code error;
    const bool escaped = std::filesystem::remove(target.path, error);
    expect_held(escaped, target.exposure, "writing " + target.path);
  }
}

TEST_P(SandboxEscapeTest, DaemonsDoNotOutliveTheVerdict) {
  // A double-forked child in a session of its own, deaf to SIGHUP and SIGTERM, with stdout still open.
  const Outcome holding = run_python(
      "import os, signal, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
      "        signal.signal(signal.SIGHUP, signal.SIG_IGN)\n        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
      "        time.sleep(60)\n    os._exit(0)\nprint('parent done')",
      short_limits(10));
  EXPECT_EQ(holding.result.end, SandboxResult::End::exited);
  EXPECT_EQ(holding.result.stdout_text, "parent done\n");
  // The same with every descriptor closed, so nothing the evaluator reads stays open.
  const Outcome detached = run_python(
      "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        os.closerange(0, 64)\n"
      "        time.sleep(60)\n    os._exit(0)\nprint('parent done')",
      short_limits(10));
  EXPECT_EQ(detached.result.end, SandboxResult::End::exited);
  EXPECT_EQ(detached.result.stdout_text, "parent done\n");
}

TEST_P(SandboxEscapeTest, ForkBombIsContainedAndCleanedUp) {
  // Up to 2^10 processes if nothing stopped it; each then sleeps well past the deadline.
  const auto start = std::chrono::steady_clock::now();
  const Outcome run = run_python(
      "import os, time\nmade = 0\nfor i in range(10):\n    try:\n        os.fork()\n        made += 1\n"
      "    except OSError:\n        pass\ntime.sleep(60)",
      short_limits(2));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(run.result.end, SandboxResult::End::timed_out) << end_name(run.result.end);
  EXPECT_LT(seconds, 5.0);
}

TEST_P(SandboxEscapeTest, SeesOnlyWhatPythonNeeds) {
  if (!has_namespaces()) GTEST_SKIP() << "processes-only isolation runs in the host's file system";
  const Outcome run = run_python(
      "import os\nprint(sorted(os.listdir('/')))\nprint(sorted(os.listdir('/dev')))\nprint(os.listdir('/etc'))\n"
      "print(os.getcwd(), sorted(os.listdir('..')))",
      short_limits(10));
  ASSERT_EQ(run.result.end, SandboxResult::End::exited) << run.result.setup_error << run.result.stderr_text;
  std::istringstream lines(run.result.stdout_text);
  std::string top, dev, etc, cwd;
  std::getline(lines, top);
  std::getline(lines, dev);
  std::getline(lines, etc);
  std::getline(lines, cwd);
  for (const char* name : {"'dev'", "'proc'", "'sandbox'", "'usr'"}) {
    EXPECT_NE(top.find(name), std::string::npos) << top;
  }
  for (const char* name : {"'home'", "'root'", "'run'", "'tmp'", "'var'", "'sys'", "'work'"}) {
    EXPECT_EQ(top.find(name), std::string::npos) << name << " in " << top;
  }
  EXPECT_EQ(dev, "['fd', 'null', 'random', 'stderr', 'stdin', 'stdout', 'urandom', 'zero']");
  EXPECT_TRUE(etc == "['ld.so.cache']" || etc == "[]") << etc;
  EXPECT_EQ(cwd, "/sandbox/work ['work']");
}

INSTANTIATE_TEST_SUITE_P(Modes, SandboxEscapeTest,
                         ::testing::Values(Isolation::namespaces, Isolation::root_namespaces,
                                           Isolation::processes_only),
                         mode_test_name);

}  // namespace
}  // namespace moeserve::eval

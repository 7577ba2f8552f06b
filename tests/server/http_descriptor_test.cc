// Issue 14: with descriptors gone, accept() failed 14,803 times in 2 s and kept a core busy. Here the process's
// descriptor limit is lowered and filled, a client connects (it waits in the listen backlog, which the server
// cannot accept from), and for a second the process must use little CPU, keep serving the connection it holds,
// and count one shortage; once descriptors are free the waiting client is served.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <dirent.h>
#include <thread>

#include "server/http_server.h"
#include "server/raw_connection.h"

namespace moeserve {
namespace {

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

size_t open_descriptors() {
  size_t count = 0;
  DIR* dir = opendir("/proc/self/fd");
  while (readdir(dir) != nullptr) ++count;
  closedir(dir);
  return count;  // counts ".", ".." and the directory's own descriptor: a few too many, which is what is wanted
}

// A plain POSIX client: one descriptor, nothing else (an io_context would take more while none are left).
int connect_plain(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads until the server closes or `timeout` passes.
std::string read_plain(int fd, std::chrono::milliseconds timeout) {
  std::string received;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char chunk[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0) break;
    received.append(chunk, static_cast<size_t>(n));
  }
  return received;
}

TEST(HttpDescriptors, AcceptPausesWhileDescriptorsRunOutAndResumes) {
  server::HttpServer http(server::HttpServerOptions{.port = 0},
                          [](server::HttpRequest, std::shared_ptr<server::ResponseChannel> channel) {
                            channel->respond(200, "application/json", R"({"status":"ok"})");
                          });
  http.start();
  testing::RawConnection held(http.port());
  const std::string request = testing::request_bytes("GET", "/ok");
  const std::string last_request = testing::request_bytes("GET", "/ok", "", "Connection: close\r\n");
  held.send(request);
  ASSERT_EQ(held.read_response().status, 200u);

  rlimit original{};
  getrlimit(RLIMIT_NOFILE, &original);
  rlimit lowered = original;
  lowered.rlim_cur = open_descriptors() + 16;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
  std::vector<int> fillers;
  for (int fd; (fd = ::open("/dev/null", O_RDONLY)) >= 0;) fillers.push_back(fd);
  ASSERT_EQ(errno, EMFILE);
  ::close(fillers.back());  // one left: for the waiting client's socket, none for the server's end of it
  fillers.pop_back();
  const int waiting = connect_plain(http.port());
  ASSERT_GE(waiting, 0);
  ASSERT_EQ(::send(waiting, last_request.data(), last_request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(last_request.size()));

  const double cpu_before = cpu_seconds();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double cpu_used = cpu_seconds() - cpu_before;
  std::printf("CPU time over 1 s without descriptors: %.3f s\n", cpu_used);
  EXPECT_LT(cpu_used, 0.1) << "accept() spins";  // pausing uses ~0.001 s here; retrying at once, 0.25 s and more
  EXPECT_EQ(http.descriptor_shortages(), 1u);
  held.send(request);  // the connection the server holds is served meanwhile
  EXPECT_EQ(held.read_response().status, 200u);

  for (int fd : fillers) ::close(fd);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &original), 0);
  const std::string reply = read_plain(waiting, std::chrono::seconds(10));
  ::close(waiting);
  EXPECT_EQ(reply.substr(0, 15), "HTTP/1.1 200 OK") << reply;
  EXPECT_EQ(http.descriptor_shortages(), 1u);
}

}  // namespace
}  // namespace moeserve

#include "bench/repro.h"

#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "model/gpt_oss/checkpoint.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve::bench {
namespace {

// The command line as run, with the value of --api-key replaced: a result file is shared, a key is not.
std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string flag = "--api-key";
  std::string out;
  bool secret_next = false;
  for (size_t start = 0; start < raw.size();) {
    size_t end = raw.find('\0', start);
    if (end == std::string::npos) end = raw.size();
    std::string arg = raw.substr(start, end - start);
    if (secret_next) arg = "<redacted>";
    secret_next = arg == flag;
    if (arg.rfind(flag + "=", 0) == 0) arg = flag + "=<redacted>";
    out += (out.empty() ? "" : " ") + arg;
    start = end + 1;
  }
  return out;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "";
}

const char* dtype_of(const Matrix& m) { return dtype_name(m.dtype); }

}  // namespace

nlohmann::json describe_build_and_host() {
  nlohmann::json j;
  j["moeserve_version"] = MOESERVE_VERSION;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    j["binary"] = exe.string();
    j["binary_sha256"] = sha256_file(exe.string());
  }
  j["command_line"] = command_line();
  j["compiler"] = fmt::format("GCC {}", __VERSION__);
#ifdef _GLIBCXX_RELEASE
  // The RNG distributions and std::shuffle that decide the schedule come from the standard library.
  j["standard_library"] = fmt::format("libstdc++ {} ({})", _GLIBCXX_RELEASE, __GLIBCXX__);
#endif
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) j["host"] = host;
  j["cpu"] = cpu_model();
  j["cpu_cores"] = ::sysconf(_SC_NPROCESSORS_ONLN);
  utsname u{};
  if (::uname(&u) == 0) j["kernel"] = fmt::format("{} {} {}", u.sysname, u.release, u.machine);
  return j;
}

nlohmann::json describe_checkpoint(const std::string& directory, bool hash_contents) {
  namespace fs = std::filesystem;
  nlohmann::json j;
  j["directory"] = fs::absolute(directory).string();
  const fs::path config = fs::path(directory) / "config.json";
  if (fs::exists(config)) j["config"] = read_json_file(config.string());
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(directory))
    if (entry.is_regular_file()) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  nlohmann::json listed = nlohmann::json::array();
  std::string combined;
  for (const fs::path& f : files) {
    nlohmann::json file = {{"name", f.filename().string()}, {"bytes", fs::file_size(f)}};
    if (hash_contents) {
      file["sha256"] = sha256_file(f.string());
      combined += file["sha256"].get<std::string>() + "  " + f.filename().string() + "\n";
    }
    listed.push_back(file);
  }
  j["files"] = listed;
  if (hash_contents) {
    // SHA-256 of the "sha256  name" lines in name order, as `sha256sum * | sort -k2 | sha256sum` would give.
    j["sha256"] = sha256_hex(std::span(reinterpret_cast<const uint8_t*>(combined.data()), combined.size()));
  } else {
    j["sha256"] = "not computed (pass --hash-checkpoint)";
  }
  return j;
}

nlohmann::json describe_loaded_weights(const Checkpoint& checkpoint) {
  const ModelWeights& w = checkpoint.weights();
  MOESERVE_CHECK(!w.layers.empty(), "the checkpoint has no layers");
  const LayerWeights& layer = w.layers.front();
  const ExpertMatrix& experts = layer.mlp1;
  return {{"experts", experts.format == ExpertFormat::mxfp4 ? std::string("MXFP4 (e2m1 values, e8m0 block scales)")
                                                            : fmt::format("dense {}", dtype_of(experts.dense))},
          {"attention", dtype_of(layer.q)},
          {"router", dtype_of(layer.router)},
          {"embedding", dtype_of(w.embedding)},
          {"unembedding", dtype_of(w.unembedding)},
          {"norms_biases_sinks", "f32 (converted at load)"}};
}

}  // namespace moeserve::bench

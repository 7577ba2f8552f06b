// libFuzzer target: the safetensors reader (header length, JSON header, dtypes, shapes against bytes, tiling)
// and the sharded index, on arbitrary bytes. An input that begins with '{' is a model.safetensors.index.json
// beside one fixed valid shard; any other input is a model.safetensors. Opening either yields tensors whose
// views lie inside the file, or fails with an Error.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>

#include "model/safetensors.h"
#include "util/error.h"
#include "util/files.h"

namespace {

namespace fs = std::filesystem;

void check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "safetensors_fuzz: %s\n", what);
    std::abort();
  }
}

// Two directories of this process: one holding a single file, one an index and its shard.
struct Dirs {
  std::string single, sharded;
  Dirs() {
    const fs::path base = fs::temp_directory_path() / ("safetensors_fuzz." + std::to_string(::getpid()));
    single = (base / "single").string();
    sharded = (base / "sharded").string();
    fs::create_directories(single);
    fs::create_directories(sharded);
    // The shard the index may name: two tensors, 8 bytes of data.
    moeserve::write_safetensors(sharded + "/model-00001-of-00001.safetensors",
                                {{"a", moeserve::DType::BF16, {2}, [] { return std::vector<uint8_t>(4, 1); }},
                                 {"b", moeserve::DType::U8, {4}, [] { return std::vector<uint8_t>(4, 2); }}});
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moeserve;
  static const Dirs dirs;
  const bool index = size > 0 && data[0] == '{';
  const std::string dir = index ? dirs.sharded : dirs.single;
  write_file(dir + (index ? "/model.safetensors.index.json" : "/model.safetensors"), std::span(data, size));
  try {
    const TensorStore store = TensorStore::open_directory(dir);
    for (const std::string& name : store.names()) {
      const TensorView& view = store.get(name);
      check(static_cast<uint64_t>(view.numel()) * dtype_size(view.dtype) == view.bytes.size(),
            "a tensor's bytes do not match its shape");
      uint64_t sum = 0;
      for (uint8_t b : view.bytes) sum += b;  // every byte of a view is readable
      (void)sum;
    }
  } catch (const Error&) {
  }
  return 0;
}

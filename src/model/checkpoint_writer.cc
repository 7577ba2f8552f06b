#include "model/checkpoint_writer.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/files.h"

namespace moeserve {

void write_checkpoint_tensors(const std::string& out_dir, std::vector<TensorToWrite> tensors, int shards,
                              const std::string& shard_name) {
  namespace fs = std::filesystem;
  MOESERVE_CHECK(shards >= 1, "--shards must be at least 1");
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  if (shards == 1) {
    write_safetensors((fs::path(out_dir) / "model.safetensors").string(), std::move(tensors), metadata);
    return;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  const size_t per_shard = (tensors.size() + shards - 1) / shards;
  for (int s = 0; s < shards; ++s) {
    const std::string file = fmt::format(fmt::runtime(shard_name), s + 1, shards);
    std::vector<TensorToWrite> shard;
    for (size_t i = s * per_shard; i < std::min(tensors.size(), (s + 1) * per_shard); ++i) {
      weight_map[tensors[i].name] = file;
      shard.push_back(std::move(tensors[i]));
    }
    write_safetensors((fs::path(out_dir) / file).string(), std::move(shard), metadata);
  }
  const nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", weight_map}};
  write_text_file((fs::path(out_dir) / "model.safetensors.index.json").string(), index.dump(2) + "\n");
}

}  // namespace moeserve

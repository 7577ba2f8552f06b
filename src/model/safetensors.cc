#include "model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "util/error.h"
#include "util/files.h"
#include "util/json_parse.h"

namespace moeserve {
namespace {

// The reference implementation refuses headers over 100 MB; so do we, before parsing.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// More dimensions than any checkpoint tensor has (GPT-OSS's MXFP4 blocks have four).
constexpr size_t kMaxRank = 8;

DType parse_dtype(const std::string& name, const std::string& where) {
  static const std::map<std::string, DType> kNames = {{"BF16", DType::BF16}, {"F16", DType::F16},
                                                      {"F32", DType::F32},   {"U8", DType::U8},
                                                      {"I32", DType::I32},   {"I64", DType::I64},
                                                      {"BOOL", DType::BOOL}, {"F8_E4M3", DType::F8_E4M3}};
  auto it = kNames.find(name);
  MOESERVE_CHECK(it != kNames.end(), "{}: unsupported dtype \"{}\"", where, name);
  return it->second;
}

}  // namespace

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::BF16:
    case DType::F16:
      return 2;
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::U8:
    case DType::BOOL:
    case DType::F8_E4M3:
      return 1;
    case DType::I64:
      return 8;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::BF16:
      return "BF16";
    case DType::F16:
      return "F16";
    case DType::F32:
      return "F32";
    case DType::U8:
      return "U8";
    case DType::I32:
      return "I32";
    case DType::I64:
      return "I64";
    case DType::BOOL:
      return "BOOL";
    case DType::F8_E4M3:
      return "F8_E4M3";
  }
  return "?";
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::describe() const {
  return fmt::format("tensor {} [{}] {} in {}", name, fmt::join(shape, ", "), dtype_name(dtype), file);
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  auto bytes = file_.bytes();
  MOESERVE_CHECK(bytes.size() >= 8, "{}: not a safetensors file (only {} bytes, no header length)", path,
                 bytes.size());
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);  // little-endian on every platform we build for
  MOESERVE_CHECK(header_len <= kMaxHeaderBytes, "{}: header length {} exceeds the {} byte limit", path, header_len,
                 kMaxHeaderBytes);
  MOESERVE_CHECK(header_len <= bytes.size() - 8, "{}: truncated: header length {} but only {} bytes follow", path,
                 header_len, bytes.size() - 8);
  std::string_view header(reinterpret_cast<const char*>(bytes.data() + 8), header_len);
  MOESERVE_CHECK(!header.empty() && header.front() == '{', "{}: header is not a JSON object", path);
  // Entries nest three levels ({name: {shape: [..]}}); the depth limit keeps a hostile header off the stack.
  const nlohmann::json json = parse_json(header, path + " header", 8);
  MOESERVE_CHECK(json.is_object(), "{}: header is not a JSON object", path);

  auto data = bytes.subspan(8 + header_len);
  std::vector<std::pair<uint64_t, uint64_t>> extents;
  for (auto& [name, entry] : json.items()) {
    if (name == "__metadata__") {
      MOESERVE_CHECK(entry.is_object(), "{}: __metadata__ is not an object", path);
      for (auto& [key, value] : entry.items()) {
        MOESERVE_CHECK(value.is_string(), "{}: __metadata__ value for \"{}\" is not a string", path, key);
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    std::string where = fmt::format("{}: tensor {}", path, name);
    MOESERVE_CHECK(entry.is_object(), "{}: entry is not an object", where);
    MOESERVE_CHECK(entry.contains("dtype") && entry["dtype"].is_string(), "{}: missing dtype", where);
    MOESERVE_CHECK(entry.contains("shape") && entry["shape"].is_array(), "{}: missing shape", where);
    MOESERVE_CHECK(entry.contains("data_offsets") && entry["data_offsets"].is_array() &&
                       entry["data_offsets"].size() == 2,
                   "{}: data_offsets must be [begin, end]", where);
    TensorView view;
    view.name = name;
    view.file = path;
    view.dtype = parse_dtype(entry["dtype"].get<std::string>(), where);
    MOESERVE_CHECK(entry["shape"].size() <= kMaxRank, "{}: shape has {} dimensions (at most {})", where,
                   entry["shape"].size(), kMaxRank);
    for (auto& dim : entry["shape"]) {
      MOESERVE_CHECK(dim.is_number_unsigned() && dim.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX),
                     "{}: shape has a non-integer, negative or out-of-range dimension", where);
      view.shape.push_back(static_cast<int64_t>(dim.get<uint64_t>()));
    }
    auto& offsets = entry["data_offsets"];
    MOESERVE_CHECK(offsets[0].is_number_unsigned() && offsets[1].is_number_unsigned(),
                   "{}: data_offsets are not non-negative integers", where);
    uint64_t begin = offsets[0].get<uint64_t>();
    uint64_t end = offsets[1].get<uint64_t>();
    MOESERVE_CHECK(begin <= end && end <= data.size(),
                   "{}: data_offsets [{}, {}] fall outside the {} byte data buffer (truncated file?)", where, begin,
                   end, data.size());
    // The element count is bounded by the tensor's bytes as it is multiplied, so it cannot overflow.
    const bool empty = std::find(view.shape.begin(), view.shape.end(), 0) != view.shape.end();
    const uint64_t max_numel = (end - begin) / dtype_size(view.dtype);
    uint64_t numel = empty ? 0 : 1;
    for (int64_t d : view.shape) {
      if (empty) break;
      MOESERVE_CHECK(numel <= max_numel / static_cast<uint64_t>(d), "{}: {} bytes are too few for shape [{}] of {}",
                     where, end - begin, fmt::join(view.shape, ", "), dtype_name(view.dtype));
      numel *= static_cast<uint64_t>(d);
    }
    MOESERVE_CHECK(end - begin == numel * dtype_size(view.dtype),
                   "{}: {} bytes for shape [{}] of {} (expected {})", where, end - begin,
                   fmt::join(view.shape, ", "), dtype_name(view.dtype), numel * dtype_size(view.dtype));
    view.bytes = data.subspan(begin, end - begin);
    extents.emplace_back(begin, end);
    tensors_.emplace(name, std::move(view));
  }
  // Like the reference library: tensors tile the data buffer with no gap and no overlap.
  std::sort(extents.begin(), extents.end());
  uint64_t expected = 0;
  for (auto [begin, end] : extents) {
    MOESERVE_CHECK(begin == expected, "{}: tensor data overlaps or leaves a gap at byte {}", path, expected);
    expected = end;
  }
  MOESERVE_CHECK(expected == data.size(), "{}: {} trailing bytes after the last tensor", path,
                 data.size() - expected);
}

TensorStore TensorStore::open_directory(const std::string& dir) {
  namespace fs = std::filesystem;
  MOESERVE_CHECK(fs::is_directory(dir), "model directory {} does not exist", dir);
  TensorStore store;
  store.directory_ = dir;
  std::string index_path = (fs::path(dir) / "model.safetensors.index.json").string();
  std::map<std::string, std::string> weight_map;
  if (file_exists(index_path)) {
    auto index = read_json_file(index_path);
    MOESERVE_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
                   "{}: no weight_map object", index_path);
    std::set<std::string> listed;
    for (auto& [name, file] : index["weight_map"].items()) {
      MOESERVE_CHECK(file.is_string(), "{}: weight_map entry {} is not a file name", index_path, name);
      std::string file_name = file.get<std::string>();
      MOESERVE_CHECK(file_name.find('/') == std::string::npos, "{}: weight_map entry {} names a path outside {}",
                     index_path, name, dir);
      weight_map[name] = file_name;
      if (listed.insert(file_name).second) store.files_.push_back(file_name);
    }
  } else {
    for (auto& entry : fs::directory_iterator(dir)) {
      if (entry.is_regular_file() && entry.path().extension() == ".safetensors")
        store.files_.push_back(entry.path().filename().string());
    }
    std::sort(store.files_.begin(), store.files_.end());
  }
  MOESERVE_CHECK(!store.files_.empty(), "no .safetensors files in {}", dir);
  for (const auto& file : store.files_) {
    std::string path = (fs::path(dir) / file).string();
    MOESERVE_CHECK(file_exists(path), "missing checkpoint file {}", path);
    store.mapped_.push_back(std::make_unique<SafetensorsFile>(path));
    for (const auto& [name, view] : store.mapped_.back()->tensors()) {
      MOESERVE_CHECK(!store.by_name_.contains(name), "tensor {} appears in both {} and {}", name,
                     store.by_name_[name]->file, path);
      if (!weight_map.empty()) {
        auto it = weight_map.find(name);
        MOESERVE_CHECK(it != weight_map.end() && it->second == file,
                       "tensor {} is in {} but model.safetensors.index.json places it {}", name, path,
                       it == weight_map.end() ? std::string("nowhere") : "in " + it->second);
      }
      store.by_name_[name] = &view;
    }
  }
  for (const auto& [name, file] : weight_map)
    MOESERVE_CHECK(store.by_name_.contains(name), "{}: tensor {} is indexed in {} but not found there", index_path,
                   name, file);
  return store;
}

const TensorView* TensorStore::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const TensorView& TensorStore::get(const std::string& name) const {
  const TensorView* view = find(name);
  MOESERVE_CHECK(view != nullptr, "tensor {} is missing from the checkpoint in {}", name, directory_);
  return *view;
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> result;
  for (const auto& [name, view] : by_name_) result.push_back(name);
  return result;
}

void write_safetensors(const std::string& path, std::vector<TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& tensor : tensors) {
    uint64_t numel = 1;
    for (int64_t d : tensor.shape) numel *= static_cast<uint64_t>(d);
    uint64_t size = numel * dtype_size(tensor.dtype);
    header[tensor.name] = {{"dtype", dtype_name(tensor.dtype)},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  std::string header_text = header.dump();
  while (header_text.size() % 8 != 0) header_text.push_back(' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  MOESERVE_CHECK(out.good(), "cannot create {}", path);
  uint64_t header_len = header_text.size();
  out.write(reinterpret_cast<const char*>(&header_len), 8);
  out.write(header_text.data(), static_cast<std::streamsize>(header_text.size()));
  for (auto& tensor : tensors) {
    std::vector<uint8_t> bytes = tensor.fill();
    uint64_t numel = 1;
    for (int64_t d : tensor.shape) numel *= static_cast<uint64_t>(d);
    MOESERVE_CHECK(bytes.size() == numel * dtype_size(tensor.dtype), "{}: tensor {} produced {} bytes, expected {}",
                   path, tensor.name, bytes.size(), numel * dtype_size(tensor.dtype));
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  out.close();
  MOESERVE_CHECK(out.good(), "cannot write {}", path);
}

}  // namespace moeserve

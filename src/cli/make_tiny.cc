#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "model/deepseek_v3/make_tiny.h"
#include "model/gpt_oss/make_tiny.h"
#include "model/eagle3/make_tiny.h"
#include "tokenizer/o200k.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_files.h"
#include "util/error.h"

namespace moeserve::cli {
namespace {

// make-tiny writes a whole checkpoint: into a directory that holds something else only when told to, and then
// without the files of an earlier checkpoint that the loader would read with the new one (shards of another
// --shards, an index, the original layout's dtypes.json).
void prepare_output_dir(const std::string& dir, bool force) {
  namespace fs = std::filesystem;
  if (!fs::exists(dir)) return;
  MOESERVE_CHECK(fs::is_directory(dir), "make-tiny --out {}: a file of that name exists", dir);
  std::vector<std::string> entries;
  for (const auto& entry : fs::directory_iterator(dir)) entries.push_back(entry.path().filename().string());
  if (entries.empty()) return;
  std::sort(entries.begin(), entries.end());
  MOESERVE_CHECK(force,
                 "make-tiny --out {}: the directory is not empty ({} entries, e.g. {}); pass --force to write the "
                 "checkpoint into it",
                 dir, entries.size(), entries.front());
  for (const std::string& name : entries) {
    const fs::path path = fs::path(dir) / name;
    if (path.extension() == ".safetensors" || name == "model.safetensors.index.json" || name == "dtypes.json")
      fs::remove(path);
  }
}

}  // namespace

void register_make_tiny(CLI::App& app) {
  struct Args {
    TinyModelOptions options;
    std::string out;
    std::string layout = "hf";
    std::string experts_format = "mxfp4";
    bool eagle3 = false;
    std::string target;
    TinyEagle3Options eagle3_options;
    std::string family = "gpt-oss";
    std::string dtype = "fp8";
    bool force = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("make-tiny", "write a deterministic checkpoint with random weights");
  auto& o = args->options;
  cmd->add_option("--out", args->out, "output directory (new or empty, unless --force)")->required();
  cmd->add_flag("--force", args->force,
                "write into a non-empty --out (an earlier checkpoint's *.safetensors, index and dtypes.json are "
                "removed first)");
  cmd->add_option("--family", args->family,
                  "gpt-oss, or deepseek-v3 (DeepSeek-V3/R1: MLA, FP8 block-scaled weights, the MTP layer; takes "
                  "--seed, --layers, --vocab, --shards, --shape deepseek-r1 and --dtype)")
      ->check(CLI::IsMember({"gpt-oss", "deepseek-v3"}))
      ->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "deepseek-v3 weights: fp8 (e4m3, 128 x 128 block scales) or bf16")
      ->check(CLI::IsMember({"fp8", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "random seed")->capture_default_str();
  cmd->add_option("--layers", o.layers, "layers (even: sliding, odd: full attention)")->capture_default_str();
  cmd->add_option("--hidden", o.hidden, "hidden size (multiple of 32)")->capture_default_str();
  cmd->add_option("--heads", o.heads, "query heads")->capture_default_str();
  cmd->add_option("--kv-heads", o.kv_heads, "key/value heads")->capture_default_str();
  cmd->add_option("--head-dim", o.head_dim, "head dimension")->capture_default_str();
  cmd->add_option("--experts", o.experts, "experts per layer")->capture_default_str();
  cmd->add_option("--top-k", o.top_k, "experts per token")->capture_default_str();
  cmd->add_option("--intermediate", o.intermediate, "expert intermediate size (multiple of 32)")->capture_default_str();
  cmd->add_option("--vocab", o.vocab, "vocabulary size")->capture_default_str();
  cmd->add_option("--window", o.window, "sliding window")->capture_default_str();
  cmd->add_option("--shards", o.shards,
                  "number of safetensors files, named model-00001-of-0000N (hf) or model--00001-of-0000N (original), "
                  "with an index when more than 1")
      ->capture_default_str();
  cmd->add_option("--layout", args->layout, "hf (Hugging Face) or original (OpenAI)")
      ->check(CLI::IsMember({"hf", "original"}))
      ->capture_default_str();
  cmd->add_option("--experts-format", args->experts_format,
                  "mxfp4, or dense (bf16 in Hugging Face's dequantised layout)")
      ->check(CLI::IsMember({"mxfp4", "dense"}))
      ->capture_default_str();
  cmd->add_option("--shape", o.shape, "full-size dimensions with random weights")
      ->check(CLI::IsMember({"gpt-oss-20b", "gpt-oss-120b", "deepseek-r1"}));
  // --eagle3: a draft head for an existing tiny target instead of a target.
  auto& e = args->eagle3_options;
  auto* eagle3 = cmd->add_flag("--eagle3", args->eagle3, "write an EAGLE-3 draft head for --target");
  cmd->add_option("--target", args->target, "the target checkpoint the draft head is for (with --eagle3)")
      ->needs(eagle3);
  cmd->add_option("--draft-vocab", e.draft_vocab, "draft vocabulary size (0: min(32000, vocab / 2))")
      ->needs(eagle3)
      ->capture_default_str();
  cmd->add_option("--eagle3-names", e.names, "midlayer (midlayer.*) or layers (layers.0.*)")
      ->check(CLI::IsMember({"midlayer", "layers"}))
      ->needs(eagle3)
      ->capture_default_str();
  cmd->add_flag("--eagle3-input-norm", e.input_norm, "norm_before_fc, with input_norm.weight")->needs(eagle3);
  cmd->callback([args, cmd] {
    prepare_output_dir(args->out, args->force);
    if (args->family == "deepseek-v3") {
      for (const char* gpt_oss_only : {"--hidden", "--heads", "--kv-heads", "--head-dim", "--experts", "--top-k",
                                       "--intermediate", "--window", "--layout", "--experts-format", "--eagle3"})
        MOESERVE_CHECK(cmd->count(gpt_oss_only) == 0, "make-tiny: {} is for --family gpt-oss", gpt_oss_only);
      deepseek_v3::TinyOptions d;
      d.seed = args->options.seed;
      d.layers = cmd->count("--layers") ? args->options.layers : 0;
      d.vocab = cmd->count("--vocab") ? args->options.vocab : 0;
      d.shards = args->options.shards;
      d.shape = args->options.shape;
      d.fp8 = args->dtype == "fp8";
      deepseek_v3::make_tiny_checkpoint(d, args->out);
      fmt::print("wrote {}\n", args->out);
      return;
    }
    MOESERVE_CHECK(cmd->count("--dtype") == 0, "make-tiny: --dtype is for --family deepseek-v3");
    if (args->eagle3) {
      MOESERVE_CHECK(!args->target.empty(), "make-tiny --eagle3 needs --target DIR");
      args->eagle3_options.seed = args->options.seed;
      make_tiny_eagle3(args->eagle3_options, args->target, args->out);
      fmt::print("wrote {}\n", args->out);
      return;
    }
    args->options.layout = args->layout == "hf" ? CheckpointLayout::huggingface : CheckpointLayout::original;
    args->options.expert_format = args->experts_format == "mxfp4" ? ExpertFormat::mxfp4 : ExpertFormat::dense;
    make_tiny_checkpoint(args->options, args->out);
    // A model directory carries its tokenizer, as real checkpoints do; only the real vocabulary has one.
    if (tiny_model_config(args->options).vocab_size == o200k::kVocabularySize)
      write_tokenizer_files(*Tokenizer::o200k_harmony(), args->out);
    fmt::print("wrote {}\n", args->out);
  });
}

}  // namespace moeserve::cli

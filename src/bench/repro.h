// What a result records so that it can be reproduced. Published MLPerf recipes leave precisions and versions
// ambiguous (seed document 004); a moeserve result names them: the build and command line, the host, the
// checkpoint (its config and a content hash), the precision each tensor class was loaded in, the GPUs.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace moeserve {
class Checkpoint;
}

namespace moeserve::bench {

// moeserve's version, the running binary's SHA-256, the command line (/proc/self/cmdline), the compiler and
// standard library it was built with, the host name, CPU model and kernel.
nlohmann::json describe_build_and_host();

// A checkpoint directory: config.json as it is, and every file's size; with `hash_contents`, every file's
// SHA-256 and one SHA-256 over those (a large checkpoint takes about a minute per 60 GB to hash).
nlohmann::json describe_checkpoint(const std::string& directory, bool hash_contents);

// The dtype each tensor class was loaded in (experts: MXFP4 or dense and its dtype; attention, router,
// embeddings), as the runner reads them.
nlohmann::json describe_loaded_weights(const Checkpoint& checkpoint);

}  // namespace moeserve::bench

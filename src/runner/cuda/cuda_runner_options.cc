// CudaRunnerOptions' parsing, in every build (the CLI checks its flags before it knows whether CUDA is there).
#include <cmath>

#include "runner/cuda/cuda_runner_factory.h"
#include "util/error.h"
#include "util/parse.h"

namespace moeserve {

double parse_synthetic_router(const std::string& value) {
  if (value == "uniform") return 0;
  if (value.starts_with("zipf:")) {
    const std::string number = value.substr(5);
    size_t used = 0;
    const std::optional<double> skew = parse_double_prefix(number, used);
    if (skew && used == number.size() && std::isfinite(*skew) && *skew > 0 && *skew <= 8) return *skew;
  }
  if (value == "zipf") return 1.0;
  fail("--synthetic-router \"{}\": uniform, zipf (zipf:1) or zipf:S with 0 < S <= 8", value);
}

}  // namespace moeserve

#include <fmt/core.h>

#include <CLI/CLI.hpp>

#include "cli/cli_flags.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "util/error.h"

int main(int argc, char** argv) {
  CLI::App app{"moeserve: serve and benchmark GPT-OSS mixture-of-experts models the way MLPerf Inference defines it"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "moeserve 0.1.0");
  moeserve::cli::register_make_tiny(app);
  moeserve::cli::register_generate(app);
  moeserve::cli::register_tokenize(app);
  moeserve::cli::register_detokenize(app);
  moeserve::cli::register_chat(app);
  moeserve::cli::register_serve(app);
  moeserve::cli::register_bench(app);
  moeserve::cli::register_eval(app);
  moeserve::cli::register_comply(app);
  moeserve::cli::register_specbench(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return app.exit(e);  // a command's own exit code (cli/exit_codes.h)
  } catch (const CLI::ExtrasError& e) {
    app.exit(e);
    for (const std::string& line : moeserve::cli::flag_suggestions(app)) fmt::print(stderr, "{}\n", line);
    return moeserve::cli::kExitSetupError;
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; a usage error exits 2, as argparse's do, not with CLI11's own codes (100+).
    return app.exit(e) == 0 ? 0 : moeserve::cli::kExitSetupError;
  } catch (const moeserve::Error& e) {
    fmt::print(stderr, "moeserve: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "moeserve: internal error: {}\n", e.what());
    return 2;
  }
  return 0;
}

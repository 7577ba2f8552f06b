// Each subcommand registers itself on the application; its options are bound to a struct that lives as long
// as the app, and its callback runs the command.
#pragma once

#include <CLI/CLI.hpp>

namespace moeserve::cli {

void register_make_tiny(CLI::App& app);
void register_generate(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_detokenize(CLI::App& app);
void register_chat(CLI::App& app);
void register_serve(CLI::App& app);
void register_bench(CLI::App& app);
// `bench compare`, under the bench command; returned so that bench's own callback can tell it ran.
CLI::App* register_bench_compare(CLI::App& bench);
void register_eval(CLI::App& app);
void register_comply(CLI::App& app);
void register_specbench(CLI::App& app);

}  // namespace moeserve::cli

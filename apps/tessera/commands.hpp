#pragma once
// The subcommands of the `tessera` command.
#include <CLI/CLI.hpp>

namespace tessera::app {

void add_info_command(CLI::App& app);
void add_demo_command(CLI::App& app);
void add_bench_command(CLI::App& app);

}  // namespace tessera::app

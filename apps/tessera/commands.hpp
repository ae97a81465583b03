#pragma once
// The subcommands of the `tessera` command.
#include <CLI/CLI.hpp>

namespace tessera::app {

void add_info_command(CLI::App& app);
void add_demo_command(CLI::App& app);
void add_profile_command(CLI::App& app);    // the demo's workloads under the profiler
void add_bench_command(CLI::App& app);  // `bench`, with each suite below as its subcommand
void add_calibrate_command(CLI::App& app);  // measure and cache this machine's roofline
void add_verify_command(CLI::App& app);     // every kernel row against the scalar reference
void add_tune_command(CLI::App& app);       // find the fastest tiling per shape and store it for dispatch

// The suites of `tessera bench`.
void add_bench_gemm_command(CLI::App& bench);
void add_bench_attention_command(CLI::App& bench);
void add_bench_membound_command(CLI::App& bench);
void add_bench_conv_command(CLI::App& bench);
void add_bench_diffusion_command(CLI::App& bench);

}  // namespace tessera::app

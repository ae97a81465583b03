// tessera: the command-line face of the library (info, demo, bench; more to come).
#include "commands.hpp"

namespace tessera::app {

void add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmark Tessera against peer libraries in the same run");
  bench->require_subcommand(1);
  add_bench_gemm_command(*bench);
  add_bench_attention_command(*bench);
  add_bench_membound_command(*bench);
  add_bench_conv_command(*bench);
  add_bench_diffusion_command(*bench);
}

}  // namespace tessera::app

int main(int argc, char** argv) {
  CLI::App app{"Tessera: AIGC inference operators and runtime for CPUs with AVX-512 and AMX"};
  app.require_subcommand(1);
  tessera::app::add_info_command(app);
  tessera::app::add_demo_command(app);
  tessera::app::add_profile_command(app);
  tessera::app::add_bench_command(app);
  tessera::app::add_calibrate_command(app);
  tessera::app::add_verify_command(app);
  tessera::app::add_tune_command(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}

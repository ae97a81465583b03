// `tessera info`: what Tessera sees on this machine and what it will use.
#include <fmt/format.h>

#include "commands.hpp"
#include "tessera/tessera.hpp"

namespace tessera::app {

namespace {
std::string mib(std::int64_t bytes) {
  return bytes >= (1 << 20) ? fmt::format("{} MiB", bytes >> 20) : fmt::format("{} KiB", bytes >> 10);
}
const char* yes(bool b) { return b ? "yes" : "no"; }

void print_info() {
  const hw::Info& hw = hw::info();
  const hw::Features& f = hw.features;
  Context ctx;
  fmt::print("cpu            {}\n", hw.cpu_name);
  fmt::print("cores          {}\n", hw.cores);
  fmt::print("caches         L1d {} | L2 {} | L3 {}  (per instance)\n", mib(hw.l1d_bytes), mib(hw.l2_bytes), mib(hw.l3_bytes));
  fmt::print("avx2 / fma     {} / {}   f16c {}\n", yes(f.avx2), yes(f.fma), yes(f.f16c));
  fmt::print("avx512         f {}  bw {}  vl {}  dq {}  bf16 {}  fp16 {}  vnni {}\n", yes(f.avx512f), yes(f.avx512bw),
             yes(f.avx512vl), yes(f.avx512dq), yes(f.avx512_bf16), yes(f.avx512_fp16), yes(f.avx512_vnni));
  fmt::print("avx-vnni       {}\n", yes(f.avx_vnni));
  fmt::print("amx            tile {}  bf16 {}  int8 {}  (OS permission {})\n", yes(f.amx_tile), yes(f.amx_bf16),
             yes(f.amx_int8), f.amx_tile ? (f.amx_permitted ? "granted" : "refused") : "n/a");
  fmt::print("isa            machine max {}, in use {} (TESSERA_ISA lowers it)\n", hw::to_string(hw.max_isa),
             hw::to_string(ctx.isa()));
  fmt::print("thread pool    tessera spin-then-sleep pool, {} threads (caller + {} workers)\n", ctx.pool().threads(),
             ctx.pool().threads() - 1);
}
}  // namespace

void add_info_command(CLI::App& app) {
  app.add_subcommand("info", "Show ISA features, cores, caches and the thread pool")->callback(print_info);
}

}  // namespace tessera::app

#pragma once
// What this machine is: ISA features (with the OS support they need), cores
// and cache sizes. Read once; tiling and dispatch read it from here.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessera::hw {

// ISA levels, lowest to highest. A kernel row needs one; TESSERA_ISA lowers
// the ceiling so that one machine can run (and test) every level.
//   avx2:        AVX2, FMA, F16C
//   avx512:      + AVX-512 F, BW, VL, DQ
//   avx512_bf16: + AVX512-BF16, AVX512-VNNI (vdpbf16ps, vpdpbusd: Cooper Lake, Zen 4)
//   amx:         + AVX512-FP16, AMX tile/BF16/INT8 (OS permission granted)
enum class Isa : std::uint8_t { scalar, avx2, avx512, avx512_bf16, amx };

std::string_view to_string(Isa isa);
std::optional<Isa> parse_isa(std::string_view name);

struct Features {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_bf16 = false, avx512_fp16 = false, avx512_vnni = false, avx_vnni = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  // Linux grants AMX tile data per process on request (arch_prctl); false when it refused.
  bool amx_permitted = false;
};

struct Info {
  std::string cpu_name;
  Features features;
  Isa max_isa = Isa::scalar;  // highest level both CPU and OS support
  int cores = 1;              // CPUs this process may run on
  std::int64_t l1d_bytes = 32 << 10;
  std::int64_t l2_bytes = 1 << 20;
  std::int64_t l3_bytes = 8 << 20;
};

const Info& info();

}  // namespace tessera::hw

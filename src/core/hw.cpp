#include "tessera/core/hw.hpp"

#include <cpuid.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <fstream>
#include <string>

namespace tessera::hw {

namespace {

struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned sub = 0) {
  Regs r;
  __cpuid_count(leaf, sub, r.a, r.b, r.c, r.d);
  return r;
}

bool bit(unsigned v, int i) { return (v >> i) & 1u; }

std::uint64_t xgetbv0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (std::uint64_t(hi) << 32) | lo;
}

// Linux hands out AMX tile state per process only on request.
bool request_amx_permission() {
  constexpr int kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  unsigned long mask = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &mask) != 0) return false;
  return (mask >> kXfeatureXtiledata) & 1u;
}

std::string brand_string() {
  if (cpuid(0x80000000u).a < 0x80000004u) return "unknown x86-64";
  std::array<unsigned, 12> words{};
  for (unsigned i = 0; i < 3; ++i) {
    const Regs r = cpuid(0x80000002u + i);
    words[i * 4 + 0] = r.a, words[i * 4 + 1] = r.b, words[i * 4 + 2] = r.c, words[i * 4 + 3] = r.d;
  }
  char text[49] = {};
  std::memcpy(text, words.data(), 48);
  std::string s(text);
  const auto first = s.find_first_not_of(' ');
  return first == std::string::npos ? std::string("unknown x86-64") : s.substr(first);
}

// "48K", "2048K", "300M" as sysfs prints them.
std::int64_t parse_size(const std::string& s) {
  if (s.empty()) return 0;
  std::int64_t v = std::stoll(s);
  switch (s.back()) {
    case 'K': return v << 10;
    case 'M': return v << 20;
    case 'G': return v << 30;
    default: return v;
  }
}

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// Cache sizes from CPUID, for machines whose kernel does not list them in
// sysfs (seen in a VM: AMD EPYC Turin under a hypervisor without
// /sys/devices/system/cpu/cpu0/cache). The cache-parameter leaf (Intel 4,
// AMD 0x8000001D) gives every level's size per instance; without it, AMD's
// legacy leaves give L1d and L2 only: their L3 field is whatever the
// hypervisor says of the package (that VM: 508 MiB for a 32 MiB CCD), so
// the L3 then stays at its default.
void read_caches_cpuid(Info& info) {
  const Regs vendor = cpuid(0);
  const bool intel = vendor.b == 0x756e6547u;  // "Genu"
  const unsigned max_ext = cpuid(0x80000000u).a;
  const bool amd_topology = !intel && max_ext >= 0x8000001Du && bit(cpuid(0x80000001u).c, 22);
  const unsigned leaf = intel && vendor.a >= 4 ? 4u : amd_topology ? 0x8000001Du : 0u;
  bool found = false;
  for (unsigned sub = 0; leaf != 0 && sub < 8; ++sub) {
    const Regs r = cpuid(leaf, sub);
    const unsigned type = r.a & 31u, level = (r.a >> 5) & 7u;  // type 1 data, 2 instruction, 3 unified
    if (type == 0) break;
    const std::int64_t size = std::int64_t((r.b >> 22) + 1) * (((r.b >> 12) & 0x3ffu) + 1) * ((r.b & 0xfffu) + 1) * (std::int64_t(r.c) + 1);
    if (level == 1 && type == 1) info.l1d_bytes = size, found = true;
    if (level == 2 && type != 2) info.l2_bytes = size, found = true;
    if (level == 3 && type != 2) info.l3_bytes = size, found = true;
  }
  if (found || intel || max_ext < 0x80000006u) return;
  if (const unsigned l1d_kib = cpuid(0x80000005u).c >> 24; l1d_kib > 0) info.l1d_bytes = std::int64_t(l1d_kib) << 10;
  if (const unsigned l2_kib = cpuid(0x80000006u).c >> 16; l2_kib > 0) info.l2_bytes = std::int64_t(l2_kib) << 10;
}

// Cache sizes as the kernel reports them for cpu0; sizes per instance.
void read_caches(Info& info) {
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    const std::string level = read_line(dir + "level");
    if (level.empty()) break;
    const std::string type = read_line(dir + "type");
    std::int64_t size = 0;
    try {
      size = parse_size(read_line(dir + "size"));
    } catch (...) {
      continue;
    }
    if (size <= 0) continue;
    if (level == "1" && type == "Data") info.l1d_bytes = size;
    if (level == "2") info.l2_bytes = size;
    if (level == "3") info.l3_bytes = size;
  }
}

Info detect() {
  Info info;
  info.cpu_name = brand_string();
  Features& f = info.features;
  const unsigned max_leaf = cpuid(0).a;
  const Regs l1 = cpuid(1);
  const bool osxsave = bit(l1.c, 27);
  const std::uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;            // XMM and YMM state
  const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;    // XTILECFG, XTILEDATA
  if (os_avx) {
    f.fma = bit(l1.c, 12);
    f.f16c = bit(l1.c, 29);
  }
  if (max_leaf >= 7) {
    const Regs l7 = cpuid(7, 0);
    const Regs l7s1 = cpuid(7, 1);
    if (os_avx) {
      f.avx2 = bit(l7.b, 5);
      f.avx_vnni = bit(l7s1.a, 4);
    }
    if (os_avx512) {
      f.avx512f = bit(l7.b, 16);
      f.avx512dq = bit(l7.b, 17);
      f.avx512bw = bit(l7.b, 30);
      f.avx512vl = bit(l7.b, 31);
      f.avx512_vnni = bit(l7.c, 11);
      f.avx512_fp16 = bit(l7.d, 23);
      f.avx512_bf16 = bit(l7s1.a, 5);
    }
    if (os_amx) {
      f.amx_bf16 = bit(l7.d, 22);
      f.amx_tile = bit(l7.d, 24);
      f.amx_int8 = bit(l7.d, 25);
    }
  }
  if (f.amx_tile) f.amx_permitted = request_amx_permission();

  if (f.avx2 && f.fma && f.f16c) info.max_isa = Isa::avx2;
  if (info.max_isa == Isa::avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq) info.max_isa = Isa::avx512;
  if (info.max_isa == Isa::avx512 && f.avx512_bf16 && f.avx512_vnni) info.max_isa = Isa::avx512_bf16;
  if (info.max_isa == Isa::avx512_bf16 && f.avx512_fp16 && f.amx_tile && f.amx_bf16 && f.amx_int8 && f.amx_permitted)
    info.max_isa = Isa::amx;

  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) info.cores = std::max(1, CPU_COUNT(&set));
  read_caches_cpuid(info);
  read_caches(info);  // sysfs, where it lists them, over CPUID
  return info;
}

constexpr std::array<std::string_view, 5> kIsaNames = {"scalar", "avx2", "avx512", "avx512_bf16", "amx"};

}  // namespace

std::string_view to_string(Isa isa) { return kIsaNames[static_cast<int>(isa)]; }

std::optional<Isa> parse_isa(std::string_view name) {
  for (std::size_t i = 0; i < kIsaNames.size(); ++i)
    if (kIsaNames[i] == name) return static_cast<Isa>(i);
  return std::nullopt;
}

const Info& info() {
  static const Info kInfo = detect();
  return kInfo;
}

}  // namespace tessera::hw

#pragma once
// This machine's measured limits: memory bandwidth and compute peaks, the
// roofline the profiler and the benches judge achieved rates against.
// `tessera calibrate` measures them once and caches them in a JSON file.
#include <string>

#include "tessera/core/status.hpp"

namespace tessera {

struct Calibration {
  std::string cpu_name;  // hw::info().cpu_name when measured; a file from another CPU is ignored on load
  int threads = 0;       // "all threads" is this many
  double read_gbps_1t = 0, read_gbps_all = 0;    // memory read bandwidth over arrays larger than the L3, GB/s
  double triad_gbps_1t = 0, triad_gbps_all = 0;  // STREAM triad, bytes read plus written, GB/s
  double fma_f32_gflops = 0;                     // all threads, AVX-512 FMA; 0 where absent
  double amx_bf16_gflops = 0, amx_int8_gops = 0;  // all threads; 0 where absent
};

// $TESSERA_CALIBRATION_FILE, else $XDG_CACHE_HOME/tessera/calibration.json,
// else $HOME/.cache/tessera/calibration.json (.cache/tessera/calibration.json
// under the working directory when HOME is unset).
std::string calibration_path();

// The cached calibration of this machine. unsupported when there is none:
// the file is absent, or was measured on another CPU. invalid_argument,
// naming the file (and the field), when it is not a calibration.
Result<Calibration> load_calibration(const std::string& path = calibration_path());

// Writes `c` to `path`, creating its directory.
Status save_calibration(const Calibration& c, const std::string& path = calibration_path());

}  // namespace tessera

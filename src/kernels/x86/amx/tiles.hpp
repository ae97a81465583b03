#pragma once
// AMX tile configuration shared by the AMX kernels. Static, like avx512/vec.hpp.
#include <immintrin.h>

#include <cstdint>

namespace tessera::kernels::amx {

struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

// Eight 16-row x 64-byte tiles: every operand tile is full; edges are zero-padded in the packed buffers.
static inline void configure_tiles() {
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) cfg.colsb[i] = 64, cfg.rows[i] = 16;
  _tile_loadconfig(&cfg);
}

}  // namespace tessera::kernels::amx

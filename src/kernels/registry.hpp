#pragma once
// The kernel registry: per op family, a table of rows ordered best first.
// A row names itself, the ISA level it needs, which problems it supports,
// how it tiles a problem for this machine, and the function that runs one
// tile. The op layer takes the first row that supports the problem under the
// context's ISA ceiling; the table always ends with the scalar reference row,
// which supports every valid problem.
//
// Kernel translation units under x86/<isa>/ are compiled with that ISA's
// flags. They include only family headers (plain structs and declarations)
// and keep their helpers `static`, so no ISA-specific copy of an inline
// function can leak into baseline code through the linker.
#include <span>
#include <string_view>

#include "tessera/core/hw.hpp"

namespace tessera::kernels {

template <class Family>
struct KernelRow {
  std::string_view name;
  hw::Isa isa;
  bool (*supports)(const typename Family::Problem&);
  typename Family::Tiling (*tiling)(const typename Family::Problem&, const hw::Info&);
  typename Family::Run run;
};

// Each family header declares `std::span<const KernelRow<F>> rows(F)`.
template <class Family>
const KernelRow<Family>* select(const typename Family::Problem& problem, hw::Isa ceiling) {
  for (const auto& row : rows(Family{}))
    if (row.isa <= ceiling && row.supports(problem)) return &row;
  return nullptr;
}

inline bool supports_all(const auto&) { return true; }

}  // namespace tessera::kernels

#pragma once
// Test harness: seeded random tensors, strided variants of them, the ISA
// levels to cover, and the assertion that compares a result with its
// reference using the library's tolerances (tessera/core/compare.hpp).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/tessera.hpp"

namespace tessera::testing {

// Unwraps a Result, failing the test (and aborting it) on error.
template <class T>
T value_or_die(Result<T> r) {
  if (!r.ok()) {
    ADD_FAILURE() << r.status().to_string();
    std::abort();
  }
  return std::move(r).value();
}

// Uniform values in [lo, hi), deterministic in `seed`, any float dtype.
Tensor random_tensor(DType dtype, const Shape& shape, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f);
void fill_random(const Tensor& t, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f);
// The same values as `t`, stored in a bigger buffer and viewed through a
// slice, so the result has gaps between rows (non-contiguous).
Tensor padded_copy(const Tensor& t, std::int64_t pad = 3);
Tensor zeros(DType dtype, const Shape& shape);
// A contiguous copy of t (to run in place on, or to compare with).
Tensor clone(const Tensor& t);

// ISA levels to test: every level up to this run's ceiling (TESSERA_ISA, else the machine's best).
std::vector<hw::Isa> isa_levels();
std::string isa_name(const ::testing::TestParamInfo<hw::Isa>& info);

// Float dtypes every op is tested with.
inline const std::vector<DType> kFloatTypes = {DType::f32, DType::bf16, DType::f16};

// Row lengths: minimum, odd, just past a vector, typical hidden sizes, large.
inline const std::vector<std::int64_t> kRowLengths = {1, 3, 17, 64, 255, 1000, 4096};

// Base of the tests that run an op at one ISA level (the parameter) and its
// reference at scalar.
class IsaTest : public ::testing::TestWithParam<hw::Isa> {
 protected:
  Context ctx_{{.isa = GetParam()}};
  Context ref_ctx_{{.isa = hw::Isa::scalar}};
  Stream stream_{ctx_};
  Stream ref_stream_{ref_ctx_};
};

::testing::AssertionResult close(const Tensor& got, const Tensor& ref, const Tolerance& tol);
// Bit-for-bit equality of two contiguous tensors of one desc.
::testing::AssertionResult identical(const Tensor& a, const Tensor& b);

// The message of a failed Status must name the argument at fault.
::testing::AssertionResult fails_naming(const Status& s, std::string_view argument);
template <class T>
::testing::AssertionResult fails_naming(const Result<T>& r, std::string_view argument) {
  return fails_naming(r.status(), argument);
}

}  // namespace tessera::testing

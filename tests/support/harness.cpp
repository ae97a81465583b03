#include "support/harness.hpp"

#include <cstring>

#include "core/element.hpp"
#include "core/strided.hpp"

namespace tessera::testing {

void fill_random(const Tensor& t, std::uint64_t seed, float lo, float hi) {
  const auto dims = detail::collapse<1>(t.shape(), {t.strides()});
  std::uint64_t state = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    state += 0x9e3779b97f4a7c15ull;  // splitmix64
    std::uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u = float(z >> 40) * 0x1p-24f;
    detail::store(t.data(), t.dtype(), dims.offsets(i)[0], lo + (hi - lo) * u);
  }
}

Tensor random_tensor(DType dtype, const Shape& shape, std::uint64_t seed, float lo, float hi) {
  Tensor t = value_or_die(Tensor::empty(dtype, shape));
  fill_random(t, seed, lo, hi);
  return t;
}

Tensor zeros(DType dtype, const Shape& shape) { return value_or_die(Tensor::zeros(dtype, shape)); }

Tensor padded_copy(const Tensor& t, std::int64_t pad) {
  Shape big = t.shape();
  big[big.rank() - 1] += pad;
  Tensor storage = value_or_die(Tensor::zeros(t.dtype(), big));
  Tensor view = value_or_die(storage.slice(big.rank() - 1, 0, t.shape()[t.rank() - 1]));
  EXPECT_TRUE(copy(t, view).ok());
  return view;
}

std::vector<hw::Isa> isa_levels() {
  std::vector<hw::Isa> levels;
  const hw::Isa top = isa_from_env(hw::info().max_isa);
  for (int i = 0; i <= int(top); ++i) levels.push_back(static_cast<hw::Isa>(i));
  return levels;
}

std::string isa_name(const ::testing::TestParamInfo<hw::Isa>& info) { return std::string(hw::to_string(info.param)); }

::testing::AssertionResult close(const Tensor& got, const Tensor& ref, const Tolerance& tol) {
  Result<Comparison> c = compare(got, ref, tol);
  if (!c.ok()) return ::testing::AssertionFailure() << c.status().to_string();
  if (c->passes(tol)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << c->to_string() << " (atol " << tol.atol << ", rtol " << tol.rtol << ")";
}

::testing::AssertionResult fails_naming(const Status& s, std::string_view argument) {
  if (s.ok()) return ::testing::AssertionFailure() << "expected an error naming '" << argument << "', got ok";
  if (s.message().find(std::string(argument) + ":") == std::string::npos &&
      s.message().find(std::string(argument) + " ") == std::string::npos)
    return ::testing::AssertionFailure() << "error does not name '" << argument << "': " << s.to_string();
  return ::testing::AssertionSuccess();
}

Tensor clone(const Tensor& t) {
  Tensor c = value_or_die(Tensor::empty(t.dtype(), t.shape()));
  EXPECT_TRUE(copy(t, c).ok());
  return c;
}

::testing::AssertionResult identical(const Tensor& a, const Tensor& b) {
  if (!(a.desc() == b.desc()) || !a.is_contiguous()) return ::testing::AssertionFailure() << "not comparable";
  if (std::memcmp(a.data(), b.data(), std::size_t(a.numel() * bytes_of(a.dtype()))) != 0)
    return ::testing::AssertionFailure() << "bits differ";
  return ::testing::AssertionSuccess();
}

}  // namespace tessera::testing

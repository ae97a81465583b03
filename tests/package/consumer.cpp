// Links against an installed Tessera and runs one op.
#include <tessera/tessera.hpp>

int main() {
  tessera::Context ctx;
  tessera::Stream stream(ctx);
  auto a = tessera::Tensor::zeros(tessera::DType::f32, {4, 8});
  auto b = tessera::Tensor::zeros(tessera::DType::f32, {8});
  if (!a.ok() || !b.ok()) return 1;
  return tessera::ops::add(stream, *a, *b, *a).ok() ? 0 : 1;
}

#pragma once
// Pieces every op file uses: argument checks with messages that name the
// argument, the run-time tensor checks, the plan-cache path of the one-shot
// functions, and the loop that splits a strided op across the pool.
#include <fmt/format.h>

#include <array>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/strided.hpp"
#include "tessera/ops/plan.hpp"
#include "tessera/runtime/context.hpp"
#include "tessera/runtime/profiler.hpp"

namespace tessera::ops::detail {

using tessera::detail::collapse;
using tessera::detail::StridedDims;

Status check_float(const TensorDesc& d, std::string_view name);
// Indices (gather, embedding ids, positions): i32 or i64.
Status check_index_dtype(const TensorDesc& d, std::string_view name);
Status check_rank(const TensorDesc& d, std::string_view name, int min_rank, int max_rank = kMaxRank);
// An axis of a tensor of `rank` dims, negative counting from the end, as 0 .. rank - 1 (an error naming axis).
Result<int> normalize_axis(int axis, int rank);
Status check_same_shape(const TensorDesc& d, std::string_view name, const Shape& expected, std::string_view expected_what);
// A tensor written by an op must not have stride 0 in a dim of size > 1.
Status check_writable(const TensorDesc& d, std::string_view name);

// Strides of `d` broadcast (numpy rules) to `shape`: 0 where d is broadcast.
Strides broadcast_strides(const TensorDesc& d, const Shape& shape);
// The same, after checking that `d` (named `name`) broadcasts to `shape`
// (`shape_what` names it in the error).
Result<Strides> check_broadcasts_to(const TensorDesc& d, std::string_view name, const Shape& shape, std::string_view shape_what);

// The run()-time checks: counts, descs equal to the plan's, data present.
Status check_tensors(std::string_view op, std::span<const Tensor> given, std::span<const TensorDesc> expected,
                     std::span<const std::string_view> names);
// `out` may not overlap `in`, unless `allow_same_view` and both are the same view (in-place).
Status check_overlap(const Tensor& out, std::string_view out_name, const Tensor& in, std::string_view in_name,
                     bool allow_same_view);

// The run()-time checks of an op from x to y that may not work in place:
// check_tensors of {x} and {y} against descs[0] and descs[1], and no overlap.
Status check_x_to_y(std::string_view op, std::span<const Tensor> in, std::span<const Tensor> out, const TensorDesc* descs);
// The same for one input named in_name and several outputs (descs[1..],
// named out_names), which may not overlap the input or each other.
Status check_one_to_outputs(std::string_view op, std::span<const Tensor> in, std::string_view in_name, std::span<const Tensor> out,
                            const TensorDesc* descs, std::span<const std::string_view> out_names);

// Plans through the context's cache (key: op, attributes, descs, ISA
// ceiling), and runs (the workspace from the memory pool, as Plan::run
// takes it). The profiler's host time starts here, plan lookup included.
template <class MakePlan>
Status run_cached(Stream& stream, const PlanKey& key, MakePlan&& make_plan, std::span<const Tensor> inputs,
                  std::span<const Tensor> outputs) {
  Context& ctx = stream.context();
  const auto host_start = ctx.profiler().enabled() ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  std::shared_ptr<const CachedPlan> cached = ctx.plans().find(key);
  if (!cached) {
    Result<PlanPtr> made = make_plan();
    if (!made.ok()) return made.status();
    cached = *made;
    ctx.plans().insert(key, cached);
  }
  return static_cast<const Plan&>(*cached).launch(stream, inputs, outputs, nullptr, host_start);
}

// Calls fn(offsets, i0, i1) for every piece of an (outer x inner) iteration
// space, split over the pool in tasks of `grain` inner units; `offsets` are
// the N operands' element offsets at the outer index.
template <int N, class F>
void parallel_over(ThreadPool& pool, const StridedDims<N>& outer, std::int64_t inner, std::int64_t grain, F&& fn) {
  if (inner <= 0) return;
  pool.parallel_for(outer.numel() * inner, grain, [&](std::int64_t b, std::int64_t e) {
    while (b < e) {
      const std::int64_t o = b / inner, i0 = b % inner, i1 = std::min(inner, i0 + (e - b));
      fn(outer.offsets(o), i0, i1);
      b += i1 - i0;
    }
  });
}

// An op run through copies of some operands, each made by a tiled reorder
// into a buffer in the plan's workspace: inputs copied in before the op,
// outputs out after it. For operands laid out so that the op's SIMD rows
// cannot take them (a transposed or permuted view), which the scalar row
// walked 15-35x slower (AMD EPYC Zen 3, [2048, 2048] f32 transposed, 1
// thread: silu 2.4 -> 64 ms, add 1.7 -> 24, softmax 3.7 -> 129, rms_norm 2.3
// -> 47). copy_of(d, output) names the buffer's layout for an input (or an
// output) d, nullopt for none; make plans the op on the descs given (its
// inputs, then its outputs, in its order). make runs on the operands as given first,
// so that its checks and messages come first; that plan is the result where
// nothing is copied, and at the scalar ISA ceiling. The copies show in the
// profiler as reorder entries of their own.
using CopyLayout = std::function<std::optional<TensorDesc>(const TensorDesc& d, bool output)>;
using MakePlan = std::function<Result<PlanPtr>(std::span<const TensorDesc> inputs, std::span<const TensorDesc> outputs)>;
Result<PlanPtr> plan_through_copies(Context& ctx, std::vector<TensorDesc> inputs, std::vector<TensorDesc> outputs,
                                    std::vector<std::string_view> input_names, std::vector<std::string_view> output_names,
                                    const CopyLayout& copy_of, const MakePlan& make);
// The row ops' (softmax, the norms) layout rule: an operand strided along
// its last dim is copied contiguous.
std::optional<TensorDesc> contiguous_if_strided_rows(const TensorDesc& d, bool output);

// The dims of y by stride, largest first; a stable order, so equal strides
// (size-1 dims) keep theirs. An elementwise op may visit its elements in any
// order: in this one its inner run is y's unit-stride dim wherever y has one,
// a permuted y (and inputs permuted alike) included.
std::array<int, kMaxRank> stride_order(const TensorDesc& y);

// collapse() of the dims taken in `order`.
template <int N>
StridedDims<N> collapse_in_order(const Shape& shape, const std::array<Strides, N>& strides, const std::array<int, kMaxRank>& order) {
  Shape s = Shape::filled(shape.rank(), 1);
  std::array<Strides, N> t;
  for (int k = 0; k < N; ++k) t[k] = Strides::filled(shape.rank(), 0);
  for (int i = 0; i < shape.rank(); ++i) {
    s[i] = shape[order[std::size_t(i)]];
    for (int k = 0; k < N; ++k) t[k][i] = strides[k][order[std::size_t(i)]];
  }
  return collapse<N>(s, t);
}

// Splits collapsed dims into (outer dims, last dim): the last dim becomes the
// kernel's run, the rest are walked by parallel_over.
template <int N>
struct SplitDims {
  StridedDims<N> outer;
  std::int64_t inner = 1;
  std::array<std::int64_t, N> inner_strides{};
};
template <int N>
SplitDims<N> split_last(StridedDims<N> dims) {
  SplitDims<N> s;
  if (dims.rank > 0) {
    --dims.rank;
    s.inner = dims.shape[dims.rank];
    for (int k = 0; k < N; ++k) s.inner_strides[k] = dims.strides[k][dims.rank];
  }
  s.outer = dims;
  return s;
}

// a * b for the traffic model, saturating at INT64_MAX: broadcast (stride 0)
// inputs can describe far more elements than memory holds.
inline std::int64_t saturating_mul(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

inline std::int64_t saturating_add(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

// Bytes an op moves for these tensors, each read or written once: a
// broadcast (stride 0) dim is counted once, as the data is.
std::int64_t traffic_bytes(std::initializer_list<TensorDesc> descs);

inline const char* byte_ptr(const Tensor& t) { return static_cast<const char*>(t.data()); }

}  // namespace tessera::ops::detail

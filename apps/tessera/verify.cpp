// `tessera verify`: the one-click regression. Each case (verify_cases.cpp) is
// planned under every ISA ceiling from avx2 up to this run's (TESSERA_ISA,
// else the machine's best). Every kernel row the op layer picks there runs on
// the case's inputs and is compared with what the scalar reference row gives
// on the same inputs, with compare.hpp's tolerances. A row is checked once per
// case, at the lowest level that picks it; the reference row itself is not
// checked. Exits 1 when any row fails.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "tessera/core/compare.hpp"
#include "tessera/core/hw.hpp"
#include "tessera/runtime/context.hpp"
#include "tessera/runtime/memory_pool.hpp"
#include "tessera/runtime/stream.hpp"
#include "verify.hpp"

namespace tessera::app {

namespace {

using verify::Case;
using verify::Output;
using verify::Problem;
using verify::Size;

struct VerifyOptions {
  std::string op;  // substring of the case's op name; empty: every case
  bool quick = false;
  bool json = false;
};

// One output of one kernel row on one case.
struct Row {
  std::string op, kernel, isa, dtype, shape;
  std::optional<Comparison> comparison;  // absent when the row could not be compared
  bool pass = false;
  std::string error;  // why it could not be compared
};

struct Totals {
  int checked = 0, failed = 0;
};

// Runs the plan on the problem's inputs into fresh zeroed outputs.
Result<std::vector<Tensor>> run(Context& ctx, const ops::Plan& plan, const Problem& problem) {
  std::vector<Tensor> outputs;
  for (const Output& o : problem.outputs) {
    TESSERA_ASSIGN_OR_RETURN(Tensor t, Tensor::zeros(o.desc.dtype, o.desc.shape));
    outputs.push_back(std::move(t));
  }
  MemoryPool::Block workspace;
  if (plan.workspace_bytes() > 0) {
    TESSERA_ASSIGN_OR_RETURN(workspace, ctx.memory().allocate(plan.workspace_bytes()));
  }
  Stream stream(ctx);
  TESSERA_RETURN_IF_ERROR(
      plan.run(stream, std::span<const Tensor>(problem.inputs), std::span<const Tensor>(outputs), workspace.data()));
  TESSERA_RETURN_IF_ERROR(stream.synchronize());
  return outputs;
}

// compare() reads no i4: a contiguous i4 tensor's values widened to i8.
Result<Tensor> widen_i4(const Tensor& t) {
  TESSERA_ASSIGN_OR_RETURN(Tensor wide, Tensor::empty(DType::i8, t.shape()));
  const auto* packed = t.data_as<std::uint8_t>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const int nibble = (packed[i / 2] >> (i % 2 * 4)) & 0xf;  // element 2k in the low nibble
    wide.data_as<std::int8_t>()[i] = std::int8_t(nibble >= 8 ? nibble - 16 : nibble);
  }
  return wide;
}

Result<Comparison> compare_output(const Tensor& got, const Tensor& ref, const Tolerance& tolerance) {
  if (got.dtype() != DType::i4) return compare(got, ref, tolerance);
  TESSERA_ASSIGN_OR_RETURN(Tensor got_wide, widen_i4(got));
  TESSERA_ASSIGN_OR_RETURN(Tensor ref_wide, widen_i4(ref));
  return compare(got_wide, ref_wide, tolerance);
}

constexpr std::string_view kTableFormat = "{:<38} {:<25} {:<11} {:<26} {:<44} {:>9} {:>9} {:>11} {:>9} {:>9}  {}\n";

void print_header() {
  fmt::print(kTableFormat, "op", "kernel", "isa", "dtype", "shape", "max_abs", "max_rel", "cosine", "nan g/r", "inf g/r",
             "result");
}

void print_row(const Row& r, bool json) {
  const char* result = r.pass ? "PASS" : "FAIL";
  if (json) {
    // ordered_json keeps the table's column order.
    nlohmann::ordered_json j;
    j["op"] = r.op;
    j["kernel"] = r.kernel;
    j["isa"] = r.isa;
    j["dtype"] = r.dtype;
    j["shape"] = r.shape;
    const Comparison* c = r.comparison ? &*r.comparison : nullptr;
    j["max_abs"] = c ? nlohmann::json(c->max_abs_error) : nlohmann::json(nullptr);
    j["max_rel"] = c ? nlohmann::json(c->max_rel_error) : nlohmann::json(nullptr);
    j["cosine"] = c ? nlohmann::json(c->cosine) : nlohmann::json(nullptr);
    j["nan_got"] = c ? nlohmann::json(c->nan_got) : nlohmann::json(nullptr);
    j["nan_ref"] = c ? nlohmann::json(c->nan_ref) : nlohmann::json(nullptr);
    j["inf_got"] = c ? nlohmann::json(c->inf_got) : nlohmann::json(nullptr);
    j["inf_ref"] = c ? nlohmann::json(c->inf_ref) : nlohmann::json(nullptr);
    j["result"] = result;
    j["error"] = r.error.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.error);
    fmt::print("{}\n", j.dump());
  } else if (r.comparison) {
    const Comparison& c = *r.comparison;
    fmt::print(kTableFormat, r.op, r.kernel, r.isa, r.dtype, r.shape, fmt::format("{:.3g}", c.max_abs_error),
               fmt::format("{:.3g}", c.max_rel_error), fmt::format("{:.8f}", c.cosine),
               fmt::format("{}/{}", c.nan_got, c.nan_ref), fmt::format("{}/{}", c.inf_got, c.inf_ref),
               c.mismatches > 0 ? fmt::format("{}  {} of {} outside tolerance", result, c.mismatches, c.count) : result);
  } else {
    fmt::print(kTableFormat, r.op, r.kernel, r.isa, r.dtype, r.shape, "-", "-", "-", "-", "-",
               fmt::format("{}  {}", result, r.error));
  }
  std::fflush(stdout);  // rows appear as they are checked: a full run takes a while
}

// Plans the case under the reference and every level, then runs each kernel
// row not seen before (for this case) and compares it with the reference.
void check_case(const Case& c, Context& ref_ctx, std::span<const std::unique_ptr<Context>> levels, bool json,
                Totals& totals) {
  auto report = [&](Row row) {
    ++totals.checked;
    if (!row.pass) ++totals.failed;
    print_row(row, json);
  };
  auto report_error = [&](std::string kernel, std::string_view isa, const Status& s) {
    report({c.op, std::move(kernel), std::string(isa), c.dtype, c.shape, std::nullopt, false, s.to_string()});
  };

  Result<Problem> problem = c.make();
  if (!problem.ok()) return report_error("-", "-", problem.status());
  Result<ops::PlanPtr> ref_plan = problem->plan(ref_ctx);
  if (!ref_plan.ok()) return report_error("-", hw::to_string(hw::Isa::scalar), ref_plan.status());

  std::set<std::string, std::less<>> seen = {std::string((*ref_plan)->kernel())};
  std::vector<std::pair<Context*, ops::PlanPtr>> picked;
  for (const std::unique_ptr<Context>& ctx : levels) {
    Result<ops::PlanPtr> plan = problem->plan(*ctx);
    if (!plan.ok())
      report_error("-", hw::to_string(ctx->isa()), plan.status());
    else if (seen.insert(std::string((*plan)->kernel())).second)
      picked.emplace_back(ctx.get(), *plan);
  }
  if (picked.empty()) return;

  const Result<std::vector<Tensor>> ref = run(ref_ctx, **ref_plan, *problem);
  for (const auto& [ctx, plan] : picked) {
    const std::string kernel(plan->kernel());
    if (!ref.ok()) {
      report_error(kernel, hw::to_string(ctx->isa()),
                   Status(ref.status().code(), fmt::format("reference row {}: {}", (*ref_plan)->kernel(), ref.status().message())));
      continue;
    }
    const Result<std::vector<Tensor>> got = run(*ctx, *plan, *problem);
    if (!got.ok()) {
      report_error(kernel, hw::to_string(ctx->isa()), got.status());
      continue;
    }
    for (std::size_t i = 0; i < problem->outputs.size(); ++i) {
      const Output& out = problem->outputs[i];
      Row row{problem->outputs.size() > 1 ? fmt::format("{}:{}", c.op, out.name) : c.op, kernel,
              std::string(hw::to_string(ctx->isa())), c.dtype, c.shape};
      Result<Comparison> comparison = compare_output((*got)[i], (*ref)[i], out.tolerance);
      if (comparison.ok()) {
        row.pass = comparison->passes(out.tolerance);
        row.comparison = *comparison;
      } else {
        row.error = comparison.status().to_string();
      }
      report(std::move(row));
    }
  }
}

// True when every checked row passes.
bool run_verify(const VerifyOptions& opt) {
  std::vector<Case> cases = verify::all_cases();
  std::erase_if(cases, [&](const Case& c) {
    return c.op.find(opt.op) == std::string::npos || (opt.quick && c.size > Size::odd);
  });
  if (cases.empty()) {
    fmt::print(stderr, "verify: no case's op name contains '{}'\n", opt.op);
    return false;
  }

  const auto start = std::chrono::steady_clock::now();
  const hw::Isa top = isa_from_env(hw::info().max_isa);
  Context ref_ctx{{.isa = hw::Isa::scalar}};
  std::vector<std::unique_ptr<Context>> levels;
  for (int isa = int(hw::Isa::avx2); isa <= int(top); ++isa)
    levels.push_back(std::make_unique<Context>(ContextOptions{.isa = static_cast<hw::Isa>(isa)}));
  if (levels.empty())
    fmt::print(stderr, "verify: the ISA ceiling is scalar (TESSERA_ISA): no row to check against the reference\n");
  if (!opt.json) {
    fmt::print("cpu {}, {} threads; reference: the scalar rows; checked: the rows picked under avx2 .. {} "
               "(TESSERA_ISA lowers the ceiling), each once, at the lowest level that picks it\n",
               hw::info().cpu_name, ref_ctx.pool().threads(), hw::to_string(top));
    print_header();
  }

  Totals totals;
  for (const Case& c : cases) check_case(c, ref_ctx, levels, opt.json, totals);

  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (opt.json) {
    nlohmann::ordered_json j;
    j["rows_checked"] = totals.checked;
    j["failed"] = totals.failed;
    j["seconds"] = seconds;
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("{} rows checked, {} failed ({:.1f} s)\n", totals.checked, totals.failed, seconds);
  }
  return totals.failed == 0;
}

}  // namespace

void add_verify_command(CLI::App& app) {
  static VerifyOptions opt;
  CLI::App* verify = app.add_subcommand(
      "verify",
      "Run every kernel row the op layer picks, at each ISA level up to this machine's (or TESSERA_ISA's), against "
      "the scalar reference row on min, odd, typical and large shapes and every dtype; exit 1 on any failure");
  verify->add_option("--op", opt.op, "only the cases whose op name contains this, e.g. norm, linear, attention");
  verify->add_flag("--quick", opt.quick, "only the min and odd shapes");
  verify->add_flag("--json", opt.json, "one JSON object per line instead of a table");
  // CLI11_PARSE turns a RuntimeError into main's return value, without a message.
  verify->callback([] {
    if (!run_verify(opt)) throw CLI::RuntimeError(1);
  });
}

}  // namespace tessera::app

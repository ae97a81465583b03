// The tuning store (`tessera tune`'s file) and how GEMM plans use it: an
// override valid for the plan's kernel row replaces the row's tiling and
// leaves the result as the default tiling computes it; any other is ignored.
#include "tessera/runtime/tuning.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "support/harness.hpp"
#include "support/temp_dir.hpp"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;
using Setting = std::vector<std::int64_t>;

// A directory of its own per test (TempDirTest).
class TuningTest : public TempDirTest {
 protected:
  TuningTest() : TempDirTest("tessera_tuning") {}
};

TEST_F(TuningTest, RoundTripsThroughANewDirectory) {
  const std::string file = path("nested/cache/tuning.json");
  TuningStore store(file);
  EXPECT_EQ(store.path(), file);
  EXPECT_EQ(store.size(), 0u);
  store.set("row_a:f32.f32.f32:packed:b1:m1:n2:k3:t4", {14, 64, 192});
  store.set("row \"b\"", {});
  store.set("row_c", {-1, 0, std::int64_t(1) << 40});
  ASSERT_TRUE(store.save().ok());

  TuningStore loaded(file);
  EXPECT_EQ(loaded.size(), 3u);
  EXPECT_EQ(loaded.find("row_a:f32.f32.f32:packed:b1:m1:n2:k3:t4"), std::optional(Setting{14, 64, 192}));
  EXPECT_EQ(loaded.find("row \"b\""), std::optional<Setting>(Setting{}));
  EXPECT_EQ(loaded.find("row_c"), std::optional(Setting{-1, 0, std::int64_t(1) << 40}));
  EXPECT_EQ(loaded.find("absent"), std::nullopt);

  loaded.set("row_c", {7});  // set replaces
  loaded.erase("row \"b\"");
  ASSERT_TRUE(loaded.save().ok());
  TuningStore again(file);
  EXPECT_EQ(again.size(), 2u);
  EXPECT_EQ(again.find("row_c"), std::optional(Setting{7}));
  EXPECT_EQ(again.find("row \"b\""), std::nullopt);
  EXPECT_EQ(std::distance(fs::directory_iterator(fs::path(file).parent_path()), fs::directory_iterator()), 1);

  again.clear();
  EXPECT_EQ(again.size(), 0u);
  ASSERT_TRUE(again.save().ok());
  EXPECT_EQ(TuningStore(file).size(), 0u);
}

TEST_F(TuningTest, MissingOrMalformedFileIsEmpty) {
  EXPECT_EQ(TuningStore(path("absent.json")).size(), 0u);
  const std::string file = path("tuning.json");
  for (const char* text : {"{\"key\": [1, 2", "[[1, 2]]", "{\"key\": [1, \"two\"]}", "{\"key\": 3}",
                           "{\"a\": [1], \"b\": [1.5]}", ""}) {
    SCOPED_TRACE(text);
    write(file, text);
    TuningStore store(file);
    EXPECT_EQ(store.size(), 0u);
    store.set("key", {1});  // and the next save replaces the file
    ASSERT_TRUE(store.save().ok());
    EXPECT_EQ(TuningStore(file).find("key"), std::optional(Setting{1}));
  }
}

TEST_F(TuningTest, DefaultPathIsTheVariableElseTheUserCache) {
  const char* old = std::getenv("TESSERA_TUNING_FILE");
  const std::optional<std::string> saved = old ? std::optional<std::string>(old) : std::nullopt;
  setenv("TESSERA_TUNING_FILE", "/opt/tuning.json", 1);
  EXPECT_EQ(TuningStore::default_path(), "/opt/tuning.json");
  EXPECT_EQ(Context().tuning().path(), "/opt/tuning.json");
  unsetenv("TESSERA_TUNING_FILE");
  EXPECT_TRUE(TuningStore::default_path().ends_with("tessera/tuning.json")) << TuningStore::default_path();
  if (saved) setenv("TESSERA_TUNING_FILE", saved->c_str(), 1);
}

// A GEMM with weights packed as `dtype`, planned in a context whose tuning
// file is the test's own.
class GemmTuningTest : public TuningTest, public ::testing::WithParamInterface<DType> {
 protected:
  static constexpr std::int64_t kM = 100, kK = 200, kN = 300;

  Context& context() {
    if (!ctx_) ctx_.emplace(ContextOptions{.tuning_file = path("tuning.json")});
    return *ctx_;
  }
  ops::PlanPtr plan(Context& ctx) {
    return value_or_die(ops::Linear::plan(ctx, a_.desc(), weights_, c_.desc()));
  }
  static Setting values(const ops::Plan& p) {
    Setting s;
    for (const ops::TuningParam& t : p.tuning_params()) s.push_back(t.value);
    return s;
  }
  // The plan's setting with every parameter named in `vary` at another of its candidates.
  static Setting other_setting(const ops::Plan& p, std::initializer_list<std::string_view> vary) {
    Setting s;
    for (const ops::TuningParam& t : p.tuning_params()) {
      s.push_back(t.value);
      if (std::ranges::find(vary, t.name) == vary.end() || t.candidates.size() < 2) continue;
      s.back() = t.candidates.front() != t.value ? t.candidates.front() : t.candidates.back();
    }
    return s;
  }
  Tensor run(const ops::Plan& p) {
    Tensor c = zeros(DType::f32, {kM, kN});
    Stream stream(context());
    const Tensor in[] = {a_}, out[] = {c};
    EXPECT_TRUE(p.run(stream, in, out).ok());
    return c;
  }

  std::optional<Context> ctx_;
  ops::WeightsPtr weights_ = value_or_die(ops::pack_weights(random_tensor(DType::f32, {kK, kN}, 1), GetParam()));
  Tensor a_ = random_tensor(DType::f32, {kM, kK}, 2);
  Tensor c_ = zeros(DType::f32, {kM, kN});
};

TEST_P(GemmTuningTest, KeyNamesTheRowDtypesAndProblem) {
  const ops::PlanPtr p = plan(context());
  if (p->tuning_key().empty()) GTEST_SKIP() << p->kernel() << " is not tuned";
  EXPECT_EQ(p->tuning_key(), fmt::format("{}:f32.{}.f32:packed:b1:m{}:n{}:k{}:t{}", p->kernel(), to_string(GetParam()),
                                         kM, kN, kK, context().pool().threads()));
  for (const ops::TuningParam& t : p->tuning_params()) {
    SCOPED_TRACE(t.name);
    EXPECT_TRUE(std::ranges::is_sorted(t.candidates));
    EXPECT_NE(std::ranges::find(t.candidates, t.value), t.candidates.end());
    EXPECT_GE(t.candidates.size(), 2u);  // every dimension spans several blocks here
  }
}

TEST_P(GemmTuningTest, PlanUsesAValidOverrideFromTheStoreAndTheFile) {
  const ops::PlanPtr p = plan(context());
  if (p->tuning_key().empty()) GTEST_SKIP() << p->kernel() << " is not tuned";
  const Setting tuned = other_setting(*p, {"m_block", "n_block", "k_block"});
  ASSERT_NE(tuned, values(*p));
  context().tuning().set(p->tuning_key(), tuned);
  EXPECT_EQ(values(*plan(context())), tuned);

  // Saved, it is what the next context's plans use (dispatch reads the file at start-up).
  ASSERT_TRUE(context().tuning().save().ok());
  Context next({.tuning_file = path("tuning.json")});
  const ops::PlanPtr again = plan(next);
  EXPECT_EQ(again->kernel(), p->kernel());
  EXPECT_EQ(values(*again), tuned);
}

TEST_P(GemmTuningTest, InvalidOverrideIsIgnored) {
  const ops::PlanPtr p = plan(context());
  if (p->tuning_key().empty()) GTEST_SKIP() << p->kernel() << " is not tuned";
  const Setting defaults = values(*p);
  std::vector<Setting> invalid = {{}, Setting(defaults.size() + 1, defaults.front())};
  for (std::size_t i = 0; i < defaults.size(); ++i) {
    const std::int64_t largest = p->tuning_params()[i].candidates.back();
    for (std::int64_t bad : {std::int64_t(0), std::int64_t(-defaults[i]), defaults[i] + 1, 1000 * largest}) {
      invalid.push_back(defaults);
      invalid.back()[i] = bad;
    }
  }
  for (const Setting& bad : invalid) {
    SCOPED_TRACE(fmt::format("{}", fmt::join(bad, " ")));
    context().tuning().set(p->tuning_key(), bad);
    EXPECT_EQ(values(*plan(context())), defaults);
  }
}

TEST_P(GemmTuningTest, TunedResultEqualsTheDefault) {
  const ops::PlanPtr p = plan(context());
  if (p->tuning_key().empty()) GTEST_SKIP() << p->kernel() << " is not tuned";
  const Tensor expected = run(*p);
  // Other blocks of M and N: each element is the same sum, computed the same way.
  context().tuning().set(p->tuning_key(), other_setting(*p, {"m_block", "n_block"}));
  EXPECT_TRUE(identical(run(*plan(context())), expected));
  // Other K slices too: within the GEMM tolerance (bf16 weights are computed through bf16).
  context().tuning().set(p->tuning_key(), other_setting(*p, {"m_block", "n_block", "k_block"}));
  const ops::PlanPtr all = plan(context());
  EXPECT_TRUE(close(run(*all), expected, tolerance_for(GetParam() == DType::f32 ? DType::f32 : DType::bf16, kK)));
}

INSTANTIATE_TEST_SUITE_P(Weights, GemmTuningTest, ::testing::Values(DType::f32, DType::bf16),
                         [](const ::testing::TestParamInfo<DType>& info) { return std::string(to_string(info.param)); });

}  // namespace
}  // namespace tessera::testing

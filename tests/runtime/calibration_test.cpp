#include "tessera/runtime/calibration.hpp"

#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <map>
#include <optional>
#include <string>

#include "support/harness.hpp"
#include "support/temp_dir.hpp"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

// A directory of its own per test (TempDirTest).
class CalibrationTest : public TempDirTest {
 protected:
  CalibrationTest() : TempDirTest("tessera_calibration") {}

  static Calibration measured_here() {
    return {.cpu_name = hw::info().cpu_name,
            .threads = 2,
            .read_gbps_1t = 12.345678901234,
            .read_gbps_all = 21.5,
            .triad_gbps_1t = 11.25,
            .triad_gbps_all = 19.0625,
            .fma_f32_gflops = 203.7,
            .amx_bf16_gflops = 0,
            .amx_int8_gops = 1e-3};
  }
};

TEST_F(CalibrationTest, RoundTripsThroughANewDirectory) {
  const std::string file = path("nested/cache/calibration.json");
  const Calibration c = measured_here();
  ASSERT_TRUE(save_calibration(c, file).ok());
  const Calibration loaded = value_or_die(load_calibration(file));
  EXPECT_EQ(loaded.cpu_name, c.cpu_name);
  EXPECT_EQ(loaded.threads, c.threads);
  EXPECT_EQ(loaded.read_gbps_1t, c.read_gbps_1t);
  EXPECT_EQ(loaded.read_gbps_all, c.read_gbps_all);
  EXPECT_EQ(loaded.triad_gbps_1t, c.triad_gbps_1t);
  EXPECT_EQ(loaded.triad_gbps_all, c.triad_gbps_all);
  EXPECT_EQ(loaded.fma_f32_gflops, c.fma_f32_gflops);
  EXPECT_EQ(loaded.amx_bf16_gflops, c.amx_bf16_gflops);
  EXPECT_EQ(loaded.amx_int8_gops, c.amx_int8_gops);

  Calibration again = c;  // saving again replaces the file
  again.threads = 4;
  ASSERT_TRUE(save_calibration(again, file).ok());
  EXPECT_EQ(value_or_die(load_calibration(file)).threads, 4);
  EXPECT_EQ(std::distance(fs::directory_iterator(fs::path(file).parent_path()), fs::directory_iterator()), 1);
}

TEST_F(CalibrationTest, MissingFileIsNone) {
  const Result<Calibration> r = load_calibration(path("absent.json"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::unsupported) << r.status().to_string();
}

TEST_F(CalibrationTest, OtherCpuIsNone) {
  const std::string file = path("calibration.json");
  Calibration c = measured_here();
  c.cpu_name += " (another machine)";
  ASSERT_TRUE(save_calibration(c, file).ok());
  const Result<Calibration> r = load_calibration(file);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::unsupported) << r.status().to_string();
}

TEST_F(CalibrationTest, MalformedFileIsAnErrorNamingItAndTheField) {
  const std::string file = path("calibration.json");
  write(file, "{\"cpu_name\": ");
  Result<Calibration> r = load_calibration(file);
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument) << r.status().to_string();
  EXPECT_TRUE(fails_naming(r, file));

  write(file, "[1, 2]");
  EXPECT_TRUE(fails_naming(load_calibration(file), file));

  const std::string cpu = fmt::format("\"cpu_name\": \"{}\"", hw::info().cpu_name);
  write(file, fmt::format("{{{}, \"threads\": \"two\"}}", cpu));
  r = load_calibration(file);
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument) << r.status().to_string();
  EXPECT_TRUE(fails_naming(r, file));
  EXPECT_TRUE(fails_naming(r, "threads"));

  write(file, fmt::format("{{{}, \"threads\": 2}}", cpu));  // no rates
  EXPECT_TRUE(fails_naming(load_calibration(file), "read_gbps_1t"));
}

TEST_F(CalibrationTest, SaveRefusesWhatLoadWouldRefuse) {
  Calibration c = measured_here();
  c.threads = 0;
  EXPECT_TRUE(fails_naming(save_calibration(c, path("a.json")), "threads"));
  c = measured_here();
  c.triad_gbps_all = -1;
  EXPECT_TRUE(fails_naming(save_calibration(c, path("b.json")), "triad_gbps_all"));
  EXPECT_FALSE(fs::exists(dir_));
}

// Sets environment variables for one scope and restores them after.
class ScopedEnv {
 public:
  void set(const char* name, const char* value) {
    if (!saved_.contains(name)) {
      const char* old = std::getenv(name);
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value) setenv(name, value, 1); else unsetenv(name);
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_)
      if (value) setenv(name.c_str(), value->c_str(), 1); else unsetenv(name.c_str());
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST(CalibrationPath, FileThenXdgThenHome) {
  ScopedEnv env;
  env.set("TESSERA_CALIBRATION_FILE", "/opt/cal.json");
  env.set("XDG_CACHE_HOME", "/xdg");
  env.set("HOME", "/home/u");
  EXPECT_EQ(calibration_path(), "/opt/cal.json");
  env.set("TESSERA_CALIBRATION_FILE", nullptr);
  EXPECT_EQ(calibration_path(), "/xdg/tessera/calibration.json");
  env.set("XDG_CACHE_HOME", "relative");  // the XDG spec has it ignored
  EXPECT_EQ(calibration_path(), "/home/u/.cache/tessera/calibration.json");
  env.set("XDG_CACHE_HOME", "");
  EXPECT_EQ(calibration_path(), "/home/u/.cache/tessera/calibration.json");
}

}  // namespace
}  // namespace tessera::testing

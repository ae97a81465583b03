#pragma once
// A test fixture with a directory of its own per test, under gtest's
// TempDir and named after the prefix, the process and the test; it is
// removed before and after the test.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace tessera::testing {

class TempDirTest : public ::testing::Test {
 protected:
  explicit TempDirTest(std::string_view prefix)
      : dir_(std::filesystem::path(::testing::TempDir()) / fmt::format("{}_{}_{}", prefix, ::getpid(), test_name())) {
    std::filesystem::remove_all(dir_);
  }
  ~TempDirTest() override { std::filesystem::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Writes `text` to `file`, creating its directories.
  void write(const std::string& file, const std::string& text) const {
    std::filesystem::create_directories(std::filesystem::path(file).parent_path());
    std::ofstream(file) << text;
  }

  std::filesystem::path dir_;

 private:
  // The test's name as one path component: a parameterized test's ends in
  // "/<param>", which made the directory a child of one left behind.
  static std::string test_name() {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::ranges::replace(name, '/', '_');
    return name;
  }
};

}  // namespace tessera::testing

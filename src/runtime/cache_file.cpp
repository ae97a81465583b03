#include "runtime/cache_file.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace tessera::detail {

namespace {

namespace fs = std::filesystem;

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

}  // namespace

std::string user_cache_file(const char* env_variable, std::string_view file_name) {
  if (const char* file = env(env_variable)) return file;
  fs::path cache_home = ".cache";  // relative to the working directory when neither variable is set
  // The XDG spec has a relative XDG_CACHE_HOME ignored.
  if (const char* xdg = env("XDG_CACHE_HOME"); xdg != nullptr && *xdg == '/') {
    cache_home = xdg;
  } else if (const char* home = env("HOME")) {
    cache_home = fs::path(home) / ".cache";
  }
  return (cache_home / "tessera" / file_name).string();
}

Status replace_file(const std::string& path, std::string_view contents) {
  const fs::path file(path);
  std::error_code ec;
  if (file.has_parent_path()) fs::create_directories(file.parent_path(), ec);
  if (ec)
    return Status::invalid_argument(
        fmt::format("path: cannot create the directory {}: {}", file.parent_path().string(), ec.message()));
  const fs::path partial = fmt::format("{}.{}.partial", path, ::getpid());
  {
    std::ofstream out(partial);
    out << contents;
    out.close();
    if (!out) {
      fs::remove(partial, ec);
      return Status::invalid_argument(fmt::format("path: cannot write {}", partial.string()));
    }
  }
  fs::rename(partial, file, ec);
  if (ec) {
    const std::string reason = ec.message();
    fs::remove(partial, ec);
    return Status::invalid_argument(fmt::format("path: cannot replace {}: {}", path, reason));
  }
  return {};
}

Result<std::optional<nlohmann::json>> read_json_file(const std::string& path, std::string_view what) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !ec) return std::optional<nlohmann::json>{};
  std::ifstream in(path);
  if (!in) return Status::invalid_argument(fmt::format("path: {} {} cannot be read", what, path));
  try {
    return std::optional(nlohmann::json::parse(in));
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(fmt::format("{} {}: not valid JSON: {}", what, path, e.what()));
  }
}

}  // namespace tessera::detail

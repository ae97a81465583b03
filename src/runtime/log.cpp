#include "tessera/runtime/log.hpp"

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace tessera {

namespace {
constexpr std::array<std::string_view, 4> kLevelNames = {"error", "warn", "info", "debug"};

LogLevel level_from_env() {
  const char* env = std::getenv("TESSERA_LOG");
  if (env == nullptr) return LogLevel::warn;
  for (std::size_t i = 0; i < kLevelNames.size(); ++i)
    if (kLevelNames[i] == env) return static_cast<LogLevel>(i);
  std::fprintf(stderr, "[tessera warn] TESSERA_LOG=%s is not one of error|warn|info|debug; using warn\n", env);
  return LogLevel::warn;
}

std::atomic<LogLevel>& level_ref() {
  static std::atomic<LogLevel> level{level_from_env()};
  return level;
}
}  // namespace

LogLevel log_level() { return level_ref().load(std::memory_order_relaxed); }
void set_log_level(LogLevel level) { level_ref().store(level, std::memory_order_relaxed); }

void log_message(LogLevel level, std::string_view message) {
  if (level > log_level()) return;
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  std::fprintf(stderr, "[tessera %.*s] %.*s\n", int(kLevelNames[int(level)].size()), kLevelNames[int(level)].data(),
               int(message.size()), message.data());
}

}  // namespace tessera

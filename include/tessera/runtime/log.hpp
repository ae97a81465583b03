#pragma once
// Logging with levels, set by TESSERA_LOG=error|warn|info|debug (default warn).
#include <string_view>

namespace tessera {

enum class LogLevel { error, warn, info, debug };

LogLevel log_level();
void set_log_level(LogLevel level);
// Writes "[tessera warn] message" to stderr when `level` is enabled.
void log_message(LogLevel level, std::string_view message);

}  // namespace tessera

#pragma once
// TESSERA_LOG_AT(level, "fmt {}", args...): formats only when the level is on.
#include <fmt/format.h>

#include "tessera/runtime/log.hpp"

#define TESSERA_LOG_AT(level, ...)                                                                 \
  do {                                                                                             \
    if ((level) <= ::tessera::log_level()) ::tessera::log_message((level), fmt::format(__VA_ARGS__)); \
  } while (0)

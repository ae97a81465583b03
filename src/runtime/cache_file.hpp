#pragma once
// The files Tessera keeps per user (the calibration, the tuning store): where
// they live, and how a new version replaces the old.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

#include "tessera/core/status.hpp"

namespace tessera::detail {

// $<env_variable>, else $XDG_CACHE_HOME/tessera/<file_name>, else
// $HOME/.cache/tessera/<file_name> (.cache/tessera/<file_name> under the
// working directory when HOME is unset). An empty variable counts as unset.
std::string user_cache_file(const char* env_variable, std::string_view file_name);

// Writes `contents` to `path`, creating its directory. The text goes to a
// file beside it that is then renamed over it, so that a reader (or another
// writer) never sees half of it. Errors name the argument "path".
Status replace_file(const std::string& path, std::string_view contents);

// The JSON in the file at `path`; nullopt when there is no such file. Errors
// (unreadable, not JSON) name the file as "<what> <path>".
Result<std::optional<nlohmann::json>> read_json_file(const std::string& path, std::string_view what);

}  // namespace tessera::detail

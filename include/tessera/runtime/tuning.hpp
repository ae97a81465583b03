#pragma once
// Tiling overrides found by `tessera tune`: per key (a kernel row and a
// problem: ops::Plan::tuning_key()), the row's tiling parameters in the order
// ops::Plan::tuning_params() lists them. A Context loads its store when it is
// made, and the plans made in it use the overrides that are valid for their
// row. The file is a JSON object from key to an array of integers.
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tessera/core/status.hpp"

namespace tessera {

class TuningStore {
 public:
  // $TESSERA_TUNING_FILE, else $XDG_CACHE_HOME/tessera/tuning.json, else
  // $HOME/.cache/tessera/tuning.json (as calibration_path()).
  static std::string default_path();

  // Loads `path`. An absent file is an empty store; so is a malformed one,
  // with a warning in the log (the next save() replaces it).
  explicit TuningStore(std::string path = default_path());
  TuningStore(const TuningStore&) = delete;
  TuningStore& operator=(const TuningStore&) = delete;

  // Safe to call from any thread, alongside each other.
  std::optional<std::vector<std::int64_t>> find(const std::string& key) const;
  void set(const std::string& key, std::vector<std::int64_t> params);
  void erase(const std::string& key);
  void clear();
  std::size_t size() const;

  const std::string& path() const { return path_; }
  // Writes every entry to path(), creating its directory; a reader never sees half a file.
  Status save() const;

 private:
  const std::string path_;
  mutable std::mutex mutex_;
  std::map<std::string, std::vector<std::int64_t>> entries_;
};

}  // namespace tessera

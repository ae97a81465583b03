#include "tessera/runtime/tuning.hpp"

#include <nlohmann/json.hpp>
#include <utility>

#include "runtime/cache_file.hpp"
#include "runtime/log_format.hpp"

namespace tessera {

namespace {

using json = nlohmann::json;
using Entries = std::map<std::string, std::vector<std::int64_t>>;

// The entries of the file at `path`; none when there is no file.
Result<Entries> load(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::optional<json> file, detail::read_json_file(path, "tuning file"));
  if (!file) return Entries{};
  const json& j = *file;
  if (!j.is_object())
    return Status::invalid_argument(fmt::format("tuning file {}: expected a JSON object, got {}", path, j.type_name()));
  Entries entries;
  for (const auto& [key, params] : j.items()) {
    bool integers = params.is_array();
    for (const json& p : params) integers = integers && p.is_number_integer();
    if (!integers)
      return Status::invalid_argument(fmt::format("tuning file {}: key {}: expected an array of integers, got {}", path,
                                                  key, params.dump(-1, ' ', false, json::error_handler_t::replace)));
    entries[key] = params.get<std::vector<std::int64_t>>();
  }
  return entries;
}

}  // namespace

std::string TuningStore::default_path() { return detail::user_cache_file("TESSERA_TUNING_FILE", "tuning.json"); }

TuningStore::TuningStore(std::string path) : path_(std::move(path)) {
  Result<Entries> loaded = load(path_);
  if (loaded.ok()) {
    entries_ = std::move(loaded).value();
  } else {
    TESSERA_LOG_AT(LogLevel::warn, "{}; plans use their default tilings (`tessera tune` replaces the file)",
                   loaded.status().message());
  }
}

std::optional<std::vector<std::int64_t>> TuningStore::find(const std::string& key) const {
  std::lock_guard lock(mutex_);
  const auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void TuningStore::set(const std::string& key, std::vector<std::int64_t> params) {
  std::lock_guard lock(mutex_);
  entries_[key] = std::move(params);
}

void TuningStore::erase(const std::string& key) {
  std::lock_guard lock(mutex_);
  entries_.erase(key);
}

void TuningStore::clear() {
  std::lock_guard lock(mutex_);
  entries_.clear();
}

std::size_t TuningStore::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

Status TuningStore::save() const {
  // One entry per line, so that the file reads (and diffs) by key.
  std::string text = "{";
  {
    std::lock_guard lock(mutex_);
    const char* separator = "\n";
    for (const auto& [key, params] : entries_) {
      text += fmt::format("{}  {}: {}", separator, json(key).dump(-1, ' ', false, json::error_handler_t::replace),
                          json(params).dump());
      separator = ",\n";
    }
  }
  text += "\n}\n";
  return detail::replace_file(path_, text);
}

}  // namespace tessera

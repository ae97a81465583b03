#include "tessera/runtime/calibration.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>

#include "runtime/cache_file.hpp"
#include "tessera/core/hw.hpp"

namespace tessera {

namespace {

using json = nlohmann::ordered_json;  // the file lists the fields in the struct's order

// The rates, by their names in the file.
struct RateField {
  const char* name;
  double Calibration::*member;
};
constexpr RateField kRates[] = {
    {"read_gbps_1t", &Calibration::read_gbps_1t},      {"read_gbps_all", &Calibration::read_gbps_all},
    {"triad_gbps_1t", &Calibration::triad_gbps_1t},    {"triad_gbps_all", &Calibration::triad_gbps_all},
    {"fma_f32_gflops", &Calibration::fma_f32_gflops},  {"amx_bf16_gflops", &Calibration::amx_bf16_gflops},
    {"amx_int8_gops", &Calibration::amx_int8_gops},
};

json to_json(const Calibration& c) {
  json j = {{"cpu_name", c.cpu_name}, {"threads", c.threads}};
  for (const RateField& f : kRates) j[f.name] = c.*f.member;
  return j;
}

// The calibration `j` holds; `what` (the file, or the argument) heads the
// message when a field is missing or out of range.
Result<Calibration> from_json(const json& j, std::string_view what) {
  if (!j.is_object())
    return Status::invalid_argument(fmt::format("{}: expected a JSON object, got {}", what, j.type_name()));
  auto bad = [&](std::string_view field, std::string_view expected) {
    const auto it = j.find(field);
    const std::string got = it == j.end() ? "nothing" : it->dump(-1, ' ', false, json::error_handler_t::replace);
    return Status::invalid_argument(fmt::format("{}: field {}: expected {}, got {}", what, field, expected, got));
  };
  Calibration c;
  const auto cpu = j.find("cpu_name");
  if (cpu == j.end() || !cpu->is_string()) return bad("cpu_name", "a string");
  c.cpu_name = cpu->get<std::string>();
  const auto threads = j.find("threads");
  if (threads == j.end() || !threads->is_number_integer() || threads->get<std::int64_t>() < 1 ||
      threads->get<std::int64_t>() > std::numeric_limits<int>::max())
    return bad("threads", "an integer >= 1");
  c.threads = threads->get<int>();
  for (const RateField& f : kRates) {
    const auto rate = j.find(f.name);
    if (rate == j.end() || !rate->is_number() || !std::isfinite(rate->get<double>()) || rate->get<double>() < 0)
      return bad(f.name, "a finite number >= 0");
    c.*f.member = rate->get<double>();
  }
  return c;
}

}  // namespace

std::string calibration_path() { return detail::user_cache_file("TESSERA_CALIBRATION_FILE", "calibration.json"); }

Result<Calibration> load_calibration(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::optional<json> j, detail::read_json_file(path, "calibration file"));
  if (!j) return Status::unsupported(fmt::format("path: no calibration at {} (`tessera calibrate` writes it)", path));
  TESSERA_ASSIGN_OR_RETURN(Calibration c, from_json(*j, fmt::format("calibration file {}", path)));
  if (c.cpu_name != hw::info().cpu_name)
    return Status::unsupported(fmt::format("calibration file {}: measured on \"{}\", not on this CPU (\"{}\")", path,
                                           c.cpu_name, hw::info().cpu_name));
  return c;
}

Status save_calibration(const Calibration& c, const std::string& path) {
  const json j = to_json(c);
  // Nothing is written that load_calibration would refuse.
  TESSERA_RETURN_IF_ERROR(from_json(j, "c").status());
  return detail::replace_file(path, j.dump(2, ' ', false, json::error_handler_t::replace) + '\n');
}

}  // namespace tessera

#include "tessera/core/status.hpp"

namespace tessera {

std::string_view to_string(StatusCode code) {
  switch (code) {
    case StatusCode::ok: return "ok";
    case StatusCode::invalid_argument: return "invalid_argument";
    case StatusCode::out_of_range: return "out_of_range";
    case StatusCode::unsupported: return "unsupported";
    case StatusCode::out_of_memory: return "out_of_memory";
    case StatusCode::internal: return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(tessera::to_string(code_)) + ": " + message_;
}

}  // namespace tessera

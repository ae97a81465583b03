#include "tessera/runtime/context.hpp"

#include <cstdlib>

#include "runtime/log_format.hpp"

namespace tessera {

hw::Isa isa_from_env(hw::Isa max) {
  const char* env = std::getenv("TESSERA_ISA");
  if (env == nullptr || *env == '\0') return max;
  const auto isa = hw::parse_isa(env);
  if (!isa) {
    TESSERA_LOG_AT(LogLevel::warn, "TESSERA_ISA={} is not one of scalar|avx2|avx512|avx512_bf16|amx; using {}", env, hw::to_string(max));
    return max;
  }
  if (*isa > max) {
    TESSERA_LOG_AT(LogLevel::info, "TESSERA_ISA={} is above what this machine has; using {}", env, hw::to_string(max));
    return max;
  }
  return *isa;
}

Context::Context(const ContextOptions& options)
    : isa_(options.isa ? std::min(*options.isa, hw::info().max_isa) : isa_from_env(hw::info().max_isa)),
      pool_(options.threads),
      plans_(options.plan_cache_capacity) {
  TESSERA_LOG_AT(LogLevel::info, "context: isa {}, {} threads", hw::to_string(isa_), pool_.threads());
}

}  // namespace tessera

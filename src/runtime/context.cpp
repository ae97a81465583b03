#include "tessera/runtime/context.hpp"

#include <algorithm>
#include <bit>
#include <cstdlib>

#include "runtime/log_format.hpp"
#include "tessera/runtime/stream.hpp"

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
      token_bucket_(std::max<std::int64_t>(options.token_bucket, 0)),
      pool_(options.threads),
      plans_(options.plan_cache_capacity),
      tuning_(options.tuning_file.empty() ? TuningStore::default_path() : options.tuning_file) {
  TESSERA_LOG_AT(LogLevel::info, "context: isa {}, {} threads", hw::to_string(isa_), pool_.threads());
}

std::int64_t Context::token_bucket(std::int64_t tokens) const {
  if (token_bucket_ == 0 || tokens <= 0) return 0;
  if (tokens >= token_bucket_) return (tokens + token_bucket_ - 1) / token_bucket_ * token_bucket_;
  return std::min(std::bit_ceil(std::uint64_t(tokens)), std::uint64_t(token_bucket_));
}

Status Context::warmup(std::span<const std::function<Status(Stream&)>> problems) {
  Stream stream(*this);
  Status first;
  for (const auto& problem : problems) {
    first = problem(stream);
    if (!first.ok()) break;
  }
  Status queued = stream.synchronize();
  return first.ok() ? queued : first;
}

}  // namespace tessera

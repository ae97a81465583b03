#pragma once
// Status and Result<T>: every fallible call in Tessera returns one of these.
// Messages name the argument at fault and what was expected, so a caller can
// act on them without reading Tessera's source.
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tessera {

enum class StatusCode { ok, invalid_argument, out_of_range, unsupported, out_of_memory, internal };

std::string_view to_string(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status invalid_argument(std::string message) { return {StatusCode::invalid_argument, std::move(message)}; }
  static Status out_of_range(std::string message) { return {StatusCode::out_of_range, std::move(message)}; }
  static Status unsupported(std::string message) { return {StatusCode::unsupported, std::move(message)}; }
  static Status out_of_memory(std::string message) { return {StatusCode::out_of_memory, std::move(message)}; }
  static Status internal(std::string message) { return {StatusCode::internal, std::move(message)}; }

  bool ok() const { return code_ == StatusCode::ok; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid_argument: x: expected ..." — for logs and CLI output.
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::ok;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design, like std::expected
  Result(Status status) : v_(std::move(status)) {
    if (std::get<Status>(v_).ok()) v_ = Status::internal("Result constructed from an ok Status");
  }

  bool ok() const { return v_.index() == 0; }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace tessera

#define TESSERA_CONCAT_INNER_(a, b) a##b
#define TESSERA_CONCAT_(a, b) TESSERA_CONCAT_INNER_(a, b)

// Returns the Status of `expr` from the enclosing function when it is not ok.
#define TESSERA_RETURN_IF_ERROR(expr)                 \
  do {                                                \
    ::tessera::Status tessera_status_ = (expr);       \
    if (!tessera_status_.ok()) return tessera_status_; \
  } while (0)

// `TESSERA_ASSIGN_OR_RETURN(auto x, make_x());` binds the value or returns the error.
#define TESSERA_ASSIGN_OR_RETURN(lhs, expr) \
  TESSERA_ASSIGN_OR_RETURN_IMPL_(TESSERA_CONCAT_(tessera_result_, __LINE__), lhs, expr)
#define TESSERA_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()

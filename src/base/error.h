// Errors are values: a message a person can act on, carried by Result<T>.
#pragma once

#include <fmt/format.h>

#include <string>
#include <utility>
#include <variant>

namespace tern {

struct Error {
  std::string message;
  int code = 0;  // optional machine-readable kind; the server maps some to HTTP statuses (429)
};

// Builds an Error with fmt-style formatting: make_error("bad magic {:#x} at offset {}", m, off).
template <typename... Args>
Error make_error(fmt::format_string<Args...> format, Args&&... args) {
  return Error{fmt::format(format, std::forward<Args>(args)...)};
}

// A value or an Error. Small by design: ok(), value(), error(), and operator bool.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : state_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const { return std::get<Error>(state_); }

 private:
  std::variant<T, Error> state_;
};

// Result<void>: success or an Error.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), failed_(true) {}  // NOLINT
  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return error_; }

 private:
  Error error_;
  bool failed_ = false;
};

inline Result<void> ok_result() {
  return {};
}

}  // namespace tern

// Propagates an error from an expression returning Result<T>; evaluates to nothing.
#define TERN_TRY(expr)                                           \
  do {                                                           \
    auto tern_try_result_ = (expr);                              \
    if (!tern_try_result_.ok()) return tern_try_result_.error(); \
  } while (0)

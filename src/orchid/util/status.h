// Errors as values: the engine returns Status / Expected<T>; exceptions stay at the
// HTTP/JSON edge. An error is one human-readable message that names the file, tensor or
// field involved and what was expected. A cancellation (the caller asked work to stop; see
// Backend::forward) is an error flagged as such, so callers tell it from a failure without
// reading the message.
#pragma once

#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace orchid {

struct Error {
  std::string message;
  bool cancelled = false;  // made by cancellation(): stopped on request, nothing failed
};

// Status: success or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error e)  // NOLINT: implicit on purpose
      : message_(std::move(e.message)), ok_(false), cancelled_(e.cancelled) {}

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  // An error that is a cancellation (never true when ok()).
  bool cancelled() const { return cancelled_; }
  const std::string& message() const { return message_; }
  Error error() const { return Error{message_, cancelled_}; }

 private:
  std::string message_;
  bool ok_ = true;
  bool cancelled_ = false;
};

// Expected<T>: a value or an Error.
template <class T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}  // NOLINT: implicit on purpose
  Expected(Error e) : v_(std::move(e)) {}      // NOLINT: implicit on purpose

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  bool cancelled() const { return !ok() && std::get<1>(v_).cancelled; }
  const std::string& message() const { return std::get<1>(v_).message; }
  Error error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

namespace detail {
inline std::string to_piece(std::string_view s) {
  return std::string(s);
}
inline std::string to_piece(char c) {
  return std::string(1, c);
}
template <class N>
requires std::is_arithmetic_v<N> std::string to_piece(N n) {
  return std::to_string(n);
}
}  // namespace detail

// Builds an Error from pieces: err("tensor ", name, ": expected bf16").
template <class... Parts>
Error err(const Parts&... parts) {
  std::string s;
  ((s += detail::to_piece(parts)), ...);
  return Error{std::move(s)};
}

// The same for a cancellation: cancellation("forward cancelled after ", n, " tokens").
template <class... Parts>
Error cancellation(const Parts&... parts) {
  Error e = err(parts...);
  e.cancelled = true;
  return e;
}

}  // namespace orchid

// Propagate an error from an expression returning Status or Expected<T>.
#define ORCHID_TRY(expr)                                   \
  do {                                                     \
    auto&& orchid_try_r_ = (expr);                         \
    if (!orchid_try_r_.ok()) return orchid_try_r_.error(); \
  } while (0)

// OpenAI-shaped API errors as values: an HTTP status plus the body fields
// {"error": {"message", "type", "param", "code"}}; ApiExpected<T> is a value or one of them.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace orchid::server {

struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;  // "" → null
  std::string code;   // "" → null
};

// 400 invalid_request_error naming the offending field (param may be "").
inline ApiError bad_request(std::string message, std::string param = "", std::string code = "") {
  return ApiError{400, "invalid_request_error", std::move(message), std::move(param),
                  std::move(code)};
}

// The JSON body of an error: {"error":{"message":...,"type":...,"param":...,"code":...}}.
std::string error_body(const ApiError& e);

template <class T>
class [[nodiscard]] ApiExpected {
 public:
  ApiExpected(T value) : v_(std::move(value)) {}  // NOLINT: implicit on purpose
  ApiExpected(ApiError e) : v_(std::move(e)) {}   // NOLINT: implicit on purpose
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const ApiError& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, ApiError> v_;
};

}  // namespace orchid::server

// Status and Result: how every fallible core function reports failure.
// No exception crosses the core API; a Status carries a code and a one-line message
// that names the file, node, op and values involved.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace qs {

enum class StatusCode {
  Ok = 0,
  InvalidModel,     // the model file is unreadable, malformed or inconsistent
  InvalidArgument,  // bad user input: data files, options, shapes fed at run time
  Unsupported,      // an op, opset, dtype or attribute form the executor does not implement
  ResourceLimit,    // a declared size beyond the configured limit
  IoError,          // file system failure
  RuntimeError,     // a kernel failed during execution
  Cancelled,        // the caller's cancel token was set
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : m_code(code), m_message(std::move(message)) {}

  static Status ok() { return {}; }
  bool isOk() const { return m_code == StatusCode::Ok; }
  explicit operator bool() const { return isOk(); }
  StatusCode code() const { return m_code; }
  const std::string& message() const { return m_message; }

  /// Prefixes the message with context ("file.onnx: node 'conv1' (Conv): ...").
  Status withContext(const std::string& prefix) const {
    if (isOk()) return *this;
    return Status(m_code, prefix + ": " + m_message);
  }

 private:
  StatusCode m_code = StatusCode::Ok;
  std::string m_message;
};

inline Status invalidModel(std::string m) { return {StatusCode::InvalidModel, std::move(m)}; }
inline Status invalidArgument(std::string m) { return {StatusCode::InvalidArgument, std::move(m)}; }
inline Status unsupported(std::string m) { return {StatusCode::Unsupported, std::move(m)}; }
inline Status runtimeError(std::string m) { return {StatusCode::RuntimeError, std::move(m)}; }
inline Status ioError(std::string m) { return {StatusCode::IoError, std::move(m)}; }

/// A value or the Status that explains why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : m_value(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : m_status(std::move(status)) {}  // NOLINT
  bool isOk() const { return m_status.isOk(); }
  explicit operator bool() const { return isOk(); }
  const Status& status() const { return m_status; }
  T& value() & { return *m_value; }
  const T& value() const& { return *m_value; }
  T&& value() && { return std::move(*m_value); }
  T* operator->() { return &*m_value; }
  const T* operator->() const { return &*m_value; }
  T& operator*() { return *m_value; }

 private:
  std::optional<T> m_value;
  Status m_status;
};

}  // namespace qs

#define QS_RETURN_IF_ERROR(expr)        \
  do {                                  \
    ::qs::Status qs_status_ = (expr);   \
    if (!qs_status_.isOk()) return qs_status_; \
  } while (0)

// storage/error.h — the storage layer's one error table, and Result<T>.
//
// Codes and names are FoundationDB's (fdbclient/error_definitions.h), so that code written against
// this layer reads like code written against FoundationDB and a real FoundationDB backend can sit
// behind it. A new code is added only when a caller reacts to it differently from every existing
// one.
#pragma once

#include <cassert>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace chaise::storage {

enum class Error : int {
  success = 0,
  transaction_too_old = 1007,  // read version older than the 5 s MVCC window; retryable
  future_version = 1009,       // reserved: read version ahead of storage (never produced embedded)
  not_committed = 1020,  // a read-conflict range was written after the read version; retryable
  commit_unknown_result = 1021,  // commit may or may not have applied; retryable (maybe committed)
  transaction_cancelled = 1025,  // operation on a cancelled/reset transaction, or a cancelled watch
  // FoundationDB only: the transaction outlived its timeout (FdbOptions::transaction_timeout_ms),
  // such as when the cluster is unreachable. Not retryable: the caller fails the request.
  transaction_timed_out = 1031,
  // FoundationDB only: a watch failed at once because as many as FdbOptions::max_watches are
  // waiting already. Not retryable until one of them ends.
  too_many_watches = 1032,
  // FoundationDB only: the cluster is behind or shedding load: a storage server lags (1037), or
  // the cluster throttles or is short of memory (FoundationDB's other retryable errors, 1042,
  // 1078, 1213, ..., are reported as this one). Retryable.
  process_behind = 1037,
  accessed_unreadable = 1036,      // read of a key whose value is a pending versionstamped value
  io_error = 1510,                 // the engine (RocksDB) failed; not retryable
  key_outside_legal_range = 2004,  // key at or after \xff (the system keyspace)
  inverted_range = 2005,           // range whose begin is after its end
  used_during_commit = 2017,       // operation on a transaction while its commit is in flight
  transaction_too_large = 2101,    // mutations + conflict ranges exceed 10,000,000 bytes
  key_too_large = 2102,            // key longer than 10,000 bytes
  value_too_large = 2103,          // value longer than 100,000 bytes
  invalid_option_value = 2006,     // an option or argument out of its documented range
};

// FoundationDB's name for the code ("not_committed"), for logs and error bodies.
std::string_view error_name(Error e);

// FoundationDB's description ("Transaction not committed due to conflict with another
// transaction").
std::string_view error_description(Error e);

// True for the errors Transaction::on_error() retries (1007, 1009, 1020, 1021, 1037).
bool is_retryable(Error e);

// True when a commit that failed with `e` may nevertheless have been applied (1021 only).
bool is_maybe_committed(Error e);

// Result<T>: a T, or an Error that is never `success`. Not-found is a value (e.g. optional<T>), not
// an error. [[nodiscard]]: an ignored error is a bug.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                 // NOLINT: implicit by design
  Result(Error e) : v_(e) { assert(e != Error::success); }  // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  Error error() const { return ok() ? Error::success : std::get<1>(v_); }

  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Error> v_;
};

// Result<void>: success or an Error.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error e) : e_(e) {}  // NOLINT: implicit by design
  bool ok() const { return e_ == Error::success; }
  explicit operator bool() const { return ok(); }
  Error error() const { return e_; }

 private:
  Error e_ = Error::success;
};

using Status = Result<void>;

}  // namespace chaise::storage

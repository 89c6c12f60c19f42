// core/util/error.h — CouchDB's errors as the core reports them: the HTTP status, the `error` and the
// `reason` of CouchDB's {"error": ..., "reason": ...} body (table: COUCHDB-API.md section 0).
// Storage errors (storage/error.h) are not CouchErrors: they drive retries; only a non-retryable
// storage error that reaches the top becomes a 500 (see storage_failure()).
#pragma once

#include <string>
#include <string_view>
#include <variant>

#include "storage/error.h"

namespace chaise::core {

struct CouchError {
  int status = 500;
  std::string error;
  std::string reason;
  bool operator==(const CouchError&) const = default;
};

// The common ones, with CouchDB's exact texts.
inline CouchError db_not_found() { return {404, "not_found", "Database does not exist."}; }
inline CouchError doc_not_found() { return {404, "not_found", "missing"}; }
inline CouchError doc_deleted() { return {404, "not_found", "deleted"}; }
inline CouchError conflict() { return {409, "conflict", "Document update conflict."}; }
inline CouchError db_exists() {
  return {412, "file_exists", "The database could not be created, the file already exists."};
}
inline CouchError bad_request(std::string reason) {
  return {400, "bad_request", std::move(reason)};
}
inline CouchError illegal_database_name(std::string_view name) {
  return {
      400, "illegal_database_name",
      "Name: '" + std::string(name) +
          "'. Only lowercase characters (a-z), digits (0-9), and any of the characters _, $, (, "
          "), +, -, and / are allowed. Must begin with a letter."};
}
inline CouchError storage_failure(storage::Error e) {
  return {500, "unknown_error", std::string(storage::error_name(e))};
}

// A value or a CouchError.
template <typename T>
using Outcome = std::variant<T, CouchError>;

template <typename T>
bool failed(const Outcome<T>& o) {
  return std::holds_alternative<CouchError>(o);
}

}  // namespace chaise::core

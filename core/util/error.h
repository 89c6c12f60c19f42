// core/util/error.h — CouchDB's errors as this server reports them: the HTTP status, the `error`
// and the `reason` of CouchDB's {"error": ..., "reason": ...} body.
//
// CHAISE_COUCH_ERRORS is the one table of them, in the spirit of FoundationDB's
// error_definitions.h: each row is a name, the status, the `error` string and the reason CouchDB
// gives when nothing more specific is known (chttpd:error_info's fixed texts; empty where CouchDB
// always says more). Each row becomes a function in core::err that returns the CouchError, so a
// site reads `err::forbidden("You are not a db or server admin.")` and a status never travels
// without its error string. Errors whose `error` is not fixed (a validate_doc_update function's
// own {"forbidden": ...}, a JavaScript error) are built as CouchError values directly.
//
// Storage errors (storage/error.h) are not CouchErrors: they drive retries; only a non-retryable
// storage error that reaches the top becomes a 500 (storage_failure()).
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

// clang-format off
#define CHAISE_COUCH_ERRORS(X)                                                                     \
  /* name                           status  error                             default reason */    \
  X(bad_request,                     400,  "bad_request",                     "")                  \
  X(query_parse_error,               400,  "query_parse_error",               "")                  \
  X(illegal_database_name,           400,  "illegal_database_name",           "")                  \
  X(illegal_docid,                   400,  "illegal_docid",                   "")                  \
  X(illegal_partition,               400,  "illegal_partition",               "")                  \
  X(doc_validation,                  400,  "doc_validation",                  "")                  \
  X(invalid_design_doc,              400,  "invalid_design_doc",              "")                  \
  X(compilation_error,               400,  "compilation_error",               "")                  \
  X(invalid_index,                   400,  "invalid_index",                   "")                  \
  X(invalid_sort,                    400,  "invalid_sort",                    "")                  \
  X(invalid_argument,                400,  "invalid_argument",                "")                  \
  X(invalid_bookmark,                400,  "invalid_bookmark",                "")                  \
  X(invalid_boolean,                 400,  "invalid_boolean",                 "")                  \
  X(invalid_bulk_docs,               400,  "invalid_bulk_docs",               "")                  \
  X(invalid_index_name,              400,  "invalid_index_name",              "")                  \
  X(invalid_list_index_params,       400,  "invalid_list_index_params",       "")                  \
  X(invalid_partitioned_option,      400,  "invalid_partitioned_option",      "")                  \
  X(missing_required_key,            400,  "missing_required_key",            "")                  \
  X(unsupported_mixed_sort,          400,  "unsupported_mixed_sort",          "")                  \
  X(no_usable_index,                 400,  "no_usable_index",                 "")                  \
  X(invalid_operator,                400,  "invalid_operator",                "")                  \
  X(bad_arg,                         400,  "bad_arg",                         "")                  \
  X(not_supported,                   400,  "not_supported",                   "")                  \
  X(bad_field,                       400,  "bad_field",                       "")                  \
  X(invalid_field_name,              400,  "invalid_field_name",              "")                  \
  X(invalid_selector,                400,  "invalid_selector",                "")                  \
  X(invalid_selector_json,           400,  "invalid_selector_json",           "")                  \
  X(invalid_sort_json,               400,  "invalid_sort_json",               "")                  \
  X(invalid_sort_field,              400,  "invalid_sort_field",              "")                  \
  X(invalid_fields,                  400,  "invalid_fields",                  "")                  \
  X(invalid_field,                   400,  "invalid_field",                   "")                  \
  X(invalid_key,                     400,  "invalid_key",                     "")                  \
  X(invalid_non_neg_integer,         400,  "invalid_non_neg_integer",         "")                  \
  X(invalid_pos_integer,             400,  "invalid_pos_integer",             "")                  \
  X(unauthorized,                    401,  "unauthorized",                    "")                  \
  X(forbidden,                       403,  "forbidden",                       "")                  \
  X(not_found,                       404,  "not_found",                       "missing")           \
  X(db_not_found,                    404,  "not_found",                                            \
    "Database does not exist.")                                                                    \
  X(doc_deleted,                     404,  "not_found",                       "deleted")           \
  X(method_not_allowed,              405,  "method_not_allowed",              "")                  \
  X(conflict,                        409,  "conflict",                                             \
    "Document update conflict.")                                                                   \
  X(missing_rev,                     409,  "not_found",                       "missing_rev")       \
  X(gone,                            410,  "gone",                            "")                  \
  X(file_exists,                     412,  "file_exists",                                          \
    "The database could not be created, the file already exists.")                                 \
  X(missing_stub,                    412,  "missing_stub",                    "")                  \
  X(too_large,                       413,  "too_large",                                            \
    "the request entity is too large")                                                             \
  X(document_too_large,              413,  "document_too_large",              "")                  \
  X(attachment_too_large,            413,  "attachment_too_large",            "")                  \
  X(bad_content_type,                415,  "bad_content_type",                "")                  \
  X(requested_range_not_satisfiable, 416,  "requested_range_not_satisfiable",                      \
    "Requested range not satisfiable")                                                             \
  X(unprocessable_entity,            422,  "unprocessable_entity",            "")                  \
  X(header_fields_too_large,         431,  "bad_request",                                          \
    "Request header fields too large")                                                             \
  X(unknown_error,                   500,  "unknown_error",                   "")                  \
  X(render_error,                    500,  "render_error",                    "")                  \
  X(invalid_value,                   500,  "invalid_value",                   "")                  \
  X(misconfigured_server,            500,  "misconfigured_server",            "")                  \
  X(not_implemented,                 501,  "not_implemented",                                      \
    "this feature is not yet implemented")                                                         \
  X(service_unavailable,             503,  "service_unavailable",             "")
// clang-format on

namespace err {
#define CHAISE_COUCH_ERROR_FUNCTION(name, status, error, reason) \
  inline CouchError name(std::string why = reason) { return {status, error, std::move(why)}; }
CHAISE_COUCH_ERRORS(CHAISE_COUCH_ERROR_FUNCTION)
#undef CHAISE_COUCH_ERROR_FUNCTION
}  // namespace err

// 400 illegal_database_name with CouchDB's text naming `name`.
inline CouchError bad_db_name(std::string_view name) {
  return err::illegal_database_name(
      "Name: '" + std::string(name) +
      "'. Only lowercase characters (a-z), digits (0-9), and any of the characters _, $, (, ), +, "
      "-, and / are allowed. Must begin with a letter.");
}
// A storage error that survived its retries: 500 unknown_error naming it; 503 when the store did
// not answer in time (a FoundationDB cluster out of reach, [foundationdb] transaction_timeout),
// which a load balancer reads as "try another node".
inline CouchError storage_failure(storage::Error e) {
  if (e == storage::Error::transaction_timed_out)
    return err::service_unavailable("the store did not answer in time (" +
                                    std::string(storage::error_name(e)) + ")");
  return err::unknown_error(std::string(storage::error_name(e)));
}

// A value or a CouchError.
template <typename T>
using Outcome = std::variant<T, CouchError>;

template <typename T>
bool failed(const Outcome<T>& o) {
  return std::holds_alternative<CouchError>(o);
}

}  // namespace chaise::core

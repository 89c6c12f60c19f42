#include "storage/error.h"

namespace chaise::storage {

std::string_view error_name(Error e) {
  switch (e) {
    case Error::success:
      return "success";
    case Error::transaction_too_old:
      return "transaction_too_old";
    case Error::future_version:
      return "future_version";
    case Error::not_committed:
      return "not_committed";
    case Error::commit_unknown_result:
      return "commit_unknown_result";
    case Error::transaction_cancelled:
      return "transaction_cancelled";
    case Error::transaction_timed_out:
      return "transaction_timed_out";
    case Error::too_many_watches:
      return "too_many_watches";
    case Error::process_behind:
      return "process_behind";
    case Error::accessed_unreadable:
      return "accessed_unreadable";
    case Error::io_error:
      return "io_error";
    case Error::key_outside_legal_range:
      return "key_outside_legal_range";
    case Error::inverted_range:
      return "inverted_range";
    case Error::invalid_option_value:
      return "invalid_option_value";
    case Error::used_during_commit:
      return "used_during_commit";
    case Error::transaction_too_large:
      return "transaction_too_large";
    case Error::key_too_large:
      return "key_too_large";
    case Error::value_too_large:
      return "value_too_large";
  }
  return "unknown_error";
}

std::string_view error_description(Error e) {
  switch (e) {
    case Error::success:
      return "Success";
    case Error::transaction_too_old:
      return "Transaction is too old to perform reads or be committed";
    case Error::future_version:
      return "Request for future version";
    case Error::not_committed:
      return "Transaction not committed due to conflict with another transaction";
    case Error::commit_unknown_result:
      return "Transaction may or may not have committed";
    case Error::transaction_cancelled:
      return "Operation aborted because the transaction was cancelled";
    case Error::transaction_timed_out:
      return "Operation aborted because the transaction timed out";
    case Error::too_many_watches:
      return "Too many watches currently set";
    case Error::process_behind:
      return "Storage process does not have recent mutations";
    case Error::accessed_unreadable:
      return "Read or wrote an unreadable key";
    case Error::io_error:
      return "Disk i/o operation failed";
    case Error::key_outside_legal_range:
      return "Key outside legal range";
    case Error::inverted_range:
      return "Range begin key larger than end key";
    case Error::invalid_option_value:
      return "Option set with an invalid value";
    case Error::used_during_commit:
      return "Operation issued while a commit was outstanding";
    case Error::transaction_too_large:
      return "Transaction exceeds byte limit";
    case Error::key_too_large:
      return "Key length exceeds limit";
    case Error::value_too_large:
      return "Value length exceeds limit";
  }
  return "Unknown error";
}

bool is_retryable(Error e) {
  return e == Error::transaction_too_old || e == Error::future_version ||
         e == Error::not_committed || e == Error::commit_unknown_result ||
         e == Error::process_behind;
}

bool is_maybe_committed(Error e) { return e == Error::commit_unknown_result; }

}  // namespace chaise::storage

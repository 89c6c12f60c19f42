// storage/write_checks.h — what every engine checks of a transaction's writes, so that both answer
// a bad write with the same FoundationDB error (deferred to commit by the caller).
#pragma once

#include <string>
#include <string_view>

#include "storage/error.h"

namespace chaise::storage {

// The end of the normal keyspace: keys from 0xff on are the system keyspace.
inline const std::string kKeyspaceEnd("\xff", 1);

// A key a transaction writes or clears: success, key_too_large (over kKeySizeMax) or
// key_outside_legal_range (the system keyspace, keys from 0xff on).
Error check_written_key(std::string_view key);

// A versionstamped key or value template: a 4-byte little-endian offset suffix naming 10
// placeholder bytes (kVersionstampSize) inside what precedes it.
bool versionstamp_template_ok(std::string_view tmpl);

// A value set, or an atomic operation's operand: success or value_too_large (over kValueSizeMax).
Error check_written_value(std::string_view value);

// The bounds of a cleared range: success, inverted_range, key_too_large or
// key_outside_legal_range (past the end of the normal keyspace).
Error check_cleared_range(std::string_view begin, std::string_view end);

// A versionstamped value template: success, invalid_option_value (not a template) or
// value_too_large (the value it becomes, without its offset suffix).
Error check_value_template(std::string_view value_template);

}  // namespace chaise::storage

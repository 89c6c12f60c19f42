// storage/write_checks.h — what every engine checks of a transaction's writes, so that both answer
// a bad write with the same FoundationDB error (deferred to commit by the caller).
#pragma once

#include <string_view>

#include "storage/error.h"

namespace chaise::storage {

// A key a transaction writes or clears: success, key_too_large (over kKeySizeMax) or
// key_outside_legal_range (the system keyspace, keys from 0xff on).
Error check_written_key(std::string_view key);

// A versionstamped key or value template: a 4-byte little-endian offset suffix naming 10
// placeholder bytes (kVersionstampSize) inside what precedes it.
bool versionstamp_template_ok(std::string_view tmpl);

}  // namespace chaise::storage

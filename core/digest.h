// core/digest.h — the digests names are made of: MD5 as 32 lowercase hex digits (CouchDB's view
// signatures and Mango's default index names are MD5 digests too).
#pragma once

#include <string>
#include <string_view>

namespace chaise::core {

std::string md5_hex(std::string_view data);

}  // namespace chaise::core

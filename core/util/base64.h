// core/util/base64.h — base64 (RFC 4648) for attachment data and digests, cookies, bookmarks and JWTs.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace chaise::core {

std::string base64_encode(std::string_view bytes);
// Strict-enough base64 (whitespace ignored, padding optional); nullopt if malformed.
std::optional<std::string> base64_decode(std::string_view text);
// The URL-safe alphabet (RFC 4648 section 5: '-' and '_'), padding optional.
std::optional<std::string> base64url_decode(std::string_view text);

}  // namespace chaise::core

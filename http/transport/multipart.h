// http/transport/multipart.h — MIME multipart bodies (RFC 2046) as CouchDB reads and writes them:
// multipart/related document uploads (the replicator's PUT ?new_edits=false), multipart/mixed and
// multipart/related answers (open_revs, attachments=true, _bulk_get).
//
// Contract: pure functions, thread-safe. Parsing works on a complete body held by the caller;
// parts are views into it. Malformed input is answered with nullopt, never asserted.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace chaise::http {

struct MultipartPart {
  std::vector<std::pair<std::string, std::string>> headers;  // names lowercased
  std::string_view body;

  // The value of header `name` (lowercase), or "".
  std::string_view header(std::string_view name) const;
};

// At most this many parts are parsed from one body (a bound on work per request).
inline constexpr std::size_t kMultipartPartsMax = 10'000;

// At most this many headers in one part.
inline constexpr std::size_t kPartHeadersMax = 100;
// One "Name: value" line of a part's headers: the name lowercased, both trimmed of spaces and
// tabs (and a stray CR at the end); nullopt without a colon or with an empty name.
std::optional<std::pair<std::string, std::string>> parse_part_header(std::string_view line);

// The boundary parameter of a Content-Type value (quotes removed), or nullopt.
std::optional<std::string> multipart_boundary(std::string_view content_type);
// The parameter `name` of a header value with parameters (`type; a=1; b="x y"`), its quotes
// removed; nullopt when absent. Names compare case-insensitively.
std::optional<std::string> header_param(std::string_view value, std::string_view name);

// Splits `body` at `boundary`. The preamble before the first delimiter and the epilogue after the
// closing one are ignored. nullopt when there is no closing delimiter, a part has malformed
// headers, or there are more than kMultipartPartsMax parts.
std::optional<std::vector<MultipartPart>> parse_multipart(std::string_view body,
                                                          std::string_view boundary);

// A random boundary: 32 lowercase hex digits, like couch_uuids:random().
std::string make_boundary();

// Appends one part: "--boundary\r\n" headers "\r\n" body "\r\n".
void append_part(std::string& out, std::string_view boundary,
                 const std::vector<std::pair<std::string, std::string>>& headers,
                 std::string_view body);
// The headers of one attachment's part (couch_doc:atts_to_mp): Content-Disposition with the name,
// Content-Type, Content-Length and, for encoded bytes, Content-Encoding.
std::vector<std::pair<std::string, std::string>> attachment_part_headers(
    std::string_view name, std::string_view content_type, std::size_t length,
    std::string_view encoding);

// Appends the closing delimiter "--boundary--".
void append_close(std::string& out, std::string_view boundary);

}  // namespace chaise::http

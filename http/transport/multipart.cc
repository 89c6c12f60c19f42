// http/transport/multipart.cc — see multipart.h. Delimiters are "\r\n--boundary" (the first may omit the
// CRLF); each part is headers, an empty line, then the body up to the next delimiter. A closing
// delimiter is "--boundary--".
#include "http/transport/multipart.h"

#include <cstdint>
#include <random>

#include "core/util/ascii.h"

namespace chaise::http {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// Parses "Name: value" lines up to the empty line; returns the offset after it, or npos.
std::size_t parse_headers(std::string_view s, MultipartPart& part) {
  std::size_t pos = 0;
  while (true) {
    const std::size_t eol = s.find("\r\n", pos);
    if (eol == std::string_view::npos) return std::string_view::npos;
    std::string_view line = s.substr(pos, eol - pos);
    pos = eol + 2;
    if (line.empty()) return pos;
    auto header = parse_part_header(line);
    if (!header) return std::string_view::npos;
    part.headers.push_back(std::move(*header));
    if (part.headers.size() > kPartHeadersMax) return std::string_view::npos;
  }
}

}  // namespace

std::optional<std::pair<std::string, std::string>> parse_part_header(std::string_view line) {
  const std::size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  return std::make_pair(core::ascii_lower(trim(line.substr(0, colon))),
                        std::string(trim(line.substr(colon + 1))));
}

std::string_view MultipartPart::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return v;
  return {};
}

std::optional<std::string> header_param(std::string_view value, std::string_view name) {
  std::string_view rest = value;
  while (true) {
    const std::size_t semi = rest.find(';');
    if (semi == std::string_view::npos) return std::nullopt;
    rest = rest.substr(semi + 1);
    std::string_view param = trim(rest.substr(0, rest.find(';')));
    const std::size_t eq = param.find('=');
    if (eq == std::string_view::npos) continue;
    if (core::ascii_lower(trim(param.substr(0, eq))) != core::ascii_lower(name)) continue;
    std::string_view v = trim(param.substr(eq + 1));
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    return std::string(v);
  }
}

std::optional<std::string> multipart_boundary(std::string_view content_type) {
  auto v = header_param(content_type, "boundary");
  if (!v || v->empty() || v->size() > 200) return std::nullopt;
  return v;
}

std::optional<std::vector<MultipartPart>> parse_multipart(std::string_view body,
                                                          std::string_view boundary) {
  const std::string delim = "--" + std::string(boundary);
  std::size_t pos;
  if (body.starts_with(delim)) {
    pos = delim.size();
  } else {
    const std::size_t first = body.find("\r\n" + delim);
    if (first == std::string_view::npos) return std::nullopt;
    pos = first + 2 + delim.size();
  }
  const std::string next_delim = "\r\n" + delim;
  std::vector<MultipartPart> parts;
  while (true) {
    if (body.substr(pos).starts_with("--")) return parts;  // closing delimiter
    // Transport padding, then CRLF.
    while (pos < body.size() && (body[pos] == ' ' || body[pos] == '\t')) ++pos;
    if (!body.substr(pos).starts_with("\r\n")) return std::nullopt;
    pos += 2;
    if (parts.size() >= kMultipartPartsMax) return std::nullopt;
    MultipartPart part;
    const std::size_t hdr_end = parse_headers(body.substr(pos), part);
    if (hdr_end == std::string_view::npos) return std::nullopt;
    pos += hdr_end;
    const std::size_t end = body.find(next_delim, pos);
    if (end == std::string_view::npos) return std::nullopt;
    part.body = body.substr(pos, end - pos);
    parts.push_back(std::move(part));
    pos = end + next_delim.size();
  }
}

std::string make_boundary() {
  static constexpr char kHex[] = "0123456789abcdef";
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::string out;
  std::uint64_t a = rng(), b = rng();
  for (int i = 0; i < 16; ++i, a >>= 4, b >>= 4) {
    out.push_back(kHex[a & 15]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

void append_part(std::string& out, std::string_view boundary,
                 const std::vector<std::pair<std::string, std::string>>& headers,
                 std::string_view body) {
  out += "--";
  out += boundary;
  out += "\r\n";
  for (const auto& [k, v] : headers) {
    out += k;
    out += ": ";
    out += v;
    out += "\r\n";
  }
  out += "\r\n";
  out += body;
  out += "\r\n";
}

std::vector<std::pair<std::string, std::string>> attachment_part_headers(
    std::string_view name, std::string_view content_type, std::size_t length,
    std::string_view encoding) {
  std::string quoted = "\"";
  for (char c : name) {
    if (c == '"' || c == '\\') quoted.push_back('\\');
    quoted.push_back(c);
  }
  quoted.push_back('"');
  std::vector<std::pair<std::string, std::string>> h = {
      {"Content-Disposition", "attachment; filename=" + quoted},
      {"Content-Type", std::string(content_type)},
      {"Content-Length", std::to_string(length)}};
  if (!encoding.empty()) h.emplace_back("Content-Encoding", std::string(encoding));
  return h;
}

void append_close(std::string& out, std::string_view boundary) {
  out += "--";
  out += boundary;
  out += "--";
}

}  // namespace chaise::http

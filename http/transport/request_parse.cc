// http/transport/request_parse.cc — see request_parse.h.
#include "http/transport/request_parse.h"

#include <charconv>

#include "core/util/ascii.h"

namespace chaise::http {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

namespace {

// Percent-decoding; in a query string '+' is a space (Erlang's parse_qs), in a path it is '+'.
std::optional<std::string> decode(std::string_view in, bool plus_is_space) {
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '+' && plus_is_space) {
      out.push_back(' ');
    } else if (in[i] == '%') {
      if (i + 2 >= in.size()) return std::nullopt;  // needs two hex digits after '%'
      const int hi = hex_digit(in[i + 1]), lo = hex_digit(in[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else {
      out.push_back(in[i]);
    }
  }
  return out;
}

std::string decode_component(std::string_view in) {
  auto out = decode(in, true);
  if (!out) throw HttpError(err::bad_request("Invalid URL encoding"));
  return std::move(*out);
}

}  // namespace

Query Query::parse(std::string_view target) {
  Query q;
  auto qm = target.find('?');
  if (qm == std::string_view::npos) return q;
  std::string_view rest = target.substr(qm + 1);
  while (!rest.empty()) {
    auto amp = rest.find('&');
    std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (pair.empty()) continue;
    auto eq = pair.find('=');
    std::string key = decode_component(pair.substr(0, eq));
    std::string value = eq == std::string_view::npos ? "" : decode_component(pair.substr(eq + 1));
    q.params_.emplace_back(std::move(key), std::move(value));
  }
  return q;
}

std::optional<std::string> Query::get(std::string_view key) const {
  for (const auto& [k, v] : params_)
    if (k == key) return v;
  return std::nullopt;
}

std::optional<bool> parse_boolean(std::string_view text) {
  const std::string lower = core::ascii_lower(text);
  if (lower == "true") return true;
  if (lower == "false") return false;
  return std::nullopt;
}

bool Query::get_bool(std::string_view key, bool fallback) const {
  auto v = get(key);
  if (!v) return fallback;
  if (auto b = parse_boolean(*v)) return *b;
  throw HttpError(err::query_parse_error("Invalid boolean parameter: \"" + *v + "\""));
}

std::optional<std::int64_t> Query::get_int(std::string_view key) const {
  auto v = get(key);
  if (!v) return std::nullopt;
  std::int64_t out = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (ec != std::errc() || p != v->data() + v->size())
    throw HttpError(err::query_parse_error("Invalid value for integer: \"" + *v + "\""));
  return out;
}

std::optional<Json> Query::get_json(std::string_view key) const {
  auto v = get(key);
  if (!v) return std::nullopt;
  return parse_json_or_throw(*v);
}

Json parse_json_or_throw(std::string_view text, core::JsonNumbers numbers) {
  auto parsed = core::parse_json_text(text, numbers);
  if (auto* reason = std::get_if<std::string>(&parsed)) throw HttpError(err::bad_request(*reason));
  return std::move(std::get<Json>(parsed));
}

std::optional<std::string> percent_decode(std::string_view in) { return decode(in, false); }

std::string unquote_plus(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '+') {
      out.push_back(' ');
    } else if (in[i] == '%' && i + 2 < in.size() && hex_digit(in[i + 1]) >= 0 &&
               hex_digit(in[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex_digit(in[i + 1]) * 16 + hex_digit(in[i + 2])));
      i += 2;
    } else {
      out.push_back(in[i]);
    }
  }
  return out;
}

namespace {

// %XX (uppercase) for every byte but ASCII letters, digits and `safe`; a space is '+' when
// `space_plus`.
std::string percent_encode(std::string_view text, std::string_view safe, bool space_plus) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (alnum || (c != '\0' && safe.find(c) != std::string_view::npos)) {
      out.push_back(c);
    } else if (c == ' ' && space_plus) {
      out.push_back('+');
    } else {
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 15]);
    }
  }
  return out;
}

}  // namespace

std::string quote_plus(std::string_view text) { return percent_encode(text, "_.-~", true); }

std::string url_encode(std::string_view text) { return percent_encode(text, "_.-:", false); }

std::optional<std::vector<std::string>> path_segments(std::string_view target) {
  const std::size_t query = target.find('?');
  std::string_view path = target.substr(0, query);
  if (path.empty() || path.front() != '/') return std::nullopt;
  std::vector<std::string> segments;
  while (!path.empty()) {
    path.remove_prefix(1);  // the '/'
    const std::size_t next = path.find('/');
    const std::string_view raw = path.substr(0, next);
    path = next == std::string_view::npos ? std::string_view{} : path.substr(next);
    if (raw.empty()) continue;
    auto decoded = percent_decode(raw);
    if (!decoded) return std::nullopt;
    segments.push_back(std::move(*decoded));
  }
  return segments;
}

}  // namespace chaise::http

#include "http/transport/multipart_reader.h"

#include <algorithm>

#include "http/transport/multipart.h"
#include "http/transport/request_parse.h"

namespace chaise::http {

namespace {
// Bytes asked of the body per read, and the largest header block of one part.
constexpr std::size_t kPullBytes = 256 * 1024;
constexpr std::size_t kPartHeaderBytesMax = 16 * 1024;
// A preamble longer than this (before the first delimiter) is refused.
constexpr std::size_t kPreambleMax = 64 * 1024;

[[noreturn]] void malformed(const char* what) {
  throw HttpError(err::bad_request(std::string("Invalid multipart/related request: ") + what));
}

}  // namespace

MultipartReader::MultipartReader(Pull pull, std::string boundary)
    : pull_(std::move(pull)), delimiter_("\r\n--" + std::move(boundary)) {}

boost::asio::awaitable<void> MultipartReader::fill() {
  auto n = co_await pull_(buffer_, kPullBytes);
  if (!n) malformed("the body broke off");
  if (*n == 0) malformed("the body ended before its closing delimiter");
}

boost::asio::awaitable<std::size_t> MultipartReader::read(std::string& out, std::size_t max) {
  if (state_ != State::in_part || max == 0) co_return 0;
  for (;;) {
    const std::size_t at = buffer_.find(delimiter_);
    if (at != std::string::npos) {
      const std::size_t n = std::min(at, max);
      out.append(buffer_, 0, n);
      if (n == at) {
        buffer_.erase(0, at + delimiter_.size());
        state_ = State::after_delimiter;
      } else {
        buffer_.erase(0, n);
      }
      co_return n;
    }
    // Everything but a possible start of the delimiter at the end is the part's.
    if (buffer_.size() >= delimiter_.size()) {
      const std::size_t n = std::min(buffer_.size() - (delimiter_.size() - 1), max);
      out.append(buffer_, 0, n);
      buffer_.erase(0, n);
      co_return n;
    }
    co_await fill();
  }
}

boost::asio::awaitable<bool> MultipartReader::next_part(
    std::vector<std::pair<std::string, std::string>>& headers) {
  headers.clear();
  if (state_ == State::closed) co_return false;
  if (state_ == State::in_part) {  // skip the rest of the current part
    std::string sink;
    while (co_await read(sink, kPullBytes) > 0) sink.clear();
  }
  if (state_ == State::start) {
    // The first delimiter may omit its CRLF.
    const std::string_view first = std::string_view(delimiter_).substr(2);
    for (;;) {
      if (buffer_.starts_with(first)) {
        buffer_.erase(0, first.size());
        break;
      }
      if (const std::size_t at = buffer_.find(delimiter_); at != std::string::npos) {
        buffer_.erase(0, at + delimiter_.size());
        break;
      }
      if (buffer_.size() > kPreambleMax + delimiter_.size()) malformed("no delimiter");
      co_await fill();
    }
    state_ = State::after_delimiter;
  }
  // After a delimiter: "--" closes; else transport padding and CRLF, then the headers.
  while (buffer_.size() < 2) co_await fill();
  if (buffer_.starts_with("--")) {
    state_ = State::closed;
    co_return false;
  }
  for (;;) {
    const std::size_t eol = buffer_.find("\r\n");
    if (eol != std::string::npos) {
      if (buffer_.find_first_not_of(" \t") != eol) malformed("bad delimiter line");
      buffer_.erase(0, eol + 2);
      break;
    }
    if (buffer_.size() > 1024) malformed("bad delimiter line");
    co_await fill();
  }
  if (++parts_ > kMultipartPartsMax) malformed("too many parts");
  std::size_t end;
  while ((end = buffer_.find("\r\n\r\n")) == std::string::npos && !buffer_.starts_with("\r\n")) {
    if (buffer_.size() > kPartHeaderBytesMax) malformed("part headers too large");
    co_await fill();
  }
  std::string_view block(buffer_);
  std::size_t consumed;
  if (block.starts_with("\r\n")) {
    block = {};
    consumed = 2;
  } else {
    block = block.substr(0, end);
    consumed = end + 4;
  }
  while (!block.empty()) {
    const std::size_t eol = block.find("\r\n");
    const std::string_view line = block.substr(0, eol);
    block = eol == std::string_view::npos ? std::string_view() : block.substr(eol + 2);
    auto header = parse_part_header(line);
    if (!header) malformed("bad part header");
    headers.push_back(std::move(*header));
    if (headers.size() > kPartHeadersMax) malformed("too many part headers");
  }
  buffer_.erase(0, consumed);
  state_ = State::in_part;
  co_return true;
}

}  // namespace chaise::http

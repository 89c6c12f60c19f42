// http/transport/multipart_reader.h — a multipart body read as it arrives (a streamed request, see
// ServerOptions::stream_body): part by part, each part's body in pieces, so that a 100 MB
// attachment in a replicator's multipart/related PUT never sits in memory whole.
//
// Same grammar as parse_multipart (http/transport/multipart.h): delimiters "\r\n--boundary" (the first may
// omit the CRLF, a preamble before it is skipped), transport padding, headers, an empty line, the
// body; "--boundary--" closes. Memory: the bytes of one read plus one delimiter.
//
// Threading: one coroutine at a time (the request's handler).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace chaise::http {

class MultipartReader {
 public:
  // Appends at most `max` more bytes of the body to `out`: how many (0 at its end), or nullopt
  // when the client is gone or the body is broken.
  using Pull =
      std::function<boost::asio::awaitable<std::optional<std::size_t>>(std::string&, std::size_t)>;
  MultipartReader(Pull pull, std::string boundary);

  // Moves to the next part (skipping what is left of the current one) and reads its headers
  // (names lowercased). False after the closing delimiter. Throws HttpError 400 when the body
  // is malformed or ends early.
  boost::asio::awaitable<bool> next_part(std::vector<std::pair<std::string, std::string>>& headers);
  // Appends at most `max` (> 0) bytes of the current part's body to `out`: how many, 0 once the
  // part is complete. Throws like next_part.
  boost::asio::awaitable<std::size_t> read(std::string& out, std::size_t max);

 private:
  // Reads more of the body into buffer_; throws 400 when it ended or broke.
  boost::asio::awaitable<void> fill();

  Pull pull_;
  std::string delimiter_;  // "\r\n--boundary"
  std::string buffer_;     // received, not yet consumed
  enum class State { start, in_part, after_delimiter, closed } state_ = State::start;
  std::size_t parts_ = 0;
};

}  // namespace chaise::http

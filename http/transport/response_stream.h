// http/transport/response_stream.h — what a handler writes a streamed (chunked) response through.
//
// A handler answers either by returning a complete Response, or by calling begin() with the head of
// a response, write()-ing the body in pieces, and finish()-ing it. Writes are buffered up to
// kFlushBytes and sent as one HTTP chunk, so a handler may write row by row. A full chunk is sent
// while the handler fills the next; a second full chunk waits for the first to be sent
// (back-pressure: a client that does not read stalls its producer instead of growing server
// memory). A false result means the client is gone or too slow (perhaps noticed one chunk late);
// stop producing and return.
//
// Threading: only from the handler's coroutine (on the connection's io thread or a worker).
#pragma once

#include <any>
#include <boost/asio/awaitable.hpp>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "http/transport/message.h"

namespace chaise::http {

class ResponseStream {
 public:
  static constexpr std::size_t kFlushBytes = 64 * 1024;

  virtual ~ResponseStream() = default;
  // Sends the status line and headers; Transfer-Encoding: chunked is set here. `head`'s body is
  // ignored.
  virtual boost::asio::awaitable<bool> begin(Response head) = 0;
  // Appends to the body; sends a chunk when kFlushBytes are buffered.
  virtual boost::asio::awaitable<bool> write(std::string_view data) = 0;
  // Sends what is buffered now (continuous feeds, heartbeats).
  virtual boost::asio::awaitable<bool> flush() = 0;
  // Flushes and ends the body.
  virtual boost::asio::awaitable<bool> finish() = 0;
  virtual bool begun() const = 0;
  // Calls `closed` (on the connection's io thread) if the client closes the connection while the
  // handler is still producing: how an idle feed notices a client that went away. At most one
  // watch; it ends with the handler.
  virtual void watch_peer(std::function<void()> closed) = 0;
  // The client's IP address as text ("" when unknown).
  virtual std::string peer_address() const { return {}; }
  // True when the connection is TLS (the [ssl] port): cookies get `Secure`, URIs `https`.
  virtual bool secure() const { return false; }
  // What the router keeps from one request of the connection to the next (the Basic credential
  // it last decoded), living as long as the connection; nullptr when the stream has no
  // connection of its own.
  virtual std::any* connection_memo() { return nullptr; }

  // A request the server hands over before reading its body (ServerOptions::stream_body): the
  // request's body() is empty and the handler pulls the body through read_body().
  virtual bool body_streamed() const { return false; }
  // Appends the next bytes of a streamed body to `out`, at most `max` (> 0): the number appended,
  // 0 once the body is complete, nullopt if the client is gone, too slow or breaks the framing
  // (then the handler stops and its answer closes the connection).
  virtual boost::asio::awaitable<std::optional<std::size_t>> read_body(std::string& out,
                                                                       std::size_t max) {
    (void)out;
    (void)max;
    co_return std::nullopt;
  }
};

}  // namespace chaise::http

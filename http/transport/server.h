// The HTTP/1.1 server: a listener, one session per connection, N io threads.
//
// Built on Boost.Beast with asio C++20 coroutines. Each io thread runs an io_context of its own,
// and each connection is a coroutine on one of them (given out in turn), so it needs no strand: it
// reads one request (bounded header and body size, idle timeout), passes it to the Handler, writes
// the response, and loops while the connection is keep-alive. Requests on one connection are
// answered in order, one at a time (a pipelined request waits in the read buffer).
//
// Malformed HTTP closes the connection without an answer; a body over the limit is answered with
// 413 {"error":"too_large",...} and the connection is closed. The server never lets an exception
// escape into asio: a handler that throws anyway only costs its connection.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "http/transport/message.h"
#include "http/transport/response_stream.h"

namespace chaise::http {

class SessionBase;  // server.cc: one connection
template <typename Stream>
class Session;

// A second listener that speaks HTTPS (CouchDB's [ssl] section).
struct TlsOptions {
  std::uint16_t port = 6984;  // 0: the OS picks one (Server::tls_port())
  std::string cert_file;      // PEM certificate chain
  std::string key_file;       // PEM private key
  std::string password;       // of the key file, if encrypted
  std::string cacert_file;    // PEM CA certificates that client certificates are checked against
  bool verify_peer = false;   // ask clients for a certificate and check it
  bool fail_if_no_peer_cert = false;  // with verify_peer: refuse clients without one
  std::string ciphers;                // OpenSSL cipher list for TLS 1.2; empty: OpenSSL's default
};

struct ServerOptions {
  // Address to listen on, IPv4 or IPv6 literal. Default: loopback only.
  std::string bind_address = "127.0.0.1";
  // TCP port; 0 lets the OS pick one (read it back with Server::port()). Default: CouchDB's 5984.
  std::uint16_t port = 5984;
  // io threads, each running an io_context of its own; 0 = one per hardware thread (at least 1).
  unsigned io_threads = 0;
  // Largest request body accepted, in bytes; larger ones get 413. Default 64 MiB (CouchDB's
  // [chttpd] max_http_request_size).
  std::size_t max_request_body_bytes = 64 * 1024 * 1024;
  // Largest request line + headers, in bytes; larger ones close the connection. Default 64 KiB.
  std::size_t max_header_bytes = 64 * 1024;
  // How long a connection may take to deliver a complete request (including waiting idle between
  // keep-alive requests) before it is closed. Default 300 s.
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(300)};
  // How long a request's line and headers may take to arrive once its first byte has (a client
  // trickling a byte a second is cut off), and how long a new connection may stay silent before
  // its first request begins (idle_timeout applies between keep-alive requests). Default 30 s.
  std::chrono::milliseconds header_timeout{std::chrono::seconds(30)};
  // How long writing one response may take before the connection is closed. Default 60 s.
  std::chrono::milliseconds write_timeout{std::chrono::seconds(60)};
  // Open connections at most; connections beyond it are closed right after accept. Default 10000.
  std::size_t max_connections = 10000;
  // Open connections from one peer address at most; more are closed right after accept. 1000.
  std::size_t max_connections_per_address = 1000;
  // How long a request body may go without a byte arriving (the whole body still has
  // idle_timeout). Default 30 s.
  std::chrono::milliseconds body_timeout{std::chrono::seconds(30)};
  // Bytes of request bodies held at once over all connections; a request that would exceed it
  // gets 503 with Retry-After and the connection is closed. Default 512 MiB.
  std::size_t max_request_bytes_in_flight = 512ull << 20;
  // Pending connections queue length passed to listen(). Default 1024 (the kernel may cap it).
  int listen_backlog = 1024;
  // HTTPS on a second port, when set. TLS 1.2 and 1.3 only.
  std::optional<TlsOptions> tls;
  // Requests (with a body) for which this answers true, given their line and headers, reach the
  // handler before their body is read: it pulls the body with ResponseStream::read_body(), so a
  // large upload streams through bounded memory. max_request_body_bytes and the in-flight cap do
  // not apply to them (the handler bounds what it accepts). Unset: every body is read whole.
  std::function<bool(const Request& header)> stream_body;
  // How long stop() lets in-flight responses finish before abandoning them. Default 10 s.
  std::chrono::milliseconds shutdown_grace{std::chrono::seconds(10)};
};

// Answers one request: returns the complete Response, or writes a streamed one through the
// ResponseStream and returns nullopt. Must be callable concurrently from several threads (it runs
// on the connection's io thread). Router::handle fits.
using Handler =
    std::function<boost::asio::awaitable<std::optional<Response>>(const Request&, ResponseStream&)>;

class Server {
 public:
  Server(ServerOptions options, Handler handler);
  // Stops the server if it is running (see stop()).
  ~Server();

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds, listens and starts the io threads. Returns an empty error_code once the socket is
  // listening (connections are accepted from then on), or the error from resolving the address,
  // bind() or listen(), or loading the TLS certificate or key -- the server is then not running.
  // Call at most once.
  [[nodiscard]] boost::system::error_code start();

  // The port the listener is bound to (the OS-assigned one when options.port was 0). Valid after
  // a successful start().
  std::uint16_t port() const;
  // The TLS listener's port (0 without options.tls).
  std::uint16_t tls_port() const;
  // Connections open now.
  std::size_t open_connections() const;
  // True when an io thread runs a posted handler within `within` (the watchdog's health probe).
  bool probe(std::chrono::milliseconds within) const;

  // Stops accepting, closes idle connections, lets responses being written finish (bounded by
  // options.shutdown_grace), then joins the io threads. Idempotent; safe to call from any thread
  // except an io thread (it joins them). After it returns no handler is running.
  void stop();

 private:
  friend class SessionBase;
  template <typename Stream>
  friend class Session;
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace chaise::http

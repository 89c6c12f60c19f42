// http/client/http_client.h — an HTTP/1.1 client for one remote server: what the replicator
// speaks to another CouchDB with.
//
// Blocking calls with a deadline each: a request connects (or reuses an idle connection), writes,
// and reads the whole answer, or gives up once `timeout_ms` passes without the exchange finishing
// (a stalled peer costs its caller at most the timeout, never a stuck thread). Each connection has
// an io_context of its own that only the thread using it runs, so calls from several threads run
// in parallel on different connections without locks on the I/O path.
//
// Connections are kept alive and reused: at most `max_connections` are open at once (a caller
// beyond that waits for one to come back); a connection the server closed or that failed is
// dropped and the request tried once more on a fresh one when nothing of the answer was read.
// https:// speaks TLS 1.2+ through OpenSSL, checking the peer's certificate and name unless
// `verify_peer` is off, against the system's CA store or `ca_file`.
//
// cancel() closes the connections in use and makes every later call fail at once: how a job that
// is stopped lets go of a peer that does not answer.
//
// Answers are read whole, up to `max_body_bytes`; a larger one fails the call (the caller asks in
// smaller pieces). Threading: every method is thread-safe.
#pragma once

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/verb.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace chaise::http::client {

// An http(s) URL split as the client needs it. parse() accepts `scheme://[user[:password]@]host
// [:port][/path][?query]` with scheme http or https; user and password are percent-decoded.
struct Url {
  std::string scheme;  // "http" or "https"
  std::string host;    // without brackets for an IPv6 literal
  std::uint16_t port = 0;
  std::string path;   // percent-encoded as given, "/" at least, without the query
  std::string query;  // without '?'
  std::string user;
  std::string password;
  bool has_credentials = false;

  static std::optional<Url> parse(std::string_view text);
  bool tls() const { return scheme == "https"; }
  // "host" or "host:port" as the Host header carries it (the port only when not the default).
  std::string host_header() const;
};

struct ClientOptions {
  // The longest one request may take from connecting to the last byte of its answer. 30 s.
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
  // Open connections at most. 20 (CouchDB's http_connections).
  std::size_t max_connections = 20;
  // The largest answer read, in bytes. 256 MiB.
  std::size_t max_body_bytes = 256ull << 20;
  // TLS: check the server's certificate chain and host name.
  bool verify_peer = true;
  // TLS: PEM file of the CA certificates to trust; empty: the system's default store.
  std::string ca_file;
};

struct ClientResponse {
  unsigned status = 0;
  boost::beast::http::fields headers;
  std::string body;
};

// A failed exchange: no answer arrived (connection refused, DNS, TLS, timeout, malformed or
// oversized answer). `timed_out` tells the deadline apart.
struct ClientError {
  std::string message;
  bool timed_out = false;
};

template <typename T>
class ClientResult {
 public:
  ClientResult(T value) : value_(std::move(value)) {}            // NOLINT: implicit on purpose
  ClientResult(ClientError error) : error_(std::move(error)) {}  // NOLINT
  bool ok() const { return value_.has_value(); }
  T& value() { return *value_; }
  const ClientError& error() const { return *error_; }

 private:
  std::optional<T> value_;
  std::optional<ClientError> error_;
};

// A response whose body is read piece by piece (a document with large attachments), holding its
// connection until it is destroyed.
class ResponseReader {
 public:
  virtual ~ResponseReader() = default;
  unsigned status() const { return status_; }
  const boost::beast::http::fields& headers() const { return headers_; }
  // Appends the next bytes of the body to `out`, at most `max`: how many, 0 once the body is
  // complete; an error when the connection fails or stalls past the client's timeout.
  virtual ClientResult<std::size_t> read(std::string& out, std::size_t max) = 0;

 protected:
  unsigned status_ = 0;
  boost::beast::http::fields headers_;
};

// Gives a request body piece by piece: appends at most `max` bytes to `out` and says how many
// (0: the body is complete), or nullopt when it cannot.
using BodyPull = std::function<std::optional<std::size_t>(std::string& out, std::size_t max)>;

struct Connection;  // http_client.cc

class HttpClient {
 public:
  // `base` names the server (scheme, host, port); its path and credentials are not used here.
  HttpClient(Url base, ClientOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Sends `method target` (target: the path and query, percent-encoded) with `headers` (Host,
  // User-Agent and Content-Length are added) and `body`, and reads the answer.
  ClientResult<ClientResponse> request(
      boost::beast::http::verb method, std::string_view target,
      const std::vector<std::pair<std::string, std::string>>& headers, std::string body);

  // Sends `method target` without a body and reads the answer's head; its body is read through
  // the ResponseReader (each read bounded by the timeout).
  ClientResult<std::unique_ptr<ResponseReader>> open(
      boost::beast::http::verb method, std::string_view target,
      const std::vector<std::pair<std::string, std::string>>& headers);
  // Sends `method target` with a body `pull` gives piece by piece (Transfer-Encoding: chunked;
  // each piece's write bounded by the timeout) and reads the whole answer.
  ClientResult<ClientResponse> request_streamed(
      boost::beast::http::verb method, std::string_view target,
      const std::vector<std::pair<std::string, std::string>>& headers, const BodyPull& pull);

  // Ends the requests in progress at once (they fail) and every later one; any thread.
  void cancel();

  const Url& base() const { return base_; }

 private:
  struct Pool;
  class Reader;
  // A connection from the pool (idle, or new when fewer than max_connections are open), waiting
  // while all are in use; nullptr and `error` once cancelled.
  std::unique_ptr<Connection> acquire(std::string& error);
  // Back to the pool: kept when still connected, else closed and counted out.
  void release(std::unique_ptr<Connection> conn);
  boost::beast::http::request_header<> header(
      boost::beast::http::verb method, std::string_view target,
      const std::vector<std::pair<std::string, std::string>>& headers) const;
  Url base_;
  ClientOptions options_;
  std::unique_ptr<Pool> pool_;
};

}  // namespace chaise::http::client

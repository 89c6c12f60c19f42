// http/client/http_client.cc — see http_client.h.
//
// One exchange is one asio coroutine (resolve and connect when the connection is new, TLS
// handshake, write, read) run on the connection's own io_context by the calling thread for at
// most the timeout; past it the connection is closed, which ends every pending operation, and the
// connection is dropped.
#include "http/client/http_client.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/ssl/stream_base.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <cctype>
#include <charconv>
#include <condition_variable>
#include <limits>
#include <mutex>

#include "http/transport/request_parse.h"

namespace chaise::http::client {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

std::optional<Url> Url::parse(std::string_view text) {
  Url u;
  const auto scheme_end = text.find("://");
  if (scheme_end == std::string_view::npos) return std::nullopt;
  u.scheme = std::string(text.substr(0, scheme_end));
  for (char& c : u.scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (u.scheme != "http" && u.scheme != "https") return std::nullopt;
  std::string_view rest = text.substr(scheme_end + 3);
  const auto authority_end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, authority_end);
  std::string_view tail = authority_end == std::string_view::npos ? "" : rest.substr(authority_end);
  if (const auto at = authority.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    const auto colon = userinfo.find(':');
    auto user = percent_decode(userinfo.substr(0, colon));
    auto pass = colon == std::string_view::npos ? std::optional<std::string>("")
                                                : percent_decode(userinfo.substr(colon + 1));
    if (!user || !pass) return std::nullopt;
    u.user = std::move(*user);
    u.password = std::move(*pass);
    u.has_credentials = true;
  }
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    u.host = std::string(authority.substr(1, close - 1));
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return std::nullopt;
      port_text = after.substr(1);
    }
  } else {
    const auto colon = authority.rfind(':');
    u.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
  }
  if (u.host.empty()) return std::nullopt;
  u.port = u.tls() ? 443 : 80;
  if (!port_text.empty()) {
    unsigned port = 0;
    const auto [end, ec] =
        std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 ||
        port > 65535)
      return std::nullopt;
    u.port = static_cast<std::uint16_t>(port);
  }
  if (const auto hash = tail.find('#'); hash != std::string_view::npos) tail = tail.substr(0, hash);
  const auto q = tail.find('?');
  u.path = std::string(tail.substr(0, q));
  if (q != std::string_view::npos) u.query = std::string(tail.substr(q + 1));
  if (u.path.empty()) u.path = "/";
  return u;
}

std::string Url::host_header() const {
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  if (port != (tls() ? 443 : 80)) h += ":" + std::to_string(port);
  return h;
}

// One connection: its own io_context, and the byte stream once connected.
struct Connection {
  asio::io_context ioc{1};
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls;
  beast::flat_buffer buffer;
  bool connected = false;

  beast::tcp_stream& tcp() { return tls ? beast::get_lowest_layer(*tls) : *plain; }
  void close() {
    boost::system::error_code ignored;
    if (tls || plain) tcp().socket().close(ignored);
    connected = false;
  }
};

struct HttpClient::Pool {
  std::mutex mu;
  std::condition_variable returned;
  std::vector<std::unique_ptr<Connection>> idle;
  std::vector<Connection*> busy;
  std::size_t open = 0;
  bool cancelled = false;
  std::optional<asio::ssl::context> tls_context;
  std::string tls_error;  // why the TLS context could not be set up
};

HttpClient::HttpClient(Url base, ClientOptions options)
    : base_(std::move(base)), options_(std::move(options)), pool_(std::make_unique<Pool>()) {
  if (options_.max_connections == 0) options_.max_connections = 1;
  if (base_.tls()) {
    auto& ctx = pool_->tls_context.emplace(asio::ssl::context::tls_client);
    boost::system::error_code ec;
    ctx.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                        asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                        asio::ssl::context::no_tlsv1_1,
                    ec);
    if (options_.verify_peer) {
      ctx.set_verify_mode(asio::ssl::verify_peer, ec);
      if (!options_.ca_file.empty()) {
        ctx.load_verify_file(options_.ca_file, ec);
        if (ec) pool_->tls_error = "cannot load CA file " + options_.ca_file + ": " + ec.message();
      } else {
        ctx.set_default_verify_paths(ec);
      }
    } else {
      ctx.set_verify_mode(asio::ssl::verify_none, ec);
    }
  }
}

HttpClient::~HttpClient() = default;

void HttpClient::cancel() {
  std::lock_guard lock(pool_->mu);
  pool_->cancelled = true;
  for (Connection* c : pool_->busy) asio::post(c->ioc, [c] { c->close(); });
  pool_->returned.notify_all();
}

namespace {

// What a step of an exchange needs to know about the server.
struct Peer {
  const Url& base;
  asio::ssl::context* tls_context;
  bool verify_peer;
};

asio::awaitable<void> connect(Connection& c, const Peer& p, std::string& error) {
  boost::system::error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  tcp::resolver resolver(c.ioc);
  const auto endpoints =
      co_await resolver.async_resolve(p.base.host, std::to_string(p.base.port), tok);
  if (ec) {
    error = "cannot resolve " + p.base.host + ": " + ec.message();
    co_return;
  }
  c.plain.reset();
  c.tls.reset();
  if (p.tls_context != nullptr) {
    c.tls.emplace(c.ioc, *p.tls_context);
  } else {
    c.plain.emplace(c.ioc);
  }
  co_await c.tcp().async_connect(endpoints, tok);
  if (ec) {
    error = "cannot connect to " + p.base.host_header() + ": " + ec.message();
    co_return;
  }
  c.tcp().socket().set_option(tcp::no_delay(true), ec);
  if (c.tls) {
    if (!SSL_set_tlsext_host_name(c.tls->native_handle(), p.base.host.c_str())) {
      error = "TLS: cannot set the server name";
      co_return;
    }
    if (p.verify_peer) c.tls->set_verify_callback(asio::ssl::host_name_verification(p.base.host));
    co_await c.tls->async_handshake(asio::ssl::stream_base::client, tok);
    if (ec) {
      error = "TLS handshake with " + p.base.host_header() + " failed: " + ec.message();
      co_return;
    }
  }
  c.connected = true;
  c.buffer.clear();
}

// Writes `what` (a message, a serializer's header, a chunk) on the connection's stream.
template <typename Write>
asio::awaitable<void> on_stream(Connection& c, Write write, std::string& error,
                                std::string_view doing) {
  boost::system::error_code ec;
  if (c.tls) {
    co_await write(*c.tls, asio::redirect_error(asio::use_awaitable, ec));
  } else {
    co_await write(*c.plain, asio::redirect_error(asio::use_awaitable, ec));
  }
  if (ec && ec != bhttp::error::need_buffer) error = std::string(doing) + ": " + ec.message();
}

asio::awaitable<void> read_whole(Connection& c, std::size_t max_body_bytes,
                                 ClientResponse& response, std::string& error) {
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(max_body_bytes);
  parser.header_limit(1 << 20);
  boost::system::error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  if (c.tls) {
    co_await bhttp::async_read(*c.tls, c.buffer, parser, tok);
  } else {
    co_await bhttp::async_read(*c.plain, c.buffer, parser, tok);
  }
  if (ec) {
    error = ec == bhttp::error::body_limit
                ? "the answer is larger than " + std::to_string(max_body_bytes) + " bytes"
                : "cannot read the answer: " + ec.message();
    co_return;
  }
  auto msg = parser.release();
  response.status = msg.result_int();
  response.body = std::move(msg.body());
  response.headers = std::move(msg.base());
  if (!msg.keep_alive()) c.close();
}

using StreamParser = bhttp::response_parser<bhttp::buffer_body>;

// Connects the connection when it is not, then writes `req`.
template <typename Message>
asio::awaitable<void> send_request(Connection& c, const Peer& peer, Message& req,
                                   std::string& err) {
  if (!c.connected) co_await connect(c, peer, err);
  if (!err.empty()) co_return;
  co_await on_stream(
      c, [&](auto& s, auto tok) { return bhttp::async_write(s, req, tok); }, err,
      "cannot send the request");
}

}  // namespace

// Runs one step (a coroutine on the connection) for at most `timeout`; past it the connection
// is closed, which ends the step at once. Returns the step's error ("" when it succeeded).
template <typename Step>
static std::string run_step(Connection& c, Step step, std::chrono::milliseconds timeout) {
  std::string error;
  bool done = false;
  asio::co_spawn(c.ioc, step(error), [&done](std::exception_ptr) { done = true; });
  c.ioc.restart();
  c.ioc.run_for(timeout);
  if (!done) {
    c.close();
    c.ioc.restart();
    c.ioc.run();
    error = "no answer within " + std::to_string(timeout.count()) + " ms";
  }
  c.ioc.restart();
  if (!error.empty()) c.close();
  return error;
}

std::unique_ptr<Connection> HttpClient::acquire(std::string& error) {
  std::unique_lock lock(pool_->mu);
  pool_->returned.wait(lock, [&] {
    return pool_->cancelled || !pool_->idle.empty() || pool_->open < options_.max_connections;
  });
  if (pool_->cancelled) {
    error = "cancelled";
    return nullptr;
  }
  std::unique_ptr<Connection> conn;
  if (!pool_->idle.empty()) {
    conn = std::move(pool_->idle.back());
    pool_->idle.pop_back();
  } else {
    conn = std::make_unique<Connection>();
    ++pool_->open;
  }
  pool_->busy.push_back(conn.get());
  return conn;
}

void HttpClient::release(std::unique_ptr<Connection> conn) {
  {
    std::lock_guard lock(pool_->mu);
    std::erase(pool_->busy, conn.get());
    if (pool_->cancelled) conn->close();
    if (conn->connected) {
      pool_->idle.push_back(std::move(conn));
    } else {
      --pool_->open;
    }
  }
  pool_->returned.notify_one();
}

bhttp::request_header<> HttpClient::header(
    bhttp::verb method, std::string_view target,
    const std::vector<std::pair<std::string, std::string>>& headers) const {
  bhttp::request_header<> h;
  h.method(method);
  h.target(target);
  h.version(11);
  h.set(bhttp::field::host, base_.host_header());
  h.set(bhttp::field::user_agent, "Chaise/0.1.0");
  for (const auto& [name, value] : headers) h.set(name, value);
  return h;
}

ClientResult<ClientResponse> HttpClient::request(
    bhttp::verb method, std::string_view target,
    const std::vector<std::pair<std::string, std::string>>& headers, std::string body) {
  if (!pool_->tls_error.empty()) return ClientError{pool_->tls_error};
  bhttp::request<bhttp::string_body> req{header(method, target, headers)};
  const bool has_body = !body.empty() || method == bhttp::verb::post || method == bhttp::verb::put;
  req.body() = std::move(body);
  if (has_body) req.prepare_payload();
  const Peer peer{base_, pool_->tls_context ? &*pool_->tls_context : nullptr, options_.verify_peer};

  for (int attempt = 0;; ++attempt) {
    std::string error;
    auto conn = acquire(error);
    if (!conn) return ClientError{error};
    const bool reused = conn->connected;
    ClientResponse response;
    error = run_step(
        *conn,
        [&](std::string& err) -> asio::awaitable<void> {
          co_await send_request(*conn, peer, req, err);
          if (!err.empty()) co_return;
          co_await read_whole(*conn, options_.max_body_bytes, response, err);
        },
        options_.timeout);
    const bool timed_out = error.starts_with("no answer within");
    release(std::move(conn));
    if (error.empty()) return response;
    // A kept-alive connection the server closed meanwhile fails at once: try a fresh one, once.
    if (reused && !timed_out && attempt == 0) continue;
    return ClientError{std::move(error), timed_out};
  }
}

// A response read piece by piece: holds its connection until the body is read or it is gone.
class HttpClient::Reader : public ResponseReader {
 public:
  Reader(HttpClient& client, std::unique_ptr<Connection> conn, std::unique_ptr<StreamParser> p)
      : client_(client), conn_(std::move(conn)), parser_(std::move(p)) {
    status_ = parser_->get().result_int();
    headers_ = parser_->get().base();
  }
  ~Reader() override {
    if (!parser_->is_done()) conn_->close();  // the rest of the body is not worth reading
    client_.release(std::move(conn_));
  }
  ClientResult<std::size_t> read(std::string& out, std::size_t max) override {
    if (parser_->is_done() || max == 0) return std::size_t{0};
    const std::size_t before = out.size();
    out.resize(before + max);
    auto& body = parser_->get().body();
    body.data = out.data() + before;
    body.size = max;
    const std::string error = run_step(
        *conn_,
        [&](std::string& err) -> asio::awaitable<void> {
          co_await on_stream(
              *conn_,
              [&](auto& s, auto tok) { return bhttp::async_read(s, conn_->buffer, *parser_, tok); },
              err, "cannot read the answer");
        },
        client_.options_.timeout);
    const std::size_t got = max - body.size;
    out.resize(before + got);
    if (!error.empty()) return ClientError{error, error.starts_with("no answer within")};
    if (got == 0 && !parser_->is_done()) return ClientError{"the answer ended early"};
    if (parser_->is_done() && !parser_->keep_alive()) conn_->close();
    return got;
  }

 private:
  HttpClient& client_;
  std::unique_ptr<Connection> conn_;
  std::unique_ptr<StreamParser> parser_;
};

ClientResult<std::unique_ptr<ResponseReader>> HttpClient::open(
    bhttp::verb method, std::string_view target,
    const std::vector<std::pair<std::string, std::string>>& headers) {
  if (!pool_->tls_error.empty()) return ClientError{pool_->tls_error};
  bhttp::request<bhttp::empty_body> req{header(method, target, headers)};
  const Peer peer{base_, pool_->tls_context ? &*pool_->tls_context : nullptr, options_.verify_peer};
  for (int attempt = 0;; ++attempt) {
    std::string error;
    auto conn = acquire(error);
    if (!conn) return ClientError{error};
    const bool reused = conn->connected;
    auto parser = std::make_unique<StreamParser>();
    // No limit: the body is read piece by piece. (Not boost::none: Boost 1.74's parser compares a
    // Content-Length with the disabled limit and refuses every body.)
    parser->body_limit(std::numeric_limits<std::uint64_t>::max());
    parser->header_limit(1 << 20);
    error = run_step(
        *conn,
        [&](std::string& err) -> asio::awaitable<void> {
          co_await send_request(*conn, peer, req, err);
          if (!err.empty()) co_return;
          co_await on_stream(
              *conn,
              [&](auto& s, auto tok) {
                return bhttp::async_read_header(s, conn->buffer, *parser, tok);
              },
              err, "cannot read the answer");
        },
        options_.timeout);
    if (error.empty()) {
      return std::unique_ptr<ResponseReader>(new Reader(*this, std::move(conn), std::move(parser)));
    }
    const bool timed_out = error.starts_with("no answer within");
    release(std::move(conn));
    if (reused && !timed_out && attempt == 0) continue;
    return ClientError{std::move(error), timed_out};
  }
}

ClientResult<ClientResponse> HttpClient::request_streamed(
    bhttp::verb method, std::string_view target,
    const std::vector<std::pair<std::string, std::string>>& headers, const BodyPull& pull) {
  if (!pool_->tls_error.empty()) return ClientError{pool_->tls_error};
  bhttp::request<bhttp::empty_body> req{header(method, target, headers)};
  req.chunked(true);
  const Peer peer{base_, pool_->tls_context ? &*pool_->tls_context : nullptr, options_.verify_peer};
  std::string error;
  auto conn = acquire(error);
  if (!conn) return ClientError{error};
  std::optional<bhttp::request_serializer<bhttp::empty_body>> sr;
  // The head: a kept-alive connection the server closed meanwhile is replaced once (nothing of
  // the body has been pulled yet).
  for (int attempt = 0;; ++attempt) {
    const bool reused = conn->connected;
    sr.emplace(req);
    error = run_step(
        *conn,
        [&](std::string& err) -> asio::awaitable<void> {
          if (!conn->connected) co_await connect(*conn, peer, err);
          if (!err.empty()) co_return;
          co_await on_stream(
              *conn, [&](auto& s, auto tok) { return bhttp::async_write_header(s, *sr, tok); }, err,
              "cannot send the request");
        },
        options_.timeout);
    if (error.empty() || !reused || attempt > 0) break;
  }
  std::string piece;
  while (error.empty()) {
    piece.clear();
    const auto n = pull(piece, 1 << 20);
    if (!n) {
      error = "the body to send could not be read";
      break;
    }
    error = run_step(
        *conn,
        [&](std::string& err) -> asio::awaitable<void> {
          co_await on_stream(
              *conn,
              [&](auto& s, auto tok) {
                return *n == 0 ? asio::async_write(s, bhttp::make_chunk_last(), tok)
                               : asio::async_write(s, bhttp::make_chunk(asio::buffer(piece)), tok);
              },
              err, "cannot send the request");
        },
        options_.timeout);
    if (*n == 0) break;
  }
  ClientResponse response;
  if (error.empty()) {
    error = run_step(
        *conn,
        [&](std::string& err) -> asio::awaitable<void> {
          co_await read_whole(*conn, options_.max_body_bytes, response, err);
        },
        options_.timeout);
  }
  if (!error.empty()) conn->close();
  release(std::move(conn));
  if (!error.empty()) return ClientError{error, error.starts_with("no answer within")};
  return response;
}

}  // namespace chaise::http::client

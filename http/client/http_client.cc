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
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <cctype>
#include <charconv>
#include <condition_variable>
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

namespace {

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

}  // namespace

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

std::size_t HttpClient::open_connections() const {
  std::lock_guard lock(pool_->mu);
  return pool_->open;
}

namespace {

struct Exchange {
  const Url& base;
  asio::ssl::context* tls_context;
  bool verify_peer;
  std::size_t max_body_bytes;
  bhttp::request<bhttp::string_body>& request;
  ClientResponse response;
  bool wrote = false;  // the request was sent whole: no retry after a failure past this point
  std::string error;
};

asio::awaitable<void> run_exchange(Connection& c, Exchange& x) {
  boost::system::error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  if (!c.connected) {
    tcp::resolver resolver(c.ioc);
    const auto endpoints =
        co_await resolver.async_resolve(x.base.host, std::to_string(x.base.port), tok);
    if (ec) {
      x.error = "cannot resolve " + x.base.host + ": " + ec.message();
      co_return;
    }
    c.plain.reset();
    c.tls.reset();
    if (x.tls_context != nullptr) {
      c.tls.emplace(c.ioc, *x.tls_context);
    } else {
      c.plain.emplace(c.ioc);
    }
    co_await c.tcp().async_connect(endpoints, tok);
    if (ec) {
      x.error = "cannot connect to " + x.base.host_header() + ": " + ec.message();
      co_return;
    }
    c.tcp().socket().set_option(tcp::no_delay(true), ec);
    if (c.tls) {
      if (!SSL_set_tlsext_host_name(c.tls->native_handle(), x.base.host.c_str())) {
        x.error = "TLS: cannot set the server name";
        co_return;
      }
      if (x.verify_peer) c.tls->set_verify_callback(asio::ssl::host_name_verification(x.base.host));
      co_await c.tls->async_handshake(asio::ssl::stream_base::client, tok);
      if (ec) {
        x.error = "TLS handshake with " + x.base.host_header() + " failed: " + ec.message();
        co_return;
      }
    }
    c.connected = true;
    c.buffer.clear();
  }
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(x.max_body_bytes);
  parser.header_limit(1 << 20);
  if (c.tls) {
    co_await bhttp::async_write(*c.tls, x.request, tok);
  } else {
    co_await bhttp::async_write(*c.plain, x.request, tok);
  }
  if (ec) {
    x.error = "cannot send the request: " + ec.message();
    co_return;
  }
  x.wrote = true;
  if (c.tls) {
    co_await bhttp::async_read(*c.tls, c.buffer, parser, tok);
  } else {
    co_await bhttp::async_read(*c.plain, c.buffer, parser, tok);
  }
  if (ec) {
    x.error = ec == bhttp::error::body_limit
                  ? "the answer is larger than " + std::to_string(x.max_body_bytes) + " bytes"
                  : "cannot read the answer: " + ec.message();
    co_return;
  }
  auto msg = parser.release();
  x.response.status = msg.result_int();
  x.response.body = std::move(msg.body());
  x.response.headers = std::move(msg.base());
  if (!msg.keep_alive()) c.close();
}

}  // namespace

ClientResult<ClientResponse> HttpClient::request(
    bhttp::verb method, std::string_view target,
    const std::vector<std::pair<std::string, std::string>>& headers, std::string body) {
  if (!pool_->tls_error.empty()) return ClientError{pool_->tls_error};
  bhttp::request<bhttp::string_body> req{method, std::string(target), 11};
  req.set(bhttp::field::host, base_.host_header());
  req.set(bhttp::field::user_agent, "Chaise/0.1.0");
  for (const auto& [name, value] : headers) req.set(name, value);
  const bool has_body = !body.empty() || method == bhttp::verb::post || method == bhttp::verb::put;
  req.body() = std::move(body);
  if (has_body) req.prepare_payload();
  req.keep_alive(true);

  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<Connection> conn;
    {
      std::unique_lock lock(pool_->mu);
      pool_->returned.wait(lock, [&] {
        return pool_->cancelled || !pool_->idle.empty() || pool_->open < options_.max_connections;
      });
      if (pool_->cancelled) return ClientError{"cancelled"};
      if (!pool_->idle.empty()) {
        conn = std::move(pool_->idle.back());
        pool_->idle.pop_back();
      } else {
        conn = std::make_unique<Connection>();
        ++pool_->open;
      }
      pool_->busy.push_back(conn.get());
    }
    const bool reused = conn->connected;
    Exchange x{base_,
               pool_->tls_context ? &*pool_->tls_context : nullptr,
               options_.verify_peer,
               options_.max_body_bytes,
               req,
               {},
               false,
               {}};
    bool done = false;
    asio::co_spawn(conn->ioc, run_exchange(*conn, x), [&done](std::exception_ptr) { done = true; });
    conn->ioc.run_for(options_.timeout);
    bool timed_out = false;
    if (!done) {
      timed_out = true;
      conn->close();
      conn->ioc.restart();
      conn->ioc.run();  // the closed socket ends every pending operation at once
      if (x.error.empty())
        x.error = "no answer within " + std::to_string(options_.timeout.count()) + " ms";
    }
    conn->ioc.restart();
    const bool failed = timed_out || !x.error.empty();
    if (failed) conn->close();
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
    if (!failed) return std::move(x.response);
    // A kept-alive connection the server closed meanwhile fails at once: try a fresh one, once.
    if (reused && !timed_out && attempt == 0) continue;
    return ClientError{std::move(x.error), timed_out};
  }
}

}  // namespace chaise::http::client

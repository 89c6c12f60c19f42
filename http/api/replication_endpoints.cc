// http/api/replication_endpoints.cc — see replication_endpoints.h.
//
// The in-process sender runs the router's coroutine on an io_context of its own, driven by the
// calling thread (a replication job's), and collects the answer, streamed or not, in memory up to
// kMaxBody. Cancelling it tells the handler that its client left (ResponseStream::watch_peer), which
// ends a waiting longpoll at once.
#include "http/api/replication_endpoints.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "core/security/replicator_docs.h"
#include "http/api/router.h"
#include "http/client/couch_endpoint.h"
#include "http/transport/request_parse.h"
#include "http/transport/response_stream.h"

namespace chaise::http {

namespace asio = boost::asio;
using client::ClientError;
using client::ClientResponse;
using client::ClientResult;

namespace {

// The largest answer an in-process request collects (a page of _bulk_get with attachments).
constexpr std::size_t kMaxBody = 256ull << 20;

class CollectingStream : public ResponseStream {
 public:
  asio::awaitable<bool> begin(Response head) override {
    head_ = std::move(head);
    begun_ = true;
    co_return true;
  }
  asio::awaitable<bool> write(std::string_view data) override {
    if (body_.size() + data.size() > kMaxBody) {
      overflow_ = true;
      co_return false;
    }
    body_.append(data);
    co_return true;
  }
  asio::awaitable<bool> flush() override { co_return !overflow_; }
  asio::awaitable<bool> finish() override { co_return !overflow_; }
  bool begun() const override { return begun_; }
  void watch_peer(std::function<void()> closed) override {
    std::lock_guard lock(mu_);
    closed_ = std::move(closed);
  }
  std::string peer_address() const override { return "127.0.0.1"; }
  bool body_streamed() const override { return static_cast<bool>(pull_); }
  asio::awaitable<std::optional<std::size_t>> read_body(std::string& out,
                                                        std::size_t max) override {
    co_return pull_(out, max);
  }
  // The request's body, pulled as the handler reads it (a streamed PUT).
  void stream_body(client::BodyPull pull) { pull_ = std::move(pull); }

  // The watch_peer callback, if any (to run on the handler's executor).
  std::function<void()> take_closed() {
    std::lock_guard lock(mu_);
    return std::exchange(closed_, {});
  }

  Response head_;
  std::string body_;
  bool begun_ = false;
  bool overflow_ = false;

 private:
  std::mutex mu_;
  std::function<void()> closed_;
  client::BodyPull pull_;
};

// A response the router streams on a thread of its own while the caller reads it: write()
// waits while kPipeBytes are unread, so the body passes through in bounded memory.
class PipeStream : public ResponseStream {
 public:
  static constexpr std::size_t kPipeBytes = 1 << 20;

  asio::awaitable<bool> begin(Response head) override {
    std::lock_guard lock(mu_);
    head_ = std::move(head);
    has_head_ = true;
    cv_.notify_all();
    co_return !gone_;
  }
  asio::awaitable<bool> write(std::string_view data) override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return gone_ || buffer_.size() < kPipeBytes; });
    if (gone_) co_return false;
    buffer_.append(data);
    cv_.notify_all();
    co_return true;
  }
  asio::awaitable<bool> flush() override { co_return !is_gone(); }
  asio::awaitable<bool> finish() override {
    end();
    co_return !is_gone();
  }
  bool begun() const override {
    std::lock_guard lock(mu_);
    return has_head_;
  }
  void watch_peer(std::function<void()> closed) override {
    std::lock_guard lock(mu_);
    closed_ = std::move(closed);
  }
  std::string peer_address() const override { return "127.0.0.1"; }

  // The router answered with a whole Response (or nothing, when it failed).
  void complete(std::optional<Response> r) {
    std::lock_guard lock(mu_);
    if (r) {
      head_ = std::move(*r);
      buffer_ = std::move(head_.body());
      has_head_ = true;
    }
    ended_ = true;
    cv_.notify_all();
  }
  void end() {
    std::lock_guard lock(mu_);
    ended_ = true;
    cv_.notify_all();
  }
  // The reader's side. wait_head: false when the router ended without an answer or `timeout`
  // passed.
  bool wait_head(std::chrono::milliseconds timeout, Response& head) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return has_head_ || ended_; }) || !has_head_)
      return false;
    head = head_;
    head.body().clear();
    return true;
  }
  // Appends up to `max` unread bytes: how many (0 at the end), nullopt after `timeout`.
  std::optional<std::size_t> take(std::string& out, std::size_t max,
                                  std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !buffer_.empty() || ended_; }))
      return std::nullopt;
    const std::size_t n = std::min(max, buffer_.size());
    out.append(buffer_, 0, n);
    buffer_.erase(0, n);
    cv_.notify_all();
    return n;
  }
  // The reader is gone: the handler's next write fails and a waiting feed is told.
  std::function<void()> leave() {
    std::lock_guard lock(mu_);
    gone_ = true;
    cv_.notify_all();
    return std::exchange(closed_, {});
  }

 private:
  bool is_gone() const {
    std::lock_guard lock(mu_);
    return gone_;
  }
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Response head_;
  std::string buffer_;
  bool has_head_ = false;
  bool ended_ = false;
  bool gone_ = false;
  std::function<void()> closed_;
};

// How long a reader of this server's own answer waits for its next bytes.
constexpr std::chrono::milliseconds kLocalReadTimeout{60'000};

// The router's streamed answer, read on the caller's thread while a thread of its own produces
// it.
class PipeReader : public client::ResponseReader {
 public:
  PipeReader(const Router& router, Request req) : req_(std::move(req)) {
    thread_ = std::thread([this, &router] {
      auto work = asio::make_work_guard(ioc_);
      bool done = false;
      asio::co_spawn(ioc_, router.handle(req_, stream_),
                     [&](std::exception_ptr, std::optional<Response> r) {
                       stream_.complete(std::move(r));
                       done = true;
                     });
      while (!done) ioc_.run_one_for(std::chrono::milliseconds(100));
      work.reset();
      ioc_.run();
    });
  }
  ~PipeReader() override {
    if (auto closed = stream_.leave()) asio::post(ioc_, std::move(closed));
    thread_.join();
  }
  bool start() {
    Response head;
    if (!stream_.wait_head(kLocalReadTimeout, head)) return false;
    status_ = head.result_int();
    headers_ = head.base();
    return true;
  }
  client::ClientResult<std::size_t> read(std::string& out, std::size_t max) override {
    auto n = stream_.take(out, max, kLocalReadTimeout);
    if (!n) return client::ClientError{"no answer within 60000 ms", true};
    return *n;
  }

 private:
  Request req_;
  PipeStream stream_;
  asio::io_context ioc_{1};
  std::thread thread_;
};

class LocalSender : public client::Sender {
 public:
  LocalSender(const Router& router, std::optional<core::UserCtx> as_user)
      : router_(router), as_user_(std::move(as_user)) {}

  ClientResult<ClientResponse> send(beast_http::verb method, std::string_view target,
                                    const Headers& headers, std::string body) override {
    Request req{method, std::string(target), 11};
    req.set(beast_http::field::host, "127.0.0.1");
    for (const auto& [name, value] : headers) req.set(name, value);
    req.body() = std::move(body);
    if (!req.body().empty() || method == beast_http::verb::post || method == beast_http::verb::put)
      req.prepare_payload();
    return send(std::move(req), nullptr);
  }

  // Answers `req` through the router on this thread; its body pulled from `pull` when set.
  ClientResult<ClientResponse> send(Request req, const client::BodyPull* pull) {
    CollectingStream stream;
    if (pull != nullptr) stream.stream_body(*pull);
    {
      std::lock_guard lock(mu_);
      if (cancelled_) return ClientError{"cancelled"};
      current_ = &stream;
    }
    ioc_.restart();
    std::optional<Response> answer;
    bool done = false;
    std::exception_ptr failure;
    auto work = asio::make_work_guard(ioc_);
    auto run = as_user_ ? router_.handle_as(req, stream, *as_user_) : router_.handle(req, stream);
    asio::co_spawn(ioc_, std::move(run), [&](std::exception_ptr e, std::optional<Response> r) {
      failure = e;
      answer = std::move(r);
      done = true;
    });
    while (!done) ioc_.run_one_for(std::chrono::milliseconds(100));
    work.reset();
    {
      std::lock_guard lock(mu_);
      current_ = nullptr;
    }
    if (failure) return ClientError{"the request failed inside the server"};
    if (stream.overflow_) return ClientError{"the answer is larger than the in-process limit"};
    ClientResponse out;
    if (answer) {
      out.status = answer->result_int();
      out.headers = std::move(answer->base());
      out.body = std::move(answer->body());
    } else {
      out.status = stream.head_.result_int();
      out.headers = std::move(stream.head_.base());
      out.body = std::move(stream.body_);
    }
    return out;
  }

  ClientResult<std::unique_ptr<client::ResponseReader>> open(beast_http::verb method,
                                                             std::string_view target,
                                                             const Headers& headers) override {
    {
      std::lock_guard lock(mu_);
      if (cancelled_) return ClientError{"cancelled"};
    }
    Request req{method, std::string(target), 11};
    req.set(beast_http::field::host, "127.0.0.1");
    for (const auto& [name, value] : headers) req.set(name, value);
    auto reader = std::make_unique<PipeReader>(router_, std::move(req));
    if (!reader->start()) return ClientError{"no answer from this server", true};
    return std::unique_ptr<client::ResponseReader>(std::move(reader));
  }

  ClientResult<ClientResponse> send_streamed(beast_http::verb method, std::string_view target,
                                             const Headers& headers,
                                             const client::BodyPull& pull) override {
    Request req{method, std::string(target), 11};
    req.set(beast_http::field::host, "127.0.0.1");
    for (const auto& [name, value] : headers) req.set(name, value);
    req.set(beast_http::field::transfer_encoding, "chunked");
    if (streams_request_body(req)) return send(std::move(req), &pull);
    // A body the handler reads whole (JSON): gathered first.
    std::string body;
    for (;;) {
      const auto n = pull(body, 1 << 20);
      if (!n) return ClientError{"the body to send could not be read"};
      if (*n == 0) break;
    }
    req.erase(beast_http::field::transfer_encoding);
    req.body() = std::move(body);
    req.prepare_payload();
    return send(std::move(req), nullptr);
  }

  void cancel() override {
    std::function<void()> closed;
    {
      std::lock_guard lock(mu_);
      cancelled_ = true;
      if (current_ != nullptr) closed = current_->take_closed();
    }
    if (closed) asio::post(ioc_, std::move(closed));
  }

 private:
  const Router& router_;
  const std::optional<core::UserCtx> as_user_;
  asio::io_context ioc_{1};
  std::mutex mu_;
  bool cancelled_ = false;
  CollectingStream* current_ = nullptr;
};

}  // namespace

ReplicationEndpoints::ReplicationEndpoints(RemoteEndpointOptions remote)
    : remote_(std::move(remote)) {}

void ReplicationEndpoints::set_listener(std::string host, std::uint16_t port,
                                        std::uint16_t tls_port) {
  host_ = std::move(host);
  port_ = port;
  tls_port_ = tls_port;
}

std::string ReplicationEndpoints::own_url() const {
  std::string host = host_;
  if (host.empty() || host == "0.0.0.0" || host == "::") host = "127.0.0.1";
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return "http://" + host + ":" + std::to_string(port_.load());
}

bool ReplicationEndpoints::is_self(std::string_view scheme, std::string_view host,
                                   std::uint16_t port) const {
  const bool loopback = host == "127.0.0.1" || host == "localhost" || host == "::1" ||
                        (!host_.empty() && host == host_);
  if (!loopback) return false;
  if (scheme == "http") return port_ != 0 && port == port_;
  return tls_port_ != 0 && port == tls_port_;
}

core::Outcome<std::unique_ptr<core::replication::Endpoint>> ReplicationEndpoints::open(
    const core::replication::Json& endpoint, const Options& o) {
  std::string url_text;
  if (endpoint.is_string()) {
    url_text = endpoint.get<std::string>();
  } else if (endpoint.is_object() && endpoint.contains("url") && endpoint["url"].is_string()) {
    url_text = endpoint["url"].get<std::string>();
  }
  const auto url = client::Url::parse(url_text);
  if (!url) return core::err::bad_request("endpoint has an invalid url");
  client::ClientOptions options;
  options.timeout = std::chrono::milliseconds(o.connection_timeout_ms);
  options.max_connections = static_cast<std::size_t>(std::max(1, o.http_connections));
  options.verify_peer = remote_.verify_peer;
  options.ca_file = remote_.ca_file;
  std::unique_ptr<client::Sender> sender;
  if (is_self(url->scheme, url->host, url->port))
    sender = std::make_unique<LocalSender>(*router_, std::nullopt);
  return client::CouchEndpoint::from_json(endpoint, options, std::move(sender));
}

std::unique_ptr<core::replication::Endpoint> ReplicationEndpoints::replicator_db(
    std::string_view db_name) {
  core::UserCtx replicator{std::nullopt,
                           {std::string(core::kAdminRole), std::string(core::kReplicatorRole)}};
  return std::make_unique<client::CouchEndpoint>(
      std::make_unique<LocalSender>(*router_, std::move(replicator)),
      "/" + url_encode(db_name) + "/", std::vector<std::pair<std::string, std::string>>{},
      std::string(db_name));
}

}  // namespace chaise::http

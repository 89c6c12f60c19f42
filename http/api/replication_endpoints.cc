// http/api/replication_endpoints.cc — see replication_endpoints.h.
//
// The in-process sender runs the router's coroutine on the factory's io threads while the calling
// thread (a replication job's) waits, and collects the answer in memory up to kMaxBody, or hands
// it over piece by piece through a Pipe (a streamed GET) or pulls a streamed PUT's body as the
// handler reads it. Cancelling tells the handler that its client left (ResponseStream::watch_peer),
// which ends a waiting longpoll at once. The io_context lives as long as the factory, so nothing
// posts into one that is gone.
#include "http/api/replication_endpoints.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "core/security/replicator_docs.h"
#include "http/api/router.h"
#include "http/api/wakeup.h"
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

// A streamed answer passing from the router (producer, on an io thread) to a reader (a job's
// thread): at most kPipeBytes wait unread; a producer that finds the pipe full waits without
// holding its thread (async_wait_ready) until the reader drains it.
struct Pipe {
  static constexpr std::size_t kPipeBytes = 1 << 20;
  std::mutex mu;
  std::condition_variable cv;    // the reader's waits
  std::function<void()> resume;  // a producer waiting for room
  Response head;
  std::string buffer;
  bool has_head = false;
  bool ended = false;            // the router finished the body (or failed)
  bool completed = false;        // the router's coroutine is over: its request and stream may go
  bool gone = false;             // the reader left
  std::function<void()> closed;  // the handler's watch_peer
  bool ready() const { return gone || buffer.size() < kPipeBytes; }
  void wake_producer(std::unique_lock<std::mutex>& lock) {
    auto r = std::exchange(resume, {});
    lock.unlock();
    if (r) r();
  }
};

class PipeStream : public ResponseStream {
 public:
  explicit PipeStream(std::shared_ptr<Pipe> pipe) : pipe_(std::move(pipe)) {}
  asio::awaitable<bool> begin(Response head) override {
    std::lock_guard lock(pipe_->mu);
    pipe_->head = std::move(head);
    pipe_->has_head = true;
    pipe_->cv.notify_all();
    co_return !pipe_->gone;
  }
  asio::awaitable<bool> write(std::string_view data) override {
    co_await async_wait_ready(pipe_, asio::use_awaitable);
    std::lock_guard lock(pipe_->mu);
    if (pipe_->gone) co_return false;
    pipe_->buffer.append(data);
    pipe_->cv.notify_all();
    co_return true;
  }
  asio::awaitable<bool> flush() override { co_return !is_gone(); }
  asio::awaitable<bool> finish() override {
    std::lock_guard lock(pipe_->mu);
    pipe_->ended = true;
    pipe_->cv.notify_all();
    co_return !pipe_->gone;
  }
  bool begun() const override {
    std::lock_guard lock(pipe_->mu);
    return pipe_->has_head;
  }
  void watch_peer(std::function<void()> closed) override {
    std::lock_guard lock(pipe_->mu);
    pipe_->closed = std::move(closed);
  }
  std::string peer_address() const override { return "127.0.0.1"; }

 private:
  bool is_gone() const {
    std::lock_guard lock(pipe_->mu);
    return pipe_->gone;
  }
  std::shared_ptr<Pipe> pipe_;
};

// How long a reader of this server's own answer waits for its next bytes.
constexpr std::chrono::milliseconds kLocalReadTimeout{60'000};

// The router's streamed answer, read on the caller's thread while the router produces it on the
// in-process io threads.
class PipeReader : public client::ResponseReader {
 public:
  PipeReader(const Router& router, asio::io_context& ioc, Request req)
      : ioc_(ioc), req_(std::move(req)), pipe_(std::make_shared<Pipe>()), stream_(pipe_) {
    asio::co_spawn(ioc_, router.handle(req_, stream_),
                   [pipe = pipe_](std::exception_ptr, std::optional<Response> r) {
                     std::lock_guard lock(pipe->mu);
                     if (r) {
                       pipe->head = std::move(*r);
                       pipe->buffer = std::move(pipe->head.body());
                       pipe->has_head = true;
                     }
                     pipe->ended = true;
                     pipe->completed = true;
                     pipe->cv.notify_all();
                   });
  }
  ~PipeReader() override {
    std::unique_lock lock(pipe_->mu);
    pipe_->gone = true;
    auto closed = std::exchange(pipe_->closed, {});
    if (closed) asio::post(ioc_, std::move(closed));
    pipe_->wake_producer(lock);
    // The router's coroutine refers to req_ and stream_: they stay until it is over.
    lock.lock();
    pipe_->cv.wait(lock, [&] { return pipe_->completed; });
  }
  bool start() {
    std::unique_lock lock(pipe_->mu);
    if (!pipe_->cv.wait_for(lock, kLocalReadTimeout,
                            [&] { return pipe_->has_head || pipe_->ended; }) ||
        !pipe_->has_head)
      return false;
    status_ = pipe_->head.result_int();
    headers_ = pipe_->head.base();
    return true;
  }
  client::ClientResult<std::size_t> read(std::string& out, std::size_t max) override {
    std::unique_lock lock(pipe_->mu);
    if (!pipe_->cv.wait_for(lock, kLocalReadTimeout,
                            [&] { return !pipe_->buffer.empty() || pipe_->ended; }))
      return client::ClientError{"no answer within 60000 ms", true};
    const std::size_t n = std::min(max, pipe_->buffer.size());
    out.append(pipe_->buffer, 0, n);
    pipe_->buffer.erase(0, n);
    pipe_->wake_producer(lock);
    return n;
  }

 private:
  asio::io_context& ioc_;
  Request req_;
  std::shared_ptr<Pipe> pipe_;
  PipeStream stream_;
};

// One request answered by the router on the in-process io threads while the caller waits.
struct Exchange {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr failure;
  std::optional<Response> answer;
};

class LocalSender : public client::Sender {
 public:
  LocalSender(const Router& router, asio::io_context& ioc, std::optional<core::UserCtx> as_user)
      : router_(router), ioc_(ioc), as_user_(std::move(as_user)) {}

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

  // Answers `req` through the router; its body pulled from `pull` when set (on an io thread).
  ClientResult<ClientResponse> send(Request req, const client::BodyPull* pull) {
    CollectingStream stream;
    if (pull != nullptr) stream.stream_body(*pull);
    {
      std::lock_guard lock(mu_);
      if (cancelled_) return ClientError{"cancelled"};
      current_ = &stream;
    }
    auto x = std::make_shared<Exchange>();
    auto run = as_user_ ? router_.handle_as(req, stream, *as_user_) : router_.handle(req, stream);
    asio::co_spawn(ioc_, std::move(run), [x](std::exception_ptr e, std::optional<Response> r) {
      std::lock_guard lock(x->mu);
      x->failure = e;
      x->answer = std::move(r);
      x->done = true;
      x->cv.notify_all();
    });
    {
      std::unique_lock lock(x->mu);
      x->cv.wait(lock, [&] { return x->done; });
    }
    {
      std::lock_guard lock(mu_);
      current_ = nullptr;
    }
    if (x->failure) return ClientError{"the request failed inside the server"};
    if (stream.overflow_) return ClientError{"the answer is larger than the in-process limit"};
    ClientResponse out;
    if (x->answer) {
      out.status = x->answer->result_int();
      out.headers = std::move(x->answer->base());
      out.body = std::move(x->answer->body());
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
    auto reader = std::make_unique<PipeReader>(router_, ioc_, std::move(req));
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
  asio::io_context& ioc_;
  const std::optional<core::UserCtx> as_user_;
  std::mutex mu_;
  bool cancelled_ = false;
  CollectingStream* current_ = nullptr;
};

}  // namespace

ReplicationEndpoints::ReplicationEndpoints(RemoteEndpointOptions remote)
    : work_(asio::make_work_guard(ioc_)), remote_(std::move(remote)) {
  for (int i = 0; i < kIoThreads; ++i) threads_.emplace_back([this] { ioc_.run(); });
}

ReplicationEndpoints::~ReplicationEndpoints() {
  work_.reset();
  ioc_.stop();
  for (auto& t : threads_) t.join();
}

void ReplicationEndpoints::set_listener(std::string host, std::uint16_t port,
                                        std::uint16_t tls_port) {
  {
    std::lock_guard lock(host_mu_);
    host_ = std::move(host);
  }
  port_ = port;
  tls_port_ = tls_port;
}

std::string ReplicationEndpoints::own_url() const {
  std::string host;
  {
    std::lock_guard lock(host_mu_);
    host = host_;
  }
  if (host.empty() || host == "0.0.0.0" || host == "::") host = "127.0.0.1";
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return "http://" + host + ":" + std::to_string(port_.load());
}

bool ReplicationEndpoints::is_self(std::string_view scheme, std::string_view host,
                                   std::uint16_t port) const {
  bool loopback = host == "127.0.0.1" || host == "localhost" || host == "::1";
  if (!loopback) {
    std::lock_guard lock(host_mu_);
    loopback = !host_.empty() && host == host_;
  }
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
    sender = std::make_unique<LocalSender>(*router_, ioc_, std::nullopt);
  return client::CouchEndpoint::from_json(endpoint, options, std::move(sender));
}

std::unique_ptr<core::replication::Endpoint> ReplicationEndpoints::replicator_db(
    std::string_view db_name) {
  core::UserCtx replicator{std::nullopt,
                           {std::string(core::kAdminRole), std::string(core::kReplicatorRole)}};
  return std::make_unique<client::CouchEndpoint>(
      std::make_unique<LocalSender>(*router_, ioc_, std::move(replicator)),
      "/" + url_encode(db_name) + "/", std::vector<std::pair<std::string, std::string>>{},
      std::string(db_name));
}

}  // namespace chaise::http

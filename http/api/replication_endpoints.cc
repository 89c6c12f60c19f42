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
#include <mutex>

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
};

class LocalSender : public client::Sender {
 public:
  LocalSender(const Router& router, std::optional<core::UserCtx> as_user)
      : router_(router), as_user_(std::move(as_user)) {}

  ClientResult<ClientResponse> send(beast_http::verb method, std::string_view target,
                                    const std::vector<std::pair<std::string, std::string>>& headers,
                                    std::string body) override {
    Request req{method, std::string(target), 11};
    req.set(beast_http::field::host, "127.0.0.1");
    for (const auto& [name, value] : headers) req.set(name, value);
    req.body() = std::move(body);
    if (!req.body().empty() || method == beast_http::verb::post || method == beast_http::verb::put)
      req.prepare_payload();
    CollectingStream stream;
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

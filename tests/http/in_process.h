// tests/http/in_process.h — endpoint tests without a process or a socket: a Router over a fresh
// store in a temporary directory, called directly on the test's thread.
//
//   chaise::test::InProcessServer server;                   // admin party, no JavaScript engine
//   auto r = server.request(verb::put, "/db");               // the HttpResponse of test_server.h
//   EXPECT_EQ(r.status, 201u);
//
// What it answers is what the binary answers for the same request: the same Router, the same
// store, the same notifier and janitor. What it leaves out is the transport (Session: framing,
// timeouts, limits on headers and bodies, streamed request bodies) and authentication, so tests of
// those keep running the real binary (test_server.h). A streamed answer is collected whole: a
// feed that never ends (feed=continuous without a timeout) would never return.
#pragma once

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/db/changes_notifier.h"
#include "core/db/db_updates.h"
#include "core/db/keyspace.h"
#include "core/db/txid_janitor.h"
#include "http/api/router.h"
#include "http/transport/response_stream.h"
#include "storage/database.h"
#include "tests/http/test_server.h"

namespace chaise::test {

// A ResponseStream that keeps what a streaming handler writes.
class CapturedStream : public http::ResponseStream {
 public:
  boost::asio::awaitable<bool> begin(http::Response head) override {
    head_ = std::move(head);
    co_return true;
  }
  boost::asio::awaitable<bool> write(std::string_view data) override {
    body_.append(data);
    co_return true;
  }
  boost::asio::awaitable<bool> flush() override { co_return true; }
  boost::asio::awaitable<bool> finish() override { co_return true; }
  bool begun() const override { return head_.has_value(); }
  void watch_peer(std::function<void()>) override {}

  std::optional<http::Response>& head() { return head_; }
  std::string& body() { return body_; }

 private:
  std::optional<http::Response> head_;
  std::string body_;
};

class InProcessServer {
 public:
  // `tune` may change the router's context (limits, page sizes) before the router is made.
  explicit InProcessServer(const std::function<void(http::RouterContext&)>& tune = {}) {
    storage::Options options;
    options.fsync = false;
    core::keyspace::set_store_options(options);
    auto opened = storage::Database::open((dir_.path() / "store").string(), options);
    if (!opened.ok()) throw std::runtime_error("cannot open the store");
    store_ = std::move(*opened);
    janitor_ = std::make_unique<core::TxIdJanitor>(*store_);
    notifier_ = std::make_unique<core::ChangesNotifier>(*store_);
    db_updates_ = std::make_unique<core::DbUpdatesRecorder>(*store_);
    http::RouterContext context;
    context.server_uuid = "0123456789abcdef0123456789abcdef";
    context.store = store_.get();
    context.janitor = janitor_.get();
    context.notifier = notifier_.get();
    context.db_updates = db_updates_.get();
    if (tune) tune(context);
    router_ = std::make_unique<http::Router>(std::move(context));
  }
  ~InProcessServer() {
    router_.reset();
    notifier_.reset();
    db_updates_.reset();
    janitor_.reset();
    store_.reset();
  }

  // The Host the requests name (Location headers and absolute URIs use it).
  static constexpr std::string_view kHost = "127.0.0.1:5984";

  HttpResponse request(beast_http::verb method, std::string_view target, std::string body = {},
                       const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    http::Request request{method, target, 11};
    request.set(beast_http::field::host, kHost);
    request.set(beast_http::field::user_agent, "chaise-test");
    for (const auto& [name, value] : headers) request.set(name, value);
    request.body() = std::move(body);
    request.prepare_payload();

    CapturedStream stream;
    std::optional<http::Response> answer;
    std::exception_ptr failure;
    io_.restart();
    boost::asio::co_spawn(io_, router_->handle(request, stream),
                          [&](std::exception_ptr e, std::optional<http::Response> r) {
                            failure = e;
                            answer = std::move(r);
                          });
    io_.run();
    if (failure) std::rethrow_exception(failure);

    HttpResponse out;
    http::Response& head = answer ? *answer : *stream.head();
    if (!answer && !stream.head()) throw std::runtime_error("the handler answered nothing");
    out.status = static_cast<unsigned>(head.result_int());
    for (const auto& field : head) out.headers.insert(field.name_string(), field.value());
    out.body = answer ? std::move(answer->body()) : std::move(stream.body());
    return out;
  }
  HttpResponse get(std::string_view target) { return request(beast_http::verb::get, target); }

  storage::Database& store() { return *store_; }

 private:
  TempDir dir_;
  // Declared before the store, so destroyed after it: the store's commit thread posts a commit's
  // completion here and may still be signalling the context when run() has returned.
  boost::asio::io_context io_;
  std::unique_ptr<storage::Database> store_;
  std::unique_ptr<core::TxIdJanitor> janitor_;
  std::unique_ptr<core::ChangesNotifier> notifier_;
  std::unique_ptr<core::DbUpdatesRecorder> db_updates_;
  std::unique_ptr<http::Router> router_;
};

}  // namespace chaise::test

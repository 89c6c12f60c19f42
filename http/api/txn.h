// http/api/txn.h — running storage transactions from a request coroutine without blocking its io
// thread.
//
// async_commit hands the transaction to the commit pipeline and suspends the coroutine; the commit
// thread's callback posts the result back to the coroutine's executor (the connection's io thread).
// run_txn is Database::run for coroutines: the body runs on the io thread (reads are quick snapshot
// reads), the commit is awaited, and retryable errors back off on an asio timer, not in a sleeping
// thread.
//
// Shutdown order: the storage::Database must be destroyed while the io_context still exists (it
// drains pending commits, whose callbacks post into it); see server/main.cc.
#pragma once

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <memory>
#include <type_traits>
#include <utility>

#include "storage/database.h"

namespace chaise::http {

// Resumes with the commit's result.
template <typename CompletionToken>
auto async_commit(storage::Transaction& tr, CompletionToken&& token) {
  using Sig = void(storage::Result<storage::CommitResult>);
  return boost::asio::async_initiate<CompletionToken, Sig>(
      [&tr](auto handler) {
        auto executor = boost::asio::get_associated_executor(handler);
        // std::function needs a copyable callable; the handler is move-only.
        auto shared = std::make_shared<decltype(handler)>(std::move(handler));
        tr.commit_async([shared, executor](storage::Result<storage::CommitResult> r) {
          boost::asio::post(executor,
                            [shared, r = std::move(r)]() mutable { (*shared)(std::move(r)); });
        });
      },
      token);
}

// Runs `body(tr) -> storage::Status` and commits, retrying retryable errors up to the store's
// run_attempts_max. `before_attempt(e) -> awaitable<void>` (optional) is awaited before each
// attempt's body, with the error that failed the attempt before (success before the first).
// Returns the first non-retryable error, or success.
template <typename Body, typename BeforeAttempt>
boost::asio::awaitable<storage::Status> run_txn(storage::Database& store, Body&& body,
                                                BeforeAttempt&& before_attempt) {
  storage::Transaction tr = store.create_transaction();
  storage::Error last = storage::Error::success;
  for (int attempt = 0; attempt < store.options().run_attempts_max; ++attempt) {
    co_await before_attempt(last);
    storage::Status s = body(tr);
    storage::Error e = s.error();
    if (e == storage::Error::success) {
      auto c = co_await async_commit(tr, boost::asio::use_awaitable);
      if (c.ok()) co_return storage::Status{};
      e = c.error();
    }
    last = e;
    auto delay = tr.prepare_retry(e);
    if (!delay.ok()) co_return storage::Status(e);
    if (delay->count() > 0) {
      boost::asio::steady_timer timer(co_await boost::asio::this_coro::executor, *delay);
      co_await timer.async_wait(boost::asio::use_awaitable);
    }
  }
  co_return storage::Status(last);
}

template <typename Body>
boost::asio::awaitable<storage::Status> run_txn(storage::Database& store, Body&& body) {
  co_return co_await run_txn(store, std::forward<Body>(body),
                             [](storage::Error) -> boost::asio::awaitable<void> { co_return; });
}

// Runs `body(tr) -> storage::Status` in its own transaction (Database::run) when the scope ends,
// however it ends, unless dismissed: a claim given back by a request that may end in an exception.
// Blocking, for a quick write or two; its error is dropped (a claim not given back lapses).
template <typename Body>
class RunAtExit {
 public:
  RunAtExit(storage::Database& store, Body body) : store_(store), body_(std::move(body)) {}
  RunAtExit(const RunAtExit&) = delete;
  RunAtExit& operator=(const RunAtExit&) = delete;
  ~RunAtExit() {
    if (!dismissed_) [[maybe_unused]]
      storage::Status s = store_.run(body_);
  }
  void dismiss() { dismissed_ = true; }

 private:
  storage::Database& store_;
  Body body_;
  bool dismissed_ = false;
};

}  // namespace chaise::http

#include "http/api/hot_docs.h"

#include <algorithm>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <functional>
#include <utility>
#include <vector>

#include "core/db/txid_janitor.h"
#include "http/api/txn.h"
#include "http/api/wakeup.h"
#include "http/transport/workers.h"

namespace chaise::http {

using Result = storage::Result<core::Outcome<core::RevId>>;

struct HotDocs::Waiter {
  core::DocStep step;
  std::mutex mu;
  Result result{storage::Error::io_error};  // guarded by mu until done
  bool done = false;                        // guarded by mu
  std::function<void()> resume;             // guarded by mu: set while the caller waits
  bool ready() const { return done; }       // (async_wait_ready)

  void finish(Result r) {
    std::function<void()> go;
    {
      std::lock_guard lock(mu);
      result = std::move(r);
      done = true;
      go = std::move(resume);
    }
    if (go) go();
  }
};

struct HotDocs::Queue {
  std::deque<std::shared_ptr<Waiter>> pending;  // guarded by HotDocs::mu_
  bool leading = false;                         // guarded by HotDocs::mu_
};

boost::asio::awaitable<Result> HotDocs::update(storage::Database& store, core::TxIdJanitor* janitor,
                                               std::string db_name, std::string id,
                                               core::DocStep step) {
  auto w = std::make_shared<Waiter>();
  w->step = std::move(step);
  std::string key = db_name;
  key += '\0';
  key += id;
  std::shared_ptr<Queue> q;
  bool start = false;
  {
    std::lock_guard lock(mu_);
    auto& slot = queues_[key];
    if (!slot) slot = std::make_shared<Queue>();
    q = slot;
    q->pending.push_back(w);
    if (!q->leading) q->leading = start = true;
  }
  if (start) {
    boost::asio::co_spawn(
        co_await boost::asio::this_coro::executor,
        lead(store, janitor, std::move(db_name), std::move(id), std::move(key), q),
        boost::asio::detached);
  }
  co_await async_wait_ready(w, boost::asio::use_awaitable);
  std::lock_guard lock(w->mu);
  co_return std::move(w->result);
}

boost::asio::awaitable<void> HotDocs::lead(storage::Database& store, core::TxIdJanitor* janitor,
                                           std::string db_name, std::string id, std::string key,
                                           std::shared_ptr<Queue> q) {
  // Keeps the HotDocs alive while groups are in flight.
  auto self = shared_from_this();
  std::optional<core::DocStepBatch::Cache> cache;
  std::size_t last_group = 0;
  boost::asio::steady_timer linger(co_await boost::asio::this_coro::executor);
  for (;;) {
    // The callers of the group just answered send their next update within a round trip.
    // Starting the next group before they are back splits them over two commits (each caller
    // then waits for two), so wait for them a little: until as many are queued as the last group
    // had, at most kLingerPolls * kLingerPoll.
    for (int i = 0; i < kLingerPolls && last_group > 1; ++i) {
      {
        std::lock_guard lock(mu_);
        if (q->pending.size() >= last_group) break;
      }
      linger.expires_after(kLingerPoll);
      co_await linger.async_wait(boost::asio::use_awaitable);
    }
    std::vector<std::shared_ptr<Waiter>> group;
    {
      std::lock_guard lock(mu_);
      if (q->pending.empty()) {
        q->leading = false;
        if (auto it = queues_.find(key); it != queues_.end() && it->second == q) queues_.erase(it);
        co_return;
      }
      while (!q->pending.empty() && group.size() < core::DocStepBatch::kStepsPerTransactionMax) {
        group.push_back(std::move(q->pending.front()));
        q->pending.pop_front();
      }
    }
    last_group = group.size();
    std::vector<core::DocStep> steps;
    steps.reserve(group.size());
    for (const auto& w : group) steps.push_back(std::move(w->step));
    const bool scripts = std::any_of(steps.begin(), steps.end(),
                                     [](const core::DocStep& st) { return st.script != nullptr; });
    core::DocStepBatch batch(db_name, id, std::move(steps), std::move(cache), js_);
    auto body = [&](storage::Transaction& tr) { return batch(tr); };
    storage::Status s = scripts && workers_ != nullptr
                            ? co_await workers_->run(run_txn(store, body))
                            : co_await run_txn(store, body);
    cache = std::nullopt;
    if (s.ok()) {
      if (janitor != nullptr && !batch.tx_key().empty()) janitor->committed(batch.tx_key());
      cache = batch.take_cache();
      std::lock_guard lock(mu_);
      // Steps the group left for later (DocStepBatch::kStepsTimeMax) go first in the next one.
      std::size_t deferred = 0;
      for (std::size_t i = group.size(); i-- > 0 && !batch.db_missing();) {
        if (!batch.deferred(i)) continue;
        group[i]->step = batch.take_step(i);
        q->pending.push_front(std::move(group[i]));
        ++deferred;
      }
      updates_ += group.size() - deferred;
      ++groups_;
    }
    for (std::size_t i = 0; i < group.size(); ++i) {
      if (!group[i]) continue;  // deferred
      if (!s.ok()) {
        group[i]->finish(Result(s.error()));
      } else if (batch.db_missing()) {
        group[i]->finish(Result(core::Outcome<core::RevId>(core::err::db_not_found())));
      } else {
        group[i]->finish(Result(batch.results()[i]));
      }
    }
  }
}

std::size_t HotDocs::updates() const {
  std::lock_guard lock(mu_);
  return updates_;
}

std::size_t HotDocs::groups() const {
  std::lock_guard lock(mu_);
  return groups_;
}

}  // namespace chaise::http

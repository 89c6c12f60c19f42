#include "core/db/txid_janitor.h"

#include <algorithm>

#include "core/db/idempotency.h"

namespace chaise::core {

TxIdJanitor::TxIdJanitor(storage::Database& store, std::chrono::milliseconds interval,
                         std::size_t keys_per_transaction_max)
    : store_(store),
      interval_(interval),
      keys_per_transaction_max_(std::max<std::size_t>(1, keys_per_transaction_max)),
      thread_([this] { loop(); }) {}

TxIdJanitor::~TxIdJanitor() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  flush();
}

void TxIdJanitor::committed(std::string txid_key) {
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(txid_key));
    wake = queue_.size() >= keys_per_transaction_max_;  // bound the queue: clear early
  }
  if (wake) cv_.notify_all();
}

std::size_t TxIdJanitor::expired() const {
  std::lock_guard lock(mu_);
  return expired_;
}

std::size_t TxIdJanitor::queued() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

std::size_t TxIdJanitor::passes() const {
  std::lock_guard lock(mu_);
  return passes_;
}

std::size_t TxIdJanitor::cleared() const {
  std::lock_guard lock(mu_);
  return cleared_;
}

void TxIdJanitor::loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, interval_,
                 [&] { return stopping_ || queue_.size() >= keys_per_transaction_max_; });
    if (stopping_) break;
    lock.unlock();
    flush();
    lock.lock();
  }
}

void TxIdJanitor::flush() {
  std::lock_guard pass(flush_mu_);
  std::vector<std::string> keys;
  {
    std::lock_guard lock(mu_);
    keys.swap(queue_);
  }
  clear_keys(keys);
  expire_idempotency_records();
  std::lock_guard lock(mu_);
  ++passes_;
}

void TxIdJanitor::expire_idempotency_records() {
  constexpr std::size_t kPerTransaction = 500;
  constexpr int kTransactionsPerPass = 100;  // the rest waits for the next pass
  const std::int64_t now = idem_now_ms();
  for (int i = 0; i < kTransactionsPerPass; ++i) {
    std::size_t handled = 0;
    storage::Status s = store_.run([&](storage::Transaction& tr) -> storage::Status {
      auto n = idem_expire_step(tr, now, kPerTransaction);
      if (!n.ok()) return n.error();
      handled = *n;
      return {};
    });
    if (!s.ok()) return;
    {
      std::lock_guard lock(mu_);
      expired_ += handled;
    }
    if (handled < kPerTransaction) return;
  }
}

void TxIdJanitor::clear_keys(std::vector<std::string>& keys) {
  for (std::size_t begin = 0; begin < keys.size(); begin += keys_per_transaction_max_) {
    const std::size_t end = std::min(keys.size(), begin + keys_per_transaction_max_);
    // Blind clears conflict with nothing; a failure leaves the keys behind, which is harmless.
    storage::Status s = store_.run([&](storage::Transaction& tr) -> storage::Status {
      for (std::size_t i = begin; i < end; ++i) tr.clear(keys[i]);
      return {};
    });
    if (s.ok()) {
      std::lock_guard lock(mu_);
      cleared_ += end - begin;
    }
  }
}

}  // namespace chaise::core

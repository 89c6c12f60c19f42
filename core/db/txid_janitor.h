// core/db/txid_janitor.h — deletes transaction-ID keys (RFC 000) once their transaction is known to
// have committed.
//
// Every document-update transaction whose commit may end in commit_unknown_result writes a (db,
// "txids", TxId) key so that a retry after it can tell whether its previous attempt landed (the
// embedded engine knows every commit's outcome, so outside tests that inject the fault none is
// written: storage::Transaction::may_commit_unknown_result). Once an attempt is
// acknowledged nobody will ask again, so the key can go: callers hand it to committed(), and a
// background thread clears the queued keys in one blind transaction every `interval`.
// Keys of transactions whose process died before the janitor ran stay behind (a few bytes each).
// Each pass also clears the idempotency records (core/db/idempotency.h) whose time has come.
//
// Threading: committed() is thread-safe and never blocks on storage.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "storage/database.h"

namespace chaise::core {

class TxIdJanitor {
 public:
  // `store` must outlive the janitor. A pass starts every `interval`, or as soon as
  // `keys_per_transaction_max` keys are queued. Small transactions keep the commit thread's
  // pauses short: one transaction of 17,000 clears (a second of PUTs) held every batch behind it
  // for 20 ms, once a second, and made the PUT p99 16-140 ms; in 500s it is 8 ms
  // (bench/README.md, "The PUT tail").
  explicit TxIdJanitor(storage::Database& store,
                       std::chrono::milliseconds interval = std::chrono::seconds(1),
                       std::size_t keys_per_transaction_max = 500);
  ~TxIdJanitor();  // clears what is queued, then stops
  TxIdJanitor(const TxIdJanitor&) = delete;
  TxIdJanitor& operator=(const TxIdJanitor&) = delete;

  void committed(std::string txid_key);
  // Clears everything queued now (tests).
  void flush();
  std::size_t cleared() const;
  // Idempotency records cleared so far.
  std::size_t expired() const;
  // Passes completed so far (timed ones and flush() calls). Once it is two more than a value
  // read after a write, a whole pass has run after that write.
  std::size_t passes() const;
  // Keys waiting for the next pass.
  std::size_t queued() const;

 private:
  void loop();
  void clear_keys(std::vector<std::string>& keys);
  void expire_idempotency_records();

  storage::Database& store_;
  const std::chrono::milliseconds interval_;
  const std::size_t keys_per_transaction_max_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> queue_;  // guarded by mu_
  bool stopping_ = false;           // guarded by mu_
  std::size_t cleared_ = 0;         // guarded by mu_
  std::size_t expired_ = 0;         // guarded by mu_
  std::size_t passes_ = 0;          // guarded by mu_
  std::mutex flush_mu_;             // one clearing pass at a time
  std::thread thread_;
};

}  // namespace chaise::core

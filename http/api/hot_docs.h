// http/api/hot_docs.h — the per-document group commit behind PATCH (hot documents).
//
// Updates of one document queue in this process. One leader coroutine per document with queued
// updates takes everything queued (up to DocStepBatch::kStepsPerTransactionMax), applies it in
// order to the latest revision inside one transaction (core::DocStepBatch, which keeps the last
// body in memory for the next group) and commits; while it commits, new updates queue for the
// next group. Every caller resumes with its own revision only after the commit holding it is
// durable. So concurrent updates of one document never conflict with each other, and their rate
// is bounded by how many fit in a group rather than by one commit per update.
//
// Thread-safe; callers may come from any executor. The leader runs on the executor of the caller
// that found no leader.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/batch/doc_batches.h"
#include "core/docs/documents.h"
#include "storage/database.h"

namespace chaise::core {
class TxIdJanitor;
}

namespace chaise::http {

class WorkerPool;

class HotDocs : public std::enable_shared_from_this<HotDocs> {
 public:
  // `js`: the engine update handlers and synchronous JavaScript indexes run in; may be null.
  // `workers`: where a group holding update-handler calls runs its transaction, so that their
  // JavaScript (bounded only by os_process_timeout) never holds an io thread; may be null (then
  // it runs where the leader runs).
  explicit HotDocs(core::js::Engine* js = nullptr, WorkerPool* workers = nullptr)
      : js_(js), workers_(workers) {}

  // Runs `step` on document `id` of database `db_name` in the next group; resumes with its
  // outcome (404 for a missing database) once that group committed, or with the storage error
  // that ended it. `janitor` (may be null) gets the group's transaction id once committed.
  boost::asio::awaitable<storage::Result<core::Outcome<core::RevId>>> update(
      storage::Database& store, core::TxIdJanitor* janitor, std::string db_name, std::string id,
      core::DocStep step);

  // Updates committed so far, and the groups (transactions) they took.
  std::size_t updates() const;
  std::size_t groups() const;

 private:
  struct Waiter;
  struct Queue;
  boost::asio::awaitable<void> lead(storage::Database& store, core::TxIdJanitor* janitor,
                                    std::string db_name, std::string id, std::string key,
                                    std::shared_ptr<Queue> q);

  static constexpr int kLingerPolls = 12;
  static constexpr std::chrono::microseconds kLingerPoll{25};

  core::js::Engine* js_ = nullptr;
  WorkerPool* workers_ = nullptr;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<Queue>> queues_;  // guarded by mu_
  std::size_t updates_ = 0;                                         // guarded by mu_
  std::size_t groups_ = 0;                                          // guarded by mu_
};

}  // namespace chaise::http

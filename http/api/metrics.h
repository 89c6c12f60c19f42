// http/api/metrics.h — what the server has done, for operators: request counts by method and status,
// request latency, open connections and live feeds, the store's commits, conflicts, WAL syncs and
// size, and what the background janitor has done.
// Served as GET /_node/_local/_prometheus (Prometheus text, CouchDB's metric names where CouchDB
// has the metric) and GET /_node/_local/_stats (CouchDB's JSON shape).
//
// Recording is lock-free (relaxed atomics): one call per request on the io threads.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "http/api/router.h"
#include "storage/database.h"

namespace chaise::http {

// What the server's background work has done, read at each scrape.
struct BackgroundCounts {
  std::uint64_t janitor_passes = 0;       // janitor passes completed (core::TxIdJanitor)
  std::uint64_t idempotency_expired = 0;  // idempotency records cleared when their time came
  std::size_t idempotency_in_flight = 0;  // Idempotency-Keys whose first request runs now
  std::uint64_t hot_doc_updates = 0;      // updates committed by group commits (HotDocs)
  std::uint64_t hot_doc_groups = 0;       // the group commits (transactions) they took
  std::uint64_t js_calls = 0;             // entries into the JavaScript engine
  std::uint64_t db_updates_folds = 0;     // _db_updates recorder transactions (DbUpdatesRecorder)
};

class Metrics {
 public:
  Metrics();

  void record_request(beast_http::verb method, unsigned status, std::chrono::nanoseconds took);
  void record_auth_failure() { auth_failures_.fetch_add(1, std::memory_order_relaxed); }
  // Documents an index build ran through the map functions (every attempt's, conflicted or not).
  void record_docs_mapped(std::uint64_t n) { docs_mapped_.fetch_add(n, std::memory_order_relaxed); }
  // Live _changes feeds (longpoll, continuous, eventsource) open now.
  void feed_opened() { feeds_.fetch_add(1, std::memory_order_relaxed); }
  void feed_closed() { feeds_.fetch_sub(1, std::memory_order_relaxed); }
  // How to count open connections (the server's); unset: 0.
  void set_connection_counter(std::function<std::size_t()> counter) {
    connections_ = std::move(counter);
  }

  std::string prometheus(const storage::StoreStats& store, const BackgroundCounts& bg) const;
  double uptime_seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  }
  Json stats(const storage::StoreStats& store, const BackgroundCounts& bg) const;

  // Upper bounds of the latency histogram's buckets, in seconds.
  static constexpr std::array<double, 14> kBuckets = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

 private:
  struct Counts;
  Counts snapshot() const;

  const std::chrono::steady_clock::time_point started_;
  std::atomic<std::uint64_t> requests_{0};
  std::array<std::atomic<std::uint64_t>, 8> methods_{};  // kMethods order, last = other
  std::array<std::atomic<std::uint64_t>, 600> statuses_{};
  std::array<std::atomic<std::uint64_t>, kBuckets.size() + 1> buckets_{};  // last: +Inf
  std::atomic<std::uint64_t> latency_ns_sum_{0};
  std::atomic<std::uint64_t> auth_failures_{0};
  std::atomic<std::uint64_t> docs_mapped_{0};
  std::atomic<std::int64_t> feeds_{0};
  std::function<std::size_t()> connections_;
};

// Counts a live feed while it lives.
class FeedGauge {
 public:
  explicit FeedGauge(Metrics* m) : m_(m) {
    if (m_) m_->feed_opened();
  }
  ~FeedGauge() {
    if (m_) m_->feed_closed();
  }
  FeedGauge(const FeedGauge&) = delete;
  FeedGauge& operator=(const FeedGauge&) = delete;

 private:
  Metrics* m_;
};

}  // namespace chaise::http

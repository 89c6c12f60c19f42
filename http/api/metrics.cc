#include "http/api/metrics.h"

#include <cstdio>

namespace chaise::http {

namespace {

constexpr std::array<std::pair<beast_http::verb, std::string_view>, 7> kMethods = {{
    {beast_http::verb::copy, "COPY"},
    {beast_http::verb::delete_, "DELETE"},
    {beast_http::verb::get, "GET"},
    {beast_http::verb::head, "HEAD"},
    {beast_http::verb::options, "OPTIONS"},
    {beast_http::verb::post, "POST"},
    {beast_http::verb::put, "PUT"},
}};

// The status codes CouchDB's stats list, always shown (others appear once seen).
constexpr std::array<unsigned, 20> kListedStatuses = {200, 201, 202, 204, 206, 301, 302,
                                                      304, 400, 401, 403, 404, 405, 406,
                                                      409, 412, 413, 414, 415, 500};

std::string number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.6g", v);
  return buffer;
}

void family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

// A family of one unlabelled sample.
void single(std::string& out, std::string_view name, std::string_view type, std::string_view help,
            std::uint64_t value) {
  family(out, name, type, help);
  out.append(name).append(" ").append(std::to_string(value)).append("\n");
}

}  // namespace

struct Metrics::Counts {
  std::uint64_t requests = 0;
  std::array<std::uint64_t, 8> methods{};
  std::array<std::uint64_t, 600> statuses{};
  std::array<std::uint64_t, kBuckets.size() + 1> buckets{};
  double latency_sum_s = 0;
  std::uint64_t auth_failures = 0;
  std::uint64_t docs_mapped = 0;
  std::int64_t feeds = 0;
  std::size_t connections = 0;
  double uptime_s = 0;
};

Metrics::Metrics() : started_(std::chrono::steady_clock::now()) {}

void Metrics::record_request(beast_http::verb method, unsigned status,
                             std::chrono::nanoseconds took) {
  requests_.fetch_add(1, std::memory_order_relaxed);
  std::size_t m = methods_.size() - 1;
  for (std::size_t i = 0; i < kMethods.size(); ++i) {
    if (kMethods[i].first == method) m = i;
  }
  methods_[m].fetch_add(1, std::memory_order_relaxed);
  if (status < statuses_.size()) statuses_[status].fetch_add(1, std::memory_order_relaxed);
  const double seconds = std::chrono::duration<double>(took).count();
  std::size_t b = 0;
  while (b < kBuckets.size() && seconds > kBuckets[b]) ++b;
  buckets_[b].fetch_add(1, std::memory_order_relaxed);
  latency_ns_sum_.fetch_add(static_cast<std::uint64_t>(took.count()), std::memory_order_relaxed);
}

Metrics::Counts Metrics::snapshot() const {
  Counts c;
  c.requests = requests_.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < methods_.size(); ++i)
    c.methods[i] = methods_[i].load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < statuses_.size(); ++i)
    c.statuses[i] = statuses_[i].load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < buckets_.size(); ++i)
    c.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
  c.latency_sum_s = static_cast<double>(latency_ns_sum_.load(std::memory_order_relaxed)) / 1e9;
  c.auth_failures = auth_failures_.load(std::memory_order_relaxed);
  c.docs_mapped = docs_mapped_.load(std::memory_order_relaxed);
  c.feeds = feeds_.load(std::memory_order_relaxed);
  c.connections = connections_ ? connections_() : 0;
  c.uptime_s = uptime_seconds();
  return c;
}

std::string Metrics::prometheus(const storage::StoreStats& store,
                                const BackgroundCounts& bg) const {
  const Counts c = snapshot();
  std::string out;
  family(out, "couchdb_uptime_seconds", "counter", "uptime of the server");
  out.append("couchdb_uptime_seconds ")
      .append(std::to_string(static_cast<std::uint64_t>(c.uptime_s)))
      .append("\n");
  family(out, "couchdb_httpd_requests_total", "counter", "number of HTTP requests");
  out.append("couchdb_httpd_requests_total ").append(std::to_string(c.requests)).append("\n");
  family(out, "couchdb_httpd_request_methods", "counter", "number of HTTP requests by method");
  for (std::size_t i = 0; i < kMethods.size(); ++i) {
    out.append("couchdb_httpd_request_methods{method=\"").append(kMethods[i].second).append("\"} ");
    out.append(std::to_string(c.methods[i])).append("\n");
  }
  family(out, "couchdb_httpd_status_codes", "counter", "number of HTTP responses by status code");
  for (unsigned code = 100; code < c.statuses.size(); ++code) {
    const bool listed =
        std::find(kListedStatuses.begin(), kListedStatuses.end(), code) != kListedStatuses.end();
    if (!listed && c.statuses[code] == 0) continue;
    out.append("couchdb_httpd_status_codes{code=\"").append(std::to_string(code)).append("\"} ");
    out.append(std::to_string(c.statuses[code])).append("\n");
  }
  family(out, "chaise_request_duration_seconds", "histogram",
         "time from a complete request to its answer (the head of a streamed one)");
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < kBuckets.size(); ++i) {
    cumulative += c.buckets[i];
    out.append("chaise_request_duration_seconds_bucket{le=\"")
        .append(number(kBuckets[i]))
        .append("\"} ");
    out.append(std::to_string(cumulative)).append("\n");
  }
  cumulative += c.buckets.back();
  out.append("chaise_request_duration_seconds_bucket{le=\"+Inf\"} ")
      .append(std::to_string(cumulative))
      .append("\n");
  out.append("chaise_request_duration_seconds_sum ").append(number(c.latency_sum_s)).append("\n");
  out.append("chaise_request_duration_seconds_count ")
      .append(std::to_string(cumulative))
      .append("\n");
  family(out, "chaise_open_connections", "gauge", "open HTTP connections");
  out.append("chaise_open_connections ").append(std::to_string(c.connections)).append("\n");
  family(out, "couchdb_httpd_clients_requesting_changes", "gauge",
         "number of clients for continuous _changes");
  out.append("couchdb_httpd_clients_requesting_changes ")
      .append(std::to_string(c.feeds))
      .append("\n");
  family(out, "chaise_auth_failures_total", "counter", "requests refused for wrong credentials");
  out.append("chaise_auth_failures_total ").append(std::to_string(c.auth_failures)).append("\n");
  family(out, "couchdb_mrview_map_doc_total", "counter",
         "number of documents mapped in the view server");
  out.append("couchdb_mrview_map_doc_total ").append(std::to_string(c.docs_mapped)).append("\n");
  family(out, "chaise_store_commits_total", "counter", "transactions committed");
  out.append("chaise_store_commits_total ").append(std::to_string(store.commits)).append("\n");
  family(out, "chaise_store_conflicts_total", "counter",
         "transactions refused for a conflict (retried)");
  out.append("chaise_store_conflicts_total ").append(std::to_string(store.conflicts)).append("\n");
  family(out, "chaise_store_commit_batches_total", "counter",
         "commit batches written (one WAL write each)");
  out.append("chaise_store_commit_batches_total ")
      .append(std::to_string(store.batches))
      .append("\n");
  single(out, "chaise_store_synced_batches_total", "counter",
         "commit batches whose WAL write was synced to disk before their commits were acknowledged",
         store.synced_batches);
  single(out, "chaise_store_fsync", "gauge",
         "1 when every commit is synced to disk before it is acknowledged ([chaise] fsync), else 0",
         store.fsync ? 1 : 0);
  single(out, "chaise_janitor_passes_total", "counter",
         "passes of the background janitor (transaction ids and expired idempotency records)",
         bg.janitor_passes);
  single(out, "chaise_db_updates_folds_total", "counter",
         "transactions of the _db_updates recorder that folded database events into its index",
         bg.db_updates_folds);
  single(out, "chaise_idempotency_expired_total", "counter",
         "idempotency records cleared when their time to live ended", bg.idempotency_expired);
  single(out, "chaise_idempotency_in_flight", "gauge",
         "Idempotency-Keys whose first request is running now", bg.idempotency_in_flight);
  single(out, "chaise_hot_doc_updates_total", "counter",
         "server-side updates of one document (PATCH, update handlers) committed in group commits",
         bg.hot_doc_updates);
  single(out, "chaise_hot_doc_groups_total", "counter",
         "group commits (transactions) those updates took", bg.hot_doc_groups);
  single(out, "chaise_js_calls_total", "counter", "entries into the JavaScript engine",
         bg.js_calls);
  family(out, "chaise_store_iterators_reused_total", "counter",
         "range reads that sought an iterator another transaction of the same version left");
  out.append("chaise_store_iterators_reused_total ")
      .append(std::to_string(store.iterators_reused))
      .append("\n");
  family(out, "chaise_store_range_clears_total", "counter",
         "cleared key ranges committed (each a RocksDB range tombstone)");
  out.append("chaise_store_range_clears_total ")
      .append(std::to_string(store.range_clears))
      .append("\n");
  family(out, "chaise_store_size_bytes", "gauge", "size of the store: data files plus memtables");
  out.append("chaise_store_size_bytes ").append(std::to_string(store.disk_bytes)).append("\n");
  family(out, "chaise_memory_bytes", "gauge",
         "memory the store holds by design, by part (each bounded by a [chaise] setting)");
  for (const auto& [part, v] : {std::pair{"block_cache", store.block_cache_bytes},
                                {"memtables", store.memtable_bytes},
                                {"table_readers", store.table_readers_bytes},
                                {"conflict_window", store.resolver_bytes}})
    out.append("chaise_memory_bytes{part=\"")
        .append(part)
        .append("\"} ")
        .append(std::to_string(v))
        .append("\n");
  family(out, "chaise_store_conflict_window_keys", "gauge",
         "write-conflict keys of recent commits remembered to check transactions against");
  out.append("chaise_store_conflict_window_keys ")
      .append(std::to_string(store.resolver_keys))
      .append("\n");
  return out;
}

Json Metrics::stats(const storage::StoreStats& store, const BackgroundCounts& bg) const {
  const Counts c = snapshot();
  const auto counter = [](std::uint64_t v, std::string_view desc) {
    return Json{{"value", v}, {"type", "counter"}, {"desc", desc}};
  };
  const auto gauge = [](std::int64_t v, std::string_view desc) {
    return Json{{"value", v}, {"type", "gauge"}, {"desc", desc}};
  };
  Json methods = Json::object();
  for (std::size_t i = 0; i < kMethods.size(); ++i) {
    methods[std::string(kMethods[i].second)] =
        counter(c.methods[i], "number of HTTP requests by method");
  }
  Json statuses = Json::object();
  for (unsigned code = 100; code < c.statuses.size(); ++code) {
    const bool listed =
        std::find(kListedStatuses.begin(), kListedStatuses.end(), code) != kListedStatuses.end();
    if (!listed && c.statuses[code] == 0) continue;
    statuses[std::to_string(code)] =
        counter(c.statuses[code], "number of HTTP responses by status code");
  }
  Json couchdb = Json::object();
  couchdb["httpd"] = {
      {"requests", counter(c.requests, "number of HTTP requests")},
      {"clients_requesting_changes", gauge(c.feeds, "number of clients for continuous _changes")},
  };
  couchdb["httpd_request_methods"] = std::move(methods);
  couchdb["httpd_status_codes"] = std::move(statuses);
  couchdb["mrview"] = {
      {"map_doc", counter(c.docs_mapped, "number of documents mapped in the view server")}};
  couchdb["uptime"] =
      gauge(static_cast<std::int64_t>(c.uptime_s), "uptime of the server in seconds");
  Json chaise = Json::object();
  chaise["open_connections"] =
      gauge(static_cast<std::int64_t>(c.connections), "open HTTP connections");
  chaise["auth_failures"] = counter(c.auth_failures, "requests refused for wrong credentials");
  chaise["store"] = {
      {"commits", counter(store.commits, "transactions committed")},
      {"conflicts", counter(store.conflicts, "transactions refused for a conflict")},
      {"commit_batches", counter(store.batches, "commit batches written")},
      {"synced_batches", counter(store.synced_batches, "commit batches synced to disk")},
      {"fsync", store.fsync},
      {"size_bytes", gauge(static_cast<std::int64_t>(store.disk_bytes), "size of the store")},
  };
  chaise["janitor_passes"] = counter(bg.janitor_passes, "passes of the background janitor");
  chaise["db_updates_folds"] =
      counter(bg.db_updates_folds, "transactions folding database events for _db_updates");
  chaise["idempotency"] = {
      {"expired", counter(bg.idempotency_expired, "idempotency records cleared at their time")},
      {"in_flight", gauge(static_cast<std::int64_t>(bg.idempotency_in_flight),
                          "Idempotency-Keys whose first request is running")},
  };
  chaise["hot_docs"] = {
      {"updates", counter(bg.hot_doc_updates, "updates committed in group commits")},
      {"groups", counter(bg.hot_doc_groups, "group commits those updates took")},
  };
  chaise["js_calls"] = counter(bg.js_calls, "entries into the JavaScript engine");
  return Json{{"couchdb", std::move(couchdb)}, {"chaise", std::move(chaise)}};
}

}  // namespace chaise::http

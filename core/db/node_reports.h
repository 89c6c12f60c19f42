// core/db/node_reports.h — the servers sharing one store, each as it last reported itself: its
// name and what it is working on, so that any of them answers /_membership, /_active_tasks and
// /_scheduler/jobs for all of them, as a CouchDB node gathers these from every node of its cluster.
//
//   (kSystem, kNodeReports, NodeId, Chunk) = a piece of the report's JSON text
//
// A server rewrites its report every NodeReporter::kInterval and clears it when it stops. A report
// not rewritten for kLapseMs, by the reader's wall clock against the writer's, is of a server that
// died, and is not listed; the servers' clocks are assumed to agree to well within that.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/db/databases.h"

namespace chaise::core {

struct NodeReport {
  std::string id;                                                  // node_id() (core/db/claims.h)
  std::string name;                                                // [chaise] node_name
  std::int64_t written_ms = 0;                                     // the writer's wall clock
  nlohmann::ordered_json tasks = nlohmann::ordered_json::array();  // as GET /_active_tasks lists
  nlohmann::ordered_json jobs = nlohmann::ordered_json::array();   // as GET /_scheduler/jobs does
};

inline constexpr std::int64_t kNodeReportLapseMs = 10'000;
// A report's JSON text at most (a server running that many jobs reports the first of them).
inline constexpr std::size_t kNodeReportBytesMax = 1'000'000;

// Replaces the report of `r.id`: its lists are cut from the end to fit kNodeReportBytesMax.
void write_node_report(Transaction& tr, const NodeReport& r);
void clear_node_report(Transaction& tr, std::string_view id);
// Every report written less than kNodeReportLapseMs before `now_ms`, ordered by id.
StorageResult<std::vector<NodeReport>> read_node_reports(Transaction& tr, std::int64_t now_ms);

// Writes `make()` every kInterval on a thread of its own, until destroyed; then clears it.
// A write that fails is given up until the next one.
class NodeReporter {
 public:
  static constexpr std::chrono::seconds kInterval{1};

  NodeReporter(storage::Database& store, std::string id, std::function<NodeReport()> make);
  ~NodeReporter();
  NodeReporter(const NodeReporter&) = delete;
  NodeReporter& operator=(const NodeReporter&) = delete;

 private:
  void loop();

  storage::Database& store_;
  const std::string id_;
  const std::function<NodeReport()> make_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace chaise::core

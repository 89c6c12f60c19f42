#include "core/db/node_reports.h"

#include <algorithm>
#include <map>
#include <utility>

#include "core/db/keyspace.h"
#include "storage/tuple.h"

namespace chaise::core {

using storage::Tuple;

namespace {

// Under FoundationDB's 100,000-byte value limit.
constexpr std::size_t kChunkBytes = 90'000;
// Keys read at most for every report together: servers times the chunks of one report.
constexpr int kReportKeysMax = 10'000;

std::pair<std::string, std::string> node_range(std::string_view id) {
  return keyspace::system().range(Tuple().add(keyspace::kNodeReports).add(std::string(id)));
}

// Appends `"key":[...]` to `text`: the entries of `list`, each serialised once, while `text` stays
// within `max` bytes.
void append_list(std::string& text, std::string_view key, const nlohmann::ordered_json& list,
                 std::size_t max) {
  text.append(",\"").append(key).append("\":[");
  bool first = true;
  for (const nlohmann::ordered_json& entry : list) {
    const std::string e = entry.dump();
    if (text.size() + e.size() + 1 > max) break;
    if (!first) text += ',';
    text += e;
    first = false;
  }
  text += ']';
}

}  // namespace

void write_node_report(Transaction& tr, const NodeReport& r) {
  // Room for what closes the lists and the object after each list's entries.
  constexpr std::size_t kTail = sizeof(R"(],"jobs":[]})");
  std::string text = nlohmann::ordered_json{{"name", r.name}, {"written_ms", r.written_ms}}.dump();
  text.pop_back();  // the object goes on
  append_list(text, "tasks", r.tasks, kNodeReportBytesMax - kTail);
  append_list(text, "jobs", r.jobs, kNodeReportBytesMax - kTail);
  text += '}';
  auto [begin, end] = node_range(r.id);
  tr.clear_range(begin, end);
  for (std::size_t at = 0, chunk = 0; at < text.size(); at += kChunkBytes, ++chunk) {
    tr.set(keyspace::system().pack(
               Tuple().add(keyspace::kNodeReports).add(r.id).add(static_cast<std::int64_t>(chunk))),
           std::string_view(text).substr(at, kChunkBytes));
  }
}

void clear_node_report(Transaction& tr, std::string_view id) {
  auto [begin, end] = node_range(id);
  tr.clear_range(begin, end);
}

StorageResult<std::vector<NodeReport>> read_node_reports(Transaction& tr, std::int64_t now_ms) {
  auto [begin, end] = keyspace::system().range(Tuple().add(keyspace::kNodeReports));
  auto kvs = tr.get_range(begin, end, kReportKeysMax, storage::Reverse::no, storage::Snapshot::yes);
  if (!kvs.ok()) return kvs.error();
  std::map<std::string, std::string> texts;  // by id: the chunks in key order, joined
  for (const auto& kv : *kvs) {
    auto t = keyspace::system().unpack(kv.key);
    const std::string* id = t ? t->get_string(1) : nullptr;
    if (id == nullptr) return storage::Error::io_error;
    texts[*id] += kv.value;
  }
  std::vector<NodeReport> out;
  for (auto& [id, text] : texts) {
    // A report cut by kReportKeysMax, or being rewritten by an older server: not listed.
    // Not const: a member missing from another server's text reads as null instead of failing
    // an assertion.
    nlohmann::ordered_json doc = nlohmann::ordered_json::parse(text, nullptr, false);
    if (!doc.is_object() || !doc["name"].is_string() || !doc["written_ms"].is_number_integer())
      continue;
    NodeReport r;
    r.id = id;
    r.name = doc["name"];
    r.written_ms = doc["written_ms"];
    if (now_ms - r.written_ms >= kNodeReportLapseMs) continue;
    if (doc["tasks"].is_array()) r.tasks = doc["tasks"];
    if (doc["jobs"].is_array()) r.jobs = doc["jobs"];
    out.push_back(std::move(r));
  }
  return out;
}

NodeReporter::NodeReporter(storage::Database& store, std::string id,
                           std::function<NodeReport()> make)
    : store_(store), id_(std::move(id)), make_(std::move(make)) {
  thread_ = std::thread([this] { loop(); });
}

NodeReporter::~NodeReporter() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  [[maybe_unused]] storage::Status s = store_.run([&](Transaction& tr) -> storage::Status {
    clear_node_report(tr, id_);
    return {};
  });
}

void NodeReporter::loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    NodeReport r = make_();
    r.id = id_;
    [[maybe_unused]] storage::Status s = store_.run([&](Transaction& tr) -> storage::Status {
      write_node_report(tr, r);
      return {};
    });
    lock.lock();
    cv_.wait_for(lock, kInterval, [&] { return stopping_; });
  }
}

}  // namespace chaise::core

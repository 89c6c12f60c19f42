#include "core/db/active_tasks.h"

#include <algorithm>
#include <vector>

namespace chaise::core {

namespace {

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

ActiveTasks::Task::Task(ActiveTasks& owner, std::string key, nlohmann::json fixed,
                        std::int64_t total, std::uint64_t number)
    : owner_(owner),
      key_(std::move(key)),
      fixed_(std::move(fixed)),
      number_(number),
      started_on_(unix_now()),
      total_(std::max<std::int64_t>(total, 0)),
      updated_on_(started_on_) {}

ActiveTasks::Task::~Task() {
  std::lock_guard lock(owner_.mu_);
  auto it = owner_.tasks_.find(key_);
  if (it != owner_.tasks_.end() && it->second.expired()) owner_.tasks_.erase(it);
}

void ActiveTasks::Task::add_done(std::int64_t n) {
  std::lock_guard lock(owner_.mu_);
  done_ += n;
  total_ = std::max(total_, done_);
  updated_on_ = unix_now();
}

nlohmann::json ActiveTasks::Task::json(std::string_view node) const {
  // An Erlang-looking pid: clients show it and match tasks by it, nothing more.
  const std::string pid = "<0." + std::to_string(number_) + ".0>";
  nlohmann::json j = fixed_;
  j["node"] = node;
  j["pid"] = pid;
  j["process_status"] = "waiting";
  if (j.value("type", "") == "indexer") j["indexer_pid"] = pid;
  j["changes_done"] = done_;
  j["total_changes"] = total_;
  j["progress"] = total_ == 0 ? 0 : done_ * 100 / total_;
  j["started_on"] = started_on_;
  j["updated_on"] = updated_on_;
  return j;
}

ActiveTasks::Handle ActiveTasks::join(const std::string& key, nlohmann::json fixed,
                                      std::int64_t total_changes) {
  std::lock_guard lock(mu_);
  if (auto it = tasks_.find(key); it != tasks_.end())
    if (Handle live = it->second.lock()) return live;
  Handle task(new Task(*this, key, std::move(fixed), total_changes, next_number_++));
  tasks_[key] = task;
  return task;
}

nlohmann::json ActiveTasks::list(std::string_view node) const {
  std::vector<Handle> live;
  std::lock_guard lock(mu_);
  for (const auto& [key, weak] : tasks_)
    if (Handle t = weak.lock()) live.push_back(std::move(t));
  std::sort(live.begin(), live.end(),
            [](const Handle& a, const Handle& b) { return a->number_ < b->number_; });
  nlohmann::json out = nlohmann::json::array();
  for (const Handle& t : live) out.push_back(t->json(node));
  return out;
}

}  // namespace chaise::core

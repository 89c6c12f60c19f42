// core/db/active_tasks.h — what this process is working on besides answering requests, for
// GET /_active_tasks: index builds and database compactions with their progress, as CouchDB's
// couch_task_status keeps them.
//
// Contract
// - A task is registered while a Handle to it lives; the last Handle's destruction removes it.
// - Two workers on the same thing (two requests building one index) share one task: join() with
//   the same key returns the live task, and each adds the changes it did.
// - Thread-safe. In memory only: a task belongs to the process that runs it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

namespace chaise::core {

class ActiveTasks {
 public:
  class Task;
  using Handle = std::shared_ptr<Task>;

  // The task registered under `key`, or a new one with the members `fixed` ({"type",
  // "database", ...}) and `total_changes`. `node` names the process in every task's "node".
  Handle join(const std::string& key, nlohmann::json fixed, std::int64_t total_changes);

  // Every task as CouchDB lists it: its fixed members and "node", "pid", "process_status",
  // "changes_done", "total_changes", "progress" (percent), "started_on", "updated_on" (Unix
  // seconds); ordered by when they started.
  nlohmann::json list(std::string_view node) const;

  class Task {
   public:
    // `n` more changes done; the total grows if they pass it.
    void add_done(std::int64_t n);
    ~Task();

   private:
    friend class ActiveTasks;
    Task(ActiveTasks& owner, std::string key, nlohmann::json fixed, std::int64_t total,
         std::uint64_t number);
    nlohmann::json json(std::string_view node) const;
    ActiveTasks& owner_;
    const std::string key_;
    const nlohmann::json fixed_;
    const std::uint64_t number_;
    const std::int64_t started_on_;
    std::int64_t total_;       // guarded by owner_.mu_
    std::int64_t done_ = 0;    // guarded by owner_.mu_
    std::int64_t updated_on_;  // guarded by owner_.mu_
  };

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::weak_ptr<Task>> tasks_;
  std::uint64_t next_number_ = 1;
};

}  // namespace chaise::core

// http/api/peruser.h — CouchDB's couch_peruser: with [couch_peruser] enable = true, every user
// document of _users ("org.couchdb.user:<name>") gets a database of its own, named by
// core::peruser_db_name ([couch_peruser] database_prefix, default "userdb-"), with that user
// among the names of its admins and members. When the user document is deleted, the database is
// deleted too with delete_dbs = true, else the user leaves its security object. ([couch_peruser]
// q is accepted and means nothing on one node.)
//
// Like CouchDB's, the work follows _users' changes feed, in the background: from the start of the
// feed whenever the setting turns on (every existing user is seen to), then as the changes
// notifier reports writes to _users. Each document is one transaction, and every step is
// idempotent, so several Chaise processes on one store may all run it.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/db/changes_notifier.h"
#include "storage/database.h"

namespace chaise::config {
class Config;
}

namespace chaise::http {

class PerUserDbs {
 public:
  // All three must outlive this object.
  PerUserDbs(storage::Database& store, config::Config& config, core::ChangesNotifier& notifier);
  ~PerUserDbs();  // stops after the document in hand
  PerUserDbs(const PerUserDbs&) = delete;
  PerUserDbs& operator=(const PerUserDbs&) = delete;

  // User documents handled so far.
  std::size_t handled() const;

 private:
  struct Settings {
    bool enable = false;
    bool delete_dbs = false;
    std::string prefix;
    bool admin_only = true;  // [couchdb] default_security of the databases created
  };
  // Shared with the notifier's callback, which may outlive a wait.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool stopping = false;  // guarded by mu
    bool woken = false;     // guarded by mu
    std::size_t handled = 0;
  };
  Settings settings() const;
  void loop();
  // One page of _users' changes after `since_`; false when there was nothing more.
  bool page(const Settings& s, std::shared_ptr<core::ChangesNotifier::Waiter>& waiter);
  void apply(const Settings& s, const std::string& user, bool deleted);

  storage::Database& store_;
  config::Config& config_;
  core::ChangesNotifier& notifier_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::string since_;  // the feed's last_seq, as text; on the loop's thread
  std::thread thread_;
};

}  // namespace chaise::http

#include "http/api/peruser.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <vector>

#include "config/config.h"
#include "config/settings.h"
#include "core/db/databases.h"
#include "core/index/cursors.h"
#include "core/security/security.h"

namespace chaise::http {

namespace {

using OJson = nlohmann::ordered_json;

constexpr std::string_view kUserPrefix = "org.couchdb.user:";
constexpr std::size_t kRowsPerPage = 1000;
// How often the settings are read again while nothing happens.
constexpr std::chrono::seconds kIdleCheck{1};

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The database's security object with `user` added or removed, written when it changes.
storage::Status update_security(storage::Transaction& tr, const core::DbRef& db,
                                const std::string& user, bool add) {
  auto text = core::read_security_json(tr, db);
  if (!text.ok()) return text.error();
  OJson raw = *text ? OJson::parse(**text, nullptr, false) : OJson::object();
  if (auto changed = core::security_with_user(raw, user, add))
    core::set_security_json(tr, db, changed->dump());
  return {};
}

}  // namespace

PerUserDbs::PerUserDbs(storage::Database& store, config::Config& config,
                       core::ChangesNotifier& notifier)
    : store_(store), config_(config), notifier_(notifier), thread_([this] { loop(); }) {}

PerUserDbs::~PerUserDbs() {
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
  }
  state_->cv.notify_all();
  thread_.join();
}

std::size_t PerUserDbs::handled() const {
  std::lock_guard lock(state_->mu);
  return state_->handled;
}

PerUserDbs::Settings PerUserDbs::settings() const {
  const auto values = config_.snapshot();
  Settings s;
  s.enable = config::get_bool(*values, "couch_peruser", "enable", false);
  s.delete_dbs = config::get_bool(*values, "couch_peruser", "delete_dbs", false);
  s.prefix = config::get_string(*values, "couch_peruser", "database_prefix", "userdb-");
  s.admin_only =
      config::get_string(*values, "couchdb", "default_security", "admin_only") != "everyone";
  return s;
}

void PerUserDbs::loop() {
  std::shared_ptr<core::ChangesNotifier::Waiter> waiter;
  bool was_enabled = false;
  for (;;) {
    const Settings s = settings();
    // Turned on: every user document is seen again, from the start of the feed.
    if (s.enable && !was_enabled) since_.clear();
    was_enabled = s.enable;
    bool more = false;
    if (s.enable) {
      try {
        more = page(s, waiter);
      } catch (const std::exception& e) {
        spdlog::warn("couch_peruser: {}", e.what());
      }
    }
    std::unique_lock lock(state_->mu);
    if (state_->stopping) return;
    if (more) continue;
    state_->cv.wait_for(lock, kIdleCheck, [&] { return state_->stopping || state_->woken; });
    state_->woken = false;
    if (state_->stopping) return;
  }
}

bool PerUserDbs::page(const Settings& s, std::shared_ptr<core::ChangesNotifier::Waiter>& waiter) {
  auto tr = store_.create_transaction();
  auto opened = core::open_db(tr, core::kUsersDb);
  if (!opened.ok() || core::failed(*opened)) return false;  // no _users yet
  const core::DbRef users = std::get<core::DbRef>(*opened);
  core::ChangesQuery q;
  if (!since_.empty()) q.since = core::Sequence::parse(since_).value_or(core::Sequence{});
  q.limit = static_cast<std::int64_t>(kRowsPerPage);
  core::ChangesCursor cursor(users, q);
  std::vector<std::string> rows;
  auto more = cursor.next_page(tr, kRowsPerPage, rows);
  if (!more.ok()) return false;
  // Read in the page's snapshot: the notifier wakes the loop for any write after it.
  auto counter = core::read_update_counter(tr, users);
  for (const std::string& text : rows) {
    const OJson row = OJson::parse(text, nullptr, false);
    const std::string id = row.value("id", "");
    if (id.starts_with(kUserPrefix))
      apply(s, id.substr(kUserPrefix.size()), row.value("deleted", false));
    std::lock_guard lock(state_->mu);
    if (state_->stopping) return false;
  }
  since_ = cursor.last_seq().str();
  if (rows.size() >= kRowsPerPage) return true;
  if (counter.ok()) {
    std::weak_ptr<State> state = state_;
    waiter = notifier_.wait(users, *counter, [state](std::int64_t) {
      if (auto st = state.lock()) {
        {
          std::lock_guard lock(st->mu);
          st->woken = true;
        }
        st->cv.notify_all();
      }
    });
  }
  return false;
}

void PerUserDbs::apply(const Settings& s, const std::string& user, bool deleted) {
  const std::string name = core::peruser_db_name(s.prefix, user);
  storage::Status st = store_.run([&](storage::Transaction& tr) -> storage::Status {
    auto opened = core::open_db(tr, name, false);
    if (!opened.ok()) return opened.error();
    const bool exists = !core::failed(*opened);
    if (deleted) {
      if (!exists) return {};
      if (s.delete_dbs) {
        auto gone = core::delete_db(tr, name);
        return gone.ok() ? storage::Status{} : storage::Status(gone.error());
      }
      return update_security(tr, std::get<core::DbRef>(*opened), user, false);
    }
    if (exists) return update_security(tr, std::get<core::DbRef>(*opened), user, true);
    auto created = core::create_db_with_default_security(tr, name, false, now_us(), s.admin_only);
    if (!created.ok()) return created.error();
    if (core::failed(*created)) {
      spdlog::warn("couch_peruser: cannot create {}: {}", name,
                   std::get<core::CouchError>(*created).reason);
      return {};
    }
    return update_security(tr, std::get<core::DbRef>(*created), user, true);
  });
  if (!st.ok())
    spdlog::warn("couch_peruser: {} for {}: {}", name, user, storage::error_name(st.error()));
  std::lock_guard lock(state_->mu);
  ++state_->handled;
}

}  // namespace chaise::http

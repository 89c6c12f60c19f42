#include "core/docs/validation.h"

#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "core/db/db_cache.h"
#include "core/db/keyspace.h"

namespace chaise::core {

namespace {

using storage::Reverse;
using storage::Snapshot;
using storage::Tuple;

// (db id, ddoc id, rev) -> the design doc if it has a validate_doc_update, else null. Bounded:
// least recently used entries go first.
class DdocCache {
 public:
  static constexpr std::size_t kEntriesMax = 4096;

  std::optional<std::shared_ptr<const js::DesignDoc>> get(const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return std::nullopt;
    order_.splice(order_.end(), order_, it->second.second);
    return it->second.first;
  }
  void put(const std::string& key, std::shared_ptr<const js::DesignDoc> d) {
    std::lock_guard lock(mu_);
    if (map_.count(key)) return;
    order_.push_back(key);
    map_.emplace(key, std::make_pair(std::move(d), std::prev(order_.end())));
    if (map_.size() > kEntriesMax) {
      map_.erase(order_.front());
      order_.pop_front();
    }
  }

 private:
  std::mutex mu_;
  std::list<std::string> order_;
  std::unordered_map<std::string, std::pair<std::shared_ptr<const js::DesignDoc>,
                                            std::list<std::string>::iterator>>
      map_;
};

DdocCache& cache() {
  static DdocCache c;
  return c;
}

// Database name -> whether its last write found validation functions (last_had_functions).
class ValidatedDbs {
 public:
  bool contains(std::string_view name) {
    std::lock_guard lock(mu_);
    return names_.find(name) != names_.end();
  }
  void note(const std::string& name, bool has) {
    std::lock_guard lock(mu_);
    if (!has) {
      names_.erase(name);
      return;
    }
    if (names_.size() >= JsDocValidator::kHintsMax) names_.clear();
    names_.insert(name);
  }

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::mutex mu_;
  std::unordered_set<std::string, Hash, std::equal_to<>> names_;
};

ValidatedDbs& validated_dbs() {
  static ValidatedDbs v;
  return v;
}

}  // namespace

JsDocValidator::JsDocValidator(js::Engine& engine, std::function<Contexts()> contexts)
    : engine_(engine), make_contexts_(std::move(contexts)) {}

namespace {
// A database's validation functions as of a snapshot: every write asks, and most databases have
// none. Design documents change only through apply_edit, which marks such transactions with
// touch_metadata(), so the list is remembered between transactions (core/db/db_cache.h).
struct DesignValidators {
  std::vector<std::shared_ptr<const js::DesignDoc>> funcs;
  bool too_many = false;
};

StorageResult<DesignValidators> load_validators(Transaction& tr, const DbRef& db) {
  DesignValidators out;
  const auto& ids = db.space.by_id();
  const std::string b = ids.pack(Tuple().add("_design/"));
  const std::string e = ids.pack(Tuple().add("_design0"));  // '0' follows '/'
  const auto max = JsDocValidator::kDesignDocsMax;
  auto kvs = tr.get_range(b, e, static_cast<int>(max) + 1, Reverse::no, Snapshot::yes);
  if (!kvs.ok()) return kvs.error();
  if (kvs->size() > max) {
    out.too_many = true;
    return out;
  }
  for (const auto& kv : *kvs) {
    auto key_t = ids.unpack(kv.key);
    auto val_t = Tuple::unpack(kv.value);
    if (!key_t || !val_t || !key_t->get_string(0)) return storage::Error::io_error;
    auto pos = val_t->get_int(1);
    const std::string* hash = val_t->get_bytes(2);
    if (!pos || !hash) return storage::Error::io_error;
    const std::string id = *key_t->get_string(0);
    const RevId rev{*pos, *hash};
    const std::string ck = std::to_string(db.id) + '\0' + id + '\0' + rev.str();
    if (auto hit = cache().get(ck)) {
      if (*hit) out.funcs.push_back(*hit);
      continue;
    }
    DocReadOptions o;
    o.rev = rev;
    auto doc = get_doc_json(tr, db, id, o);
    if (!doc.ok()) return doc.error();
    std::shared_ptr<const js::DesignDoc> d;
    if (auto* json = std::get_if<std::string>(&*doc)) {
      auto parsed = nlohmann::json::parse(*json, nullptr, false);
      auto f = parsed.is_object() ? parsed.find("validate_doc_update") : parsed.end();
      if (parsed.is_object() && f != parsed.end() && f->is_string())
        d = std::make_shared<js::DesignDoc>(js::DesignDoc{ck, *json});
    }
    cache().put(ck, d);
    if (d) out.funcs.push_back(std::move(d));
  }
  return out;
}

}  // namespace

StorageResult<bool> JsDocValidator::begin(Transaction& tr, const DbRef& db) {
  funcs_.clear();
  failure_.reset();
  auto v =
      remembered_read<DesignValidators>(tr, memo_key("validators", std::to_string(db.id)),
                                        [&](Transaction& t) { return load_validators(t, db); });
  if (!v.ok()) return v.error();
  if ((*v)->too_many) {
    failure_ = err::unknown_error("too many design documents to validate against");
  } else {
    funcs_ = (*v)->funcs;
  }
  const bool has = !funcs_.empty() || failure_.has_value();
  validated_dbs().note(db.name, has);
  return has;
}

bool JsDocValidator::last_had_functions(std::string_view db_name) {
  return validated_dbs().contains(db_name);
}

const JsDocValidator::Contexts& JsDocValidator::contexts() {
  if (!contexts_) contexts_ = make_contexts_();
  return *contexts_;
}

std::optional<CouchError> JsDocValidator::verdict_error(const js::Verdict& v) {
  switch (v.kind) {
    case js::Verdict::Kind::ok:
      return std::nullopt;
    case js::Verdict::Kind::forbidden:
      return err::forbidden(v.message);
    case js::Verdict::Kind::unauthorized:
      return err::unauthorized(v.message);
    case js::Verdict::Kind::other:
      return err::unknown_error(v.message);
  }
  return std::nullopt;
}

std::optional<CouchError> JsDocValidator::validate(std::string_view new_doc,
                                                   std::string_view old_doc) {
  if (failure_) return failure_;
  for (const auto& d : funcs_) {
    const Contexts& c = contexts();
    auto r = engine_.validate(*d, new_doc, old_doc, c.user_ctx, c.sec_obj);
    if (auto* e = std::get_if<js::JsError>(&r)) return CouchError{500, e->error, e->reason};
    if (auto refused = verdict_error(std::get<js::Verdict>(r))) return refused;
  }
  return std::nullopt;
}

}  // namespace chaise::core

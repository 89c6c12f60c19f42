#include "core/view_index.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/collation.h"
#include "core/cursors.h"
#include "core/keyspace.h"
#include "core/mango_index.h"

namespace chaise::core {

namespace {

using storage::KeyValue;
using storage::Reverse;
using storage::Snapshot;
using storage::Tuple;

std::string hex(const unsigned char* p, std::size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(kHex[p[i] >> 4]);
    out.push_back(kHex[p[i] & 15]);
  }
  return out;
}

std::string md5_hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest, &len, EVP_md5(), nullptr);
  return hex(digest, len);
}

std::string json_text(std::string_view s) { return OrderedJson(std::string(s)).dump(); }

storage::Subspace index_space(const DbRef& db, const ViewGroup& g) {
  return db.space.view_index(g.signature);
}
std::string seq_key(const DbRef& db, const ViewGroup& g) {
  return index_space(db, g).pack(Tuple().add(keyspace::kViewSeq));
}
storage::Subspace rows_space(const DbRef& db, const ViewGroup& g, std::size_t view) {
  return index_space(db, g).sub(
      Tuple().add(keyspace::kViewRows).add(static_cast<std::int64_t>(view)));
}
storage::Subspace ids_space(const DbRef& db, const ViewGroup& g) {
  return index_space(db, g).sub(Tuple().add(keyspace::kViewIds));
}
std::string count_key(const DbRef& db, const ViewGroup& g, std::size_t view) {
  return index_space(db, g).pack(
      Tuple().add(keyspace::kViewCounts).add(static_cast<std::int64_t>(view)));
}

}  // namespace

// ---- ViewGroup ----------------------------------------------------------------------------------

Outcome<ViewGroup> ViewGroup::from_design_doc(const std::string& ddoc_id, const std::string& json,
                                              const std::string& js_key) {
  OrderedJson doc = OrderedJson::parse(json, nullptr, false);
  if (!doc.is_object()) return CouchError{500, "unknown_error", "design document is not JSON"};
  ViewGroup g;
  g.ddoc_id = ddoc_id;
  g.ddoc = js::DesignDoc{js_key, json};
  g.language = doc.contains("language") && doc["language"].is_string()
                   ? doc["language"].get<std::string>()
                   : "javascript";
  OrderedJson sig_input = OrderedJson::object();
  sig_input["language"] = g.language;
  if (auto o = doc.find("options"); o != doc.end() && o->is_object()) {
    g.include_design = o->value("include_design", false) == true;
    g.local_seq = o->value("local_seq", false) == true;
    sig_input["options"] = *o;
  }
  auto views = doc.find("views");
  if (views != doc.end() && views->is_object()) {
    for (auto it = views->begin(); it != views->end(); ++it) {
      if (it.key() == "lib") {
        sig_input["lib"] = it.value();
        continue;
      }
      const OrderedJson& v = it.value();
      if (!v.is_object() || !v.contains("map")) continue;
      ViewDef d;
      d.name = it.key();
      if (g.language == "query" && v["map"].is_object()) {
        d.mango_map = v["map"];
        d.map = v["map"].dump();
      } else if (v["map"].is_string()) {
        d.map = v["map"].get<std::string>();
      } else {
        continue;
      }
      if (v.contains("reduce") && v["reduce"].is_string()) d.reduce = v["reduce"].get<std::string>();
      g.views.push_back(std::move(d));
    }
  }
  std::sort(g.views.begin(), g.views.end(),
            [](const ViewDef& a, const ViewDef& b) { return a.name < b.name; });
  OrderedJson vs = OrderedJson::array();
  for (const ViewDef& d : g.views) {
    OrderedJson o = OrderedJson::object();
    o["name"] = d.name;
    o["map"] = d.map;
    o["reduce"] = d.reduce ? OrderedJson(*d.reduce) : OrderedJson(nullptr);
    vs.push_back(o);
  }
  sig_input["views"] = vs;
  g.signature = md5_hex(sig_input.dump());
  return g;
}

std::optional<std::size_t> ViewGroup::index_of(std::string_view view) const {
  for (std::size_t i = 0; i < views.size(); ++i)
    if (views[i].name == view) return i;
  return std::nullopt;
}

// ---- Building -----------------------------------------------------------------------------------

StorageResult<Sequence> view_index_seq(Transaction& tr, const DbRef& db, const ViewGroup& g,
                                       Snapshot snapshot) {
  auto v = tr.get(seq_key(db, g), snapshot);
  if (!v.ok()) return v.error();
  if (!*v) return Sequence{};
  auto s = Sequence::parse(**v);
  if (!s) return storage::Error::io_error;
  return *s;
}

StorageResult<std::int64_t> view_row_count(Transaction& tr, const DbRef& db, const ViewGroup& g,
                                           std::size_t view) {
  auto v = tr.get(count_key(db, g, view), Snapshot::yes);
  if (!v.ok()) return v.error();
  return *v ? keyspace::decode_counter(**v) : 0;
}

StorageResult<Outcome<bool>> update_step(Transaction& tr, const DbRef& db, const ViewGroup& g,
                                         js::Engine& js) {
  auto since = view_index_seq(tr, db, g, Snapshot::no);
  if (!since.ok()) return since.error();
  ChangesQuery q;
  q.since = *since;
  q.include_docs = true;
  q.conflicts = true;  // map functions see _conflicts, as in CouchDB
  q.limit = static_cast<std::int64_t>(kDocsPerStep);
  ChangesCursor cursor(db, q);
  std::vector<std::string> rows;
  auto more = cursor.next_page(tr, kDocsPerStep, rows);
  if (!more.ok()) return more.error();
  if (rows.empty()) return Outcome<bool>(true);

  struct Changed {
    std::string id;
    bool mapped = false;
    std::size_t doc = 0;  // index into docs
  };
  std::vector<Changed> changed;
  std::vector<std::string> docs;
  std::size_t bytes = 0;
  for (const std::string& row : rows) {
    OrderedJson r = OrderedJson::parse(row, nullptr, false);
    if (!r.is_object() || !r.contains("id")) return storage::Error::io_error;
    Changed c;
    c.id = r["id"].get<std::string>();
    const bool deleted = r.value("deleted", false);
    const bool design = c.id.starts_with("_design/");
    if (!deleted && (!design || g.include_design) && r.contains("doc") && r["doc"].is_object()) {
      OrderedJson& d = r["doc"];
      if (g.local_seq) d["_local_seq"] = r["seq"];
      c.mapped = true;
      c.doc = docs.size();
      docs.push_back(d.dump());
      bytes += docs.back().size();
    }
    changed.push_back(std::move(c));
    if (bytes > kBytesPerStep) break;  // the rest waits for the next step
  }
  // Where this step got to: the last change it handled.
  Sequence reached = *since;
  {
    const std::string& last = rows[changed.size() - 1];
    OrderedJson r = OrderedJson::parse(last, nullptr, false);
    auto s = Sequence::parse(r.value("seq", ""));
    if (!s) return storage::Error::io_error;
    reached = *s;
  }

  std::vector<std::string> mapped;
  if (!docs.empty() && !g.views.empty() && g.language == "query") {
    // Mango json indexes: the key is the indexed fields' values, in C++.
    for (const std::string& text : docs) {
      OrderedJson doc = OrderedJson::parse(text, nullptr, false);
      OrderedJson per_view = OrderedJson::array();
      for (const ViewDef& v : g.views) {
        OrderedJson rows = OrderedJson::array();
        if (v.mango_map)
          if (auto key = mango_index_key(doc, *v.mango_map)) rows.push_back(OrderedJson::array({*key, nullptr}));
        per_view.push_back(std::move(rows));
      }
      mapped.push_back(per_view.dump());
    }
  } else if (!docs.empty() && !g.views.empty()) {
    std::vector<std::string> names;
    for (const ViewDef& v : g.views) names.push_back(v.name);
    auto m = js.map(g.ddoc, names, docs);
    if (auto* e = std::get_if<js::JsError>(&m)) {
      const int status = e->error == "compilation_error" ? 400 : 500;
      return Outcome<bool>(CouchError{status, e->error, e->reason});
    }
    mapped = std::move(std::get<std::vector<std::string>>(m));
  }

  std::vector<std::int64_t> delta(g.views.size(), 0);
  const storage::Subspace ids = ids_space(db, g);
  for (const Changed& c : changed) {
    // Old rows out, through the id index.
    auto [b, e] = ids.range(Tuple().add(c.id));
    for (;;) {
      auto kvs = tr.get_range(b, e, 1000, Reverse::no, Snapshot::yes);
      if (!kvs.ok()) return kvs.error();
      for (const KeyValue& kv : *kvs) {
        auto t = ids.unpack(kv.key);
        if (!t || t->size() != 5) return storage::Error::io_error;
        auto view = t->get_int(1);
        const std::string* ck = t->get_bytes(2);
        const std::string* vck = t->get_bytes(3);
        auto n = t->get_int(4);
        if (!view || !ck || !vck || !n || *view < 0 ||
            static_cast<std::size_t>(*view) >= g.views.size())
          continue;  // (cannot happen: the signature fixes the views)
        tr.clear(rows_space(db, g, static_cast<std::size_t>(*view))
                     .pack(Tuple().add_bytes(*ck).add(c.id).add_bytes(*vck).add(*n)));
        --delta[static_cast<std::size_t>(*view)];
      }
      if (kvs->size() < 1000) break;
      b = storage::key_after(kvs->back().key);
    }
    tr.clear_range(ids.range(Tuple().add(c.id)).first, ids.range(Tuple().add(c.id)).second);
    if (!c.mapped) continue;
    OrderedJson per_view = OrderedJson::parse(mapped.at(c.doc), nullptr, false);
    if (!per_view.is_array()) return storage::Error::io_error;
    for (std::size_t v = 0; v < per_view.size() && v < g.views.size(); ++v) {
      std::int64_t n = 0;
      for (const OrderedJson& kv : per_view[v]) {
        if (!kv.is_array() || kv.size() != 2) continue;
        const std::string ck = collation_key(kv[0]);
        const std::string vck = collation_key(kv[1]);
        std::string value = kv[0].dump();
        value += '\n';
        value += kv[1].dump();
        tr.set(rows_space(db, g, v).pack(Tuple().add_bytes(ck).add(c.id).add_bytes(vck).add(n)),
               value);
        tr.set(ids.pack(Tuple().add(c.id).add(static_cast<std::int64_t>(v)).add_bytes(ck)
                            .add_bytes(vck).add(n)),
               "");
        ++n;
        ++delta[v];
      }
    }
  }
  for (std::size_t v = 0; v < delta.size(); ++v)
    if (delta[v] != 0) tr.add(count_key(db, g, v), delta[v]);
  tr.set(seq_key(db, g), reached.str());
  // (The cursor says "no more" once it reached its limit: a full step may have more behind it.)
  const bool caught_up = !*more && rows.size() < kDocsPerStep && changed.size() == rows.size();
  return Outcome<bool>(caught_up);
}

StorageResult<bool> cleanup_step(Transaction& tr, const DbRef& db,
                                 const std::vector<std::string>& keep) {
  const storage::Subspace& views = db.space.views();
  std::string begin = views.range().first;
  const std::string end = views.range().second;
  for (int i = 0; i < 100; ++i) {
    auto kvs = tr.get_range(begin, end, 1, Reverse::no, Snapshot::no);
    if (!kvs.ok()) return kvs.error();
    if (kvs->empty()) return true;
    auto t = views.unpack(kvs->front().key);
    const std::string* sig = t ? t->get_bytes(0) : nullptr;
    if (!sig) return storage::Error::io_error;
    const std::string sig_prefix = views.pack(Tuple().add_bytes(*sig));
    if (std::find(keep.begin(), keep.end(), *sig) == keep.end())
      tr.clear_range(sig_prefix, storage::strinc(sig_prefix));
    begin = storage::strinc(sig_prefix);
  }
  return false;
}

// ---- Built-in reducers ----------------------------------------------------------------------------

namespace {

const char* const kSumError =
    "The _sum function requires that map values be numbers, arrays of numbers, or objects. "
    "Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, "
    "provided that the values for all fields are themselves numbers, arrays of numbers, or "
    "objects.";

CouchError builtin_error(std::string reason) {
  return CouchError{500, "invalid_value", std::move(reason)};
}

// How Erlang's ~p shows a decoded JSON value in CouchDB's messages: strings as <<"...">>.
std::string erlang_term(const OrderedJson& v) {
  if (v.is_string()) return "<<" + v.dump() + ">>";
  return v.dump();
}

OrderedJson add_numbers(const OrderedJson& a, const OrderedJson& b) {
  if (a.is_number_integer() && b.is_number_integer()) {
    std::int64_t r;
    if (!__builtin_add_overflow(a.get<std::int64_t>(), b.get<std::int64_t>(), &r)) return r;
  }
  return a.get<double>() + b.get<double>();
}

bool is_number_array(const OrderedJson& v) {
  if (!v.is_array()) return false;
  for (const auto& e : v)
    if (!e.is_number()) return false;
  return true;
}

std::optional<OrderedJson> sum_values(const OrderedJson& acc, const OrderedJson& v);

std::optional<OrderedJson> sum_arrays(const OrderedJson& a, const OrderedJson& b) {
  OrderedJson out = OrderedJson::array();
  for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i >= a.size()) {
      out.push_back(b[i]);
    } else if (i >= b.size()) {
      out.push_back(a[i]);
    } else {
      out.push_back(add_numbers(a[i], b[i]));
    }
  }
  return out;
}

std::optional<OrderedJson> sum_values(const OrderedJson& acc, const OrderedJson& v) {
  if (acc.is_number() && v.is_number()) return add_numbers(acc, v);
  if (acc.is_number() && is_number_array(v)) return sum_arrays(OrderedJson::array({acc}), v);
  if (is_number_array(acc) && v.is_number()) return sum_arrays(acc, OrderedJson::array({v}));
  if (is_number_array(acc) && is_number_array(v)) return sum_arrays(acc, v);
  if (acc.is_object() && v.is_object()) {
    OrderedJson out = acc;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!out.contains(it.key())) {
        if (!(it.value().is_number() || is_number_array(it.value()) || it.value().is_object()))
          return std::nullopt;
        out[it.key()] = it.value();
        continue;
      }
      auto s = sum_values(out[it.key()], it.value());
      if (!s) return std::nullopt;
      out[it.key()] = std::move(*s);
    }
    return out;
  }
  return std::nullopt;
}

struct Stats {
  OrderedJson sum = 0, min, max, sumsqr = 0;
  std::int64_t count = 0;
};

std::optional<Stats> stats_of(const OrderedJson& v, std::string& error) {
  Stats s;
  if (v.is_number()) {
    s.sum = v;
    s.min = v;
    s.max = v;
    s.count = 1;
    s.sumsqr = v.is_number_integer() && std::abs(v.get<double>()) < 3e9
                   ? OrderedJson(v.get<std::int64_t>() * v.get<std::int64_t>())
                   : OrderedJson(v.get<double>() * v.get<double>());
    return s;
  }
  if (v.is_object()) {
    for (const char* k : {"sum", "count", "min", "max", "sumsqr"}) {
      if (!v.contains(k)) {
        error = std::string("user _stats input missing required field ") + k + " (" + v.dump() + ")";
        return std::nullopt;
      }
      if (!v[k].is_number()) {
        error = std::string("non-numeric _stats input received for ") + k + ": " + v[k].dump();
        return std::nullopt;
      }
    }
    s.sum = v["sum"];
    s.min = v["min"];
    s.max = v["max"];
    s.sumsqr = v["sumsqr"];
    s.count = v["count"].get<std::int64_t>();
    return s;
  }
  error = "The _stats function requires that map values be numbers or arrays of numbers, not '" +
          erlang_term(v) + "'";
  return std::nullopt;
}

void merge_stats(Stats& a, const Stats& b) {
  if (a.count == 0) {
    a = b;
    return;
  }
  a.sum = add_numbers(a.sum, b.sum);
  a.sumsqr = add_numbers(a.sumsqr, b.sumsqr);
  a.count += b.count;
  if (b.min.get<double>() < a.min.get<double>()) a.min = b.min;
  if (b.max.get<double>() > a.max.get<double>()) a.max = b.max;
}

OrderedJson stats_json(const Stats& s) {
  OrderedJson o = OrderedJson::object();
  o["sum"] = s.sum;
  o["count"] = s.count;
  o["min"] = s.min;
  o["max"] = s.max;
  o["sumsqr"] = s.sumsqr;
  return o;
}

Outcome<std::string> stats_reduce(const std::vector<std::string>& values) {
  // Numbers (or pre-aggregated objects) give one stats object; arrays of numbers one per index.
  std::optional<Stats> single;
  std::vector<Stats> per_index;
  bool arrays = false;
  for (const std::string& text : values) {
    OrderedJson v = OrderedJson::parse(text, nullptr, false);
    std::string error;
    if (v.is_array()) {
      if (arrays && v.size() != per_index.size())
        return builtin_error("The _stats function requires that map values be arrays of the same length, not '" + v.dump() + "'");
      arrays = true;
      if (per_index.size() < v.size()) per_index.resize(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) {
        auto s = stats_of(v[i], error);
        if (!s) return builtin_error(error);
        merge_stats(per_index[i], *s);
      }
      continue;
    }
    auto s = stats_of(v, error);
    if (!s) return builtin_error(error);
    if (!single) single = Stats{};
    merge_stats(*single, *s);
  }
  if (arrays && single) return builtin_error("The _stats function requires that map values be numbers or arrays of numbers, not mixed");
  if (arrays) {
    OrderedJson out = OrderedJson::array();
    for (const Stats& s : per_index) out.push_back(stats_json(s));
    return out.dump();
  }
  return single ? stats_json(*single).dump() : std::string("null");
}

// HyperLogLog with 2^11 registers (CouchDB's precision), over the keys' collation bytes.
class Hll {
 public:
  static constexpr int kP = 11;
  static constexpr std::size_t kM = std::size_t{1} << kP;
  Hll() : reg_(kM, 0) {}
  void insert(std::string_view bytes) {
    std::uint64_t h = 1469598103934665603ull;
    for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    const std::size_t idx = static_cast<std::size_t>(h >> (64 - kP));
    const std::uint64_t rest = (h << kP) | (std::uint64_t{1} << (kP - 1));
    const std::uint8_t rank = static_cast<std::uint8_t>(__builtin_clzll(rest) + 1);
    reg_[idx] = std::max(reg_[idx], rank);
  }
  std::int64_t estimate() const {
    double sum = 0;
    std::size_t zeros = 0;
    for (std::uint8_t r : reg_) {
      sum += std::ldexp(1.0, -r);
      if (r == 0) ++zeros;
    }
    const double m = static_cast<double>(kM);
    double e = (0.7213 / (1 + 1.079 / m)) * m * m / sum;
    if (e <= 2.5 * m && zeros > 0) e = m * std::log(m / static_cast<double>(zeros));
    return static_cast<std::int64_t>(std::llround(e));
  }

 private:
  std::vector<std::uint8_t> reg_;
};

// _top_N / _bottom_N: the N greatest (least) distinct values by collation.
Outcome<std::string> rank_reduce(const std::vector<std::string>& values, std::size_t n, bool top,
                                 bool rereduce) {
  std::vector<std::pair<std::string, std::string>> all;  // (collation, json)
  auto add = [&](const OrderedJson& v) { all.emplace_back(collation_key(v), v.dump()); };
  for (const std::string& text : values) {
    OrderedJson v = OrderedJson::parse(text, nullptr, false);
    if (rereduce && v.is_array()) {
      for (const auto& e : v) add(e);
    } else {
      add(v);
    }
  }
  std::sort(all.begin(), all.end(), [&](const auto& a, const auto& b) {
    return top ? a.first > b.first : a.first < b.first;
  });
  all.erase(std::unique(all.begin(), all.end(),
                        [](const auto& a, const auto& b) { return a.first == b.first; }),
            all.end());
  if (all.size() > n) all.resize(n);
  std::string out = "[";
  for (std::size_t i = 0; i < all.size(); ++i) out += (i ? "," : "") + all[i].second;
  return out + "]";
}

Outcome<std::string> builtin(std::string_view fn, const std::vector<std::string>& values,
                             bool rereduce) {
  if (fn.starts_with("_count")) {
    if (!rereduce) return std::to_string(values.size());
    std::int64_t n = 0;
    for (const std::string& v : values) n += std::stoll(v);
    return std::to_string(n);
  }
  if (fn.starts_with("_sum")) {
    // A value _sum cannot add makes the reduction CouchDB's error object (a row value, not a
    // failed request): {"error":"builtin_reduce_error","reason":...,"caused_by":value}.
    auto sum_error = [](const OrderedJson& v) {
      OrderedJson e = OrderedJson::object();
      e["error"] = "builtin_reduce_error";
      e["reason"] = kSumError;
      e["caused_by"] = v;
      return e.dump();
    };
    std::optional<OrderedJson> acc;
    for (const std::string& text : values) {
      OrderedJson v = OrderedJson::parse(text, nullptr, false);
      if (rereduce && v.is_object() && v.value("error", "") == "builtin_reduce_error") return text;
      if (!acc) {
        if (!(v.is_number() || is_number_array(v) || v.is_object())) return sum_error(v);
        if (v.is_object()) {
          auto s = sum_values(OrderedJson::object(), v);
          if (!s) return sum_error(v);
          acc = std::move(*s);
        } else {
          acc = v;
        }
        continue;
      }
      auto s = sum_values(*acc, v);
      if (!s) return sum_error(v);
      acc = std::move(*s);
    }
    return acc ? acc->dump() : std::string("0");
  }
  if (fn.starts_with("_stats")) return stats_reduce(values);
  if (fn.starts_with("_top_") || fn.starts_with("_bottom_")) {
    const bool top = fn.starts_with("_top_");
    const std::size_t n = std::stoul(std::string(fn.substr(top ? 5 : 8)));
    return rank_reduce(values, n, top, rereduce);
  }
  return CouchError{400, "invalid_design_doc", "`" + std::string(fn) + "` is not a supported reduce function."};
}

}  // namespace

Outcome<std::string> builtin_reduce(std::string_view fn, const std::vector<std::string>& keys,
                                    const std::vector<std::string>& values) {
  if (fn.starts_with("_approx_count_distinct")) {
    Hll h;
    for (const std::string& k : keys) h.insert(collation_key(OrderedJson::parse(k, nullptr, false)));
    return std::to_string(h.estimate());
  }
  if (fn.starts_with("_first")) return values.empty() ? std::string("null") : values.front();
  if (fn.starts_with("_last")) return values.empty() ? std::string("null") : values.back();
  return builtin(fn, values, false);
}

// ---- Queries ------------------------------------------------------------------------------------

struct ViewCursor::Group {
  bool open = false;
  std::string ck;        // group identity (collation bytes)
  std::string key_json;  // the group's key ("null" for group=false)
  std::vector<std::string> keys, ids, values;
  std::vector<std::string> partials;
  std::optional<Hll> hll;
  std::optional<std::string> first, last;
  std::size_t batch_bytes = 0;
};

ViewCursor::ViewCursor(DbRef db, std::shared_ptr<const ViewGroup> g, ViewQuery q, js::Engine* js)
    : db_(std::move(db)), g_(std::move(g)), q_(std::move(q)), js_(js) {
  const ViewDef& def = g_->views.at(q_.view);
  reducing_ = def.reduce.has_value() && q_.reduce;
  to_skip_ = q_.skip;
  to_emit_ = q_.limit;
  group_ = std::make_shared<Group>();
  const storage::Subspace rows = rows_space(db_, *g_, q_.view);
  auto key_prefix = [&](const OrderedJson& k) {
    return rows.pack(Tuple().add_bytes(collation_key(k)));
  };
  auto key_id_prefix = [&](const OrderedJson& k, const std::string& id) {
    return rows.pack(Tuple().add_bytes(collation_key(k)).add(id));
  };
  if (q_.keys) {
    for (const OrderedJson& k : *q_.keys) {
      const std::string p = key_prefix(k);
      ranges_.push_back(Range{p, storage::strinc(p)});
    }
    return;
  }
  auto [all_b, all_e] = rows.range();
  // In key order: lo is where ascending iteration starts.
  const std::optional<OrderedJson>& lo = q_.descending ? q_.end_key : q_.start_key;
  const std::optional<OrderedJson>& hi = q_.descending ? q_.start_key : q_.end_key;
  const std::optional<std::string>& lo_id = q_.descending ? q_.end_docid : q_.start_docid;
  const std::optional<std::string>& hi_id = q_.descending ? q_.start_docid : q_.end_docid;
  std::string b = all_b, e = all_e;
  if (lo) {
    const std::string p = lo_id ? key_id_prefix(*lo, *lo_id) : key_prefix(*lo);
    // Ascending: inclusive start. Descending: the end key is inclusive unless inclusive_end=false.
    if (q_.descending && !q_.inclusive_end)
      b = storage::strinc(p);
    else
      b = p;
  }
  if (hi) {
    const std::string p = hi_id ? key_id_prefix(*hi, *hi_id) : key_prefix(*hi);
    if (!q_.descending && !q_.inclusive_end)
      e = p;
    else
      e = storage::strinc(p);
  }
  b = std::max(b, all_b);
  e = std::min(e, all_e);
  ranges_.push_back(Range{b, e});
}

StorageResult<std::int64_t> ViewCursor::offset(Transaction& tr) {
  if (reducing_ || ranges_.empty()) return std::int64_t{0};
  const storage::Subspace rows = rows_space(db_, *g_, q_.view);
  auto [all_b, all_e] = rows.range();
  std::string b = q_.descending ? ranges_.front().end : all_b;
  std::string e = q_.descending ? all_e : ranges_.front().begin;
  std::int64_t n = 0;
  while (b < e) {
    auto kvs = tr.get_range(b, e, 10'000, Reverse::no, Snapshot::yes);
    if (!kvs.ok()) return kvs.error();
    n += static_cast<std::int64_t>(kvs->size());
    if (kvs->size() < 10'000) break;
    b = storage::key_after(kvs->back().key);
  }
  return n + q_.skip;
}

StorageResult<std::string> ViewCursor::doc_for(Transaction& tr, std::string_view id,
                                               std::string_view value_json) {
  // A value {"_id": ..., ["_rev": ...]} names the document to include (linked documents).
  std::string doc_id(id);
  DocReadOptions o;
  o.conflicts = q_.conflicts;
  o.attachments = q_.attachments;
  o.att_encoding_info = q_.att_encoding_info;
  if (!value_json.empty() && value_json.front() == '{') {
    OrderedJson v = OrderedJson::parse(value_json, nullptr, false);
    if (v.is_object() && v.contains("_id") && v["_id"].is_string()) {
      doc_id = v["_id"].get<std::string>();
      if (v.contains("_rev") && v["_rev"].is_string())
        if (auto r = RevId::parse(v["_rev"].get<std::string>())) o.rev = *r;
    }
  }
  auto d = get_doc_json(tr, db_, doc_id, o);
  if (!d.ok()) return d.error();
  if (auto* s = std::get_if<std::string>(&*d)) return *s;
  return std::string("null");
}

StorageResult<Outcome<bool>> ViewCursor::next_page(Transaction& tr, std::size_t rows_max,
                                                   std::vector<std::string>& out) {
  return reducing_ ? reduce_page(tr, rows_max, out) : map_page(tr, rows_max, out);
}

StorageResult<Outcome<bool>> ViewCursor::map_page(Transaction& tr, std::size_t rows_max,
                                                  std::vector<std::string>& out) {
  const storage::Subspace rows = rows_space(db_, *g_, q_.view);
  while (range_ < ranges_.size()) {
    if (to_emit_ == 0) return Outcome<bool>(false);
    Range& r = ranges_[range_];
    if (r.begin >= r.end) {
      ++range_;
      continue;
    }
    const std::size_t want = rows_max + static_cast<std::size_t>(std::min<std::int64_t>(to_skip_, 10'000));
    auto kvs = tr.get_range(r.begin, r.end, static_cast<int>(want),
                            q_.descending ? Reverse::yes : Reverse::no, Snapshot::yes);
    if (!kvs.ok()) return kvs.error();
    for (const KeyValue& kv : *kvs) {
      if (q_.descending)
        r.end = kv.key;
      else
        r.begin = storage::key_after(kv.key);
      if (to_skip_ > 0) {
        --to_skip_;
        continue;
      }
      if (to_emit_ == 0) break;
      auto t = rows.unpack(kv.key);
      const std::string* id = t ? t->get_string(1) : nullptr;
      const std::size_t nl = kv.value.find('\n');
      if (!id || nl == std::string::npos) return storage::Error::io_error;
      const std::string_view key_json(kv.value.data(), nl);
      const std::string_view value_json(kv.value.data() + nl + 1, kv.value.size() - nl - 1);
      std::string row = "{\"id\":" + json_text(*id) + ",\"key\":";
      row.append(key_json);
      row += ",\"value\":";
      row.append(value_json);
      if (q_.include_docs) {
        auto d = doc_for(tr, *id, value_json);
        if (!d.ok()) return d.error();
        row += ",\"doc\":" + *d;
      }
      row += '}';
      out.push_back(std::move(row));
      if (to_emit_ > 0) --to_emit_;
    }
    if (kvs->size() < want) {
      r.begin = r.end;
      ++range_;
    }
    if (out.size() >= rows_max) return Outcome<bool>(true);
  }
  return Outcome<bool>(false);
}

std::optional<CouchError> ViewCursor::reduce_batch() {
  Group& g = *group_;
  const std::string& fn = *g_->views[q_.view].reduce;
  if (g.values.empty()) return std::nullopt;
  if (fn.starts_with("_")) {
    auto r = builtin(fn, g.values, false);
    if (auto* e = std::get_if<CouchError>(&r)) return *e;
    g.partials.push_back(std::get<std::string>(r));
  } else {
    if (!js_) return CouchError{500, "unknown_error", "no JavaScript engine"};
    std::string kvs = "[";
    for (std::size_t i = 0; i < g.values.size(); ++i) {
      if (i) kvs += ',';
      kvs += "[[" + g.keys[i] + "," + json_text(g.ids[i]) + "]," + g.values[i] + "]";
    }
    kvs += "]";
    auto r = js_->reduce({fn}, kvs, false);
    if (auto* e = std::get_if<js::JsError>(&r)) return CouchError{500, e->error, e->reason};
    OrderedJson arr = OrderedJson::parse(std::get<std::string>(r), nullptr, false);
    g.partials.push_back(arr.is_array() && !arr.empty() ? arr[0].dump() : "null");
  }
  g.keys.clear();
  g.ids.clear();
  g.values.clear();
  g.batch_bytes = 0;
  return std::nullopt;
}

std::optional<CouchError> ViewCursor::flush_group(std::vector<std::string>& out) {
  Group& g = *group_;
  if (!g.open) return std::nullopt;
  g.open = false;
  const std::string& fn = *g_->views[q_.view].reduce;
  std::string value;
  if (auto e = reduce_batch()) return e;
  if (g.partials.empty() && !fn.starts_with("_approx_count_distinct") &&
      !fn.starts_with("_first") && !fn.starts_with("_last")) {
    // (cannot happen: an open group has a row)
    g.partials.push_back("null");
  }
  if (fn.starts_with("_approx_count_distinct")) {
    value = std::to_string(g.hll ? g.hll->estimate() : 0);
  } else if (fn.starts_with("_first")) {
    value = (q_.descending ? g.last : g.first).value_or("null");
  } else if (fn.starts_with("_last")) {
    value = (q_.descending ? g.first : g.last).value_or("null");
  } else if (g.partials.size() == 1 && !(fn.starts_with("_top_") || fn.starts_with("_bottom_"))) {
    value = g.partials[0];
  } else if (fn.starts_with("_")) {
    auto r = builtin(fn, g.partials, true);
    if (auto* e = std::get_if<CouchError>(&r)) return *e;
    value = std::get<std::string>(r);
  } else {
    std::string vals = "[";
    for (std::size_t i = 0; i < g.partials.size(); ++i) vals += (i ? "," : "") + g.partials[i];
    vals += "]";
    auto r = js_->reduce({fn}, vals, true);
    if (auto* e = std::get_if<js::JsError>(&r)) return CouchError{500, e->error, e->reason};
    OrderedJson arr = OrderedJson::parse(std::get<std::string>(r), nullptr, false);
    value = arr.is_array() && !arr.empty() ? arr[0].dump() : "null";
  }
  g.partials.clear();
  g.hll.reset();
  g.first.reset();
  g.last.reset();
  if (to_skip_ > 0) {
    --to_skip_;
    return std::nullopt;
  }
  if (to_emit_ == 0) return std::nullopt;
  out.push_back("{\"key\":" + g.key_json + ",\"value\":" + value + "}");
  if (to_emit_ > 0) --to_emit_;
  return std::nullopt;
}

StorageResult<Outcome<bool>> ViewCursor::reduce_page(Transaction& tr, std::size_t rows_max,
                                                     std::vector<std::string>& out) {
  const storage::Subspace rows = rows_space(db_, *g_, q_.view);
  const std::string& fn = *g_->views[q_.view].reduce;
  constexpr std::size_t kBatchRows = 1000;
  constexpr std::size_t kBatchBytes = 1'000'000;
  std::size_t scanned = 0;
  while (range_ < ranges_.size()) {
    if (to_emit_ == 0) return Outcome<bool>(false);
    Range& r = ranges_[range_];
    if (r.begin < r.end) {
      auto kvs = tr.get_range(r.begin, r.end, 1000, q_.descending ? Reverse::yes : Reverse::no,
                              Snapshot::yes);
      if (!kvs.ok()) return kvs.error();
      for (const KeyValue& kv : *kvs) {
        if (q_.descending)
          r.end = kv.key;
        else
          r.begin = storage::key_after(kv.key);
        auto t = rows.unpack(kv.key);
        const std::string* ck = t ? t->get_bytes(0) : nullptr;
        const std::string* id = t ? t->get_string(1) : nullptr;
        const std::size_t nl = kv.value.find('\n');
        if (!ck || !id || nl == std::string::npos) return storage::Error::io_error;
        std::string key_json = kv.value.substr(0, nl);
        std::string value_json = kv.value.substr(nl + 1);
        // The group this row belongs to.
        std::string gck;
        std::string gkey;
        if (!q_.group_level) {
          gkey = "null";
        } else if (*q_.group_level == std::numeric_limits<std::size_t>::max()) {
          gck = *ck;
          gkey = key_json;
        } else {
          OrderedJson k = OrderedJson::parse(key_json, nullptr, false);
          if (k.is_array() && k.size() > *q_.group_level) {
            OrderedJson gk = group_key(k, *q_.group_level);
            gck = collation_key(gk);
            gkey = gk.dump();
          } else {
            gck = *ck;
            gkey = key_json;
          }
        }
        Group& g = *group_;
        if (g.open && g.ck != gck) {
          if (auto e = flush_group(out)) return Outcome<bool>(*e);
        }
        if (!g.open) {
          g.open = true;
          g.ck = gck;
        }
        g.key_json = gkey;  // CouchDB reports the group's last key (equal keys may differ in text)
        if (fn.starts_with("_approx_count_distinct")) {
          if (!g.hll) g.hll.emplace();
          g.hll->insert(*ck);
        } else if (fn.starts_with("_first") || fn.starts_with("_last")) {
          if (!g.first) g.first = value_json;
          g.last = value_json;
        } else {
          g.batch_bytes += kv.value.size();
          g.keys.push_back(std::move(key_json));
          g.ids.push_back(*id);
          g.values.push_back(std::move(value_json));
          if (g.values.size() >= kBatchRows || g.batch_bytes >= kBatchBytes) {
            // Reduce what was gathered; the group stays open with its partial result.
            if (auto e = reduce_batch()) return Outcome<bool>(*e);
          }
        }
        if (to_emit_ == 0) return Outcome<bool>(false);
      }
      scanned += kvs->size();
      if (kvs->size() < 1000) r.begin = r.end;
    }
    if (r.begin >= r.end) {
      // With keys=[...], each key is its own group.
      if (q_.keys) {
        if (auto e = flush_group(out)) return Outcome<bool>(*e);
      }
      ++range_;
    }
    if (out.size() >= rows_max || scanned >= 10'000) return Outcome<bool>(true);
  }
  if (auto e = flush_group(out)) return Outcome<bool>(*e);
  return Outcome<bool>(false);
}

}  // namespace chaise::core

// Built-in reducers (CouchDB's couch_query_servers builtin_reduce and its errors) and the
// partials the reduce tree stores. See core/index/reducers.h.
#include "core/index/reducers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/query/collation.h"

namespace chaise::core {

using OrderedJson = nlohmann::ordered_json;

std::uint64_t key_hash(std::string_view bytes) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

// ---- Built-in reducers ----------------------------------------------------------------------------

namespace {

const char* const kSumError =
    "The _sum function requires that map values be numbers, arrays of numbers, or objects. "
    "Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, "
    "provided that the values for all fields are themselves numbers, arrays of numbers, or "
    "objects.";

CouchError builtin_error(std::string reason) { return err::invalid_value(std::move(reason)); }

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
        error =
            std::string("user _stats input missing required field ") + k + " (" + v.dump() + ")";
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
        return builtin_error(
            "The _stats function requires that map values be arrays of the same length, not '" +
            v.dump() + "'");
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
  if (arrays && single)
    return builtin_error(
        "The _stats function requires that map values be numbers or arrays of numbers, not mixed");
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
    const std::uint64_t h = key_hash(bytes);
    const std::size_t idx = static_cast<std::size_t>(h >> (64 - kP));
    const std::uint64_t rest = (h << kP) | (std::uint64_t{1} << (kP - 1));
    const std::uint8_t rank = static_cast<std::uint8_t>(__builtin_clzll(rest) + 1);
    reg_[idx] = std::max(reg_[idx], rank);
  }
  // Sparse form: (index, 2 bytes big-endian; rank, 1 byte) for each non-zero register.
  std::string sparse() const {
    std::string out;
    for (std::size_t i = 0; i < kM; ++i) {
      if (reg_[i] == 0) continue;
      out.push_back(static_cast<char>(i >> 8));
      out.push_back(static_cast<char>(i & 0xff));
      out.push_back(static_cast<char>(reg_[i]));
    }
    return out;
  }
  void merge_sparse(std::string_view s) {
    for (std::size_t i = 0; i + 3 <= s.size(); i += 3) {
      const std::size_t idx =
          (static_cast<unsigned char>(s[i]) << 8) | static_cast<unsigned char>(s[i + 1]);
      if (idx < kM) reg_[idx] = std::max(reg_[idx], static_cast<std::uint8_t>(s[i + 2]));
    }
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
  return err::invalid_design_doc("`" + std::string(fn) + "` is not a supported reduce function.");
}

}  // namespace

Outcome<std::string> builtin_reduce(std::string_view fn, const std::vector<std::string>& keys,
                                    const std::vector<std::string>& values) {
  if (fn.starts_with("_approx_count_distinct")) {
    Hll h;
    for (const std::string& k : keys)
      h.insert(collation_key(OrderedJson::parse(k, nullptr, false)));
    return std::to_string(h.estimate());
  }
  if (fn.starts_with("_first")) return values.empty() ? std::string("null") : values.front();
  if (fn.starts_with("_last")) return values.empty() ? std::string("null") : values.back();
  return builtin(fn, values, false);
}

// ---- Partials -----------------------------------------------------------------------------------

namespace {

std::string failure(const CouchError& e) {
  OrderedJson o = OrderedJson::object();
  o["status"] = e.status;
  o["error"] = e.error;
  o["reason"] = e.reason;
  return "E" + o.dump();
}

std::string js_failure(const js::JsError& e) { return failure(CouchError{500, e.error, e.reason}); }

// The first element of the engine's one-function result array.
std::string first_result(const std::string& arr_json) {
  OrderedJson arr = OrderedJson::parse(arr_json, nullptr, false);
  return arr.is_array() && !arr.empty() ? arr[0].dump() : "null";
}

constexpr std::size_t kRowsPerCall = 1000;

}  // namespace

Reducer::Reducer(std::string fn, js::Engine* js)
    : fn_(std::move(fn)), js_(js), builtin_(!fn_.empty() && fn_.front() == '_') {}

std::string Reducer::reduce_chunk(const std::vector<LeafRow>& rows, std::size_t begin,
                                  std::size_t end) const {
  if (fn_.starts_with("_approx_count_distinct")) {
    Hll h;
    for (std::size_t i = begin; i < end; ++i) h.insert(rows[i].ck);
    return "V" + h.sparse();
  }
  if (fn_.starts_with("_first") || fn_.starts_with("_last"))
    return "V[" + rows[begin].value_json + "," + rows[end - 1].value_json + "]";
  if (builtin_) {
    std::vector<std::string> values;
    values.reserve(end - begin);
    for (std::size_t i = begin; i < end; ++i) values.push_back(rows[i].value_json);
    auto r = builtin(fn_, values, false);
    if (auto* e = std::get_if<CouchError>(&r)) return failure(*e);
    return "V" + std::get<std::string>(r);
  }
  if (!js_) return failure(err::unknown_error("no JavaScript engine"));
  std::string kvs = "[";
  for (std::size_t i = begin; i < end; ++i) {
    if (i > begin) kvs += ',';
    kvs += "[[" + rows[i].key_json + "," + OrderedJson(rows[i].id).dump() + "]," +
           rows[i].value_json + "]";
  }
  kvs += "]";
  auto r = js_->reduce({fn_}, kvs, false);
  if (auto* e = std::get_if<js::JsError>(&r)) return js_failure(*e);
  return "V" + first_result(std::get<std::string>(r));
}

std::string Reducer::reduce(const std::vector<LeafRow>& rows) const {
  if (rows.empty()) return "";
  if (rows.size() <= kRowsPerCall) return reduce_chunk(rows, 0, rows.size());
  std::vector<std::string> parts;
  for (std::size_t b = 0; b < rows.size(); b += kRowsPerCall)
    parts.push_back(reduce_chunk(rows, b, std::min(rows.size(), b + kRowsPerCall)));
  return rereduce(parts);
}

std::string Reducer::rereduce(const std::vector<std::string>& partials) const {
  std::vector<std::string_view> parts;
  for (const std::string& p : partials) {
    if (p.empty()) continue;
    if (p.front() == 'E') return p;  // the first failure in key order
    parts.emplace_back(std::string_view(p).substr(1));
  }
  if (parts.empty()) return "";
  if (parts.size() == 1) return "V" + std::string(parts.front());
  if (fn_.starts_with("_approx_count_distinct")) {
    Hll h;
    for (std::string_view p : parts) h.merge_sparse(p);
    return "V" + h.sparse();
  }
  if (fn_.starts_with("_first") || fn_.starts_with("_last")) {
    OrderedJson a = OrderedJson::parse(parts.front(), nullptr, false);
    OrderedJson b = OrderedJson::parse(parts.back(), nullptr, false);
    if (!a.is_array() || a.size() != 2 || !b.is_array() || b.size() != 2)
      return failure(err::unknown_error("corrupt _first/_last reduction"));
    return "V[" + a[0].dump() + "," + b[1].dump() + "]";
  }
  std::vector<std::string> values;
  values.reserve(parts.size());
  if (builtin_) {
    for (std::string_view p : parts) values.emplace_back(p);
    // (More partials than one call takes happen only at the top of a query; built-ins are cheap.)
    auto r = builtin(fn_, values, true);
    if (auto* e = std::get_if<CouchError>(&r)) return failure(*e);
    return "V" + std::get<std::string>(r);
  }
  if (!js_) return failure(err::unknown_error("no JavaScript engine"));
  std::vector<std::string> level;
  level.reserve(parts.size());
  for (std::string_view p : parts) level.emplace_back(p);
  // JavaScript rereduce in calls of at most kRowsPerCall values.
  while (level.size() > 1) {
    std::vector<std::string> next;
    for (std::size_t b = 0; b < level.size(); b += kRowsPerCall) {
      const std::size_t e = std::min(level.size(), b + kRowsPerCall);
      if (e - b == 1) {
        next.push_back(level[b]);
        continue;
      }
      std::string vals = "[";
      for (std::size_t i = b; i < e; ++i) vals += (i > b ? "," : "") + level[i];
      vals += "]";
      auto r = js_->reduce({fn_}, vals, true);
      if (auto* err = std::get_if<js::JsError>(&r)) return js_failure(*err);
      next.push_back(first_result(std::get<std::string>(r)));
    }
    level = std::move(next);
  }
  return "V" + level.front();
}

namespace {

// Runs `inputs` (kvs JSON texts) through the engine in one call, each answer into out[at[i]].
void js_batch(js::Engine& js, const std::string& fn, bool rereduce,
              const std::vector<std::string>& inputs, const std::vector<std::size_t>& at,
              std::vector<std::string>& out) {
  if (inputs.empty()) return;
  auto r = js.reduce_many(fn, inputs, rereduce);
  if (auto* e = std::get_if<js::JsError>(&r)) {
    for (std::size_t i : at) out[i] = js_failure(*e);
    return;
  }
  auto& each = std::get<std::vector<js::JsResult<std::string>>>(r);
  for (std::size_t k = 0; k < at.size(); ++k) {
    if (auto* e = std::get_if<js::JsError>(&each[k]))
      out[at[k]] = js_failure(*e);
    else
      out[at[k]] = "V" + std::get<std::string>(each[k]);
  }
}

}  // namespace

std::vector<std::string> Reducer::reduce_each(
    const std::vector<std::vector<LeafRow>>& inputs) const {
  std::vector<std::string> out(inputs.size());
  std::vector<std::string> batch;
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const auto& rows = inputs[i];
    if (builtin_ || !js_ || rows.empty() || rows.size() > kRowsPerCall) {
      out[i] = reduce(rows);
      continue;
    }
    std::string kvs = "[";
    for (std::size_t j = 0; j < rows.size(); ++j) {
      if (j) kvs += ',';
      kvs += "[[" + rows[j].key_json + "," + OrderedJson(rows[j].id).dump() + "]," +
             rows[j].value_json + "]";
    }
    kvs += "]";
    batch.push_back(std::move(kvs));
    at.push_back(i);
  }
  if (js_) js_batch(*js_, fn_, false, batch, at, out);
  return out;
}

std::vector<std::string> Reducer::rereduce_each(
    const std::vector<std::vector<std::string>>& inputs) const {
  std::vector<std::string> out(inputs.size());
  std::vector<std::string> batch;
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (builtin_ || !js_) {
      out[i] = rereduce(inputs[i]);
      continue;
    }
    // As rereduce(): empties skipped, the first failure wins, one partial is itself.
    std::vector<std::string_view> parts;
    std::optional<std::string> failed;
    for (const std::string& p : inputs[i]) {
      if (p.empty()) continue;
      if (p.front() == 'E') {
        failed = p;
        break;
      }
      parts.emplace_back(std::string_view(p).substr(1));
    }
    if (failed) {
      out[i] = *failed;
    } else if (parts.empty()) {
      out[i] = "";
    } else if (parts.size() == 1) {
      out[i] = "V" + std::string(parts.front());
    } else if (parts.size() > kRowsPerCall) {
      out[i] = rereduce(inputs[i]);
    } else {
      std::string vals = "[";
      for (std::size_t j = 0; j < parts.size(); ++j) {
        if (j) vals += ',';
        vals.append(parts[j]);
      }
      vals += "]";
      batch.push_back(std::move(vals));
      at.push_back(i);
    }
  }
  if (js_) js_batch(*js_, fn_, true, batch, at, out);
  return out;
}

Outcome<std::string> Reducer::finish(std::string_view partial) const {
  if (partial.empty()) return std::string("null");
  if (partial.front() == 'E') {
    OrderedJson o = OrderedJson::parse(partial.substr(1), nullptr, false);
    if (!o.is_object()) return err::unknown_error("corrupt reduction");
    return CouchError{o.value("status", 500), o.value("error", std::string("unknown_error")),
                      o.value("reason", std::string())};
  }
  const std::string_view payload = partial.substr(1);
  if (fn_.starts_with("_approx_count_distinct")) {
    Hll h;
    h.merge_sparse(payload);
    return std::to_string(h.estimate());
  }
  if (fn_.starts_with("_first") || fn_.starts_with("_last")) {
    OrderedJson a = OrderedJson::parse(payload, nullptr, false);
    if (!a.is_array() || a.size() != 2) return err::unknown_error("corrupt reduction");
    return (fn_.starts_with("_first") ? a[0] : a[1]).dump();
  }
  return std::string(payload);
}

}  // namespace chaise::core

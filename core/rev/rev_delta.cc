#include "core/rev/rev_delta.h"

#include <charconv>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include "core/util/json_text.h"

namespace chaise::core {

namespace {

using Json = nlohmann::ordered_json;

// Equal values that also print the same (1 and 1.0 are == but not the same text).
bool same_value(const Json& a, const Json& b) {
  if (a.type() != b.type()) return false;
  if (a.is_number_float()) return dump_json(a) == dump_json(b);
  return a == b;
}

// ordered_json finds members by a linear search, so diffing (and later applying) an object of n
// members costs about n*n: the whole diff gets this many such steps, then the body is kept whole.
constexpr std::size_t kDiffWorkMax = 1'000'000;

struct Work {
  std::size_t done = 0;
  bool exceeded = false;
  bool spend(std::size_t n) {
    done += n;
    if (done > kDiffWorkMax) exceeded = true;
    return !exceeded;
  }
};

// The delta turning `base` into `target` (both objects, or arrays of one length), or nullopt when
// `target` is better replaced whole.
std::optional<Json> diff(const Json& base, const Json& target, Work& work);

void add_member_change(Json& delta, const std::string& key, const Json& from, const Json& to,
                       Work& work) {
  const bool patchable = (from.is_object() && to.is_object()) ||
                         (from.is_array() && to.is_array() && from.size() == to.size());
  if (patchable) {
    // Containers are diffed, never compared whole first (that would cost depth x size).
    if (auto sub = diff(from, to, work)) {
      if (!sub->empty()) delta["p"][key] = std::move(*sub);
      return;
    }
  } else if (same_value(from, to)) {
    return;
  }
  delta["u"][key] = to;
}

std::optional<Json> diff(const Json& base, const Json& target, Work& work) {
  Json delta = Json::object();
  if (base.is_array()) {
    if (!work.spend(target.size() * 4)) return std::nullopt;
    for (std::size_t i = 0; i < target.size() && !work.exceeded; ++i)
      add_member_change(delta, std::to_string(i), base[i], target[i], work);
    return delta;
  }
  if (!work.spend((base.size() + 1) * (target.size() + 1))) return std::nullopt;
  std::unordered_map<std::string_view, const Json*> in_base;
  std::unordered_set<std::string_view> in_target;
  for (auto b = base.begin(); b != base.end(); ++b) in_base.emplace(b.key(), &b.value());
  for (auto t = target.begin(); t != target.end(); ++t) in_target.insert(t.key());
  // Applying keeps the base's member order and appends new members; "o" restores the target's
  // order when that is not it.
  std::vector<std::string_view> order;
  for (auto b = base.begin(); b != base.end(); ++b) {
    if (in_target.contains(b.key())) {
      order.push_back(b.key());
    } else {
      delta["r"][b.key()] = true;
    }
  }
  for (auto t = target.begin(); t != target.end() && !work.exceeded; ++t) {
    if (auto b = in_base.find(t.key()); b != in_base.end()) {
      add_member_change(delta, t.key(), *b->second, t.value(), work);
    } else {
      delta["u"][t.key()] = t.value();
      order.push_back(t.key());
    }
  }
  std::size_t i = 0;
  bool same_order = true;
  for (auto t = target.begin(); t != target.end(); ++t, ++i)
    same_order = same_order && order[i] == t.key();
  if (!same_order) {
    Json keys = Json::array();
    for (auto t = target.begin(); t != target.end(); ++t) keys.push_back(t.key());
    delta["o"] = std::move(keys);
  }
  return delta;
}

std::optional<std::size_t> array_index(const std::string& key, std::size_t size) {
  std::size_t i = 0;
  const char* end = key.data() + key.size();
  auto [p, ec] = std::from_chars(key.data(), end, i);
  if (ec != std::errc() || p != end || key.empty() || i >= size) return std::nullopt;
  return i;
}

}  // namespace

bool apply_body_delta(Json& doc, const Json& delta) {
  if (!delta.is_object() || !(doc.is_object() || doc.is_array())) return false;
  for (auto op = delta.begin(); op != delta.end(); ++op) {
    if (op.key() == "o") {
      if (!op.value().is_array() || !doc.is_object()) return false;
      continue;
    }
    if (!op.value().is_object()) return false;
    if (op.key() != "r" && op.key() != "u" && op.key() != "p") return false;
  }
  if (auto r = delta.find("r"); r != delta.end()) {
    if (!doc.is_object()) return false;
    for (auto m = r->begin(); m != r->end(); ++m)
      if (doc.erase(m.key()) != 1) return false;
  }
  if (auto u = delta.find("u"); u != delta.end()) {
    for (auto m = u->begin(); m != u->end(); ++m) {
      if (doc.is_object()) {
        doc[m.key()] = m.value();
      } else {
        auto i = array_index(m.key(), doc.size());
        if (!i) return false;
        doc[*i] = m.value();
      }
    }
  }
  if (auto p = delta.find("p"); p != delta.end()) {
    for (auto m = p->begin(); m != p->end(); ++m) {
      Json* member = nullptr;
      if (doc.is_object()) {
        auto it = doc.find(m.key());
        if (it == doc.end()) return false;
        member = &*it;
      } else {
        auto i = array_index(m.key(), doc.size());
        if (!i) return false;
        member = &doc[*i];
      }
      if (!apply_body_delta(*member, m.value())) return false;
    }
  }
  if (auto o = delta.find("o"); o != delta.end()) {
    auto& members = doc.get_ref<Json::object_t&>();
    if (o->size() != members.size()) return false;
    Json::object_t ordered;
    ordered.reserve(members.size());
    std::unordered_set<std::string_view> seen;
    for (const Json& key : *o) {
      if (!key.is_string()) return false;
      const std::string& k = key.get_ref<const std::string&>();
      auto it = members.find(k);
      if (it == members.end() || !seen.insert(k).second) return false;
      ordered.emplace_back(it->first, std::move(it->second));
    }
    members = std::move(ordered);
  }
  return true;
}

std::optional<std::string> make_body_delta(std::string_view base, std::string_view target) {
  // Not worth the parse for bodies too small to gain from it.
  if (target.size() < 64) return std::nullopt;
  auto b = parse_json_text(base, JsonNumbers::exact);
  auto t = parse_json_text(target, JsonNumbers::exact);
  auto* bj = std::get_if<Json>(&b);
  auto* tj = std::get_if<Json>(&t);
  if (!bj || !tj || !bj->is_object() || !tj->is_object()) return std::nullopt;
  Work work;
  auto delta = diff(*bj, *tj, work);
  if (!delta || work.exceeded) return std::nullopt;
  std::string text = dump_json(*delta);
  if (text.size() * 2 >= target.size()) return std::nullopt;
  // The proof: the delta gives back the target's exact bytes.
  if (!apply_body_delta(*bj, *delta) || dump_json(*bj) != target) return std::nullopt;
  return text;
}

}  // namespace chaise::core

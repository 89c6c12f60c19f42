#include "core/index/mango_index.h"

#include <algorithm>
#include <map>

namespace chaise::core {

namespace {

// field name -> the operator objects constraining it at the selector's top level
// ({"a": 1} is {"$eq": 1}; {"a": {"b": 1}} constrains "a.b"; $and is flattened).
void top_conditions(const OrderedJson& sel, const std::string& prefix,
                    std::multimap<std::string, OrderedJson>& out, int depth = 0) {
  if (!sel.is_object() || depth > kSelectorDepthMax) return;
  for (auto it = sel.begin(); it != sel.end(); ++it) {
    const std::string& k = it.key();
    const OrderedJson& v = it.value();
    if (k == "$and" && v.is_array()) {
      for (const auto& sub : v) top_conditions(sub, prefix, out, depth + 1);
      continue;
    }
    if (k.starts_with("$")) continue;
    const std::string field = prefix + k;
    bool operators = v.is_object() && !v.empty();
    bool plain_object = v.is_object() && !v.empty();
    if (v.is_object()) {
      for (auto o = v.begin(); o != v.end(); ++o) {
        if (o.key().starts_with("$"))
          plain_object = false;
        else
          operators = false;
      }
    }
    if (operators) {
      out.emplace(field, v);
    } else if (plain_object) {
      top_conditions(v, field + ".", out, depth + 1);
    } else {
      out.emplace(field, OrderedJson{{"$eq", v}});
    }
  }
}

void normalize_into(const OrderedJson& sel, const std::string& prefix, OrderedJson& out,
                    int depth) {
  if (!sel.is_object() || depth > kSelectorDepthMax) return;
  for (auto it = sel.begin(); it != sel.end(); ++it) {
    const std::string& k = it.key();
    const OrderedJson& v = it.value();
    if (k.starts_with("$")) {
      if ((k == "$and" || k == "$or" || k == "$nor") && v.is_array()) {
        OrderedJson arr = OrderedJson::array();
        for (const auto& sub : v) arr.push_back(normalize_selector(sub));
        out[k] = arr;
      } else {
        out[k] = v;
      }
      continue;
    }
    bool operators = v.is_object() && !v.empty(), plain = v.is_object() && !v.empty();
    if (v.is_object())
      for (auto o = v.begin(); o != v.end(); ++o)
        (o.key().starts_with("$") ? plain : operators) = false;
    if (operators)
      out[prefix + k] = v;
    else if (plain)
      normalize_into(v, prefix + k + ".", out, depth + 1);
    else
      out[prefix + k] = OrderedJson{{"$eq", v}};
  }
}

}  // namespace

OrderedJson normalize_selector(const OrderedJson& selector) {
  if (!selector.is_object()) return selector;
  OrderedJson out = OrderedJson::object();
  normalize_into(selector, "", out, 0);
  return out;
}

std::optional<std::vector<std::string>> parse_field_path(std::string_view name) {
  std::vector<std::string> path;
  std::string cur;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '\\' && i + 1 < name.size() && name[i + 1] == '.') {
      cur += '.';
      ++i;
    } else if (name[i] == '.') {
      if (cur.empty()) return std::nullopt;
      path.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += name[i];
    }
  }
  if (cur.empty()) return std::nullopt;
  path.push_back(std::move(cur));
  return path;
}

const OrderedJson* field_value(const OrderedJson& doc, const std::vector<std::string>& path) {
  const OrderedJson* cur = &doc;
  for (const std::string& p : path) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(p);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

Outcome<std::vector<MangoField>> parse_mango_fields(const OrderedJson& list) {
  std::vector<MangoField> out;
  if (!list.is_array())
    return err::invalid_sort_json("Sort must be an array of sort specs, not: " +
                                  erlang_term_text(list, true));
  for (const OrderedJson& f : list) {
    MangoField m;
    if (f.is_string() && !f.get_ref<const std::string&>().empty()) {
      m.name = f.get<std::string>();
    } else if (f.is_object() && f.size() == 1 && f.begin().value().is_string() &&
               (f.begin().value() == "asc" || f.begin().value() == "desc")) {
      m.name = f.begin().key();
      m.descending = f.begin().value() == "desc";
    } else {
      return err::invalid_sort_field("Invalid sort field: " + erlang_term_text(f, true));
    }
    auto path = parse_field_path(m.name);
    if (!path) return err::invalid_field_name("Invalid field name: " + m.name);
    m.path = std::move(*path);
    out.push_back(std::move(m));
  }
  return out;
}

std::optional<bool> ddoc_partitioned_option(const OrderedJson& ddoc) {
  if (!ddoc.is_object()) return std::nullopt;
  auto o = ddoc.find("options");
  if (o == ddoc.end() || !o->is_object()) return std::nullopt;
  auto p = o->find("partitioned");
  if (p == o->end() || !p->is_boolean()) return std::nullopt;
  return p->get<bool>();
}

std::vector<MangoIndex> mango_indexes(const std::string& ddoc_id, const OrderedJson& ddoc,
                                      bool db_partitioned) {
  std::vector<MangoIndex> out;
  if (!ddoc.is_object() || ddoc.value("language", "") != "query") return out;
  const bool partitioned = ddoc_partitioned_option(ddoc).value_or(db_partitioned);
  auto views = ddoc.find("views");
  if (views == ddoc.end() || !views->is_object()) return out;
  for (auto it = views->begin(); it != views->end(); ++it) {
    const OrderedJson& v = it.value();
    if (!v.is_object() || !v.contains("map") || !v["map"].is_object()) continue;
    const OrderedJson& map = v["map"];
    if (!map.contains("fields") || !map["fields"].is_object()) continue;
    MangoIndex idx;
    idx.ddoc = ddoc_id;
    idx.name = it.key();
    idx.partitioned = partitioned;
    OrderedJson def_fields = OrderedJson::array();
    bool ok = true;
    for (auto f = map["fields"].begin(); f != map["fields"].end(); ++f) {
      auto path = parse_field_path(f.key());
      if (!path) {
        ok = false;
        break;
      }
      idx.fields.push_back(MangoField{f.key(), std::move(*path), f.value() == "desc"});
      def_fields.push_back(
          OrderedJson{{f.key(), f.value().is_string() ? f.value() : OrderedJson("asc")}});
    }
    if (!ok || idx.fields.empty()) continue;
    idx.def = OrderedJson{{"fields", def_fields}};
    if (map.contains("partial_filter_selector") && map["partial_filter_selector"].is_object() &&
        !map["partial_filter_selector"].empty()) {
      idx.partial_filter = map["partial_filter_selector"];
      idx.def["partial_filter_selector"] = *idx.partial_filter;
    }
    out.push_back(std::move(idx));
  }
  std::sort(out.begin(), out.end(),
            [](const MangoIndex& a, const MangoIndex& b) { return a.name < b.name; });
  return out;
}

std::optional<OrderedJson> mango_index_key(const OrderedJson& doc, const OrderedJson& map_def) {
  if (!map_def.is_object() || !map_def.contains("fields") || !map_def["fields"].is_object())
    return std::nullopt;
  if (map_def.contains("partial_filter_selector") &&
      map_def["partial_filter_selector"].is_object() &&
      !map_def["partial_filter_selector"].empty()) {
    auto sel = Selector::parse(map_def["partial_filter_selector"]);
    if (std::holds_alternative<CouchError>(sel) || !std::get<Selector>(sel).matches(doc))
      return std::nullopt;
  }
  OrderedJson key = OrderedJson::array();
  for (auto f = map_def["fields"].begin(); f != map_def["fields"].end(); ++f) {
    auto path = parse_field_path(f.key());
    if (!path) return std::nullopt;
    const OrderedJson* v = field_value(doc, *path);
    if (!v) return std::nullopt;
    key.push_back(*v);
  }
  return key;
}

bool mango_index_usable(const MangoIndex& index, const OrderedJson& selector,
                        const std::vector<MangoField>& sort) {
  std::multimap<std::string, OrderedJson> conds;
  top_conditions(selector, "", conds);
  for (const MangoField& f : index.fields) {
    auto [b, e] = conds.equal_range(f.name);
    // A sort field counts as constrained (CouchDB adds it to the selector as "exists").
    bool constrained = std::any_of(sort.begin(), sort.end(),
                                   [&](const MangoField& s) { return s.name == f.name; });
    for (auto it = b; it != e; ++it) {
      const OrderedJson& c = it->second;
      if (c.size() == 1 && c.contains("$exists") && c["$exists"] == false) continue;
      constrained = true;
    }
    if (!constrained) return false;
  }
  if (sort.size() > index.fields.size()) return false;
  for (std::size_t i = 0; i < sort.size(); ++i) {
    if (sort[i].name != index.fields[i].name) return false;
    if (sort[i].descending != sort[0].descending) return false;
  }
  return true;
}

MangoRange mango_range(const MangoIndex& index, const OrderedJson& selector) {
  MangoRange r;
  std::multimap<std::string, OrderedJson> conds;
  top_conditions(selector, "", conds);
  auto [b, e] = conds.equal_range(index.fields.at(0).name);
  for (auto it = b; it != e; ++it) {
    const OrderedJson& c = it->second;
    for (auto o = c.begin(); o != c.end(); ++o) {
      if (o.key() == "$eq") {
        r.start = OrderedJson::array({o.value()});
        r.end = OrderedJson::array({o.value(), OrderedJson::object()});
        return r;
      }
      if (o.key() == "$gt" || o.key() == "$gte") r.start = OrderedJson::array({o.value()});
      if (o.key() == "$lt" || o.key() == "$lte")
        r.end = OrderedJson::array({o.value(), OrderedJson::object()});
    }
  }
  return r;
}

}  // namespace chaise::core

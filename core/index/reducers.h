// core/index/reducers.h — reduce functions as the view index and its queries use them: CouchDB's
// built-ins in C++ (_sum, _count, _stats, _approx_count_distinct, _first, _last, _top_N,
// _bottom_N) and JavaScript ones through the engine, over rows and over earlier results.
//
// A Reducer works on "partials": the reduction of a run of rows in key order, as the reduce tree
// (core/index/reduce_tree.h) stores it in its nodes and combines it at query time. A partial is one of
//   ""            no rows;
//   "V" payload   the reduction (for most functions the reduce result's JSON; for
//                 _approx_count_distinct the HyperLogLog registers; for _first/_last the JSON
//                 [first value, last value]);
//   "E" json      a failure ({"status","error","reason"}): a built-in refusing a value, a
//                 JavaScript error. It travels up the tree, so exactly the queries whose range
//                 includes the failing rows answer it, as CouchDB's do.
// Combining is in key order, so order-sensitive functions (_first, _last, a JavaScript reduce
// that looks at order) see what CouchDB's b-tree would give them.
//
// Contract: a Reducer is immutable after construction and thread-compatible; JavaScript calls go
// through the engine's bounded pool (each with its deadline). Never throws except bad_alloc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/js/js.h"
#include "core/util/error.h"

namespace chaise::core {

struct LeafRow {
  std::string key_json;    // the emitted key
  std::string id;          // the document id
  std::string value_json;  // the emitted value
  std::string ck;          // the key's collation bytes (core/query/collation.h)
};

class Reducer {
 public:
  // `fn`: a built-in name ("_sum", ...) or JavaScript source; `js` may be null for built-ins.
  Reducer(std::string fn, js::Engine* js);

  std::string reduce(const std::vector<LeafRow>& rows) const;
  std::string rereduce(const std::vector<std::string>& partials) const;
  // reduce()/rereduce() of each input; a JavaScript function runs over all of them in one
  // engine call (the reduce tree recomputes many nodes per level).
  std::vector<std::string> reduce_each(const std::vector<std::vector<LeafRow>>& inputs) const;
  std::vector<std::string> rereduce_each(const std::vector<std::vector<std::string>>& inputs) const;
  // The row value a non-empty partial stands for, or its failure.
  Outcome<std::string> finish(std::string_view partial) const;
  static bool empty(std::string_view partial) { return partial.empty(); }

 private:
  std::string reduce_chunk(const std::vector<LeafRow>& rows, std::size_t begin,
                           std::size_t end) const;
  std::string fn_;
  js::Engine* js_;
  bool builtin_ = false;
};

// FNV-1a 64 with a 64-bit finalizer (MurmurHash3's), over bytes: the hash of the
// HyperLogLog registers of _approx_count_distinct and of the reduce tree's row levels.
std::uint64_t key_hash(std::string_view bytes);

// Built-in reduce functions over values (the rows' value JSON texts; `keys` the key JSON texts,
// for _approx_count_distinct). Errors as CouchDB's builtin_reduce_error.
Outcome<std::string> builtin_reduce(std::string_view fn, const std::vector<std::string>& keys,
                                    const std::vector<std::string>& values);

}  // namespace chaise::core

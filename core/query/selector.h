// core/query/selector.h — Mango selectors: the `selector` of _changes?filter=_selector (and of _find),
// parsed, normalized and matched against documents with CouchDB's semantics.
//
// Reference: CouchDB 3.5 src/mango/src/mango_selector.erl (normalize/1, match/2),
// mango_util:parse_field/1, mango_doc:get_field/2, mango_json:cmp/2 and cmp_raw/2,
// mango_error.erl (reasons) and couch_changes.erl (check_selector/1). Where Chaise knowingly
// differs, "Differences" below says so.
//
// Contract
// - Selector::parse() never throws except std::bad_alloc. It returns a Selector, or a CouchError
//   with status 400 and mango_error's error and reason, as _find answers them (_changes answers
//   every one of them 400 "bad_request" with the same reason, except its own text for a
//   non-object):
//     not an object             invalid_selector_json "Selector must be a JSON object, not: <~w>"
//     unknown "$op"             invalid_operator "Invalid operator: $op"   (also $regex /
//                                  $beginsWith with a non-string argument, as in CouchDB)
//     $where, $near, ...        not_supported "Unsupported operator: $where"
//     wrong argument            bad_arg "Bad argument for operator $in: <arg>", <arg> printed as Erlang's
//                               ~w prints the decoded JSON: "foo" -> <<102,111,111>>,
//                               [1,2.5] -> [1,2.5], {"a":null} -> {[{<<97>>,null}]}, 1000.0 ->
//                               1.0e3
//     empty path segment        invalid_field_name "Invalid field name: a..b"
//     operator without a field  invalid_selector "One or more conditions is missing a field name."
//     misplaced $default        bad_field "Invalid field normalization on selector: <~w>"
//     too deep (Chaise)         bad_request "Selector is nested too deeply: more than 64 levels
//                               of arrays and objects"
//   A $regex pattern that is valid PCRE but uses a feature Chaise's engine lacks gets CouchDB's
//   "Bad argument for operator $regex: <<...>>" followed by " (not supported by Chaise: <what>)".
//   The first error in CouchDB's order wins: all operators are checked before any field name.
// - matches() never throws, and recurses only along the selector (at most kSelectorDepthMax
//   levels): a document however deep or large is walked by iteration, and compared only as deep
//   as the selector's argument goes. A $regex search costs at most kRegexCostMax (subject bytes
//   x RE2 instructions).
// - A Selector is immutable. Copies share one normalized tree; any number of threads may call
//   matches() on one Selector at once.
//
// Semantics (as CouchDB; selector_test.cc pins each, many with mango_selector.erl's own vectors)
// - {} matches every document. Bare values are $eq; an object with several members is an
//   implicit $and; {"a": {"b": 1}} is the path a.b; "a.b" splits on dots and "a\\.b" (JSON
//   text) is the one field "a.b"; a numeric segment indexes an array ("a.0").
// - A condition on a missing field does not match, $ne and $nin included; only {"$exists":
//   false} does. A path through a scalar, or a bad array index, matches nothing, not even
//   {"$exists": false}. $not is pushed down onto the conditions ({"$not": {"a": 1}} becomes
//   {"a": {"$ne": 1}}), so it does not match a document without "a" either.
// - $eq $ne $lt $lte $gt $gte compare with the view collation across types:
//   null < false < true < numbers < strings < arrays < objects; arrays element-wise, objects
//   member by member in their order; 1 == 1.0. An array field is compared as one value (no
//   element-wise $eq). The field "_id" is compared in Erlang term order instead (numbers < false
//   < null < true < objects < arrays < strings): mango_json:cmp_raw/2.
// - $in/$nin on an array field test its elements; $all needs every argument to be an element
//   (Erlang =:=, so 1 is not 1.0) or the field to equal a single array argument; $elemMatch /
//   $allMatch / $keyMapMatch apply a sub-selector to some element / every element of a
//   non-empty array / some key of an object; $size; $mod on integer fields (Erlang rem: the
//   remainder has the dividend's sign); $type; $exists; $regex (unanchored search) and
//   $beginsWith on string fields. Empty $and/$or/$nor/$nin match; empty $in/$all do not.
// - Negations are not pushed into $elemMatch/$allMatch/$keyMapMatch: {"$not": {"b": 1}} there
//   matches an element without "b". A $nor written inside them makes them not match (CouchDB's
//   matcher raises on it and they catch the error as false).
// - $text matches every document (CouchDB trusts the text index, which _changes has not).
//
// Differences from CouchDB
// - Strings compare by UTF-8 bytes (= code points), not with ICU's root collation: "B" < "a"
//   here, "a" < "B" in CouchDB; canonically equivalent strings (precomposed vs combining
//   accents) are equal in CouchDB, different here. Equality of ordinary strings is unaffected.
// - $regex is translated to RE2 (core/query/mango_regex.h): linear time, no recursion, byte-oriented
//   like Erlang's re without the unicode option. It refuses, as "not supported by Chaise",
//   the PCRE features RE2 lacks (backreferences, lookaround, atomic groups, possessive
//   quantifiers, conditionals, recursion, \p{..}, ...; mango_regex.h lists them). A search
//   costing more than kRegexCostMax is no match (Erlang's re answers nomatch past PCRE's
//   match_limit too, at other points).
// - {"$mod": [0, r]} is refused as a bad argument; CouchDB accepts it and then fails matching.
// - Field names with an empty segment ("a..b", "a.", "") are refused at parse, as on CouchDB's
//   main branch; 3.5 raised that error only while matching, and gave {"": ...} the
//   missing-field-name reason.
// - Selectors nested deeper than kSelectorDepthMax are refused (CouchDB has no such limit).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>
#include <variant>

#include "core/query/mango_regex.h"
#include "core/util/error.h"

namespace chaise::core {

// Nesting of arrays and objects in a selector, arguments included ({"a": 1} is 1 level).
// Deeper selectors are rejected at parse; this bounds every recursion of parse and match.
inline constexpr int kSelectorDepthMax = 64;

namespace selector_detail {
struct Node;
}

class Selector {
 public:
  // Validates and normalizes `selector` (mango_selector:normalize/1). See the table above for
  // the errors; on success the Selector holds the normalized tree.
  static std::variant<Selector, CouchError> parse(const nlohmann::ordered_json& selector);

  // True if `doc` matches: the document as _changes presents it to the filter, a JSON object
  // with _id, _rev, _deleted (when deleted) and the body members. A non-object has no fields,
  // so every field condition fails on it. Never throws; thread-safe.
  bool matches(const nlohmann::ordered_json& doc) const;

  // The selector as mango_selector:normalize/1 returns it ({} for the empty one): implicit $and
  // and $eq made explicit, nested field names joined with '.', $not and $nor pushed down to the
  // conditions. What a replication id hashes.
  nlohmann::ordered_json normal_form() const;

 private:
  explicit Selector(std::shared_ptr<const selector_detail::Node> root) : root_(std::move(root)) {}

  std::shared_ptr<const selector_detail::Node> root_;  // null for {}: matches everything
};

// A JSON value as Erlang's ~w prints its jiffy term ("foo" -> <<102,111,111>>, {"a":1} ->
// {[{<<97>>,1}]}), as CouchDB's error reasons show values; `pretty`: as ~p prints it on one line
// ("asc" -> <<"asc">>; a binary that is not printable Latin-1 as with ~w).
std::string erlang_term_text(const nlohmann::ordered_json& j, bool pretty = false);

}  // namespace chaise::core

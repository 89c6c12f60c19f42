#include "core/docs/doc_json.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/util/json_text.h"

namespace chaise::core {
namespace {

using Json = nlohmann::ordered_json;

ParsedDoc parse_ok(std::string_view text) {
  auto r = parse_doc(Json::parse(text));
  if (auto* err = std::get_if<CouchError>(&r)) {
    ADD_FAILURE() << text << " -> " << err->error << ": " << err->reason;
    return {};
  }
  return std::get<ParsedDoc>(std::move(r));
}

CouchError parse_err_json(const Json& j) {
  auto r = parse_doc(j);
  if (auto* err = std::get_if<CouchError>(&r)) return *err;
  ADD_FAILURE() << j.dump() << " parsed";
  return {};
}

CouchError parse_err(std::string_view text) { return parse_err_json(Json::parse(text)); }

const std::string kHexA(32, 'a');
const std::string kHexB(32, 'b');

// ---- parse_doc ---------------------------------------------------------------------------------

TEST(ParseDoc, ExtractsSpecialMembersAndKeepsBodyOrder) {
  const auto d = parse_ok(R"({"z":1,"_id":"doc","a":{"y":2,"b":[1,"x"]},"_rev":"2-)" + kHexA +
                          R"(","m":null,"_deleted":true,"_attachments":{"f.txt":{"stub":true}}})");
  ASSERT_TRUE(d.id);
  EXPECT_EQ(*d.id, "doc");
  ASSERT_TRUE(d.rev);
  EXPECT_EQ(d.rev->str(), "2-" + kHexA);
  EXPECT_TRUE(d.deleted);
  EXPECT_FALSE(d.revisions);
  ASSERT_TRUE(d.attachments);
  EXPECT_EQ(d.attachments->dump(), R"({"f.txt":{"stub":true}})");
  EXPECT_EQ(d.body, R"({"z":1,"a":{"y":2,"b":[1,"x"]},"m":null})");
}

TEST(ParseDoc, EmptyAndMetaOnlyDocumentsHaveEmptyBody) {
  EXPECT_EQ(parse_ok("{}").body, "{}");
  const auto d = parse_ok(R"({"_id":"x","_deleted":false})");
  EXPECT_EQ(d.body, "{}");
  EXPECT_FALSE(d.deleted);
  EXPECT_FALSE(d.rev);
}

TEST(ParseDoc, NestedUnderscoreKeysAreData) {
  const auto d = parse_ok(R"({"a":{"_id":1,"_foo":{"_bar":[]}},"b":[{"_x":1}]})");
  EXPECT_EQ(d.body, R"({"a":{"_id":1,"_foo":{"_bar":[]}},"b":[{"_x":1}]})");
}

TEST(ParseDoc, BodyIsCompactUtf8) {
  const auto d = parse_ok("{ \"t\" : \"caf\\u00e9 \\n \\\" \\u0001\" , \"n\" : [ 1 , 2.5 , -3 ] }");
  EXPECT_EQ(d.body, "{\"t\":\"caf\xc3\xa9 \\n \\\" \\u0001\",\"n\":[1,2.5,-3]}");
}

// The body is written member by member through one writer: it must be what serializing the kept
// members as one object writes, whatever the names and values (escapes, non-ASCII, nesting,
// numbers kept as their digits).
TEST(ParseDoc, BodyIsTheKeptMembersSerializedAsOneObject) {
  const std::string text =
      R"({"_id":"x","plain":1,"q\"uote":{"back\\slash":[true,null,"v"]},"caf\u00e9":"\u0007",)"
      R"("":{},"big":123456789012345678901234567890,"tiny":1e-400,"_access":["u"],"f":2.50})";
  auto parsed = parse_json_text(text, JsonNumbers::exact);
  ASSERT_TRUE(std::holds_alternative<Json>(parsed));
  auto r = parse_doc(std::get<Json>(parsed));
  ASSERT_TRUE(std::holds_alternative<ParsedDoc>(r));
  Json kept = std::get<Json>(parsed);
  kept.erase("_id");
  EXPECT_EQ(std::get<ParsedDoc>(r).body, dump_json(kept));
  EXPECT_EQ(std::get<ParsedDoc>(r).body,
            R"({"plain":1,"q\"uote":{"back\\slash":[true,null,"v"]},"café":"\u0007","":{},)"
            R"("big":123456789012345678901234567890,"tiny":1e-400,"_access":["u"],"f":2.5})");
}

TEST(ParseDoc, DropsReadOnlyMetaMembers) {
  const auto d = parse_ok(
      R"({"_revs_info":[1],"a":1,"_conflicts":["1-x"],"_deleted_conflicts":[],"_local_seq":5})");
  EXPECT_EQ(d.body, R"({"a":1})");
}

TEST(ParseDoc, KeepsAccessAndReplicatorMembersInBody) {
  const auto d = parse_ok(
      R"({"_access":["u"],"a":1,"_replication_state":"completed","_replication_state_time":"t",)"
      R"("_replication_state_reason":"r","_replication_id":"id","_replication_stats":{"n":1}})");
  EXPECT_EQ(d.body,
            R"({"_access":["u"],"a":1,"_replication_state":"completed","_replication_state_time":)"
            R"("t","_replication_state_reason":"r","_replication_id":"id","_replication_stats":)"
            R"({"n":1}})");
}

TEST(ParseDoc, RejectsUnknownSpecialMembers) {
  EXPECT_EQ(parse_err(R"({"a":1,"_foo":1})"),
            (CouchError{400, "doc_validation", "Bad special document member: _foo"}));
  // Only CouchDB's five _replication_* members are allowed.
  EXPECT_EQ(parse_err(R"({"_replication_other":1})"),
            (CouchError{400, "doc_validation", "Bad special document member: _replication_other"}));
  EXPECT_EQ(parse_err(R"({"_":1})"),
            (CouchError{400, "doc_validation", "Bad special document member: _"}));
}

TEST(ParseDoc, WrongTypedSpecialMembersAreBadSpecialMembers) {
  // couch_doc:transfer_fields only matches _deleted as a boolean, _attachments and _revisions as
  // objects; anything else falls through to the unknown-member clause.
  EXPECT_EQ(parse_err(R"({"_deleted":"true"})"),
            (CouchError{400, "doc_validation", "Bad special document member: _deleted"}));
  EXPECT_EQ(parse_err(R"({"_attachments":[]})"),
            (CouchError{400, "doc_validation", "Bad special document member: _attachments"}));
  EXPECT_EQ(parse_err(R"({"_revisions":null})"),
            (CouchError{400, "doc_validation", "Bad special document member: _revisions"}));
}

TEST(ParseDoc, RejectsBadRev) {
  const CouchError bad{400, "bad_request", "Invalid rev format"};
  EXPECT_EQ(parse_err(R"({"_rev":"nope"})"), bad);
  EXPECT_EQ(parse_err(R"({"_rev":1})"), bad);
  EXPECT_EQ(parse_err(R"({"_rev":null})"), bad);
}

TEST(ParseDoc, RejectsNonObjects) {
  const CouchError bad{400, "bad_request", "Document must be a JSON object"};
  EXPECT_EQ(parse_err("[]"), bad);
  EXPECT_EQ(parse_err("\"doc\""), bad);
  EXPECT_EQ(parse_err("null"), bad);
  EXPECT_EQ(parse_err("1"), bad);
}

TEST(ParseDoc, ValidatesId) {
  EXPECT_EQ(parse_err(R"({"_id":1})"),
            (CouchError{400, "illegal_docid", "Document id must be a string"}));
  EXPECT_EQ(parse_err(R"({"_id":""})"),
            (CouchError{400, "illegal_docid", "Document id must not be empty"}));
  EXPECT_EQ(
      parse_err(R"({"_id":"_foo"})"),
      (CouchError{400, "illegal_docid", "Only reserved document ids may start with underscore."}));
  EXPECT_EQ(*parse_ok(R"({"_id":"_design/x"})").id, "_design/x");
}

TEST(ParseDoc, FirstErrorInMemberOrderWins) {
  EXPECT_EQ(parse_err(R"({"_foo":1,"_rev":"bad"})").error, "doc_validation");
  EXPECT_EQ(parse_err(R"({"_rev":"bad","_foo":1})").error, "bad_request");
}

TEST(ParseDoc, ParsesRevisionsAndTakesRevFromThem) {
  const auto d = parse_ok(R"({"_revisions":{"start":3,"ids":[")" + kHexB + R"(",")" + kHexA +
                          R"("]},"_deleted":true,"a":1})");
  ASSERT_TRUE(d.revisions);
  EXPECT_EQ(d.revisions->leaf.str(), "3-" + kHexB);
  EXPECT_EQ(d.revisions->ancestors.size(), 1u);
  EXPECT_EQ(d.revisions->rev_at(1).str(), "2-" + kHexA);
  EXPECT_TRUE(d.revisions->deleted);  // the leaf carries the document's _deleted
  ASSERT_TRUE(d.rev);
  EXPECT_EQ(*d.rev, d.revisions->leaf);
  EXPECT_EQ(d.body, R"({"a":1})");
}

TEST(ParseDoc, RevisionsWinOverRevInEitherOrder) {
  // CouchDB: _revisions overrides an earlier _rev, and a later _rev is not even parsed.
  const std::string revisions = R"("_revisions":{"start":2,"ids":["b","a"]})";
  auto d = parse_ok(R"({"_rev":"5-x",)" + revisions + "}");
  ASSERT_TRUE(d.rev);
  EXPECT_EQ(d.rev->str(), "2-b");
  d = parse_ok("{" + revisions + R"(,"_rev":"garbage"})");
  ASSERT_TRUE(d.rev);
  EXPECT_EQ(d.rev->str(), "2-b");
}

TEST(ParseDoc, MalformedRevisionsAreDocValidationErrors) {
  EXPECT_EQ(parse_err(R"({"_revisions":{"start":"1","ids":["a"]}})"),
            (CouchError{400, "doc_validation", "_revisions.start isn't an integer."}));
  EXPECT_EQ(parse_err(R"({"_revisions":{"start":1,"ids":{}}})"),
            (CouchError{400, "doc_validation", "_revisions.ids isn't a array."}));
  EXPECT_EQ(parse_err(R"({"_revisions":{"start":1,"ids":[1]}})"),
            (CouchError{400, "doc_validation", "RevId isn't a string"}));
  EXPECT_EQ(parse_err(R"({"_revisions":{"start":1,"ids":["zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"]}})"),
            (CouchError{400, "doc_validation", "RevId isn't a valid hexadecimal"}));
}

TEST(ParseDoc, InvalidUtf8BuiltInCodeIsABadRequest) {
  Json j = Json::object();
  j["a"] = std::string("\xff\xfe");
  EXPECT_EQ(parse_err_json(j), (CouchError{400, "bad_request", "invalid UTF-8 JSON"}));
}

// ---- validate_docid ----------------------------------------------------------------------------

TEST(ValidateDocid, AcceptsOrdinaryAndReservedIds) {
  for (std::string_view id : {"a", "doc 1", "caf\xc3\xa9", "\xf0\x9f\x98\x80", "a_b", "_design/x",
                              "_local/x", "_design/_x/y", "a/b", "\"quoted\""}) {
    EXPECT_FALSE(validate_docid(id)) << id;
  }
}

TEST(ValidateDocid, RejectsWithCouchDBErrors) {
  auto reason = [](std::string_view id) {
    auto e = validate_docid(id);
    EXPECT_TRUE(e) << id;
    if (!e) return std::string();
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->error, "illegal_docid");
    return e->reason;
  };
  EXPECT_EQ(reason(""), "Document id must not be empty");
  EXPECT_EQ(reason("_design/"), "Illegal document id `_design/`");
  EXPECT_EQ(reason("_local/"), "Illegal document id `_local/`");
  const std::string underscore = "Only reserved document ids may start with underscore.";
  EXPECT_EQ(reason("_foo"), underscore);
  EXPECT_EQ(reason("_"), underscore);
  EXPECT_EQ(reason("_design"), underscore);
  EXPECT_EQ(reason("_all_docs"), underscore);
  EXPECT_EQ(reason("_Design/x"), underscore);
  const std::string utf8 = "Document id must be valid UTF-8";
  EXPECT_EQ(reason("\xff"), utf8);
  EXPECT_EQ(reason("a\xc3"), utf8);             // truncated sequence
  EXPECT_EQ(reason("\xc0\xaf"), utf8);          // overlong '/'
  EXPECT_EQ(reason("\xe0\x80\xaf"), utf8);      // overlong, 3 bytes
  EXPECT_EQ(reason("\xed\xa0\x80"), utf8);      // UTF-16 surrogate
  EXPECT_EQ(reason("\xf4\x90\x80\x80"), utf8);  // above U+10FFFF
  EXPECT_EQ(reason("_\xff"), utf8);             // UTF-8 is checked before the underscore
}

TEST(Utf8, ValidatesBoundaries) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("\x7f"));
  EXPECT_TRUE(is_valid_utf8("\xc2\x80"));
  EXPECT_TRUE(is_valid_utf8("\xef\xbf\xbf"));
  EXPECT_TRUE(is_valid_utf8("\xf4\x8f\xbf\xbf"));
  EXPECT_TRUE(is_valid_utf8(std::string_view("a\0b", 3)));
  EXPECT_FALSE(is_valid_utf8("\x80"));
  EXPECT_FALSE(is_valid_utf8("\xc2"));
  EXPECT_FALSE(is_valid_utf8("\xc2\x41"));
  EXPECT_FALSE(is_valid_utf8("\xf0\x8f\xbf\xbf"));  // overlong, 4 bytes
  EXPECT_FALSE(is_valid_utf8("\xf5\x80\x80\x80"));
}

// ---- json_string / splice_doc ------------------------------------------------------------------

TEST(JsonString, EscapesLikeNlohmann) {
  EXPECT_EQ(json_string("x"), "\"x\"");
  EXPECT_EQ(json_string(""), "\"\"");
  EXPECT_EQ(json_string("a\"b\\c/d"), R"("a\"b\\c/d")");
  EXPECT_EQ(json_string("\b\f\n\r\t\x01\x1f\x7f"), R"("\b\f\n\r\t\u0001\u001f)"
                                                   "\x7f\"");
  EXPECT_EQ(json_string("caf\xc3\xa9 \xf0\x9f\x98\x80"), "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"");
  for (std::string_view s : {"plain", "q\"uote", "back\\slash", "nl\n", "\xe2\x82\xac"}) {
    EXPECT_EQ(json_string(s), Json(std::string(s)).dump()) << s;
  }
  // Invalid UTF-8 does not throw; it becomes U+FFFD.
  EXPECT_EQ(json_string("a\xff"), "\"a\xef\xbf\xbd\"");
  // Every byte, in the middle of printable text (the fast path takes only printable ASCII).
  for (int b = 0; b < 256; ++b) {
    const std::string s = std::string("id-") + static_cast<char>(b) + "-x";
    EXPECT_EQ(json_string(s), Json(s).dump(-1, ' ', false, Json::error_handler_t::replace)) << b;
  }
}

TEST(JsonString, EveryByteAtEveryPositionOfTheWordAtATimeCheck) {
  // is_plain_json_string reads eight bytes at a time, then the rest one by one: each byte value
  // at each position of a 19-byte string (two words and a tail), next to plain neighbours.
  for (std::size_t at = 0; at < 19; ++at) {
    for (int b = 0; b < 256; ++b) {
      std::string s(19, 'a');
      s[at] = static_cast<char>(b);
      const bool plain = b >= 0x20 && b <= 0x7e && b != '"' && b != '\\';
      ASSERT_EQ(is_plain_json_string(s), plain) << "byte " << b << " at " << at;
      std::string appended = "[";
      append_json_string(appended, s);
      ASSERT_EQ(appended, "[" + Json(s).dump(-1, ' ', false, Json::error_handler_t::replace))
          << "byte " << b << " at " << at;
    }
  }
}

TEST(JsonString, RevisionsAsJson) {
  const RevId hex{
      12, std::string("\x01\x23\x45\x67\x89\xab\xcd\xef\xfe\xdc\xba\x98\x76\x54\x32\x10", 16)};
  std::string out = "x";
  append_json_rev(out, hex);
  EXPECT_EQ(out, "x\"12-0123456789abcdeffedcba9876543210\"");
  EXPECT_EQ(hex.str(), "12-0123456789abcdeffedcba9876543210");
  // A hash kept verbatim (not 16 bytes) is escaped like any string.
  const RevId odd{3, "a\"b"};
  out.clear();
  append_json_rev(out, odd);
  EXPECT_EQ(out, json_string("3-a\"b"));
  EXPECT_EQ(odd.str(), "3-a\"b");
}

TEST(SpliceDoc, ExamplesFromTheContract) {
  EXPECT_EQ(splice_doc(R"({"a":1})", "x", "1-abc", {R"("_deleted":true)"}),
            R"({"_id":"x","_rev":"1-abc","_deleted":true,"a":1})");
  EXPECT_EQ(splice_doc("{}", "x", "1-abc", {}), R"({"_id":"x","_rev":"1-abc"})");
}

TEST(SpliceDoc, ExtraMembersInOrderAndEmptyBody) {
  EXPECT_EQ(splice_doc("{}", "x", "2-b", {R"("_deleted":true)", R"("_conflicts":["2-a"])"}),
            R"({"_id":"x","_rev":"2-b","_deleted":true,"_conflicts":["2-a"]})");
  EXPECT_EQ(splice_doc(R"({"a":{"b":[1,2]},"c":"}"})", "x", "2-b", {}),
            R"({"_id":"x","_rev":"2-b","a":{"b":[1,2]},"c":"}"})");
  EXPECT_EQ(splice_doc("{ }", "x", "1-a", {}), R"({"_id":"x","_rev":"1-a"})");
}

TEST(SpliceDoc, EscapesIds) {
  EXPECT_EQ(splice_doc(R"({"a":1})", "q\"u\\o", "1-a", {}),
            R"({"_id":"q\"u\\o","_rev":"1-a","a":1})");
  EXPECT_EQ(splice_doc("{}", "caf\xc3\xa9\n", "1-a", {}),
            "{\"_id\":\"caf\xc3\xa9\\n\",\"_rev\":\"1-a\"}");
}

TEST(SpliceDoc, ResultParsesToTheSameDocument) {
  const std::string id = "we\"ird\\ \xe2\x98\x83 \t id";
  const auto d =
      parse_ok(R"({"_id":)" + Json(id).dump() + R"(,"x":[1,{"_y":2}],"s":"}{,","_deleted":true})");
  const auto out = Json::parse(splice_doc(d.body, *d.id, "3-" + kHexA, {R"("_deleted":true)"}));
  EXPECT_EQ(out.dump(), Json({{"_id", id},
                              {"_rev", "3-" + kHexA},
                              {"_deleted", true},
                              {"x", Json::array({1, Json({{"_y", 2}})})},
                              {"s", "}{,"}})
                            .dump());
}

}  // namespace
}  // namespace chaise::core

namespace chaise::core {
namespace {

// Same type at every node and the same values (nlohmann's == equates 1u and 1, and 1 and 1.0).
bool same_tree(const Json& a, const Json& b) {
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Json::value_t::object: {
      if (a.size() != b.size()) return false;
      auto x = a.items().begin();
      auto y = b.items().begin();
      for (; x != a.items().end(); ++x, ++y) {
        if (x.key() != y.key() || !same_tree(x.value(), y.value())) return false;
      }
      return true;
    }
    case Json::value_t::array:
      if (a.size() != b.size()) return false;
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (!same_tree(a[i], b[i])) return false;
      }
      return true;
    case Json::value_t::number_float: {  // bitwise: -0.0 and 0.0 differ
      const double x = a.get<double>(), y = b.get<double>();
      return std::memcmp(&x, &y, sizeof x) == 0;
    }
    default:
      return a == b;
  }
}

// parse_json_text (its own reader for well-formed text) answers what nlohmann's lexer answers.
void expect_read_as_nlohmann(const std::string& text) {
  for (JsonNumbers numbers : {JsonNumbers::doubles, JsonNumbers::exact}) {
    auto fast = parse_json_text(text, numbers);
    auto slow = detail::parse_json_text_with_nlohmann(text, numbers);
    ASSERT_EQ(fast.index(), slow.index()) << text;
    if (fast.index() == 1) {
      EXPECT_EQ(std::get<1>(fast), std::get<1>(slow)) << text;
    } else {
      EXPECT_TRUE(same_tree(std::get<0>(fast), std::get<0>(slow))) << text;
    }
  }
}

TEST(JsonText, ReadsWhatNlohmannReads) {
  const std::vector<std::string> texts = {
      "",
      " ",
      "{}",
      "[]",
      " { } ",
      "\t[\r\n]\n",
      "0",
      "-0",
      "1",
      "-1",
      "0.0",
      "-0.0",
      "1e5",
      "1E+5",
      "1e-5",
      "1.5e300",
      "1e400",
      "-1e400",
      "1e-400",
      "5e-324",
      "4.9e-324",
      "2.5e-308",
      "18446744073709551615",
      "18446744073709551616",
      "-9223372036854775808",
      "-9223372036854775809",
      "123456789012345678901234567890",
      "01",
      "1.",
      ".5",
      "1e",
      "1e+",
      "-",
      "+1",
      "--1",
      "1.5.5",
      "0x10",
      "NaN",
      "Infinity",
      "true",
      "false",
      "null",
      "tru",
      "nul",
      "truex",
      "\"\"",
      "\"abc\"",
      "\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\"",
      "\"\\u0000\"",
      "\"\\u00e9\\u20AC\"",
      "\"\\ud83d\\ude00\"",
      "\"\\ud83d\"",
      "\"\\ud83dx\"",
      "\"\\ude00\"",
      "\"\\ud83d\\u0041\"",
      "\"\\u12\"",
      "\"\\x\"",
      "\"\x01\"",
      "\"\x7f\"",
      "\"\xc3\xa9\"",
      "\"\xc0\x80\"",
      "\"\xc2\"",
      "\"\xe0\x80\x80\"",
      "\"\xe0\xa0\x80\"",
      "\"\xed\xa0\x80\"",
      "\"\xed\x9f\xbf\"",
      "\"\xef\xbf\xbf\"",
      "\"\xf0\x8f\xbf\xbf\"",
      "\"\xf0\x90\x80\x80\"",
      "\"\xf4\x8f\xbf\xbf\"",
      "\"\xf4\x90\x80\x80\"",
      "\"\xf5\x80\x80\x80\"",
      "\"\xff\"",
      "\"abc",
      "\xef\xbb\xbf{}",
      "{\"a\":1,\"a\":2}",
      "{\"a\":1,\"b\":2,\"a\":3}",
      "{\"a\" 1}",
      "{\"a\":}",
      "{,}",
      "{\"a\":1,}",
      "[1,]",
      "[,1]",
      "[1 2]",
      "{1:2}",
      "{\"a\"",
      "[",
      "]",
      "{}{}",
      "{} x",
      "[1,[2,[3,{\"a\":[{}]}]]]",
      R"({"_id":"doc","_rev":"1-abc","type":"reading","value":42,"tags":["a","b"],"n":null})",
  };
  for (const std::string& t : texts) expect_read_as_nlohmann(t);
  // Objects past the linear duplicate search, with a repeat.
  std::string wide = "{";
  for (int i = 0; i < 40; ++i)
    wide += "\"k" + std::to_string(i % 30) + "\":" + std::to_string(i) + ",";
  wide.back() = '}';
  expect_read_as_nlohmann(wide);
  // Nesting at and past the bound.
  for (int depth : {kJsonDepthMax, kJsonDepthMax + 1}) {
    expect_read_as_nlohmann(std::string(depth, '[') + std::string(depth, ']'));
  }
  // Every prefix and every one-byte change of a document: syntax errors at every position.
  const std::string doc = R"({"a":[1,-2.5e3,"x\u00e9y",true,null],"b":{"c":"\ud83d\ude00"}})";
  for (std::size_t i = 0; i <= doc.size(); ++i) expect_read_as_nlohmann(doc.substr(0, i));
  for (std::size_t i = 0; i < doc.size(); ++i) {
    for (char c : std::string("\"\\{}[],:0-.eE aZ\x01\x80\xff")) {
      std::string changed = doc;
      changed[i] = c;
      expect_read_as_nlohmann(changed);
    }
  }
}

}  // namespace
}  // namespace chaise::core

namespace chaise::core {
namespace {

// The body writer's own paths for strings, integers, booleans and null write what nlohmann's
// serializer writes (which the stored bodies and their revision hashes were made with).
TEST(JsonText, WriterWritesWhatTheSerializerWrites) {
  const std::vector<Json> values = {
      Json(nullptr),
      Json(true),
      Json(false),
      Json(0),
      Json(-1),
      Json(42),
      Json(std::numeric_limits<std::int64_t>::min()),
      Json(std::numeric_limits<std::int64_t>::max()),
      Json(std::numeric_limits<std::uint64_t>::max()),
      Json(std::uint64_t{9223372036854775808u}),
      Json(0.0),
      Json(-0.0),
      Json(1.5),
      Json(1e300),
      Json(5e-324),
      Json(0.1),
      Json(""),
      Json("plain"),
      Json("quote\"back\\slash/"),
      Json("\b\f\n\r\t"),
      Json(std::string("\0x", 2)),
      Json("\x01\x1f\x7f"),
      Json("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
      Json::array({1, "a", nullptr, Json::array(), Json::object()}),
      Json::parse(R"({"a":{"b":[1,-2,3.25,"\u00e9"]},"":true,"k\"":null})")};
  for (const Json& v : values) {
    std::string out;
    JsonWriter w(out, true);
    w.value(v);
    EXPECT_EQ(out, v.dump()) << v.dump();
  }
}

}  // namespace
}  // namespace chaise::core

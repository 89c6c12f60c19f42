// The in-process JavaScript engine (core/js/js.h): CouchDB's JS environment, errors, limits.
#include "core/js/js.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

namespace chaise::core::js {
namespace {

using nlohmann::json;

Engine& engine() {
  static Engine e(EngineOptions{.contexts = 2, .timeout = std::chrono::milliseconds(500)});
  return e;
}

DesignDoc ddoc(const json& body, std::string rev = "1-a") {
  json b = body;
  b["_id"] = "_design/t";
  b["_rev"] = rev;
  return DesignDoc{"_design/t@" + rev + "@" + std::to_string(std::hash<std::string>{}(b.dump())),
                   b.dump()};
}

template <typename T>
const T& ok(const JsResult<T>& r) {
  if (std::holds_alternative<JsError>(r)) {
    ADD_FAILURE() << std::get<JsError>(r).error << ": " << std::get<JsError>(r).reason;
    static T empty{};
    return empty;
  }
  return std::get<T>(r);
}

template <typename T>
JsError err(const JsResult<T>& r) {
  EXPECT_TRUE(std::holds_alternative<JsError>(r));
  return std::holds_alternative<JsError>(r) ? std::get<JsError>(r) : JsError{};
}

TEST(JsTest, MapEmitsRowsPerViewPerDocument) {
  auto d =
      ddoc({{"views",
             {{"a", {{"map", "function(doc){ emit(doc.n, doc.n * 2); emit([doc._id], null); }"}}},
              {"b", {{"map", "function(doc){ if (doc.n > 1) emit(doc.n); }"}}}}}});
  auto r = ok(engine().map(d, {"a", "b"}, {R"({"_id":"x","n":1})", R"({"_id":"y","n":2})"}));
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(json::parse(r[0]), json::parse(R"([[[1,2],[["x"],null]],[]])"));
  EXPECT_EQ(json::parse(r[1]), json::parse(R"([[[2,4],[["y"],null]],[[2,null]]])"));
}

TEST(JsTest, AThrowingMapFunctionEmitsNothingForThatDocument) {
  auto d = ddoc({{"views", {{"a", {{"map", "function(doc){ emit(1, doc.x.y); }"}}}}}});
  auto r = ok(engine().map(d, {"a"}, {R"({"_id":"x"})", R"({"_id":"y","x":{"y":5}})"}));
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(json::parse(r[0]), json::parse("[[]]"));
  EXPECT_EQ(json::parse(r[1]), json::parse("[[[1,5]]]"));
}

TEST(JsTest, DocumentsAreFrozenForMapFunctions) {
  auto d = ddoc({{"views",
                  {{"a", {{"map", "function(doc){ doc.n = 7; emit(doc.n); }"}}},
                   {"b", {{"map", "function(doc){ emit(doc.n); }"}}}}}});
  auto r = ok(engine().map(d, {"a", "b"}, {R"({"_id":"x","n":1})"}));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(json::parse(r[0]), json::parse("[[[1,null]],[[1,null]]]"));
}

TEST(JsTest, CompilationErrorsAreReported) {
  auto d = ddoc({{"views", {{"a", {{"map", "function(doc){ emit(; }"}}}}}});
  auto e = err(engine().map(d, {"a"}, {R"({"_id":"x"})"}));
  EXPECT_EQ(e.error, "compilation_error");
  auto n = ddoc({{"views", {{"a", {{"map", "42"}}}}}}, "2-b");
  e = err(engine().map(n, {"a"}, {R"({"_id":"x"})"}));
  EXPECT_EQ(e.error, "compilation_error");
  EXPECT_EQ(e.reason, "Expression does not eval to a function. (42)");
  EXPECT_TRUE(std::holds_alternative<bool>(engine().compiles("function(a){return a;};")));
  EXPECT_EQ(err(engine().compiles("function(")).error, "compilation_error");
}

TEST(JsTest, RequireLoadsCommonJsModulesFromTheDesignDocument) {
  auto d =
      ddoc({{"views",
             {{"lib",
               {{"math", "exports.double = function(x){ return 2 * x; };"},
                {"util",
                 "var m = require('./math'); exports.quad = function(x){ return "
                 "m.double(m.double(x)); };"}}},
              {"a", {{"map", "function(doc){ emit(require('views/lib/util').quad(doc.n)); }"}}}}}});
  auto r = ok(engine().map(d, {"a"}, {R"({"_id":"x","n":3})"}));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(json::parse(r[0]), json::parse("[[[12,null]]]"));
  auto bad =
      ddoc({{"views", {{"a", {{"map", "function(doc){ emit(require('nope')); }"}}}}}}, "3-c");
  r = ok(engine().map(bad, {"a"}, {R"({"_id":"x"})"}));  // logged, nothing emitted
  EXPECT_EQ(json::parse(r[0]), json::parse("[[]]"));
}

TEST(JsTest, ReduceAndRereduce) {
  std::string src =
      "function(keys, values, rereduce){ return rereduce ? sum(values) : values.length; }";
  auto r = ok(engine().reduce({src, "function(k, v){ return sum(v); }"},
                              R"([[[1,"a"],10],[[2,"b"],20]])", false));
  EXPECT_EQ(json::parse(r), json::parse("[2,30]"));
  r = ok(engine().reduce({src}, "[2,3,4]", true));
  EXPECT_EQ(json::parse(r), json::parse("[9]"));
}

TEST(JsTest, ReduceManyAnswersEachInputAndFailsOnlyTheFailingOne) {
  std::string src =
      "function(keys, values, rereduce){ if (values.indexOf(13) >= 0) throw(['error', 'unlucky', "
      "'thirteen']);"
      " return sum(values); }";
  auto r = engine().reduce_many(
      src, {R"([[[1,"a"],1],[[2,"b"],2]])", R"([[[3,"c"],13]])", R"([[[4,"d"],4]])"}, false);
  ASSERT_TRUE(std::holds_alternative<std::vector<js::JsResult<std::string>>>(r));
  auto& each = std::get<std::vector<js::JsResult<std::string>>>(r);
  ASSERT_EQ(each.size(), 3u);
  EXPECT_EQ(std::get<std::string>(each[0]), "3");
  EXPECT_EQ(std::get<js::JsError>(each[1]).error, "unlucky");
  EXPECT_EQ(std::get<js::JsError>(each[1]).reason, "thirteen");
  EXPECT_EQ(std::get<std::string>(each[2]), "4");
  auto re = engine().reduce_many(src, {"[3,4]", "[5]"}, true);
  auto& again = std::get<std::vector<js::JsResult<std::string>>>(re);
  EXPECT_EQ(std::get<std::string>(again[0]), "7");
  EXPECT_EQ(std::get<std::string>(again[1]), "5");
}

TEST(JsTest, ReduceThatDoesNotShrinkFailsWithReduceOverflow) {
  std::string rows = "[";
  for (int i = 0; i < 300; ++i)
    rows += (i ? "," : "") + std::string(R"([[1,"a"],"0123456789012345678901234567890"])");
  rows += "]";
  auto e = err(engine().reduce({"function(k, v){ return v.concat(v); }"}, rows, false));
  EXPECT_EQ(e.error, "reduce_overflow_error");
  EXPECT_NE(e.reason.find("Reduce output must shrink more rapidly"), std::string::npos);
}

TEST(JsTest, ValidateDocUpdateVerdicts) {
  auto d = ddoc(
      {{"validate_doc_update",
        "function(newDoc, oldDoc, userCtx, secObj){"
        " if (newDoc.bad) throw({forbidden: 'no bad docs'});"
        " if (!userCtx.name) throw({unauthorized: 'log in'});"
        " if (oldDoc && oldDoc.locked) throw({forbidden: 'locked by ' + secObj.admins.names[0]});"
        " if (newDoc.str) throw('plain');"
        " if (newDoc.err) null.x; }"}});
  std::string ctx = R"({"db":"d","name":"bob","roles":[]})";
  std::string sec = R"({"admins":{"names":["ann"]}})";
  EXPECT_EQ(ok(engine().validate(d, R"({"_id":"a"})", "null", ctx, sec)).kind, Verdict::Kind::ok);
  auto v = ok(engine().validate(d, R"({"_id":"a","bad":true})", "null", ctx, sec));
  EXPECT_EQ(v.kind, Verdict::Kind::forbidden);
  EXPECT_EQ(v.message, "no bad docs");
  v = ok(
      engine().validate(d, R"({"_id":"a"})", "null", R"({"db":"d","name":null,"roles":[]})", sec));
  EXPECT_EQ(v.kind, Verdict::Kind::unauthorized);
  v = ok(engine().validate(d, R"({"_id":"a"})", R"({"_id":"a","locked":true})", ctx, sec));
  EXPECT_EQ(v.message, "locked by ann");
  v = ok(engine().validate(d, R"({"_id":"a","str":1})", "null", ctx, sec));
  EXPECT_EQ(v.kind, Verdict::Kind::other);
  EXPECT_EQ(v.message, "plain");
  EXPECT_EQ(err(engine().validate(d, R"({"_id":"a","err":1})", "null", ctx, sec)).error,
            "TypeError");
}

TEST(JsTest, FiltersAndViewFilters) {
  auto d =
      ddoc({{"filters",
             {{"odd", "function(doc, req){ return doc.n % 2 == 1 && req.query.on == 'yes'; }"}}},
            {"views", {{"v", {{"map", "function(doc){ if (doc.n > 1) emit(null); }"}}}}}});
  auto r = ok(engine().filter(d, "odd", {R"({"n":1})", R"({"n":2})", R"({"n":3})"},
                              R"({"query":{"on":"yes"}})"));
  EXPECT_EQ(r, (std::vector<bool>{true, false, true}));
  r = ok(engine().filter_view(d, "v", {R"({"n":1})", R"({"n":2})"}));
  EXPECT_EQ(r, (std::vector<bool>{false, true}));
  EXPECT_EQ(err(engine().filter(d, "nope", {"{}"}, "{}")).error, "not_found");
}

TEST(JsTest, UpdateHandlers) {
  auto d = ddoc({{"updates",
                  {{"bump",
                    "function(doc, req){ if (!doc) return [null, 'none']; doc.n = (doc.n || 0) + 1;"
                    " return [doc, {json: {n: doc.n}}]; }"}}}});
  auto a = ok(engine().update(d, "bump", R"({"_id":"x","n":4})", R"({"method":"POST"})"));
  EXPECT_EQ(json::parse(a.doc_json)["n"], 5);
  EXPECT_EQ(json::parse(a.response_json), json::parse(R"({"json":{"n":5}})"));
  a = ok(engine().update(d, "bump", "null", R"({"method":"POST"})"));
  EXPECT_TRUE(a.doc_json.empty());
  EXPECT_EQ(json::parse(a.response_json), json::parse(R"({"body":"none"})"));
  EXPECT_EQ(err(engine().update(d, "bump", "null", R"({"method":"GET"})")).error,
            "method_not_allowed");
}

// update_many: an accept() that hands out revisions "N-r" and records the bodies it took;
// `refuse` (a body) is refused.
struct Accepted {
  std::vector<std::string> bodies;
  std::string refuse;
  Engine::Accept fn() {
    return [this](std::size_t, std::string_view body) -> std::optional<std::string> {
      if (body == refuse) return std::nullopt;
      bodies.emplace_back(body);
      return std::to_string(bodies.size() + 1) + "-r";
    };
  }
};

std::vector<UpdateCall> update_calls(const std::vector<std::string>& names) {
  std::vector<UpdateCall> out;
  for (const auto& n : names) out.push_back(UpdateCall{n, R"({"method":"POST"})"});
  return out;
}

TEST(JsTest, UpdateManyChainsCallsAndRollsBackFailedOnes) {
  auto d = ddoc(
      {{"updates",
        {{"inc",
          "function(doc, req){ doc.n += 1; return [doc, {json: {n: doc.n, rev: doc._rev}}]; }"},
         {"boom", "function(doc, req){ doc.n = 1000; throw(['error', 'bad', 'no']); }"},
         {"oops", "function(doc, req){ doc.n = 1000; return doc.missing.x; }"},
         {"none", "function(doc, req){ doc.n = 1000; return [null, 'nothing']; }"},
         {"other", "function(doc, req){ return [{_id: 'y'}, 'moved']; }"},
         {"drop", "function(doc, req){ doc._deleted = true; return [doc, 'gone']; }"}}}});
  Accepted a;
  auto batch = ok(engine().update_many(
      d, "x", "1-a", R"({"n":0,"keep":"me"})",
      update_calls({"inc", "boom", "inc", "oops", "none", "other", "drop", "inc"}), {}, a.fn()));
  using Kind = UpdateOutcome::Kind;
  ASSERT_EQ(batch.outcomes.size(), 8u);
  EXPECT_FALSE(batch.timed_out);
  std::vector<Kind> kinds;
  for (const auto& o : batch.outcomes) kinds.push_back(o.kind);
  EXPECT_EQ(kinds, (std::vector<Kind>{Kind::saved, Kind::failed, Kind::saved, Kind::failed,
                                      Kind::unsaved, Kind::declined, Kind::declined, Kind::saved}));
  EXPECT_EQ(batch.outcomes[1].error.error, "bad");
  EXPECT_EQ(batch.outcomes[3].error.error, "TypeError");
  EXPECT_EQ(json::parse(batch.outcomes[4].response_json), json::parse(R"({"body":"nothing"})"));
  // Each saved call saw what the one before saved, with its revision; "_" members are not saved.
  EXPECT_EQ(a.bodies, (std::vector<std::string>{R"({"n":1,"keep":"me"})", R"({"n":2,"keep":"me"})",
                                                R"({"n":3,"keep":"me"})"}));
  EXPECT_EQ(json::parse(batch.outcomes[0].response_json)["json"]["rev"], "1-a");
  EXPECT_EQ(json::parse(batch.outcomes[2].response_json)["json"]["rev"], "2-r");
  EXPECT_EQ(json::parse(batch.outcomes[7].response_json)["json"]["rev"], "3-r");
}

TEST(JsTest, UpdateManyRunsValidatorsAndAcceptOnEachSave) {
  auto d =
      ddoc({{"updates",
             {{"set", "function(doc, req){ doc.n = Number(req.query.n); return [doc, 'ok']; }"}}}});
  auto v = std::make_shared<const DesignDoc>(
      ddoc({{"validate_doc_update",
             "function(n, o, u, s){ if (n.n > 5) throw({forbidden: 'big ' + o.n + ' ' + u.name + ' "
             "' + s.x});"
             " if (n.n < 0) null.boom; }"}},
           "1-v"));
  std::vector<UpdateCall> calls;
  for (int n : {1, 7, -1, 2, 4}) {
    calls.push_back(UpdateCall{"set",
                               R"({"method":"POST","query":{"n":")" + std::to_string(n) + R"("}})",
                               R"({"name":"ann"})", R"({"x":"s"})"});
  }
  Accepted a;
  a.refuse = R"({"n":2})";
  auto batch = ok(engine().update_many(d, "x", "1-a", R"({"n":0})", calls, {v}, a.fn()));
  using Kind = UpdateOutcome::Kind;
  ASSERT_EQ(batch.outcomes.size(), 5u);
  EXPECT_EQ(batch.outcomes[0].kind, Kind::saved);
  EXPECT_EQ(batch.outcomes[1].kind, Kind::invalid);
  EXPECT_EQ(batch.outcomes[1].verdict.kind, Verdict::Kind::forbidden);
  EXPECT_EQ(batch.outcomes[1].verdict.message, "big 1 ann s");
  EXPECT_EQ(batch.outcomes[2].kind, Kind::validator_failed);
  EXPECT_EQ(batch.outcomes[2].error.error, "TypeError");
  EXPECT_EQ(batch.outcomes[3].kind, Kind::refused);
  EXPECT_EQ(batch.outcomes[4].kind, Kind::saved);
  EXPECT_EQ(a.bodies, (std::vector<std::string>{R"({"n":1})", R"({"n":4})"}));
  // A validation function that does not compile fails each save, as validate() does.
  auto broken = std::make_shared<const DesignDoc>(
      ddoc({{"validate_doc_update", "function(n) { syntax error"}}, "1-b"));
  auto failed = ok(engine().update_many(d, "x", "1-a", R"({"n":0})", {calls[0]}, {broken}, a.fn()));
  ASSERT_EQ(failed.outcomes.size(), 1u);
  EXPECT_EQ(failed.outcomes[0].kind, Kind::validator_failed);
  EXPECT_EQ(failed.outcomes[0].error.error,
            err(engine().validate(*broken, "{}", "null", "{}", "{}")).error);
}

TEST(JsTest, UpdateManyNamesTheCallThatTimedOut) {
  auto d = ddoc({{"updates",
                  {{"inc", "function(doc, req){ doc.n += 1; return [doc, 'ok']; }"},
                   {"spin", "function(doc, req){ while (true) {} }"}}}});
  Accepted a;
  auto batch = ok(engine().update_many(d, "x", "1-a", R"({"n":0})",
                                       update_calls({"inc", "inc", "spin", "inc"}), {}, a.fn()));
  ASSERT_TRUE(batch.timed_out);
  EXPECT_EQ(*batch.timed_out, 2u);
  EXPECT_TRUE(batch.outcomes.empty());
  // Each call has its own time limit: many quick calls are not cut short by the batch's length.
  a.bodies.clear();
  auto many = ok(engine().update_many(
      d, "x", "1-a", R"({"n":0})", update_calls(std::vector<std::string>(500, "inc")), {}, a.fn()));
  EXPECT_FALSE(many.timed_out);
  EXPECT_GE(many.outcomes.size(), 1u);
  EXPECT_EQ(a.bodies.size(), many.outcomes.size());
}

TEST(JsTest, ARunawayFunctionTimesOutAndHarmsNothingElse) {
  auto d = ddoc({{"views",
                  {{"spin", {{"map", "function(doc){ while (true) {} }"}}},
                   {"ok", {{"map", "function(doc){ emit(doc._id); }"}}}}}});
  std::size_t rebuilt = engine().contexts_rebuilt();
  auto t0 = std::chrono::steady_clock::now();
  auto e = err(engine().map(d, {"spin"}, {R"({"_id":"x"})"}));
  EXPECT_EQ(e.error, "os_process_error");
  EXPECT_EQ(e.reason, "timeout");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  EXPECT_EQ(engine().contexts_rebuilt(), rebuilt + 1);
  // Both contexts still answer.
  for (int i = 0; i < 4; ++i) {
    auto r = ok(engine().map(d, {"ok"}, {R"({"_id":"x"})"}));
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(json::parse(r[0]), json::parse(R"([[["x",null]]])"));
  }
}

TEST(JsTest, RunawayMemoryIsContained) {
  auto d = ddoc(
      {{"views",
        {{"hog",
          {{"map",
            "function(doc){ var a = []; while (true) a.push(new Array(100000).fill(1)); }"}}}}}});
  auto e = err(engine().map(d, {"hog"}, {R"({"_id":"x"})"}));
  EXPECT_EQ(e.error, "os_process_error");
  auto ok_ddoc = ddoc({{"views", {{"ok", {{"map", "function(doc){ emit(1); }"}}}}}}, "9-z");
  auto r = ok(engine().map(ok_ddoc, {"ok"}, {R"({"_id":"x"})"}));
  EXPECT_EQ(r.size(), 1u);
}

TEST(JsTest, ManyThreadsCallAtOnce) {
  auto d = ddoc({{"views", {{"a", {{"map", "function(doc){ emit(doc.n, sum([doc.n, 1])); }"}}}}}});
  std::vector<std::thread> ts;
  std::atomic<int> good{0};
  for (int t = 0; t < 8; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        auto r = engine().map(d, {"a"}, {"{\"n\":" + std::to_string(t * 100 + i) + "}"});
        if (std::holds_alternative<std::vector<std::string>>(r) &&
            json::parse(std::get<std::vector<std::string>>(r)[0])[0][0][1] == t * 100 + i + 1)
          ++good;
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(good.load(), 400);
}

}  // namespace
}  // namespace chaise::core::js

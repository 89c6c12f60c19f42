// js_bench — the in-process JavaScript engine (core/js/js.h) on the calls the hot paths make:
// update handlers one call per entry (Engine::update) and many per entry (Engine::update_many,
// the group commit of update handlers), with and without a validate_doc_update.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "core/js/js.h"

namespace {

using chaise::core::js::DesignDoc;
using chaise::core::js::Engine;
using chaise::core::js::EngineOptions;
using chaise::core::js::UpdateCall;

const DesignDoc kUpdates{
    "bench\0_design/u\0001-a",
    R"({"_id":"_design/u","_rev":"1-a","updates":{"inc":"function(doc, req) { doc.n = (doc.n || 0) + 1; return [doc, 'ok']; }"}})"};
const DesignDoc kValidator{
    "bench\0_design/v\0001-a",
    R"({"_id":"_design/v","_rev":"1-a","validate_doc_update":"function(newDoc, oldDoc, userCtx) { if (typeof newDoc.n !== 'number') throw({forbidden: 'n'}); }"})"};

// The request object an update handler gets over HTTP (about 600 bytes).
const std::string kReq =
    R"({"info":{"db_name":"bench"},"id":"counter","uuid":"f02f417d0897ca3ce8b0e2aa6aa3afa2","method":"POST","requested_path":["bench","_design","u","_update","inc","counter"],"path":["bench","_design","u","_update","inc","counter"],"raw_path":"/bench/_design/u/_update/inc/counter","query":{},"headers":{"Host":"127.0.0.1:5984","Authorization":"Basic YWRtaW46YWRtaW4=","User-Agent":"wrk","Accept":"*/*"},"body":"undefined","peer":"127.0.0.1","form":{},"cookie":{},"userCtx":{"db":"bench","name":"admin","roles":["_admin"]},"secObj":{"members":{"roles":["_admin"]},"admins":{"roles":["_admin"]}}})";

Engine& engine() {
  static Engine e(EngineOptions{.contexts = 1});
  return e;
}

// One call per entry into the engine, as an update handler ran before calls were grouped.
void UpdateOne(benchmark::State& state) {
  std::string doc = R"({"_id":"counter","_rev":"1-a","n":0})";
  for (auto _ : state) {
    auto r = engine().update(kUpdates, "inc", doc, kReq);
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(UpdateOne)->UseRealTime();

// range(0) calls per entry; range(1): with a validation function.
void UpdateMany(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<UpdateCall> calls(
      n, UpdateCall{"inc", kReq, R"({"db":"bench","name":"admin","roles":["_admin"]})", "{}"});
  std::vector<std::shared_ptr<const DesignDoc>> validators;
  if (state.range(1)) validators.push_back(std::make_shared<const DesignDoc>(kValidator));
  std::size_t revs = 0;
  const Engine::Accept accept = [&](std::size_t, std::string_view) -> std::optional<std::string> {
    return std::to_string(++revs) + "-a";
  };
  for (auto _ : state) {
    auto r =
        engine().update_many(kUpdates, "counter", "1-a", R"({"n":0})", calls, validators, accept);
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
}
BENCHMARK(UpdateMany)->Args({1, 0})->Args({64, 0})->Args({64, 1})->UseRealTime();

}  // namespace

BENCHMARK_MAIN();

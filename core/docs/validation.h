// core/docs/validation.h — validate_doc_update: every design document's validation function, run in
// JavaScript on each document edit (CouchDB 3: couch_db:validate_doc_update).
//
// A JsDocValidator belongs to one write request: it carries the writer's userCtx and the
// database's security object, and learns which design documents hold a validate_doc_update at
// the start of each transaction attempt (one range read of the design-doc ids; their bodies come
// from a process-wide cache keyed by database, id and revision, so they are read once per revision).
//
// Verdicts, as CouchDB answers them: {forbidden: m} -> 403 forbidden m; {unauthorized: m} -> 401
// unauthorized m; any other thrown value -> 500 unknown_error; a function that fails to run (a
// runtime error, compilation error, timeout) -> 500 with the engine's error and reason. The first
// design document (in id order) that rejects the edit decides.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/docs/documents.h"
#include "core/js/js.h"

namespace chaise::core {

class JsDocValidator : public DocValidator {
 public:
  // The JSON texts a validation function is given: userCtx ({"db","name","roles"}) and the
  // _security object.
  struct Contexts {
    std::string user_ctx;
    std::string sec_obj;
  };
  // `contexts` is called once, when the first function runs: most databases have none, and
  // serializing both for every write was 4% of a PUT.
  JsDocValidator(js::Engine& engine, std::function<Contexts()> contexts);

  StorageResult<bool> begin(Transaction& tr, const DbRef& db) override;
  std::optional<CouchError> validate(std::string_view new_doc, std::string_view old_doc) override;

  // After begin(), for callers that run the functions themselves (js::Engine::update_many): the
  // design documents whose functions validate() runs, in order; what begin() could not load
  // instead; what the functions see; and the answer for a function's verdict.
  const std::vector<std::shared_ptr<const js::DesignDoc>>& functions() const { return funcs_; }
  const std::optional<CouchError>& failure() const { return failure_; }
  const Contexts& contexts();
  static std::optional<CouchError> verdict_error(const js::Verdict& v);

  // Design documents looked at per database, at most (CouchDB has no limit; a database with more
  // answers 500 on writes rather than skip a validation function).
  static constexpr std::size_t kDesignDocsMax = 10'000;

  // Whether the last write to database `db_name` found validation functions to run. A hint for
  // where to run a write (the JavaScript may take up to os_process_timeout, so the HTTP layer runs
  // such writes on its worker pool): the first write after a validator is added runs where it
  // arrived. Remembers at most kHintsMax databases.
  static bool last_had_functions(std::string_view db_name);
  static constexpr std::size_t kHintsMax = 100'000;

 private:
  js::Engine& engine_;
  std::function<Contexts()> make_contexts_;
  std::optional<Contexts> contexts_;
  std::vector<std::shared_ptr<const js::DesignDoc>> funcs_;
  std::optional<CouchError> failure_;  // begin() could not load the functions
};

}  // namespace chaise::core

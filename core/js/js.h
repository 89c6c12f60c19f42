// core/js/js.h — JavaScript in-process: the seam between core and SpiderMonkey.
//
// CouchDB runs design-document JavaScript in `couchjs` processes behind a line protocol; Chaise
// embeds SpiderMonkey (Debian's libmozjs-102) and runs it on a small pool of threads, each owning
// one JSContext with CouchDB's JS environment loaded (emit, sum, log, toJSON, isArray, require of
// CommonJS modules in the design doc). Nothing here knows about HTTP or storage: callers pass JSON
// text in and get JSON text (or a CouchDB-style error) back.
//
// Contract
// - Thread-safe: any thread may call any method at once; calls queue for a free context (the
//   queue is bounded; beyond it a call fails at once with os_process_error).
// - Each call is limited in time (`timeout`) and each context in heap (`heap_bytes`). A call that
//   runs past its time is interrupted and answers {"os_process_error", "timeout"}; the context it
//   ran on (and any state a function left in it) is thrown away and rebuilt, so nothing else is
//   harmed. A function that throws answers the error CouchDB answers for that call.
// - Compiled functions are cached per context by design-document key (id + rev: a new revision
//   compiles afresh), at most kCachedDesignDocsMax design documents per context.
// - Every context is built before the constructor returns.
// - The JIT is off unless `jit` is set (process-wide, decided by the first Engine): the systemd unit
//   forbids writable+executable memory (MemoryDenyWriteExecute=yes), which a JIT needs.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace chaise::core::js {

struct EngineOptions {
  std::size_t contexts = 2;                 // threads, each with one JSContext
  std::chrono::milliseconds timeout{5000};  // CouchDB's [couchdb] os_process_timeout
  std::size_t heap_bytes = 64u << 20;       // per context
  bool jit = false;
  // CouchDB's [query_server_config] reduce_limit: a JS reduce whose output does not shrink fast
  // enough fails with reduce_overflow_error.
  bool reduce_limit = true;
  std::size_t queue_max = 4096;  // calls waiting for a context
};

// An error as CouchDB reports it for a query-server call: {"error": error, "reason": reason}.
struct JsError {
  std::string error;
  std::string reason;
};

template <typename T>
using JsResult = std::variant<T, JsError>;

// A design document for the function cache: `key` names this revision ("_design/x@3-abc"),
// `json` is its body (with _id, _rev).
struct DesignDoc {
  std::string key;
  std::string json;
};

// What a validate_doc_update function said.
struct Verdict {
  enum class Kind { ok, forbidden, unauthorized, other } kind = Kind::ok;
  std::string message;  // the thrown value's message (other: its JSON)
};

// An update handler's answer: the document to save (empty: none) and the response object.
struct UpdateAnswer {
  std::string doc_json;       // "" or "null": nothing to save
  std::string response_json;  // {"code":..,"headers":{..},"body":".."|"json":..|"base64":..}
};

// One call of Engine::update_many: updates.<name>(doc, req), by a writer whose validation
// functions see `user_ctx` and `sec_obj` (JSON texts).
struct UpdateCall {
  std::string name;
  std::string req;
  std::string user_ctx = "null";
  std::string sec_obj = "null";
};

// What one call of Engine::update_many came to.
struct UpdateOutcome {
  enum class Kind {
    saved,             // saved in place: accept() took its body and gave its revision
    unsaved,           // the handler saved nothing (its document was null)
    declined,          // the handler saved something else: another id, a deletion, not an object
    refused,           // accept() refused its body
    failed,            // the handler threw, or could not run: `error`
    invalid,           // a validation function threw `verdict`
    validator_failed,  // a validation function could not run: `error`
  } kind = Kind::failed;
  std::string response_json;  // saved, unsaved: {"code":..,"headers":{..},"body"|"json"|"base64"}
  JsError error;              // failed, validator_failed
  Verdict verdict;            // invalid
};

// Engine::update_many's answer: one outcome per call run, in order. Fewer than the calls when
// the batch stopped early: after kUpdateBatchTime, or when call `timed_out` ran past the time
// limit (it is then the first call not run; the entry was thrown away with everything the calls
// before it did, the bodies accept() took included).
struct UpdateBatch {
  std::vector<UpdateOutcome> outcomes;
  std::optional<std::size_t> timed_out;
};

// A list function's rows in and its output out while lists.<name> runs, called on the engine's
// thread in the order the function asks; the function's time limit restarts after each call, as
// CouchDB's starts afresh for each row it sends its query server.
class ListIo {
 public:
  virtual ~ListIo() = default;
  // The next row as JSON text ({"id","key","value"[,"doc"]}), or nullopt after the last. Throwing
  // stops the function at once (uncatchably); the implementation keeps the reason.
  virtual std::optional<std::string> next_row() = 0;
  // What the function sent up to a getRow() or its end: `resp`, the response object of start()
  // ({"code","headers"}) when one was set since the last output, else empty; `data` the text
  // sent. false stops the function at once (the client is gone).
  virtual bool output(std::string_view resp, std::string_view data) = 0;
  // The function ended: true, or its error (after a stop: the stop's). Called once, last.
  virtual void finished(JsResult<bool> result) = 0;
};

// The SpiderMonkey major version the engine runs ("102"), as CouchDB reports its own in
// GET /_node/{node}/_versions.
std::string spidermonkey_version();

class Engine {
 public:
  explicit Engine(EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  static constexpr std::size_t kCachedDesignDocsMax = 64;

  // Runs the map functions of `views` (names under the ddoc's "views") over `docs` (JSON texts).
  // Returns one JSON text per document: an array with one element per view, each an array of
  // [key, value] pairs. A function that throws on a document emits nothing for it (and logs), as
  // in CouchDB; a function that does not compile fails the whole call with compilation_error.
  JsResult<std::vector<std::string>> map(const DesignDoc& ddoc,
                                         const std::vector<std::string>& views,
                                         const std::vector<std::string>& docs);
  // Reduce functions (JS sources) over rows: `kvs_json` is a JSON array of [[key, docid], value];
  // rereduce: `kvs_json` is a JSON array of earlier reductions. Returns a JSON array with one
  // reduction per function.
  JsResult<std::string> reduce(const std::vector<std::string>& sources, std::string_view kvs_json,
                               bool rereduce);
  // One function over many independent inputs (each as `kvs_json` above) in one call: the
  // reduction (JSON) or the error of each. The outer error is a failure of the whole call
  // (timeout, compilation).
  JsResult<std::vector<JsResult<std::string>>> reduce_many(const std::string& source,
                                                           const std::vector<std::string>& inputs,
                                                           bool rereduce);
  // The ddoc's validate_doc_update(newDoc, oldDoc, userCtx, secObj); old_doc "null" for none.
  JsResult<Verdict> validate(const DesignDoc& ddoc, std::string_view new_doc,
                             std::string_view old_doc, std::string_view user_ctx,
                             std::string_view sec_obj);
  // filters.<name>(doc, req) for each document: whether it passes.
  JsResult<std::vector<bool>> filter(const DesignDoc& ddoc, std::string_view name,
                                     const std::vector<std::string>& docs, std::string_view req);
  // filter=_view: whether views.<name>.map emits anything for each document.
  JsResult<std::vector<bool>> filter_view(const DesignDoc& ddoc, std::string_view name,
                                          const std::vector<std::string>& docs);
  // updates.<name>(doc, req); doc "null" when there is none.
  JsResult<UpdateAnswer> update(const DesignDoc& ddoc, std::string_view name, std::string_view doc,
                                std::string_view req);
  // Update-handler calls of one design document on one document, in one entry into the engine:
  // the document (`id` at revision `rev`, body `body` without "_" members) enters once; each call
  // sees what the call before it saved, and a call that fails leaves it as the last saved call
  // left it. Each save first passes `validators` (validate_doc_update of each, in order), then
  // accept(call, body), called on the engine's thread, which answers the revision the next call
  // sees as _rev, or nullopt to refuse the body. Each call has its own time limit; the batch
  // stops before a call once kUpdateBatchTime has passed (the caller runs the rest in another
  // entry, so other work gets the context in between).
  using Accept = std::function<std::optional<std::string>(std::size_t call, std::string_view body)>;
  static constexpr std::chrono::milliseconds kUpdateBatchTime{20};
  JsResult<UpdateBatch> update_many(const DesignDoc& ddoc, std::string_view id,
                                    std::string_view rev, std::string_view body,
                                    const std::vector<UpdateCall>& calls,
                                    const std::vector<std::shared_ptr<const DesignDoc>>& validators,
                                    const Accept& accept);
  // shows.<name>(doc, req); doc "null" when there is none. The response object
  // ({"code","headers","body"|"json"|"base64"}), with start()/send() and provides() applied.
  JsResult<std::string> show(const DesignDoc& ddoc, std::string_view name, std::string_view doc,
                             std::string_view req);
  // lists.<name>(head, req) over the rows of `io`, run on a context of its own for as long as the
  // function reads rows; returns at once (a full queue answers through io->finished at once).
  void list(const DesignDoc& ddoc, std::string_view name, std::string_view head,
            std::string_view req, std::shared_ptr<ListIo> io);
  // The design document's "rewrites" function over `req`: the rewrite object it returned
  // ({"path","method","query","headers","body"} or {"code",...}), or nullopt when it returned
  // nothing (no rule matched).
  JsResult<std::optional<std::string>> rewrite(const DesignDoc& ddoc, std::string_view req);
  // Compiles `source` as a function (nothing is run); used to check design docs on write.
  JsResult<bool> compiles(std::string_view source);

  // Calls made, and contexts rebuilt after a timeout or out-of-memory (for tests and _stats).
  std::size_t calls() const;
  std::size_t contexts_rebuilt() const;
  // The contexts (one thread each), and the calls waiting for one now.
  std::size_t contexts() const;
  std::size_t queued() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  struct Task;
  JsResult<std::string> call(std::string_view op, const DesignDoc* ddoc, std::string args_json);
  JsResult<std::string> run_task(const std::shared_ptr<Task>& t);
  // Queues `t` for a context; false when the queue is full.
  bool enqueue(std::shared_ptr<Task> t);
};

}  // namespace chaise::core::js

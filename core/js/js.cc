// core/js/js.cc — the SpiderMonkey side of core/js/js.h.
//
// Threads: `contexts` workers, each creating and owning one JSContext (SpiderMonkey binds a context
// to the thread that made it), plus one watchdog that interrupts a call past its deadline. A call
// is a task on a bounded queue; the caller blocks on its future.
#include "core/js/js.h"

#include <js-config.h>
#include <js/CallAndConstruct.h>
#include <js/CompilationAndEvaluation.h>
#include <js/Context.h>
#include <js/ContextOptions.h>
#include <js/Conversions.h>
#include <js/Initialization.h>
#include <js/Interrupt.h>
#include <js/PropertyAndElement.h>
#include <js/SourceText.h>
#include <js/String.h>
#include <js/Utility.h>
#include <jsapi.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <utility>

namespace chaise::core::js {

extern const char kPrelude[];  // core/js/prelude.js, embedded by CMake

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> spidermonkey_initialized{false};

// Called by every Engine's constructor: the shutdown is registered before any Engine with static
// storage finishes constructing, so it runs after every such Engine is gone (atexit handlers run
// in reverse), and SpiderMonkey's helper threads stop before its own statics are destroyed.
void register_spidermonkey_shutdown_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::atexit([] {
      if (spidermonkey_initialized.load()) JS_ShutDown();
    });
  });
}

// Contexts are built and destroyed only while no other context runs JavaScript (exclusive), and
// run JavaScript side by side (shared). SpiderMonkey 102 corrupted a running context's strings
// now and then when another thread built a context meanwhile (JsTest.ManyThreadsCallAtOnce after
// a rebuild: JSON.parse saw garbage in 5 runs of 10 under ASan). Builds are rare: a worker's
// first task, and after a timeout or out-of-memory.
std::shared_mutex& context_gate() {
  static std::shared_mutex gate;
  return gate;
}

// Called by a worker before it builds its first context.
void init_spidermonkey_once(bool jit) {
  static std::once_flag once;
  std::call_once(once, [jit] {
    if (!jit) JS::DisableJitBackend();
    if (!JS_Init()) {
      spdlog::critical("js: SpiderMonkey failed to initialize");
      std::abort();
    }
    spidermonkey_initialized.store(true);
  });
}

bool native_log(JSContext* cx, unsigned argc, JS::Value* vp) {
  JS::CallArgs args = JS::CallArgsFromVp(argc, vp);
  if (args.length() > 0) {
    JS::RootedString s(cx, JS::ToString(cx, args[0]));
    if (!s) return false;
    JS::UniqueChars text = JS_EncodeStringToUTF8(cx, s);
    if (!text) return false;
    std::string_view v(text.get());
    spdlog::info("js log: {}", v.substr(0, 4096));
  }
  args.rval().setUndefined();
  return true;
}

const JSClass kGlobalClass = {
    "global", JSCLASS_GLOBAL_FLAGS, &JS::DefaultGlobalClassOps, nullptr, nullptr, nullptr};

}  // namespace

struct Engine::Task {
  std::string op;
  std::string ddoc_key;
  std::string ddoc_json;
  std::string args;
  std::promise<JsResult<std::string>> done;
  // update_many: the caller's accept(), and the call of the batch that runs (set by the engine's
  // thread; read by the caller once `done` is set).
  const Accept* accept = nullptr;
  std::size_t running_call = 0;
  // list: the rows and output of a list function, and whether one of its natives stopped it.
  std::shared_ptr<ListIo> list_io;
  bool stopped = false;
};

struct Engine::Impl {
  explicit Impl(EngineOptions o) : options(o) {}

  EngineOptions options;
  std::mutex mu;
  std::condition_variable work_cv;
  std::deque<std::shared_ptr<Task>> queue;
  bool stopping = false;
  std::vector<std::thread> workers;
  std::atomic<std::size_t> calls{0};
  std::atomic<std::size_t> rebuilt{0};

  // The watchdog: per worker, the context running a call and its deadline.
  struct Slot {
    JSContext* cx = nullptr;
    std::optional<Clock::time_point> deadline;
    bool interrupted = false;
  };
  std::mutex watch_mu;
  std::condition_variable watch_cv;
  std::vector<Slot> slots;
  std::thread watchdog;

  void watch_loop() {
    std::unique_lock lock(watch_mu);
    while (!stopping_watch) {
      std::optional<Clock::time_point> next;
      auto now = Clock::now();
      for (Slot& s : slots) {
        if (!s.deadline || s.interrupted) continue;
        if (*s.deadline <= now) {
          s.interrupted = true;
          JS_RequestInterruptCallback(s.cx);
        } else if (!next || *s.deadline < *next) {
          next = s.deadline;
        }
      }
      if (next)
        watch_cv.wait_until(lock, *next);
      else
        watch_cv.wait(lock);
    }
  }
  bool stopping_watch = false;

  // One worker's context and everything rooted in it; the JSContext's private points here.
  struct Context {
    Impl* impl = nullptr;
    std::size_t slot = 0;
    JSContext* cx = nullptr;
    std::optional<JS::PersistentRootedObject> global;
    std::atomic<bool> kill{false};
    Task* task = nullptr;  // the task running on it
  };

  static bool on_interrupt(JSContext* cx) {
    auto* c = static_cast<Context*>(JS_GetContextPrivate(cx));
    return !(c && c->kill.load());  // false: stop the script, uncatchably
  }

  // The call running on `c` starts a time limit of its own from now.
  static void restart_deadline(Context& c) {
    std::lock_guard lock(c.impl->watch_mu);
    Slot& s = c.impl->slots[c.slot];
    if (!s.interrupted) s.deadline = Clock::now() + c.impl->options.timeout;
  }

  // __chaise_call_begin(i): call i of a batch starts, with a time limit of its own.
  static bool native_call_begin(JSContext* cx, unsigned argc, JS::Value* vp) {
    JS::CallArgs args = JS::CallArgsFromVp(argc, vp);
    auto* c = static_cast<Context*>(JS_GetContextPrivate(cx));
    double i = 0;
    if (args.length() > 0 && !JS::ToNumber(cx, args[0], &i)) return false;
    if (c && c->task) {
      c->task->running_call = static_cast<std::size_t>(i);
      restart_deadline(*c);
    }
    args.rval().setUndefined();
    return true;
  }

  // __chaise_list_row(): the list's next row (JSON text), or null after the last. Returning false
  // without an exception stops the script uncatchably: the caller's reader gave up.
  static bool native_list_row(JSContext* cx, unsigned argc, JS::Value* vp) {
    JS::CallArgs args = JS::CallArgsFromVp(argc, vp);
    auto* c = static_cast<Context*>(JS_GetContextPrivate(cx));
    args.rval().setNull();
    if (!c || !c->task || !c->task->list_io) return true;
    std::optional<std::string> row;
    try {
      row = c->task->list_io->next_row();
    } catch (const std::exception&) {  // never through SpiderMonkey's frames
      c->task->stopped = true;
      return false;
    }
    restart_deadline(*c);
    if (row) {
      JSString* r = JS_NewStringCopyUTF8N(cx, JS::UTF8Chars(row->data(), row->size()));
      if (!r) return false;
      args.rval().setString(r);
    }
    return true;
  }

  // __chaise_list_output(resp, data): hands the list's output so far to the caller; resp is ""
  // when start() set nothing new.
  static bool native_list_output(JSContext* cx, unsigned argc, JS::Value* vp) {
    JS::CallArgs args = JS::CallArgsFromVp(argc, vp);
    auto* c = static_cast<Context*>(JS_GetContextPrivate(cx));
    args.rval().setUndefined();
    if (!c || !c->task || !c->task->list_io || args.length() < 2) return true;
    JS::RootedString resp(cx, JS::ToString(cx, args[0]));
    if (!resp) return false;
    JS::UniqueChars r = JS_EncodeStringToUTF8(cx, resp);
    if (!r) return false;
    JS::RootedString data(cx, JS::ToString(cx, args[1]));
    if (!data) return false;
    JS::UniqueChars d = JS_EncodeStringToUTF8(cx, data);
    if (!d) return false;
    bool go = false;
    try {
      go = c->task->list_io->output(r.get(), d.get());
    } catch (const std::exception&) {
      go = false;
    }
    if (!go) {
      c->task->stopped = true;
      return false;
    }
    restart_deadline(*c);
    return true;
  }

  // __chaise_accept(i, body): the caller's accept() for call i; its revision, or null.
  static bool native_accept(JSContext* cx, unsigned argc, JS::Value* vp) {
    JS::CallArgs args = JS::CallArgsFromVp(argc, vp);
    auto* c = static_cast<Context*>(JS_GetContextPrivate(cx));
    args.rval().setNull();
    if (!c || !c->task || !c->task->accept || args.length() < 2) return true;
    double i = 0;
    if (!JS::ToNumber(cx, args[0], &i)) return false;
    JS::RootedString s(cx, JS::ToString(cx, args[1]));
    if (!s) return false;
    JS::UniqueChars body = JS_EncodeStringToUTF8(cx, s);
    if (!body) return false;
    std::optional<std::string> rev;
    try {
      rev = (*c->task->accept)(static_cast<std::size_t>(i), body.get());
    } catch (const std::exception& e) {  // never through SpiderMonkey's frames
      spdlog::error("js: accept failed: {}", e.what());
    }
    if (rev) {
      JSString* r = JS_NewStringCopyUTF8N(cx, JS::UTF8Chars(rev->data(), rev->size()));
      if (!r) return false;
      args.rval().setString(r);
    }
    return true;
  }

  bool build(Context& c) {
    c.cx = JS_NewContext(options.heap_bytes);
    if (!c.cx) return false;
    c.impl = this;
    JS_SetContextPrivate(c.cx, &c);
    if (!JS::InitSelfHostedCode(c.cx)) return false;
    JS_AddInterruptCallback(c.cx, &Impl::on_interrupt);
    JS::RealmOptions realm;
    JS::RootedObject global(
        c.cx, JS_NewGlobalObject(c.cx, &kGlobalClass, nullptr, JS::FireOnNewGlobalHook, realm));
    if (!global) return false;
    c.global.emplace(c.cx, global);
    JSAutoRealm ar(c.cx, global);
    if (!JS::InitRealmStandardClasses(c.cx)) return false;
    if (!JS_DefineFunction(c.cx, global, "__chaise_log", &native_log, 1, 0) ||
        !JS_DefineFunction(c.cx, global, "__chaise_call_begin", &Impl::native_call_begin, 1, 0) ||
        !JS_DefineFunction(c.cx, global, "__chaise_accept", &Impl::native_accept, 2, 0) ||
        !JS_DefineFunction(c.cx, global, "__chaise_list_row", &Impl::native_list_row, 0, 0) ||
        !JS_DefineFunction(c.cx, global, "__chaise_list_output", &Impl::native_list_output, 2, 0))
      return false;
    JS::CompileOptions co(c.cx);
    co.setFileAndLine("prelude.js", 1);
    JS::SourceText<mozilla::Utf8Unit> src;
    if (!src.init(c.cx, kPrelude, std::strlen(kPrelude), JS::SourceOwnership::Borrowed))
      return false;
    JS::RootedValue rval(c.cx);
    if (!JS::Evaluate(c.cx, co, src, &rval)) {
      spdlog::critical("js: the prelude failed to load");
      return false;
    }
    return true;
  }

  void destroy(Context& c) {
    if (!c.cx) return;
    c.global.reset();
    JS_DestroyContext(c.cx);
    c.cx = nullptr;
  }

  static std::string pending_exception_text(JSContext* cx) {
    JS::RootedValue exc(cx);
    if (!JS_GetPendingException(cx, &exc)) return "unknown error";
    JS_ClearPendingException(cx);
    JS::RootedString s(cx, JS::ToString(cx, exc));
    if (!s) {
      JS_ClearPendingException(cx);
      return "unknown error";
    }
    JS::UniqueChars u = JS_EncodeStringToUTF8(cx, s);
    return u ? std::string(u.get()) : "unknown error";
  }

  // Runs one task on `c`; returns whether the context must be rebuilt.
  // Runs the task in c; the result, and whether the context must be rebuilt.
  std::pair<JsResult<std::string>, bool> run(Context& c, std::size_t slot, Task& t) {
    JSContext* cx = c.cx;
    {
      std::lock_guard lock(watch_mu);
      slots[slot] = Slot{cx, Clock::now() + options.timeout, false};
    }
    watch_cv.notify_all();
    c.kill = true;  // the interrupt callback stops the script if the watchdog fires
    c.task = &t;
    JsResult<std::string> result = JsError{"os_process_error", "unknown"};
    bool rebuild = false;
    {
      JSAutoRealm ar(cx, *c.global);
      JS::RootedValue fn(cx);
      JS::RootedObject global(cx, *c.global);
      JS::RootedValueArray<4> argv(cx);
      auto str = [&](std::string_view s) -> JSString* {
        return JS_NewStringCopyUTF8N(cx, JS::UTF8Chars(s.data(), s.size()));
      };
      JSString* a0 = str(t.op);
      JSString* a1 = a0 ? str(t.ddoc_key) : nullptr;
      JSString* a2 = a1 ? str(t.ddoc_json) : nullptr;
      JSString* a3 = a2 ? str(t.args) : nullptr;
      bool ok = a3 && JS_GetProperty(cx, global, "__chaise", &fn);
      if (ok) {
        argv[0].setString(a0);
        argv[1].setString(a1);
        argv[2].setString(a2);
        argv[3].setString(a3);
      }
      JS::RootedValue rv(cx);
      if (ok) ok = JS_CallFunctionValue(cx, global, fn, JS::HandleValueArray(argv), &rv);
      bool timed_out;
      {
        std::lock_guard lock(watch_mu);
        timed_out = slots[slot].interrupted;
        slots[slot] = Slot{};
      }
      // An interrupt was requested: even if the call got to its end first, the request may still
      // be pending in this context, so the context goes.
      if (timed_out) rebuild = true;
      if (ok && rv.isString()) {
        JS::RootedString s(cx, rv.toString());
        JS::UniqueChars u = JS_EncodeStringToUTF8(cx, s);
        if (u) {
          result = std::string(u.get());
        } else {
          result = JsError{"os_process_error", "out of memory"};
          rebuild = true;
        }
      } else if (timed_out) {
        result = JsError{"os_process_error", "timeout"};
        rebuild = true;
      } else if (t.stopped && !JS_IsExceptionPending(cx)) {
        // A list stopped by its caller: the script unwound uncatchably, the context is sound.
        result = JsError{"os_process_error", "stopped"};
      } else if (JS_IsExceptionPending(cx)) {
        std::string what = pending_exception_text(cx);
        result = JsError{"os_process_error", what};
        rebuild = true;  // the prelude catches everything a function throws: this is the engine
      } else {
        result = JsError{"os_process_error", "out of memory"};
        rebuild = true;
      }
    }
    c.kill = false;
    c.task = nullptr;
    if (!rebuild) JS_MaybeGC(cx);
    return {std::move(result), rebuild};
  }

  // A task's answer goes to its list's io, or to the caller waiting on `done`.
  static void complete(Task& t, JsResult<std::string> raw) {
    if (!t.list_io) {
      t.done.set_value(std::move(raw));
      return;
    }
    JsResult<std::string> r = unwrap(std::move(raw));
    std::shared_ptr<ListIo> io = std::move(t.list_io);
    if (auto* e = std::get_if<JsError>(&r))
      io->finished(std::move(*e));
    else
      io->finished(true);
  }

  // {"ok": result} -> result; {"error": e, "reason": r} -> JsError.
  static JsResult<std::string> unwrap(JsResult<std::string> raw) {
    if (std::holds_alternative<JsError>(raw)) return raw;
    const std::string& text = std::get<std::string>(raw);
    if (text.rfind("{\"ok\":", 0) == 0) return text.substr(6, text.size() - 7);
    try {
      auto j = nlohmann::json::parse(text);
      return JsError{j.value("error", "render_error"), j.value("reason", "")};
    } catch (const nlohmann::json::exception&) {
      return JsError{"render_error", "unreadable answer from JavaScript"};
    }
  }

  // A worker's context is built for its first task (and again after a rebuild): a server whose
  // databases run no JavaScript never loads SpiderMonkey's code or allocates its heaps.
  void worker_loop(std::size_t slot) {
    Context c;
    c.slot = slot;
    for (;;) {
      std::shared_ptr<Task> t;
      {
        std::unique_lock lock(mu);
        work_cv.wait(lock, [&] { return stopping || !queue.empty(); });
        if (stopping && queue.empty()) break;
        t = std::move(queue.front());
        queue.pop_front();
      }
      if (!c.cx) {
        std::unique_lock gate(context_gate());
        init_spidermonkey_once(options.jit);
        if (!build(c)) {
          spdlog::error("js: could not create a JavaScript context");
          destroy(c);
        }
      }
      if (!c.cx) {
        complete(*t, JsError{"os_process_error", "no JavaScript context"});
        continue;
      }
      std::pair<JsResult<std::string>, bool> outcome;
      {
        std::shared_lock gate(context_gate());
        outcome = run(c, slot, *t);
      }
      if (outcome.second) {
        std::unique_lock gate(context_gate());
        destroy(c);
        rebuilt.fetch_add(1);
      }
      complete(*t, std::move(outcome.first));
    }
    std::unique_lock gate(context_gate());
    destroy(c);
  }
};

Engine::Engine(EngineOptions options) : impl_(std::make_unique<Impl>(options)) {
  register_spidermonkey_shutdown_once();
  std::size_t n = options.contexts == 0 ? 1 : options.contexts;
  impl_->slots.resize(n);
  impl_->watchdog = std::thread([this] { impl_->watch_loop(); });
  for (std::size_t i = 0; i < n; ++i)
    impl_->workers.emplace_back([this, i] { impl_->worker_loop(i); });
}

Engine::~Engine() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->work_cv.notify_all();
  for (auto& w : impl_->workers) w.join();
  {
    std::lock_guard lock(impl_->watch_mu);
    impl_->stopping_watch = true;
  }
  impl_->watch_cv.notify_all();
  impl_->watchdog.join();
}

std::size_t Engine::calls() const { return impl_->calls.load(); }
std::size_t Engine::contexts_rebuilt() const { return impl_->rebuilt.load(); }
std::size_t Engine::contexts() const { return impl_->workers.size(); }
std::size_t Engine::queued() const {
  std::lock_guard lock(impl_->mu);
  return impl_->queue.size();
}

JsResult<std::string> Engine::call(std::string_view op, const DesignDoc* ddoc,
                                   std::string args_json) {
  auto t = std::make_shared<Task>();
  t->op = op;
  if (ddoc) {
    t->ddoc_key = ddoc->key;
    t->ddoc_json = ddoc->json;
  }
  t->args = std::move(args_json);
  return run_task(t);
}

bool Engine::enqueue(std::shared_ptr<Task> task) {
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->queue.size() >= impl_->options.queue_max) return false;
    impl_->queue.push_back(std::move(task));
  }
  impl_->calls.fetch_add(1);
  impl_->work_cv.notify_one();
  return true;
}

JsResult<std::string> Engine::run_task(const std::shared_ptr<Task>& task) {
  auto fut = task->done.get_future();
  if (!enqueue(task)) return JsError{"os_process_error", "too many JavaScript calls waiting"};
  return Impl::unwrap(fut.get());
}

namespace {

std::string json_string(std::string_view s) { return nlohmann::json(std::string(s)).dump(); }

std::string join_array(const std::vector<std::string>& items) {
  std::size_t n = 2;
  for (const auto& i : items) n += i.size() + 1;
  std::string out;
  out.reserve(n);
  out += '[';
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += ',';
    out += items[i];
  }
  out += ']';
  return out;
}

// Ordered: object members keep their order (it matters to collation and to clients).
template <typename T>
JsResult<T> parse_or(JsResult<std::string>&& r, auto&& f) {
  if (std::holds_alternative<JsError>(r)) return std::get<JsError>(r);
  try {
    return f(nlohmann::ordered_json::parse(std::get<std::string>(r)));
  } catch (const nlohmann::json::exception&) {
    return JsError{"render_error", "unreadable answer from JavaScript"};
  }
}

// What a validation function's answer says: 1 (it returned), else the value it threw.
Verdict verdict_of(const nlohmann::ordered_json& j) {
  Verdict v;
  if (j == 1 || j == true) return v;
  auto text = [](const nlohmann::ordered_json& m) {
    return m.is_string() ? m.get<std::string>() : m.dump();
  };
  if (j.is_object() && j.size() == 1) {
    auto it = j.begin();
    if (it.key() == "forbidden") return Verdict{Verdict::Kind::forbidden, text(it.value())};
    if (it.key() == "unauthorized") return Verdict{Verdict::Kind::unauthorized, text(it.value())};
    return Verdict{Verdict::Kind::other, text(it.value())};
  }
  return Verdict{Verdict::Kind::other, text(j)};
}

}  // namespace

JsResult<std::vector<std::string>> Engine::map(const DesignDoc& ddoc,
                                               const std::vector<std::string>& views,
                                               const std::vector<std::string>& docs) {
  nlohmann::json names = views;
  std::string args = "[" + names.dump() + "," + join_array(docs) + "]";
  return parse_or<std::vector<std::string>>(call("map", &ddoc, std::move(args)), [&](auto j) {
    std::vector<std::string> out;
    out.reserve(j.size());
    for (auto& d : j) out.push_back(d.dump());
    if (out.size() != docs.size()) throw nlohmann::json::other_error::create(501, "size", nullptr);
    return out;
  });
}

JsResult<std::string> Engine::reduce(const std::vector<std::string>& sources,
                                     std::string_view kvs_json, bool rereduce) {
  nlohmann::json fns = sources;
  std::string args = "{\"fns\":" + fns.dump() + ",\"rereduce\":" + (rereduce ? "true" : "false") +
                     ",\"limit\":" + (impl_->options.reduce_limit ? "true" : "false") +
                     ",\"inputLength\":" + std::to_string(kvs_json.size()) +
                     ",\"kvs\":" + std::string(kvs_json) + "}";
  return call("reduce", nullptr, std::move(args));
}

JsResult<std::vector<JsResult<std::string>>> Engine::reduce_many(
    const std::string& source, const std::vector<std::string>& inputs, bool rereduce) {
  std::string args = "{\"fn\":" + nlohmann::json(source).dump() +
                     ",\"rereduce\":" + (rereduce ? "true" : "false") +
                     ",\"limit\":" + (impl_->options.reduce_limit ? "true" : "false") +
                     ",\"items\":[";
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (i) args += ',';
    args += "{\"inputLength\":" + std::to_string(inputs[i].size()) + ",\"kvs\":" + inputs[i] + "}";
  }
  args += "]}";
  using Out = std::vector<JsResult<std::string>>;
  return parse_or<Out>(
      call("reduce_many", nullptr, std::move(args)), [&](const nlohmann::ordered_json& j) {
        Out out;
        for (const auto& item : j) {
          if (item.at(0) == "ok")
            out.emplace_back(item.at(1).dump());
          else
            out.emplace_back(JsError{item.at(1).get<std::string>(), item.at(2).get<std::string>()});
        }
        if (out.size() != inputs.size())
          throw nlohmann::json::other_error::create(501, "size", nullptr);
        return out;
      });
}

JsResult<std::string> Engine::show(const DesignDoc& ddoc, std::string_view name,
                                   std::string_view doc, std::string_view req) {
  std::string args =
      "[" + json_string(name) + "," + std::string(doc) + "," + std::string(req) + "]";
  return call("show", &ddoc, std::move(args));
}

void Engine::list(const DesignDoc& ddoc, std::string_view name, std::string_view head,
                  std::string_view req, std::shared_ptr<ListIo> io) {
  auto t = std::make_shared<Task>();
  t->op = "list";
  t->ddoc_key = ddoc.key;
  t->ddoc_json = ddoc.json;
  t->args = "[" + json_string(name) + "," + std::string(head) + "," + std::string(req) + "]";
  t->list_io = io;
  if (!enqueue(std::move(t)))
    io->finished(JsError{"os_process_error", "too many JavaScript calls waiting"});
}

JsResult<std::optional<std::string>> Engine::rewrite(const DesignDoc& ddoc, std::string_view req) {
  return parse_or<std::optional<std::string>>(
      call("rewrite", &ddoc, "[" + std::string(req) + "]"),
      [](const nlohmann::ordered_json& j) -> std::optional<std::string> {
        if (j.is_null()) return std::nullopt;
        return j.dump();
      });
}

JsResult<Verdict> Engine::validate(const DesignDoc& ddoc, std::string_view new_doc,
                                   std::string_view old_doc, std::string_view user_ctx,
                                   std::string_view sec_obj) {
  std::string args = "[" + std::string(new_doc) + "," + std::string(old_doc) + "," +
                     std::string(user_ctx) + "," + std::string(sec_obj) + "]";
  return parse_or<Verdict>(call("validate", &ddoc, std::move(args)), verdict_of);
}

JsResult<UpdateBatch> Engine::update_many(
    const DesignDoc& ddoc, std::string_view id, std::string_view rev, std::string_view body,
    const std::vector<UpdateCall>& calls,
    const std::vector<std::shared_ptr<const DesignDoc>>& validators, const Accept& accept) {
  std::string args = "{\"id\":" + json_string(id) + ",\"rev\":" + json_string(rev) +
                     ",\"body\":" + json_string(body) +
                     ",\"budgetMs\":" + std::to_string(kUpdateBatchTime.count()) +
                     ",\"validators\":[";
  for (std::size_t i = 0; i < validators.size(); ++i) {
    if (i) args += ',';
    args += "{\"key\":" + json_string(validators[i]->key) +
            ",\"json\":" + json_string(validators[i]->json) + "}";
  }
  args += "],\"calls\":[";
  for (std::size_t i = 0; i < calls.size(); ++i) {
    if (i) args += ',';
    args += "{\"name\":" + json_string(calls[i].name) + ",\"req\":" + calls[i].req +
            ",\"userCtx\":" + json_string(calls[i].user_ctx) +
            ",\"secObj\":" + json_string(calls[i].sec_obj) + "}";
  }
  args += "]}";
  auto t = std::make_shared<Task>();
  t->op = "update_many";
  t->ddoc_key = ddoc.key;
  t->ddoc_json = ddoc.json;
  t->args = std::move(args);
  t->accept = &accept;
  JsResult<std::string> raw = run_task(t);
  if (auto* e = std::get_if<JsError>(&raw)) {
    if (e->error == "os_process_error" && e->reason == "timeout")
      return UpdateBatch{{}, t->running_call};
    return *e;
  }
  return parse_or<UpdateBatch>(std::move(raw), [&](const nlohmann::ordered_json& j) {
    using Kind = UpdateOutcome::Kind;
    UpdateBatch out;
    if (!j.is_array() || j.size() > calls.size())
      throw nlohmann::json::other_error::create(501, "size", nullptr);
    for (const auto& item : j) {
      UpdateOutcome o;
      const std::string& what = item.at(0).get_ref<const std::string&>();
      if (what == "saved" || what == "unsaved") {
        o.kind = what == "saved" ? Kind::saved : Kind::unsaved;
        o.response_json = item.at(1).dump();
      } else if (what == "declined") {
        o.kind = Kind::declined;
      } else if (what == "refused") {
        o.kind = Kind::refused;
      } else if (what == "invalid") {
        o.kind = Kind::invalid;
        o.verdict = verdict_of(item.at(1));
      } else {
        o.kind = what == "error" ? Kind::failed : Kind::validator_failed;
        o.error = JsError{item.at(1).get<std::string>(), item.at(2).get<std::string>()};
      }
      out.outcomes.push_back(std::move(o));
    }
    return out;
  });
}

JsResult<std::vector<bool>> Engine::filter(const DesignDoc& ddoc, std::string_view name,
                                           const std::vector<std::string>& docs,
                                           std::string_view req) {
  std::string args =
      "[" + json_string(name) + "," + join_array(docs) + "," + std::string(req) + "]";
  return parse_or<std::vector<bool>>(call("filter", &ddoc, std::move(args)), [](auto j) {
    std::vector<bool> out;
    for (auto& b : j) out.push_back(b.is_boolean() && b.template get<bool>());
    return out;
  });
}

JsResult<std::vector<bool>> Engine::filter_view(const DesignDoc& ddoc, std::string_view name,
                                                const std::vector<std::string>& docs) {
  std::string args = "[" + json_string(name) + "," + join_array(docs) + "]";
  return parse_or<std::vector<bool>>(call("filter_view", &ddoc, std::move(args)), [](auto j) {
    std::vector<bool> out;
    for (auto& b : j) out.push_back(b.is_boolean() && b.template get<bool>());
    return out;
  });
}

JsResult<UpdateAnswer> Engine::update(const DesignDoc& ddoc, std::string_view name,
                                      std::string_view doc, std::string_view req) {
  std::string args =
      "[" + json_string(name) + "," + std::string(doc) + "," + std::string(req) + "]";
  return parse_or<UpdateAnswer>(call("update", &ddoc, std::move(args)), [](auto j) {
    return UpdateAnswer{j.at(0).is_null() ? std::string() : j.at(0).dump(), j.at(1).dump()};
  });
}

JsResult<bool> Engine::compiles(std::string_view source) {
  return parse_or<bool>(call("compile", nullptr, "[" + json_string(source) + "]"),
                        [](auto) { return true; });
}

std::string spidermonkey_version() { return std::to_string(MOZJS_MAJOR_VERSION); }

}  // namespace chaise::core::js

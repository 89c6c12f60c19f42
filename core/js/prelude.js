// core/js/prelude.js — the JavaScript environment every Chaise JS context starts with.
//
// It gives design-document functions what CouchDB's query server gives them (emit, sum, log,
// toJSON, isArray, require) and defines one entry point for the C++ side:
//   __chaise(op, ddocKey, ddocJson, argsJson) -> JSON text {"ok": result} | {"error", "reason"}
// Compiled functions are cached per design-document key. Embedded into the binary at build time
// (core/js/CMakeLists.txt); __chaise_log, __chaise_call_begin and __chaise_accept are the natives
// the context defines first.
(function (global) {
  var nativeLog = global.__chaise_log;
  var callBegin = global.__chaise_call_begin;  // (i): call i of a batch starts its own time limit
  var accept = global.__chaise_accept;         // (i, body) -> revision | null (update_many)
  var listRow = global.__chaise_list_row;      // () -> row JSON text | null (list)
  var listOutput = global.__chaise_list_output;  // (resp JSON text | "", data) (list)
  var evalGlobal = eval;  // indirect eval: user code compiles in the global scope
  var MAX_DDOCS = 64;
  var MAX_REDUCE_FUNS = 256;
  var ddocs = new Map();        // key -> {doc, funs: Map, modules: Map}
  var reduceFuns = new Map();   // source -> function
  var current = null;           // the design doc whose function runs (for require)
  var emitted = null;           // rows emitted by the map function that runs

  function CouchError(error, reason) {
    this.error = error;
    this.reason = reason;
  }

  function errstr(e) {
    if (e instanceof CouchError) return e.error + ": " + e.reason;
    if (e && typeof e === "object" && "message" in e) return String(e.name || "Error") + ": " + e.message;
    try {
      var s = JSON.stringify(e);
      return s === undefined ? String(e) : s;
    } catch (_) {
      return String(e);
    }
  }

  function errorToJson(e) {
    if (e !== null && typeof e === "object" && "stack" in e && "name" in e && "message" in e)
      return {error: e.name, message: e.message};
    return e;
  }

  function deepFreeze(o) {
    if (o === null || typeof o !== "object" || Object.isFrozen(o)) return o;
    Object.freeze(o);
    var names = Object.getOwnPropertyNames(o);
    for (var i = 0; i < names.length; i++) deepFreeze(o[names[i]]);
    return o;
  }

  // CouchDB's thrown-array convention: ["error", name, reason] or ["fatal", name, reason].
  function asCouchError(e) {
    if (e instanceof CouchError) return e;
    if (Array.isArray(e) && e.length >= 3 && (e[0] === "error" || e[0] === "fatal"))
      return new CouchError(String(e[1]), String(e[2]));
    return null;
  }

  // What a call that threw answers: [error, reason]. A JavaScript error answers with its name
  // ("TypeError") as the error, as CouchDB does.
  function errorPair(e) {
    var ce = asCouchError(e);
    if (ce !== null) return [String(ce.error), String(ce.reason)];
    if (e && typeof e === "object" && "message" in e && e.name) return [String(e.name), String(e.message)];
    return ["render_error", errstr(e)];
  }

  function compile(source, what) {
    if (typeof source !== "string" || source.length === 0)
      throw new CouchError("not_found", "missing function");
    var trimmed = source.replace(/^\s+/, "").replace(/[\s;]+$/, "");
    var fn;
    try {
      fn = evalGlobal("(" + trimmed + "\n)");
    } catch (first) {
      try {
        fn = evalGlobal(source);
      } catch (_) {
        throw new CouchError("compilation_error", errstr(first) + " (" + source + ")");
      }
    }
    if (typeof fn !== "function")
      throw new CouchError("compilation_error",
                           "Expression does not eval to a function. (" + source + ")");
    return fn;
  }

  function resolve(entry, fromId, name) {
    var parts = String(name).split("/");
    var path = [];
    if (fromId !== null && (parts[0] === "." || parts[0] === ".."))
      path = fromId.split("/").slice(0, -1);
    for (var i = 0; i < parts.length; i++) {
      var p = parts[i];
      if (p === "." || p === "") continue;
      if (p === "..") {
        if (path.length === 0)
          throw new CouchError("invalid_require_path", "Object has no parent " + JSON.stringify(name));
        path.pop();
      } else {
        path.push(p);
      }
    }
    var cur = entry.doc;
    for (var j = 0; j < path.length; j++) {
      if (cur === null || typeof cur !== "object" || cur[path[j]] === undefined)
        throw new CouchError("invalid_require_path",
                             "Object has no property \"" + path[j] + "\". " + JSON.stringify(cur));
      cur = cur[path[j]];
    }
    if (typeof cur !== "string")
      throw new CouchError("invalid_require_path", "Must require a JavaScript string, not: " + typeof cur);
    return {id: path.join("/"), source: cur};
  }

  function requireFrom(entry, fromId, name) {
    var m = resolve(entry, fromId, name);
    if (entry.modules.has(m.id)) return entry.modules.get(m.id).exports;
    var module = {id: m.id, exports: {}, current: m.source};
    entry.modules.set(m.id, module);  // before running it: a circular require sees {}
    try {
      var f = evalGlobal("(function (module, exports, require) { " + m.source + "\n })");
      f.call(null, module, module.exports, function (n) { return requireFrom(entry, m.id, n); });
    } catch (e) {
      entry.modules.delete(m.id);
      throw new CouchError("compilation_error", "Module require('" + name + "') raised error " + errstr(e));
    }
    return module.exports;
  }

  global.require = function (name) {
    if (current === null) throw new CouchError("invalid_require_path", "require outside a design document");
    return requireFrom(current, null, name);
  };
  global.emit = function (key, value) {
    if (emitted === null) throw new Error("emit is only available in map functions");
    emitted.push([key === undefined ? null : key, value === undefined ? null : errorToJson(value)]);
  };
  global.sum = function (values) {
    var r = 0;
    for (var i in values) r += values[i];
    return r;
  };
  global.log = function (message) {
    if (typeof message !== "string") message = JSON.stringify(errorToJson(message));
    nativeLog(String(message));
  };
  global.toJSON = function (v) { return JSON.stringify(v); };
  global.isArray = function (v) { return Array.isArray(v); };

  // Media types as show and list functions name them in provides(), and how an Accept header
  // chooses among them (the fitness and quality rules of RFC 7231, section 5.3.2).
  var mimesByKey = {}, keysByMime = {};
  function registerType(key) {
    var mimes = Array.prototype.slice.call(arguments, 1);
    mimesByKey[key] = mimes;
    for (var i = 0; i < mimes.length; i++) keysByMime[mimes[i]] = key;
  }
  registerType("all", "*/*");
  registerType("text", "text/plain; charset=utf-8", "txt");
  registerType("html", "text/html; charset=utf-8");
  registerType("xhtml", "application/xhtml+xml", "xhtml");
  registerType("xml", "application/xml", "text/xml", "application/x-xml");
  registerType("js", "text/javascript", "application/javascript", "application/x-javascript");
  registerType("css", "text/css");
  registerType("ics", "text/calendar");
  registerType("csv", "text/csv");
  registerType("rss", "application/rss+xml");
  registerType("atom", "application/atom+xml");
  registerType("yaml", "application/x-yaml", "text/yaml");
  registerType("multipart_form", "multipart/form-data");
  registerType("url_encoded_form", "application/x-www-form-urlencoded");
  registerType("json", "application/json", "text/x-json");

  // "type/sub; a=b; q=0.5" -> {type, sub, params (without q), q}
  function mediaRange(text) {
    var parts = String(text).split(";");
    var full = parts[0].trim();
    if (full === "*") full = "*/*";
    var slash = full.indexOf("/");
    var r = {type: slash < 0 ? full : full.slice(0, slash), sub: slash < 0 ? "" : full.slice(slash + 1),
             params: {}, q: 1};
    for (var i = 1; i < parts.length; i++) {
      var eq = parts[i].indexOf("=");
      if (eq < 0) continue;
      var k = parts[i].slice(0, eq).trim(), v = parts[i].slice(eq + 1).trim();
      if (k === "q") {
        var q = parseFloat(v);
        r.q = isNaN(q) || q < 0 || q > 1 ? 1 : q;
      } else {
        r.params[k] = v;
      }
    }
    return r;
  }
  // The supported type the Accept header prefers: the best-fitting range decides the quality;
  // ties go to the higher quality, then to the type listed later. "" when none is acceptable.
  function bestMatch(supported, header) {
    var ranges = String(header).split(",").map(mediaRange);
    var best = null;
    for (var i = 0; i < supported.length; i++) {
      var m = mediaRange(supported[i]), fit = -1, q = 0;
      for (var j = 0; j < ranges.length; j++) {
        var r = ranges[j];
        if ((r.type !== m.type && r.type !== "*" && m.type !== "*") ||
            (r.sub !== m.sub && r.sub !== "*" && m.sub !== "*")) continue;
        var f = (r.type === m.type ? 100 : 0) + (r.sub === m.sub ? 10 : 0), ok = true;
        for (var k in r.params) {
          if (m.params[k] === r.params[k]) f += 1;
          else ok = false;
        }
        if (ok && f > fit) {
          fit = f;
          q = r.q;
        }
      }
      if (best === null || fit > best.fit || (fit === best.fit && q >= best.q))
        best = {fit: fit, q: q, mime: supported[i]};
    }
    return best !== null && best.q > 0 && best.fit >= 0 ? best.mime : "";
  }

  // provides(key, fn): what a show or list function can answer, chosen by ?format= or Accept.
  var provided = [], responseType = null;
  function runProvides(req, ddoc) {
    var bestKey = null, accept = req && req.headers ? req.headers["Accept"] : undefined;
    if (req && req.query && req.query.format) {
      bestKey = req.query.format;
      responseType = mimesByKey[bestKey] ? mimesByKey[bestKey][0] : null;
    } else if (accept) {
      var supported = [];
      // In place, as CouchDB's query server does: the error below then lists them reversed.
      provided.reverse().forEach(function (p) {
        if (mimesByKey[p[0]]) supported = supported.concat(mimesByKey[p[0]]);
      });
      responseType = bestMatch(supported, accept);
      bestKey = keysByMime[responseType];
    } else {
      bestKey = provided[0][0];
      responseType = mimesByKey[bestKey] ? mimesByKey[bestKey][0] : null;
    }
    for (var i = 0; i < provided.length; i++)
      if (provided[i][0] === bestKey) return provided[i][1].call(ddoc);
    var types = provided.map(function (p) { return (mimesByKey[p[0]] || []).join(", ") || p[0]; });
    throw new CouchError("not_acceptable", "Content-Type " + (accept || bestKey) +
                         " not supported, try one of: " + types.join(", "));
  }

  // start(), send() and getRow(): a show or list function's response head, text and rows.
  var render = null;  // {chunks, startResp, newHeader, gotRow, lastRow, list}
  function resetRender(list) {
    render = {chunks: [], startResp: {}, newHeader: false, gotRow: false, lastRow: false, list: list};
    provided = [];
    responseType = null;
  }
  function withContentType(resp) {
    resp.headers = resp.headers || {};
    if (responseType) resp.headers["Content-Type"] = resp.headers["Content-Type"] || responseType;
    return resp;
  }
  function flush(withHead) {
    var data = render.chunks.join("");
    render.chunks = [];
    var head = withHead ? JSON.stringify(render.startResp) : "";
    if (withHead) {
      render.startResp = {};
      render.newHeader = false;
    }
    listOutput(head, data);
  }
  global.start = function (resp) {
    if (render === null) throw new Error("start is only available in show and list functions");
    render.startResp = resp || {};
    render.newHeader = true;
  };
  global.send = function (chunk) {
    if (render === null) throw new Error("send is only available in show and list functions");
    render.chunks.push(String(chunk));
  };
  global.getRow = function () {
    if (render === null || !render.list) throw new Error("getRow is only available in list functions");
    if (render.lastRow) return null;
    if (!render.gotRow) {
      render.gotRow = true;
      withContentType(render.startResp);
      render.newHeader = true;
    }
    flush(render.newHeader);
    var row = listRow();
    if (row === null) {
      render.lastRow = true;
      return null;
    }
    return JSON.parse(row);
  };
  global.provides = function (key, fn) { provided.push([key, fn]); };
  global.registerType = registerType;

  function wrapResponse(resp) {
    return typeof resp === "string" ? {body: resp} : resp;
  }
  // A function's error as CouchDB's query server reports it: CouchDB errors as they are, anything
  // else as `type` ("render_error") with the thrown value and its stack.
  function renderError(e, type) {
    if (asCouchError(e) !== null || (e && e.error && e.reason)) throw e;
    var what = typeof e === "string" ? "(new String(" + JSON.stringify(e) + "))" : errstr(e);
    var msg = "function raised error: " + what + " \nstacktrace: " + (e && e.stack);
    log(msg);
    throw new CouchError(type || "render_error", msg);
  }

  function designDoc(key, json) {
    var entry = ddocs.get(key);
    if (entry !== undefined) {
      ddocs.delete(key);  // most recently used last
      ddocs.set(key, entry);
      return entry;
    }
    entry = {doc: JSON.parse(json), funs: new Map(), modules: new Map()};
    ddocs.set(key, entry);
    if (ddocs.size > MAX_DDOCS) ddocs.delete(ddocs.keys().next().value);
    return entry;
  }

  function fun(entry, path) {
    var k = path.join("\u0000");
    var f = entry.funs.get(k);
    if (f !== undefined) return f;
    var src = entry.doc;
    for (var i = 0; i < path.length; i++) {
      src = (src !== null && typeof src === "object") ? src[path[i]] : undefined;
      if (src === undefined) throw new CouchError("not_found", "missing function " + path.join("."));
    }
    f = compile(src, path.join("."));
    entry.funs.set(k, f);
    return f;
  }

  // An update function's call: [doc or null, response object].
  function runUpdate(entry, f, doc, req) {
    if (req && req.method === "GET")
      throw new CouchError("method_not_allowed", "Update functions do not allow GET");
    var result = f.call(entry.doc, doc, req);
    if (!Array.isArray(result))
      throw new CouchError("render_error", "undefined response from update function");
    var resp = result[1];
    if (typeof resp === "string" || resp === undefined || resp === null) resp = {body: resp || ""};
    return [result[0] === undefined ? null : result[0], resp];
  }

  function mapOne(fn, doc) {
    emitted = [];
    try {
      fn(doc);
      return emitted;
    } catch (e) {
      var ce = asCouchError(e);
      if (e === "fatal_error") throw new CouchError("map_runtime_error", "function raised 'fatal_error'");
      if (ce !== null && Array.isArray(e) && e[0] === "fatal") throw ce;
      if (e && e.name === "InternalError") throw new CouchError(String(e.name), String(e.message));
      log("function raised exception " + errstr(e) + " with doc._id " + (doc && doc._id));
      return [];
    } finally {
      emitted = null;
    }
  }

  var ops = {
    map: function (entry, args) {
      var views = args[0], docs = args[1];
      var fns = views.map(function (v) { return fun(entry, ["views", v, "map"]); });
      var out = new Array(docs.length);
      for (var i = 0; i < docs.length; i++) {
        var doc = deepFreeze(docs[i]);
        var perDoc = new Array(fns.length);
        for (var j = 0; j < fns.length; j++) perDoc[j] = mapOne(fns[j], doc);
        out[i] = perDoc;
      }
      return out;
    },
    // Many independent reductions with one function (the reduce tree's changed nodes): one
    // answer per item, ["ok", value] or ["error", name, reason], so one failing item fails
    // only itself.
    reduce_many: function (_entry, args) {
      return args.items.map(function (item) {
        try {
          var r = ops.reduce(null, {fns: [args.fn], rereduce: args.rereduce, limit: args.limit,
                                    inputLength: item.inputLength, kvs: item.kvs});
          return ["ok", r[0]];
        } catch (e) {
          var ce = asCouchError(e);
          if (ce === null) throw e;
          return ["error", String(ce.error), String(ce.reason)];
        }
      });
    },
    reduce: function (_entry, args) {
      var fns = args.fns.map(function (src) {
        var f = reduceFuns.get(src);
        if (f === undefined) {
          f = compile(src, "reduce");
          reduceFuns.set(src, f);
          if (reduceFuns.size > MAX_REDUCE_FUNS) reduceFuns.delete(reduceFuns.keys().next().value);
        }
        return f;
      });
      var keys = null, values;
      if (args.rereduce) {
        values = args.kvs;
      } else {
        keys = new Array(args.kvs.length);
        values = new Array(args.kvs.length);
        for (var i = 0; i < args.kvs.length; i++) {
          keys[i] = args.kvs[i][0];
          values[i] = args.kvs[i][1];
        }
      }
      var out = fns.map(function (f) {
        try {
          var r = f(keys, values, !!args.rereduce);
          return r === undefined ? null : r;
        } catch (e) {
          var ce = asCouchError(e);
          if (ce !== null) throw ce;
          if (e && e.name === "InternalError") throw new CouchError(String(e.name), String(e.message));
          log("function raised exception " + errstr(e));
          return null;
        }
      });
      if (args.limit) {
        var outLen = JSON.stringify(out).length;
        if (outLen > 4096 && outLen * 2 > args.inputLength)
          throw new CouchError("reduce_overflow_error",
                               "Reduce output must shrink more rapidly: input size: " + args.inputLength +
                               " output size: " + outLen);
      }
      return out;
    },
    validate: function (entry, args) {
      var f = fun(entry, ["validate_doc_update"]);
      try {
        f.apply(entry.doc, args);
        return 1;
      } catch (e) {
        if (e && e.name && e.stack) throw e;
        return e === undefined ? null : e;
      }
    },
    filter: function (entry, args) {
      var f = fun(entry, ["filters", args[0]]);
      var docs = args[1], req = args[2];
      var out = new Array(docs.length);
      for (var i = 0; i < docs.length; i++) out[i] = (f.apply(entry.doc, [docs[i], req]) && true) || false;
      return out;
    },
    filter_view: function (entry, args) {
      var f = fun(entry, ["views", args[0], "map"]);
      var docs = args[1];
      var out = new Array(docs.length);
      for (var i = 0; i < docs.length; i++) out[i] = mapOne(f, deepFreeze(docs[i])).length > 0;
      return out;
    },
    update: function (entry, args) {
      return runUpdate(entry, fun(entry, ["updates", args[0]]), args[1], args[2]);
    },
    // Update-handler calls on one document (id, its revision rev and body text), each on what
    // the call before it saved, with the database's validation functions run on each save: the
    // document enters once, and each accepted body leaves once, through __chaise_accept(i, body),
    // which answers the new revision (or null: refused). A call that fails leaves the document as
    // the last saved call left it. Per call: ["saved", resp], ["unsaved", resp] (no document),
    // ["declined"] (another id, a deletion, not an object: not an update in place),
    // ["refused"], ["error", name, reason] (the handler), ["invalid", thrown] or
    // ["vdu_error", name, reason] (a validation function). Stops before a call once
    // args.budgetMs have passed: fewer answers than calls.
    update_many: function (entry, args) {
      var id = args.id, rev = args.rev, text = args.body;
      var vdus = args.validators.map(function (v) { return designDoc(v.key, v.json); });
      var idJson = JSON.stringify(id);
      var withMeta = function (body) {
        return '{"_id":' + idJson + ',"_rev":' + JSON.stringify(rev) + (body.length > 2 ? "," + body.slice(1) : "}");
      };
      var start = Date.now(), out = [], handlers = new Map();
      for (var i = 0; i < args.calls.length; i++) {
        if (i > 0 && Date.now() - start > args.budgetMs) break;
        callBegin(i);
        var c = args.calls[i];
        var saved, resp, bodyText;
        try {
          current = entry;
          var f = handlers.get(c.name);
          if (f === undefined) {
            f = fun(entry, ["updates", c.name]);
            handlers.set(c.name, f);
          }
          var answer = runUpdate(entry, f, JSON.parse(withMeta(text)), c.req);
          saved = answer[0];
          resp = answer[1];
          if (saved === null) {
            out.push(["unsaved", resp]);
            continue;
          }
          if (typeof saved !== "object" || Array.isArray(saved) || saved._id !== id || saved._deleted === true) {
            out.push(["declined"]);
            continue;
          }
          var body = {};
          for (var k in saved)
            if (k.charCodeAt(0) !== 95 && Object.prototype.hasOwnProperty.call(saved, k)) body[k] = saved[k];
          bodyText = JSON.stringify(body);
          JSON.stringify(resp);  // an answer that cannot be sent fails here, not the whole batch
        } catch (e) {
          out.push(["error"].concat(errorPair(e)));
          continue;
        }
        var verdict = null;
        for (var v = 0; v < vdus.length && verdict === null; v++) {
          try {
            current = vdus[v];
            fun(vdus[v], ["validate_doc_update"]).apply(vdus[v].doc, [
              JSON.parse(withMeta(bodyText)), JSON.parse(withMeta(text)),
              JSON.parse(c.userCtx), JSON.parse(c.secObj)]);
          } catch (e) {
            // A function that does not compile or fails to run, as opposed to one that refuses.
            if (e instanceof CouchError || (e && e.name && e.stack)) verdict = ["vdu_error"].concat(errorPair(e));
            else verdict = ["invalid", e === undefined ? null : e];
          }
        }
        current = null;
        if (verdict !== null) {
          out.push(verdict);
          continue;
        }
        var next = accept(i, bodyText);
        if (next === null) {
          out.push(["refused"]);
          continue;
        }
        text = bodyText;
        rev = next;
        out.push(["saved", resp]);
      }
      return out;
    },
    // shows.<name>(doc, req): the response object, with what start() and send() set and the
    // provides() the Accept header chose.
    show: function (entry, args) {
      var f = fun(entry, ["shows", args[0]]), doc = args[1], req = args[2];
      try {
        resetRender(false);
        var resp = wrapResponse(f.apply(entry.doc, [doc, req]) || {});
        if (render.chunks.length > 0) {
          resp.headers = resp.headers || {};
          var sh = render.startResp.headers || {};
          for (var h in sh) resp.headers[h] = sh[h];
          if (render.startResp.code !== undefined && resp.code === undefined) resp.code = render.startResp.code;
          resp.body = render.chunks.join("") + (resp.body || "");
          render.chunks = [];
        }
        if (provided.length > 0) {
          var p = wrapResponse(runProvides(req, entry.doc) || {});
          // Only the chosen function's body counts ("json" there is not read, as in CouchDB).
          resp.body = (resp.body || "") + render.chunks.join("") + (p.body || "");
          resp = withContentType(resp);
        }
        if (resp === null || typeof resp !== "object" || Array.isArray(resp))
          throw new CouchError("render_error", "undefined response from show function");
        return resp;
      } catch (e) {
        if (doc === null && req && req.path && req.path.length > 5)
          throw new CouchError("not_found", "document not found");
        renderError(e);
      } finally {
        render = null;
      }
    },
    // lists.<name>(head, req): the output leaves through __chaise_list_output, the rows come in
    // through __chaise_list_row; the answer is only whether it ended well.
    list: function (entry, args) {
      var f = fun(entry, ["lists", args[0]]), head = args[1], req = args[2];
      try {
        resetRender(true);
        var tail = f.apply(entry.doc, [head, req]);
        if (provided.length > 0) tail = runProvides(req, entry.doc);
        if (!render.gotRow) global.getRow();
        if (tail !== undefined) render.chunks.push(String(tail));
        flush(render.newHeader);
        return true;
      } catch (e) {
        renderError(e);
      } finally {
        render = null;
      }
    },
    // The "rewrites" function over req: null when it dispatches nothing, else the rewrite object.
    rewrite: function (entry, args) {
      var f = fun(entry, ["rewrites"]), result;
      try {
        result = f.apply(entry.doc, args);
      } catch (e) {
        renderError(e, "rewrite_error");
      }
      if (!result) return null;
      if (typeof result === "string") result = {path: result, method: args[0].method};
      return result;
    },
    compile: function (_entry, args) {
      compile(args[0], "check");
      return true;
    }
  };

  global.__chaise = function (op, ddocKey, ddocJson, argsJson) {
    try {
      var entry = ddocKey === "" ? null : designDoc(ddocKey, ddocJson);
      current = entry;
      var result = ops[op](entry, JSON.parse(argsJson));
      var text = JSON.stringify({ok: result});
      return text === undefined ? '{"ok":null}' : text;
    } catch (e) {
      var pair = errorPair(e);
      return JSON.stringify({error: pair[0], reason: pair[1]});
    } finally {
      current = null;
    }
  };
})(this);

// /{db}/_purge, /{db}/_purged_infos and /{db}/_purged_infos_limit, as CouchDB 3.5 answers them
// (chttpd_db.erl): the purge itself is core::PurgeBatch (core/batch/doc_batches.h), its log
// core/docs/purge.h. Server admins only (http/api/authz.cc), except GET /{db}/_purged_infos,
// which members may read.
#include "core/docs/purge.h"

#include "config/settings.h"
#include "core/batch/doc_batches.h"
#include "core/db/txid_janitor.h"
#include "http/api/request.h"
#include "http/api/router.h"
#include "http/api/txn.h"

namespace chaise::http {

namespace {

std::int64_t purge_setting(const Call& call, std::string_view key, std::int64_t fallback) {
  if (call.ctx.config == nullptr) return fallback;
  return config::get_int(*call.ctx.config->snapshot(), "purge", key, fallback);
}

// POST /{db}/_purge: {"docid": ["rev", ...], ...} -> 201 {"purge_seq": null, "purged": {...}},
// each id with the leaves it purged.
MaybeResponse purge(Call& call, const core::DbRef& db) {
  if (!call.is(beast_http::verb::post)) throw_method_not_allowed("POST");
  require_json_content_type(call);
  const Json body = parse_json_object_body(call.req, false);
  std::vector<core::PurgeRequest> requests;
  std::size_t revs_total = 0;
  for (const auto& [id, revs] : body.items()) {
    if (!revs.is_array()) throw HttpError(err::bad_request("Invalid list of revisions"));
    core::PurgeRequest r;
    r.id = id;
    for (const Json& rev : revs) {
      auto parsed = rev.is_string() ? core::RevId::parse(rev.get<std::string>()) : std::nullopt;
      if (!parsed) throw HttpError(err::bad_request("Invalid rev format"));
      r.revs.push_back(std::move(*parsed));
    }
    revs_total += r.revs.size();
    requests.push_back(std::move(r));
  }
  const std::int64_t docs_max =
      purge_setting(call, "max_document_id_number", core::kPurgeDocsMaxDefault);
  if (static_cast<std::int64_t>(requests.size()) > docs_max)
    throw HttpError(err::bad_request("Exceeded maximum number of documents."));
  const std::int64_t revs_max =
      purge_setting(call, "max_revisions_number", core::kPurgeRevsMaxDefault);
  if (static_cast<std::int64_t>(revs_total) > revs_max)
    throw HttpError(err::bad_request("Exceeded maximum number of revisions."));

  core::PurgeBatch batch(db.name, std::move(requests));
  batch.set_js(call.ctx.js);
  while (batch.has_more()) {
    storage::Status s =
        co_await run_txn(call.store(), [&](storage::Transaction& tr) { return batch(tr); });
    if (!s.ok()) co_return storage_error_response(call.req, s.error());
    if (call.ctx.janitor && !batch.tx_key().empty()) call.ctx.janitor->committed(batch.tx_key());
    batch.committed();
  }
  if (batch.db_missing()) throw HttpError(err::db_not_found());
  Json purged = Json::object();
  for (std::size_t i = 0; i < batch.requests().size(); ++i) {
    Json revs = Json::array();
    for (const core::RevId& rev : batch.purged()[i]) revs.push_back(rev.str());
    purged[batch.requests()[i].id] = std::move(revs);
  }
  co_return json_response(call.req, Status::created,
                          Json{{"purge_seq", nullptr}, {"purged", std::move(purged)}});
}

// GET /{db}/_purged_infos: {"purged_infos": [{"id": .., "revs": [..]}, ...]}, oldest first,
// streamed a page (its own transaction) at a time.
MaybeResponse purged_infos(Call& call, const core::DbRef& db) {
  if (!is_get(call)) throw_method_not_allowed("GET");
  constexpr std::size_t kPage = 1000;
  if (!co_await call.stream.begin(stream_head(call.req))) co_return std::nullopt;
  if (!co_await call.stream.write("{\"purged_infos\":[")) co_return std::nullopt;
  core::Sequence after;
  bool first = true;
  for (;;) {
    auto tr = call.store().create_transaction();
    auto page = core::purged_infos(tr, db, after, kPage);
    // The answer has begun: a storage failure can only cut it off.
    if (!page.ok()) co_return std::nullopt;
    std::string out;
    for (const core::PurgedInfo& info : *page) {
      Json revs = Json::array();
      for (const std::string& rev : info.revs) revs.push_back(rev);
      if (!first) out += ',';
      first = false;
      out += Json{{"id", info.id}, {"revs", std::move(revs)}}.dump();
      after = info.seq;
    }
    if (!co_await call.stream.write(out)) co_return std::nullopt;
    if (page->size() < kPage) break;
  }
  co_await call.stream.write("]}\n");
  co_await call.stream.finish();
  co_return std::nullopt;
}

// GET|PUT /{db}/_purged_infos_limit: how many purge entries the database keeps. Lowering it
// trims the oldest entries before answering, in bounded transactions.
MaybeResponse purged_infos_limit(Call& call, const core::DbRef& db) {
  if (is_get(call)) {
    auto tr = call.store().create_transaction();
    const std::int64_t limit = value_or_throw(core::purged_infos_limit(tr, db));
    co_return raw_json_response(call.req, Status::ok, std::to_string(limit));
  }
  if (!call.is(beast_http::verb::put)) throw_method_not_allowed("GET,PUT");
  // chttpd:json_body: no Content-Type check.
  const Json body = parse_json_body(call.req, false);
  if (!body.is_number_unsigned() || body.get<std::uint64_t>() == 0 ||
      body.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
    throw HttpError(err::bad_request("`purged_infos_limit` must be positive integer"));
  const auto limit = static_cast<std::int64_t>(body.get<std::uint64_t>());
  bool missing = false, set = false, more = true;
  while (more && !missing) {
    storage::Status s =
        co_await run_txn(call.store(), [&](storage::Transaction& tr) -> storage::Status {
          auto r = core::open_db(tr, db.name);
          if (!r.ok()) return r.error();
          missing = core::failed(*r) || std::get<core::DbRef>(*r).id != db.id;
          if (missing) return {};
          const core::DbRef& now = std::get<core::DbRef>(*r);
          if (!set) core::set_purged_infos_limit(tr, now, limit);
          auto trimmed = core::trim_purged_infos(tr, now, 0, core::PurgeBatch::kTrimMax);
          if (!trimmed.ok()) return trimmed.error();
          more = *trimmed;
          return {};
        });
    if (!s.ok()) co_return storage_error_response(call.req, s.error());
    set = true;
  }
  if (missing) throw HttpError(err::db_not_found());
  co_return json_response(call.req, Status::ok, Json{{"ok", true}});
}

}  // namespace

MaybeResponse handle_purge(Call& call, const core::DbRef& db) {
  const std::string& op = call.path.at(1);
  if (op == "_purge") co_return co_await purge(call, db);
  if (op == "_purged_infos") co_return co_await purged_infos(call, db);
  co_return co_await purged_infos_limit(call, db);
}

}  // namespace chaise::http

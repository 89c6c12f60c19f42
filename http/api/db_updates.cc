// GET /_db_updates: the server's database events (core/db/db_updates.h) as CouchDB 3.5's
// global_changes_httpd serves them: feed=normal|longpoll|continuous|eventsource, since (a
// sequence, or "now"), limit, descending, timeout and heartbeat; rows
// {"db_name":..,"type":"created"|"updated"|"deleted","seq":..}. Server admins only.
#include "core/db/db_updates.h"

#include <boost/asio/this_coro.hpp>
#include <charconv>

#include "core/docs/doc_json.h"
#include "http/api/feeds.h"
#include "http/api/metrics.h"
#include "http/api/request.h"
#include "http/api/router.h"

namespace chaise::http {

namespace {

// Rows read per transaction.
constexpr std::size_t kRowsPerPage = 1000;

struct DbUpdatesRequest {
  Feed feed = Feed::normal;
  core::Sequence since;
  std::optional<std::int64_t> limit;
  bool descending = false;
  std::optional<std::int64_t> heartbeat_ms;
  std::int64_t timeout_ms = 60'000;
};

// global_changes_httpd:to_non_neg_int.
std::int64_t non_negative(std::string_view text) {
  std::int64_t v = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0)
    throw HttpError(err::bad_request("invalid_integer"));
  return v;
}

DbUpdatesRequest parse(const Call& call, storage::Transaction& tr) {
  DbUpdatesRequest r;
  const std::string feed = call.query.get("feed").value_or("normal");
  if (feed == "normal") {
    r.feed = Feed::normal;
  } else if (feed == "longpoll") {
    r.feed = Feed::longpoll;
  } else if (feed == "continuous") {
    r.feed = Feed::continuous;
  } else if (feed == "eventsource") {
    r.feed = Feed::eventsource;
  } else {
    throw HttpError(
        err::bad_request("Supported `feed` types: normal, continuous, longpoll, eventsource"));
  }
  r.descending = call.query.get("descending") == "true";
  if (auto l = call.query.get("limit")) r.limit = non_negative(*l);
  // Both are capped by [chttpd] changes_timeout, as _changes' are.
  const std::int64_t max_ms = call.ctx.changes_timeout_ms;
  r.timeout_ms = max_ms;
  if (auto t = call.query.get("timeout")) r.timeout_ms = std::min(non_negative(*t), max_ms);
  if (auto h = call.query.get("heartbeat")) {
    if (*h == "true") {
      r.heartbeat_ms = max_ms;
    } else if (*h != "false") {
      r.heartbeat_ms = std::max<std::int64_t>(1, std::min(non_negative(*h), max_ms));
    }
  }
  if (auto s = call.query.get("since")) {
    if (*s == "now") {
      r.since = value_or_throw(core::newest_db_update(tr));
    } else {
      std::string_view text = *s;
      if (text.starts_with('"') && text.ends_with('"') && text.size() >= 2)
        text = text.substr(1, text.size() - 2);
      auto seq = core::Sequence::parse(text);
      if (!seq)
        throw HttpError(err::bad_request("Malformed sequence supplied in 'since' parameter."));
      r.since = *seq;
    }
  }
  return r;
}

std::string row_json(const core::DbUpdateRow& row) {
  std::string out = "{\"db_name\":";
  out += core::json_string(row.db_name);
  out += ",\"type\":";
  out += core::json_string(row.type);
  out += ",\"seq\":";
  out += core::json_string(row.seq.str());
  out += '}';
  return out;
}

}  // namespace

MaybeResponse handle_db_updates(Call& call) {
  require_server_admin(call);
  if (call.path.size() != 1) throw HttpError(err::not_found());
  if (!is_get(call)) throw_method_not_allowed("GET");
  storage::Database& store = call.store();
  DbUpdatesRequest r;
  {
    auto tr = store.create_transaction();
    r = parse(call, tr);
  }
  const bool live = r.feed != Feed::normal;
  if (live && !call.ctx.notifier) throw HttpError(err::bad_request("live feeds are not enabled"));
  const std::optional<FeedGauge> feed_gauge =
      live ? std::make_optional<FeedGauge>(call.ctx.metrics) : std::nullopt;
  if (call.is(beast_http::verb::head)) co_return raw_json_response(call.req, Status::ok, "");

  Response head = stream_head(call.req);
  if (r.feed == Feed::eventsource) {
    head.set(beast_http::field::content_type, "text/event-stream");
    head.set(beast_http::field::cache_control, "no-cache");
  }
  if (!co_await call.stream.begin(std::move(head))) co_return std::nullopt;
  FeedWriter out(call.stream, r.feed, ",\r\n");
  if (!co_await out.open()) co_return std::nullopt;
  auto executor = co_await boost::asio::this_coro::executor;
  auto wait = std::make_shared<FeedWait>(executor);
  if (live) FeedWait::watch_client(wait, call.stream);
  core::Sequence at = r.since;  // where the next page starts (exclusive)
  std::int64_t emitted = 0;
  std::vector<std::string> rows;
  for (;;) {
    std::int64_t counter = 0;
    bool more = true;
    bool sent = false;
    while (more) {
      std::size_t want = kRowsPerPage;
      if (r.limit)
        want = static_cast<std::size_t>(
            std::min<std::int64_t>(static_cast<std::int64_t>(want), *r.limit - emitted));
      if (want == 0) break;
      auto tr = store.create_transaction();
      if (live) core::prefetch_db_updates_counter(tr);
      auto page = value_or_throw(core::read_db_updates(tr, at, want, r.descending));
      if (live) counter = value_or_throw(core::read_db_updates_counter(tr));
      for (const core::DbUpdateRow& row : page) rows.push_back(row_json(row));
      if (!page.empty()) at = page.back().seq;
      emitted += static_cast<std::int64_t>(page.size());
      sent = sent || !page.empty();
      more = page.size() == want;
      if (!co_await out.rows(rows)) co_return std::nullopt;
    }
    if (!live || r.descending || (r.limit && emitted >= *r.limit)) break;
    if (r.feed == Feed::longpoll && sent) break;
    const ArmWake arm = [&call, counter](core::ChangesNotifier::Wake wake) {
      return call.ctx.notifier->wait_db_updates(counter, std::move(wake));
    };
    const WaitEnd end = co_await wait_for_more(out, wait, arm, r.heartbeat_ms, r.timeout_ms);
    if (end == WaitEnd::gone) co_return std::nullopt;
    if (end == WaitEnd::timed_out) break;
  }
  co_await out.close("\"last_seq\":" + core::json_string(at.str()));
  co_return std::nullopt;
}

}  // namespace chaise::http

#include "http/api/idempotency.h"

#include <openssl/evp.h>

#include <cstdint>
#include <stdexcept>

#include "config/config.h"
#include "core/db/databases.h"

namespace chaise::http {

namespace {

constexpr std::string_view kHeader = "Idempotency-Key";
constexpr std::size_t kKeyBytesMax = 255;
constexpr std::int64_t kTtlSecondsDefault = 24 * 3600;

bool is_write(beast_http::verb m) {
  return m == beast_http::verb::put || m == beast_http::verb::post ||
         m == beast_http::verb::delete_ || m == beast_http::verb::copy ||
         m == beast_http::verb::patch;
}

// The draft's value is a structured-field string ("..."); a bare token is taken as it is.
std::optional<std::string> parse_key(std::string_view v) {
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
  if (v.empty() || v.size() > kKeyBytesMax) return std::nullopt;
  for (char c : v)
    if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') return std::nullopt;
  return std::string(v);
}

// Length-prefixed, so that no two different requests share a prefix.
void append_field(std::string& out, std::string_view v) {
  out += std::to_string(v.size());
  out += ':';
  out += v;
}

std::string hex(const unsigned char* p, unsigned n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < n; ++i) {
    out += kHex[p[i] >> 4];
    out += kHex[p[i] & 15];
  }
  return out;
}

std::int64_t ttl_ms(const Call& call) {
  std::int64_t seconds = kTtlSecondsDefault;
  if (call.ctx.config != nullptr) {
    if (auto v = call.ctx.config->get("chaise", "idempotency_key_ttl")) {
      try {
        std::size_t used = 0;
        const long long parsed = std::stoll(*v, &used);
        if (used == v->size() && parsed > 0 && parsed <= 365LL * 24 * 3600) seconds = parsed;
      } catch (const std::exception&) {
      }
    }
  }
  return seconds * 1000;
}

HttpError key_reused() {
  return HttpError(
      err::unprocessable_entity("This Idempotency-Key was used for a different request."));
}

}  // namespace

struct IdempotentCall::Sha256 {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  Sha256() {
    if (ctx == nullptr || EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) != 1)
      throw std::runtime_error("SHA-256 unavailable");
  }
  ~Sha256() { EVP_MD_CTX_free(ctx); }
  void update(std::string_view b) { EVP_DigestUpdate(ctx, b.data(), b.size()); }
  std::string hex_digest() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    EVP_DigestFinal_ex(ctx, md, &n);
    return hex(md, n);
  }
};

bool IdempotencyInFlight::enter(const std::string& key) {
  std::lock_guard lock(mu_);
  return keys_.insert(key).second;
}

void IdempotencyInFlight::leave(const std::string& key) {
  std::lock_guard lock(mu_);
  keys_.erase(key);
}

std::size_t IdempotencyInFlight::size() const {
  std::lock_guard lock(mu_);
  return keys_.size();
}

IdempotentCall::IdempotentCall(const Call& call, std::string key, std::int64_t ttl,
                               std::shared_ptr<IdempotencyInFlight> in_flight)
    : body_(std::make_unique<Sha256>()), in_flight_(std::move(in_flight)) {
  request_.ttl_ms = ttl;
  append_field(prefix_, call.req.method_string());
  append_field(prefix_, call.req.target());
  append_field(prefix_, call.user.name.value_or(std::string()));
  append_field(prefix_, call.req[beast_http::field::content_type]);
  append_field(prefix_, call.req[beast_http::field::content_encoding]);
  if (!call.stream.body_streamed()) {
    body_->update(call.req.body());
    body_complete_ = true;
  }
  in_flight_key_ = call.path.at(0);
  in_flight_key_ += '\0';
  in_flight_key_ += key;
  request_.key = std::move(key);
  entered_ = in_flight_ == nullptr || in_flight_->enter(in_flight_key_);
}

IdempotentCall::~IdempotentCall() {
  if (entered_ && in_flight_ != nullptr) in_flight_->leave(in_flight_key_);
}

void IdempotentCall::body_bytes(std::string_view bytes, bool end) {
  if (finished_) return;
  body_->update(bytes);
  if (end) body_complete_ = true;
}

boost::asio::awaitable<void> IdempotentCall::finish(const Call& call) {
  if (finished_) co_return;
  std::string scratch;
  while (!body_complete_) {
    scratch.clear();
    auto n = co_await call.stream.read_body(scratch, 64 * 1024);
    if (!n) throw HttpError(err::bad_request("Incomplete request body."));
    if (*n == 0) body_complete_ = true;  // the tap saw it too, unless the stream is not tapped
  }
  finished_ = true;
  Sha256 all;
  all.update(prefix_);
  all.update(body_->hex_digest());
  request_.fingerprint = all.hex_digest();
}

boost::asio::awaitable<std::optional<Response>> begin_idempotent(
    Call& call, const std::function<void(std::function<void(std::string_view, bool)>)>& tap) {
  auto header = call.req.find(kHeader);
  if (header == call.req.end()) co_return std::nullopt;
  // Document writes only: /{db} POST and below /{db}/...; a server-level path ignores the header.
  if (!is_write(call.method()) || call.path.empty() || !core::valid_db_name(call.path[0]) ||
      (call.path.size() == 1 && !call.is(beast_http::verb::post)))
    co_return std::nullopt;
  auto key = parse_key(header->value());
  if (!key)
    throw HttpError(
        err::bad_request("Idempotency-Key must be 1 to 255 printable ASCII characters."));
  auto idem = std::make_shared<IdempotentCall>(call, std::move(*key), ttl_ms(call),
                                               call.ctx.idempotency_in_flight);
  if (!idem->entered())
    throw HttpError(err::conflict("A request with this Idempotency-Key is still being processed."));
  if (call.stream.body_streamed()) {
    std::weak_ptr<IdempotentCall> weak = idem;
    tap([weak](std::string_view bytes, bool end) {
      if (auto p = weak.lock()) p->body_bytes(bytes, end);
    });
  }
  call.idem = idem;
  // A stored answer is replayed without running the endpoint (whose own reads, such as DELETE's
  // "is it there", would answer differently after the first execution).
  auto tr = call.store().create_transaction();
  auto db = core::open_db(tr, call.path[0]);
  if (!db.ok()) co_return storage_error_response(call.req, db.error());
  if (core::failed(*db)) co_return std::nullopt;  // the endpoint answers 404
  const core::DbRef& ref = std::get<core::DbRef>(*db);
  if (call.stream.body_streamed()) {
    // A streamed body is the endpoint's to read: drain it for its fingerprint only when the key
    // has a record (an empty fingerprint matches none, so "mismatch" means "there is one").
    core::IdemRequest probe = idem->request();
    probe.fingerprint.clear();
    auto any = core::idem_lookup(tr, ref, probe, core::idem_now_ms(), storage::Snapshot::yes);
    if (!any.ok()) co_return storage_error_response(call.req, any.error());
    if (any->state == core::IdemState::absent) co_return std::nullopt;
  }
  co_await idem->finish(call);
  auto found =
      core::idem_lookup(tr, ref, idem->request(), core::idem_now_ms(), storage::Snapshot::yes);
  if (!found.ok()) co_return storage_error_response(call.req, found.error());
  if (found->state == core::IdemState::mismatch) throw key_reused();
  if (found->state == core::IdemState::replay)
    co_return replayed_response(call.req, found->response);
  co_return std::nullopt;  // none, or expired in between: execute
}

boost::asio::awaitable<Response> write_and_render(const Call& call, core::DocWriteBatch& batch,
                                                  BatchRender render) {
  if (call.idem) {
    co_await call.idem->finish(call);
    if (!batch.fits_one_round())
      throw HttpError(err::too_large(
          "A request with an Idempotency-Key must fit in one transaction: at most " +
          std::to_string(core::DocWriteBatch::kDocsPerTransactionMax) + " documents and " +
          std::to_string(core::DocWriteBatch::kBodyBytesPerTransactionMax) +
          " bytes of bodies, each document id once."));
    batch.set_idempotency(call.idem->request(), [&](const core::DocWriteBatch& b) {
      try {
        return stored_response(render(b));
      } catch (const HttpError& e) {
        return stored_response(error_response(call.req, e.error()));
      }
    });
  }
  const storage::Status s = co_await run_doc_batch(call, batch);
  if (!s.ok()) co_return storage_error_response(call.req, s.error());
  if (batch.db_missing()) throw HttpError(err::db_not_found());
  if (batch.idem_mismatch()) throw key_reused();
  if (batch.replayed()) co_return replayed_response(call.req, *batch.replayed());
  if (batch.rendered()) co_return replayed_response(call.req, *batch.rendered(), false);
  co_return render(batch);
}

core::StoredResponse stored_response(const Response& r) {
  core::StoredResponse s;
  s.status = static_cast<int>(r.result_int());
  for (const auto& f : r) {
    switch (f.name()) {
      case beast_http::field::server:
      case beast_http::field::date:
      case beast_http::field::content_length:
      case beast_http::field::connection:
      case beast_http::field::transfer_encoding:
      case beast_http::field::set_cookie:
        continue;
      default:
        s.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    }
  }
  s.body = r.body();
  return s;
}

Response replayed_response(const Request& req, const core::StoredResponse& s, bool replay) {
  Response r{static_cast<Status>(s.status), req.version()};
  r.set(beast_http::field::server, kServerHeader);
  r.set(beast_http::field::date, http_date_now());
  for (const auto& [name, value] : s.headers) r.insert(name, value);
  if (replay) r.set("Idempotent-Replayed", "true");
  r.keep_alive(req.keep_alive());
  r.body() = s.body;
  r.prepare_payload();
  return r;
}

}  // namespace chaise::http

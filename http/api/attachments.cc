// http/api/attachments.cc — /{db}/{docid}/{attname} (names may contain '/'): CouchDB's
// chttpd_db:db_attachment_req. GET and HEAD answer the bytes (ETag from the MD5 digest,
// If-None-Match, one byte range); PUT stores the request body as the attachment of a new revision
// (the document's other attachments carried over as stubs); DELETE writes a revision without it.
#include "core/docs/attachments.h"

#include <openssl/rand.h>

#include <algorithm>
#include <boost/beast/http/field.hpp>
#include <charconv>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/batch/doc_batches.h"
#include "core/db/keyspace.h"
#include "core/docs/documents.h"
#include "core/security/replicator_docs.h"
#include "core/util/json_text.h"
#include "http/api/doc_request.h"
#include "http/api/etag.h"
#include "http/api/idempotency.h"
#include "http/api/request.h"
#include "http/api/router.h"
#include "http/api/txn.h"

namespace chaise::http {
namespace {

using beast_http::field;
using beast_http::verb;

constexpr std::string_view kAttachmentMethods = "DELETE,GET,HEAD,PUT";
// Attachments up to this size are answered with Content-Length from one read; larger ones stream
// chunk by chunk (memory stays flat whatever the size).
constexpr std::int64_t kWholeResponseBytesMax = 1 << 20;
// Attachment bytes above this size are written before the document, in transactions of their
// own, so that a document transaction stays far below FoundationDB's 10 MB. This and the other
// transaction bounds here keep their share of a lower size limit (storage::share_of_size_limit).
constexpr std::size_t kPreuploadBytesMin = 1 << 20;
constexpr std::size_t kPreuploadBytesPerTransaction = 44 * core::kAttChunkBytes;  // ~4 MB
// Attachment PUTs with a larger (or a chunked) body are streamed (streams_request_body): read in
// pieces and written kStreamedBytesPerTransaction at a time, so server memory stays flat.
constexpr std::uint64_t kStreamBodyBytesMin = 1 << 20;
constexpr std::size_t kStreamedReadBytes = 256 * 1024;
constexpr std::size_t kStreamedBytesPerTransaction = 11 * core::kAttChunkBytes;  // ~1 MB

// Attachment bytes per transaction of their own: `bytes_at_max` (chosen for FoundationDB's 10 MB)
// under the store's size limit, in whole chunks, at least one.
std::size_t att_bytes_per_transaction(const storage::Database& store, std::size_t bytes_at_max) {
  const std::size_t share =
      storage::share_of_size_limit(bytes_at_max, store.transaction_size_limit());
  return std::max<std::size_t>(1, share / core::kAttChunkBytes) * core::kAttChunkBytes;
}

core::CouchError missing_att() { return err::not_found("Document is missing attachment"); }

// The revision named by ?rev= or If-Match (they must agree), unparsed.
std::optional<std::string> requested_rev(const Call& call) {
  return merge_revs<std::string>(std::nullopt, call.query.get("rev"), if_match_text(call.req));
}

// The revision a request reads or edits: the given one (a leaf, or a superseded revision whose
// body is still stored), else the winner. nullopt when the document does not exist or, without
// a rev, is deleted.
struct Opened {
  core::StoredBranch branch;
  core::RevRecord record;
};
std::optional<Opened> open_revision(storage::Transaction& tr, const core::DbRef& db,
                                    const std::string& id, const std::optional<core::RevId>& rev,
                                    bool& deleted) {
  auto all = value_or_throw(core::read_branches(tr, db, id, storage::Snapshot::yes));
  deleted = false;
  if (all.empty()) return std::nullopt;
  std::optional<core::StoredBranch> chosen;
  if (rev) {
    chosen = value_or_throw(core::find_revision(tr, db, id, all, *rev));
    if (!chosen) return std::nullopt;
  } else {
    if (all.back().branch.deleted) {
      deleted = true;
      return std::nullopt;
    }
    chosen = all.back();
  }
  auto rec = value_or_throw(core::read_rev(tr, db, id, chosen->branch.leaf));
  return Opened{std::move(*chosen), rec ? std::move(*rec) : core::RevRecord{}};
}

Response bytes_head(const Request& req, Status status, const core::AttInfo& a,
                    const std::string& etag) {
  Response r{status, req.version()};
  r.set(field::server, kServerHeader);
  r.set(field::date, http_date_now());
  r.set(field::content_type, a.content_type);
  r.set(field::cache_control, "must-revalidate");
  r.set(field::etag, etag);
  r.set(field::accept_ranges, "bytes");
  // CouchDB 3 sends attachments with this CSP: an HTML attachment cannot script the origin.
  r.set("Content-Security-Policy", "sandbox");
  r.keep_alive(req.keep_alive());
  return r;
}

struct ByteRange {
  std::int64_t from = 0, to = 0;  // inclusive
};

// "bytes=a-b", "bytes=a-", "bytes=-n" (one range). nullopt: no usable Range header (answer 200);
// throws 416 when it is syntactically a byte range but cannot be satisfied.
std::optional<ByteRange> parse_range(const Request& req, std::int64_t size) {
  auto it = req.find(field::range);
  if (it == req.end()) return std::nullopt;
  std::string_view v = it->value();
  if (!v.starts_with("bytes=")) return std::nullopt;
  v.remove_prefix(6);
  if (v.find(',') != std::string_view::npos) return std::nullopt;  // several ranges: whole body
  const std::size_t dash = v.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  auto num = [](std::string_view s) -> std::optional<std::int64_t> {
    std::int64_t n = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (s.empty() || ec != std::errc{} || p != s.data() + s.size() || n < 0) return std::nullopt;
    return n;
  };
  auto unsatisfiable = [] { throw HttpError(err::requested_range_not_satisfiable()); };
  std::string_view a = v.substr(0, dash), b = v.substr(dash + 1);
  ByteRange r;
  if (a.empty()) {
    auto n = num(b);
    if (!n) return std::nullopt;
    if (*n == 0 || size == 0) unsatisfiable();
    r.from = std::max<std::int64_t>(0, size - *n);
    r.to = size - 1;
    return r;
  }
  auto from = num(a);
  if (!from) return std::nullopt;
  std::optional<std::int64_t> to = b.empty() ? std::optional<std::int64_t>(size - 1) : num(b);
  if (!to) return std::nullopt;
  if (*from > *to) return std::nullopt;  // invalid: ignored, as HTTP says
  if (*from >= size) unsatisfiable();
  r.from = *from;
  r.to = std::min(*to, size - 1);
  return r;
}

// True if the client takes `coding` (Accept-Encoding, q=0 refuses).
bool accepts_coding(const Request& req, std::string_view coding) {
  std::string_view v = req[field::accept_encoding];
  while (!v.empty()) {
    const std::size_t comma = v.find(',');
    std::string_view item = v.substr(0, comma);
    v = comma == std::string_view::npos ? std::string_view{} : v.substr(comma + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    std::string_view name = item.substr(0, item.find(';'));
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    const bool refused =
        item.find("q=0") != std::string_view::npos && item.find("q=0.") == std::string_view::npos;
    if ((name == coding || name == "*") && !refused) return true;
  }
  return false;
}

// A compressed attachment (CouchDB stores compressible types gzip'd): sent as stored with
// Content-Encoding to a client that accepts it, else decoded; no byte ranges (CouchDB answers
// "Accept-Ranges: none" for these too). Compressible types are text, so one read is fine.
// Bytes read per transaction when an attachment is streamed out.
constexpr std::int64_t kStreamedReadChunk = 4 * static_cast<std::int64_t>(core::kAttChunkBytes);

// Writes the identity bytes of a gzip-stored attachment to the begun stream, decoding as it
// reads. False if the client went away or the stored bytes do not decode (the head is sent: the
// connection is closed instead of ending the body).
boost::asio::awaitable<bool> write_att_decoded(const Call& call, const core::DbRef& db,
                                               const core::AttInfo& att) {
  core::GunzipStream gunzip(static_cast<std::size_t>(std::max<std::int64_t>(att.length, 0)));
  std::string out;
  for (std::int64_t off = 0; off < att.encoded_length;) {
    const std::int64_t n = std::min(kStreamedReadChunk, att.encoded_length - off);
    auto tr = call.store().create_transaction();
    tr.disable_read_cache();  // streamed bytes pass through once
    auto piece = core::read_att_stored(tr, db, att, off, n);
    if (!piece.ok()) co_return false;
    out.clear();
    if (!gunzip.add(*piece, out)) co_return false;
    if (!out.empty() && !co_await call.stream.write(out)) co_return false;
    off += n;
  }
  co_return gunzip.finish();
}

MaybeResponse encoded_attachment(Call& call, storage::Transaction& tr, const core::DbRef& db,
                                 const core::AttInfo& att, const std::string& etag) {
  Response r = bytes_head(call.req, Status::ok, att, etag);
  r.set(field::accept_ranges, "none");
  const bool as_stored = accepts_coding(call.req, att.encoding);
  if (as_stored) r.set(field::content_encoding, att.encoding);
  if (call.is(verb::head)) {
    r.content_length(static_cast<std::uint64_t>(as_stored ? att.encoded_length : att.length));
    co_return r;
  }
  if (att.encoded_length > kWholeResponseBytesMax) {
    // Large: streamed, read (and decoded) a piece at a time.
    if (!co_await call.stream.begin(std::move(r))) co_return std::nullopt;
    const bool sent = as_stored ? co_await write_att_stored(call, db, att, 0, att.encoded_length)
                                : co_await write_att_decoded(call, db, att);
    if (sent) co_await call.stream.finish();
    co_return std::nullopt;
  }
  std::string stored = value_or_throw(core::read_att_stored(tr, db, att, 0, att.encoded_length));
  if (as_stored) {
    r.body() = std::move(stored);
  } else {
    auto identity = core::att_identity(att, std::move(stored));
    if (!identity) throw HttpError(err::unknown_error("attachment_data_corrupt"));
    r.body() = std::move(*identity);
  }
  r.prepare_payload();
  co_return r;
}

MaybeResponse get_attachment(Call& call, const core::DbRef& db, const std::string& id,
                             const std::string& name) {
  std::optional<core::RevId> rev;
  if (auto r = call.query.get("rev")) rev = parse_rev_or_throw(*r);
  auto tr = call.store().create_transaction();
  bool deleted = false;
  auto opened = open_revision(tr, db, id, rev, deleted);
  if (!opened) throw HttpError(deleted ? err::doc_deleted() : err::not_found());
  // _users: another user's document is readable, attachments included, only when some of its
  // fields are public (couch_users_db:after_doc_read).
  if (auto fields = readable_fields(call, db, id);
      fields && !core::public_user_doc_body(opened->record.body, *fields))
    throw HttpError(err::not_found());
  const core::AttInfo* att = nullptr;
  for (const core::AttInfo& a : opened->record.atts)
    if (a.name == name) att = &a;
  if (!att) throw HttpError(missing_att());
  const std::string etag = "\"" + core::base64_encode(att->md5) + "\"";
  if (if_none_match_has(call.req, etag)) {  // chttpd:etag_match's token rules
    Response r = bytes_head(call.req, Status::not_modified, *att, etag);
    r.prepare_payload();
    co_return r;
  }
  if (!att->encoding.empty()) co_return co_await encoded_attachment(call, tr, db, *att, etag);
  const std::int64_t size = att->encoded_length;
  std::optional<ByteRange> range = parse_range(call.req, size);
  const std::int64_t from = range ? range->from : 0;
  const std::int64_t len = range ? range->to - range->from + 1 : size;
  Response head = bytes_head(call.req, range ? Status::partial_content : Status::ok, *att, etag);
  if (range)
    head.set(field::content_range, "bytes " + std::to_string(range->from) + "-" +
                                       std::to_string(range->to) + "/" + std::to_string(size));
  if (call.is(verb::head) || len <= kWholeResponseBytesMax) {
    if (call.is(verb::head)) {
      head.content_length(static_cast<std::uint64_t>(len));
      co_return head;
    }
    head.body() = value_or_throw(core::read_att_stored(tr, db, *att, from, len));
    head.prepare_payload();
    co_return head;
  }
  // Large: stream it, one storage chunk at a time, each read in its own short transaction (the
  // bytes under an address never change).
  if (!co_await call.stream.begin(std::move(head))) co_return std::nullopt;
  const core::AttInfo info = *att;
  if (co_await write_att_stored(call, db, info, from, len)) co_await call.stream.finish();
  co_return std::nullopt;
}

// The edit PUT and DELETE make: the opened revision's body and attachments (as stubs), with
// `name` replaced by `upload` or removed.
MaybeResponse write_attachment(Call& call, const core::DbRef& db, const std::string& id,
                               const std::string& name, std::optional<core::AttUpload> upload) {
  {
    Json probe{{"_id", id}};
    if (id.starts_with("_design/")) {
      if (auto e = check_doc_write(call, db, probe)) throw HttpError(std::move(*e));
    }
    if (db.name == core::kUsersDb && !call.user.is_server_admin())
      throw HttpError(err::forbidden("Only admins may change attachments in the users database."));
  }
  std::optional<core::RevId> rev;
  if (auto text = requested_rev(call)) rev = parse_rev_or_throw(*text);
  auto tr = call.store().create_transaction();
  bool deleted = false;
  auto opened = open_revision(tr, db, id, rev, deleted);
  if (rev && !opened) throw HttpError(err::missing_rev());  // chttpd's odd answer
  if (!upload) {
    if (!opened) throw HttpError(deleted ? err::doc_deleted() : err::not_found());
    if (!rev) throw HttpError(err::conflict());
  } else if (opened && !rev) {
    throw HttpError(err::conflict());  // the document exists: the edit must name its revision
  }
  core::DocUpdate u;
  u.id = id;
  u.base_rev = rev;
  u.body = opened ? opened->record.body : "{}";
  if (db.name == core::kReplicatorDb)  // the owner rule and validation, on the body kept
    u.body = check_kept_body(call, db, id, std::move(u.body), false);
  bool found = false;
  // CouchDB puts the new attachment first, the others after it in their order.
  if (upload) u.atts.push_back(std::move(*upload));
  if (opened) {
    for (const core::AttInfo& a : opened->record.atts) {
      if (a.name == name) {
        found = true;
        continue;
      }
      core::AttUpload kept;
      kept.name = a.name;
      kept.carried_over = true;
      u.atts.push_back(std::move(kept));
    }
  }
  if (!upload && !found) throw HttpError(missing_att());
  if (storage::Status s = co_await preupload_attachments(call, db, u.atts); !s.ok())
    co_return storage_error_response(call.req, s.error());
  core::DocWriteBatch::Item item;
  item.update = std::move(u);
  std::vector<core::DocWriteBatch::Item> items;
  items.push_back(std::move(item));
  core::DocWriteBatch batch(db.name, std::move(items));
  co_return co_await write_and_render(call, batch, [&](const core::DocWriteBatch& b) {
    const auto& result = *b.results().at(0);
    if (auto* e = std::get_if<core::CouchError>(&result)) throw HttpError(*e);
    const std::string new_rev = std::get<core::UpdateResult>(result).rev.str();
    Response r = json_response(call.req, call.is(verb::delete_) ? Status::ok : Status::created,
                               Json{{"ok", true}, {"id", id}, {"rev", new_rev}});
    r.set(field::etag, "\"" + new_rev + "\"");
    if (call.is(verb::put)) {
      r.set(field::location,
            absolute_uri(call, call.req.target().substr(0, call.req.target().find('?'))));
    }
    return r;
  });
}

}  // namespace

boost::asio::awaitable<storage::Status> preupload_attachments(const Call& call,
                                                              const core::DbRef& db,
                                                              std::vector<core::AttUpload>& atts) {
  const std::size_t inline_max =
      storage::share_of_size_limit(kPreuploadBytesMin, call.store().transaction_size_limit());
  const std::size_t per_transaction =
      att_bytes_per_transaction(call.store(), kPreuploadBytesPerTransaction);
  // Written apart: bytes this request brought, too large to ride in the document's transaction.
  // One carried over from the base revision brings none; a "follows" one is left to its
  // multipart part's path (one without a part was refused with 400).
  auto written_apart = [&](const core::AttUpload& u) {
    return !u.carried_over && !u.follows && u.stored.size() > inline_max;
  };
  for (core::AttUpload& u : atts) {
    if (!written_apart(u)) continue;
    const std::string_view bytes = u.stored;
    for (std::size_t off = 0; off < bytes.size(); off += per_transaction) {
      // Chunk boundaries must match write_att_chunks': per_transaction is a multiple of
      // kAttChunkBytes.
      const std::string_view piece = bytes.substr(off, per_transaction);
      const auto first = static_cast<std::int64_t>(off / core::kAttChunkBytes);
      storage::Status s = co_await run_txn(call.store(), [&](storage::Transaction& tr) {
        std::int64_t chunk = first;
        for (std::size_t p = 0; p < piece.size(); p += core::kAttChunkBytes)
          tr.set(core::att_chunk_key(db, u.info.address, chunk++),
                 piece.substr(p, core::kAttChunkBytes));
        return storage::Status{};
      });
      if (!s.ok()) co_return s;
    }
    u.preuploaded = true;
    u.stored = std::string();
    call.read_version = {};  // the opening's version does not show these bytes
  }
  co_return storage::Status{};
}

std::uint64_t BodyPlan::size() const {
  std::uint64_t n = 0;
  for (const auto& p : pieces) {
    if (const auto* t = std::get_if<std::string>(&p)) {
      n += t->size();
    } else {
      n += static_cast<std::uint64_t>(std::get<core::AttInfo>(p).encoded_length);
    }
  }
  return n;
}

storage::Result<std::string> materialize_body_plan(storage::Transaction& tr, const core::DbRef& db,
                                                   const BodyPlan& plan) {
  std::string out;
  for (const auto& p : plan.pieces) {
    if (const auto* t = std::get_if<std::string>(&p)) {
      out += *t;
      continue;
    }
    const core::AttInfo& a = std::get<core::AttInfo>(p);
    auto bytes = core::read_att_stored(tr, db, a, 0, a.encoded_length);
    if (!bytes.ok()) return bytes.error();
    out += *bytes;
  }
  return out;
}

boost::asio::awaitable<bool> write_att_stored(const Call& call, const core::DbRef& db,
                                              const core::AttInfo& att, std::int64_t from,
                                              std::int64_t len) {
  for (std::int64_t off = from; off < from + len;) {
    const std::int64_t n = std::min(kStreamedReadChunk, from + len - off);
    auto tr = call.store().create_transaction();
    tr.disable_read_cache();  // streamed bytes pass through once
    auto piece = core::read_att_stored(tr, db, att, off, n);
    if (!piece.ok()) co_return false;
    if (!co_await call.stream.write(*piece)) co_return false;
    off += n;
  }
  co_return true;
}

boost::asio::awaitable<bool> write_body_plan(const Call& call, const core::DbRef& db,
                                             const BodyPlan& plan) {
  for (const auto& p : plan.pieces) {
    if (const auto* t = std::get_if<std::string>(&p)) {
      if (!co_await call.stream.write(*t)) co_return false;
    } else {
      const core::AttInfo& a = std::get<core::AttInfo>(p);
      if (!co_await write_att_stored(call, db, a, 0, a.encoded_length)) co_return false;
    }
  }
  co_return true;
}

boost::asio::awaitable<void> drop_streamed_attachment(const Call& call, const core::DbRef& db,
                                                      const std::string& address) {
  (void)co_await run_txn(call.store(), [&](storage::Transaction& tr) {
    auto refs = tr.get(core::att_ref_key(db, address));
    if (!refs.ok()) return storage::Status(refs.error());
    if (*refs && core::keyspace::decode_counter(**refs) > 0) return storage::Status{};
    auto [b, e] = core::att_chunks_range(db, address);
    tr.clear_range(b, e);
    return storage::Status{};
  });
}

boost::asio::awaitable<core::AttUpload> stream_attachment(const Call& call, const core::DbRef& db,
                                                          core::AttUpload up, const AttPull& pull,
                                                          std::string& own_address) {
  own_address.clear();
  std::string address(32, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(address.data()), 32) != 1)
    throw HttpError(err::unknown_error("no random bytes for an attachment address"));
  const bool encoded = !up.info.encoding.empty();
  std::optional<core::GzipStream> gzip;
  if (!encoded && core::is_compressible_type(up.info.content_type)) gzip.emplace();
  core::AttHasher hasher;
  std::string piece, pending;
  std::int64_t received = 0, stored_length = 0, chunk = 0;
  std::optional<HttpError> failure;
  bool wrote = false;
  // Writes whole transactions' worth of pending bytes (all of them when `last`).
  const std::size_t per_transaction =
      att_bytes_per_transaction(call.store(), kStreamedBytesPerTransaction);
  auto write_pending = [&](bool last) -> boost::asio::awaitable<storage::Status> {
    while (pending.size() >= per_transaction || (last && !pending.empty())) {
      const std::size_t n = std::min(pending.size(), per_transaction);
      storage::Status s = co_await run_txn(call.store(), [&](storage::Transaction& tr) {
        std::int64_t c = chunk;
        for (std::size_t p = 0; p < n; p += core::kAttChunkBytes)
          tr.set(core::att_chunk_key(db, address, c++),
                 std::string_view(pending).substr(p, std::min(core::kAttChunkBytes, n - p)));
        return storage::Status{};
      });
      if (!s.ok()) co_return s;
      wrote = true;
      chunk += static_cast<std::int64_t>((n + core::kAttChunkBytes - 1) / core::kAttChunkBytes);
      pending.erase(0, n);
    }
    co_return storage::Status{};
  };
  for (;;) {
    piece.clear();
    std::optional<std::size_t> n;
    try {
      n = co_await pull(piece, kStreamedReadBytes);
    } catch (const HttpError& e) {
      failure = e;
      break;
    }
    if (!n) {
      failure = HttpError(err::bad_request("The request body ended early"));
      break;
    }
    if (*n == 0) break;
    received += static_cast<std::int64_t>(*n);
    if (static_cast<std::uint64_t>(received) > call.ctx.max_attachment_size) {
      failure = HttpError(err::attachment_too_large(up.name));
      break;
    }
    const std::size_t before = pending.size();
    if (gzip) {
      gzip->add(piece, pending);
    } else {
      pending += piece;
    }
    hasher.update(std::string_view(pending).substr(before));
    stored_length += static_cast<std::int64_t>(pending.size() - before);
    if (storage::Status s = co_await write_pending(false); !s.ok()) {
      failure = HttpError(core::storage_failure(s.error()));
      break;
    }
  }
  if (!failure) {
    const std::size_t before = pending.size();
    if (gzip) gzip->finish(pending);
    hasher.update(std::string_view(pending).substr(before));
    stored_length += static_cast<std::int64_t>(pending.size() - before);
    if (storage::Status s = co_await write_pending(true); !s.ok())
      failure = HttpError(core::storage_failure(s.error()));
  }
  if (failure) {
    if (wrote) co_await drop_streamed_attachment(call, db, address);
    throw *failure;
  }
  std::string sha;
  hasher.finish(up.info.md5, sha);
  if (!encoded) {
    up.info.length = received;
    up.info.encoding = gzip ? "gzip" : "";
  }
  up.info.encoded_length = stored_length;
  up.info.address = address;
  up.stored.clear();
  up.carried_over = up.follows = false;
  up.preuploaded = true;
  call.read_version = {};  // the opening's version does not show these bytes
  // Content addressing: when these bytes are already stored under their SHA-256, share that copy.
  bool shared = false;
  storage::Status s = co_await run_txn(call.store(), [&](storage::Transaction& tr) {
    auto present = core::att_present(tr, db, sha, stored_length);
    if (!present.ok()) return storage::Status(present.error());
    shared = *present;
    return storage::Status{};
  });
  if (s.ok() && shared) {
    up.info.address = sha;
    if (wrote) co_await drop_streamed_attachment(call, db, address);
  } else if (wrote) {
    own_address = address;
  }
  co_return up;
}

bool streams_request_body(const Request& header) {
  if (header.method() != verb::put) return false;
  std::string content_type(header[field::content_type]);
  for (char& c : content_type)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  const bool multipart = content_type.starts_with("multipart/related");
  const std::string_view te = header[field::transfer_encoding];
  const std::string_view cl = header[field::content_length];
  std::uint64_t length = 0;
  const bool has_length =
      !cl.empty() && std::from_chars(cl.data(), cl.data() + cl.size(), length).ec == std::errc();
  if (te.empty() && (!has_length || length <= kStreamBodyBytesMin)) return false;
  // /{db}/{doc}/{att...} or /{db}/_design/{ddoc}/{att...}; attachment names never start with '_'.
  std::string_view path = header.target();
  path = path.substr(0, path.find('?'));
  std::vector<std::string_view> parts;
  while (!path.empty()) {
    while (path.starts_with('/')) path.remove_prefix(1);
    if (path.empty()) break;
    const std::size_t slash = path.find('/');
    parts.push_back(path.substr(0, slash));
    path = slash == std::string_view::npos ? std::string_view() : path.substr(slash);
  }
  if (parts.size() < 2) return false;
  if (parts[0].starts_with('_') && parts[0] != "_users" && parts[0] != "_replicator") return false;
  // A document with its attachments as multipart/related parts (the replicator's upload):
  // /{db}/{doc} or /{db}/_design/{ddoc}.
  if (multipart && parts[1] == "_design" && parts.size() == 3) return true;
  if (multipart && parts.size() == 2) return !parts[1].starts_with('_');
  // An attachment: /{db}/{doc}/{att...} or /{db}/_design/{ddoc}/{att...}.
  if (parts.size() < 3) return false;
  if (parts[1] == "_design") return parts.size() >= 4 && !parts[3].starts_with('_');
  return !parts[1].starts_with('_') && !parts[2].starts_with('_');
}

MaybeResponse handle_attachment(Call& call, const core::DbRef& db, const std::string& doc_id,
                                const std::string& name) {
  if (is_get(call)) co_return co_await get_attachment(call, db, doc_id, name);
  if (!call.is(verb::put) && !call.is(verb::delete_)) require_method(call, kAttachmentMethods);
  if (name.starts_with("_"))
    throw HttpError(err::bad_request("Attachment name can't start with '_'"));
  if (!core::is_valid_utf8(name))
    throw HttpError(err::bad_request("Attachment name is not UTF-8 encoded"));
  if (auto e = core::validate_docid(doc_id)) throw HttpError(std::move(*e));
  if (call.is(verb::delete_)) co_return co_await write_attachment(call, db, doc_id, name, {});
  if (call.stream.body_streamed()) {
    const std::string_view cl = call.req[field::content_length];
    std::uint64_t length = 0;
    if (!cl.empty() &&
        std::from_chars(cl.data(), cl.data() + cl.size(), length).ec == std::errc() &&
        length > call.ctx.max_attachment_size)
      throw HttpError(err::attachment_too_large(name));
    core::AttUpload up;
    up.name = name;
    up.info.name = name;
    const std::string_view ctype = call.req[field::content_type];
    up.info.content_type = ctype.empty() ? "application/octet-stream" : std::string(ctype);
    const AttPull pull = [&call](std::string& out, std::size_t max) {
      return call.stream.read_body(out, max);
    };
    std::string own_address;
    up = co_await stream_attachment(call, db, std::move(up), pull, own_address);
    std::exception_ptr failed;
    std::optional<Response> answer;
    try {
      answer = co_await write_attachment(call, db, doc_id, name, std::move(up));
    } catch (...) {
      failed = std::current_exception();
    }
    // An edit that did not happen (an error, or a stored answer replayed under an
    // Idempotency-Key) must not leave its own bytes behind (a shared copy belongs to others;
    // drop_streamed_attachment keeps bytes a stored revision names).
    const bool written = !failed && answer && answer->result_int() < 300 &&
                         answer->find("Idempotent-Replayed") == answer->end();
    if (!written && !own_address.empty()) co_await drop_streamed_attachment(call, db, own_address);
    if (failed) std::rethrow_exception(failed);
    co_return answer;
  }
  if (call.req.body().size() > call.ctx.max_attachment_size)
    throw HttpError(err::attachment_too_large(name));
  core::AttUpload up;
  up.name = name;
  up.info.name = name;
  std::string_view ctype = call.req[field::content_type];
  up.info.content_type = ctype.empty() ? "application/octet-stream" : std::string(ctype);
  core::set_att_data(up, std::string(call.req.body()));
  co_return co_await write_attachment(call, db, doc_id, name, std::move(up));
}

}  // namespace chaise::http

// core/docs/attachments.h — attachments: their metadata as stored with a revision, their bytes as
// stored once per content, and their JSON forms (stub, inline data, follows).
//
// Storage (keys in core/db/keyspace.h):
//   (kAtts, Address, Chunk)  = the stored bytes, kAttChunkBytes per chunk; Address is the SHA-256
//                              of the stored bytes, so revisions that keep an attachment as a stub,
//                              and equal uploads, share one copy (content addressing). SHA-256 and
//                              not the MD5 CouchDB reports, so that no crafted MD5 collision can
//                              make one attachment read back another's bytes.
//   (kAttRefs, Address)      = little-endian int64 (atomic add): stored revision bodies that name
//                              the address. Compaction clears addresses whose count is <= 0.
// A revision's attachment list is part of its revision header, stored with its body (see
// core/docs/documents.cc); encode_atts()/decode_atts() give its byte layout.
//
// Contract: pure functions and transaction-body pieces (they never commit); thread-safe; client
// input answered with CouchError, never asserted.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/db/databases.h"
#include "core/util/base64.h"
#include "core/util/error.h"
#include "storage/transaction.h"

namespace chaise::core {

// One attachment of a stored revision.
struct AttInfo {
  std::string name;
  std::string content_type;
  std::int64_t revpos = 0;
  std::string md5;                  // 16 raw bytes, MD5 of the stored (encoded) bytes, as CouchDB
  std::int64_t length = 0;          // identity (decoded) length
  std::string encoding;             // "" = identity, or "gzip"
  std::int64_t encoded_length = 0;  // stored length (== length when identity)
  std::string address;              // 32 raw bytes, SHA-256 of the stored bytes

  bool operator==(const AttInfo&) const = default;
};

// Stored bytes per chunk, under FoundationDB's 100,000-byte value limit.
inline constexpr std::size_t kAttChunkBytes = 90'000;

// "md5-<base64>", CouchDB's digest field.
std::string att_digest_str(std::string_view md5_raw);
// Inverse of att_digest_str; nullopt unless "md5-" + base64 of 16 bytes.
std::optional<std::string> att_digest_from_str(std::string_view digest);

// Incremental MD5 + SHA-256 of attachment bytes as they are stored.
class AttHasher {
 public:
  AttHasher();
  ~AttHasher();
  AttHasher(const AttHasher&) = delete;
  AttHasher& operator=(const AttHasher&) = delete;
  void update(std::string_view bytes);
  // Fills md5 and address (raw bytes). Call once.
  void finish(std::string& md5, std::string& address);

 private:
  struct Impl;
  Impl* impl_;
};

// CouchDB's [attachments] compressible_types default: "text/*, application/javascript,
// application/json, application/xml". True if `content_type` (parameters ignored) matches.
bool is_compressible_type(std::string_view content_type);
// gzip (RFC 1952) of `data` at CouchDB's default level 8, and its inverse (nullopt if corrupt or
// larger than `max_bytes`).
std::string gzip_compress(std::string_view data);
std::optional<std::string> gzip_decompress(std::string_view data, std::size_t max_bytes);
// gzip_decompress over stored bytes read in pieces (a large attachment sent decoded).
class GunzipStream {
 public:
  explicit GunzipStream(std::size_t max_bytes);
  ~GunzipStream();
  GunzipStream(const GunzipStream&) = delete;
  GunzipStream& operator=(const GunzipStream&) = delete;
  // Appends what `data` decodes to; false once the bytes are corrupt, go on past the end of the
  // stream, or decode to more than max_bytes in all.
  bool add(std::string_view data, std::string& out);
  // True when the whole stream was decoded without error.
  bool finish() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
// gzip_compress over bytes that arrive in pieces (a streamed upload); the same output.
class GzipStream {
 public:
  GzipStream();
  ~GzipStream();
  GzipStream(const GzipStream&) = delete;
  GzipStream& operator=(const GzipStream&) = delete;
  // Appends to `out` what compressing `data` produced so far.
  void add(std::string_view data, std::string& out);
  // Ends the stream: appends the rest and the gzip trailer. Call once.
  void finish(std::string& out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Byte layout of a revision's attachment list (a packed tuple, one nested tuple per attachment,
// in document order):
//   ((Name, ContentType, RevPos, Md5:bytes, Length, Encoding, EncodedLength, Address:bytes)...)
std::string encode_atts(const std::vector<AttInfo>& atts);
std::optional<std::vector<AttInfo>> decode_atts(std::string_view bytes);

// How a stub is rendered in a document.
enum class AttOutput {
  stub,     // {"content_type","revpos","digest","length","stub":true}
  data,     // {"content_type","revpos","digest","data":"<base64 of the identity bytes>"}
  follows,  // {"content_type","revpos","digest","length","follows":true} (multipart)
};
// One `"name":{...}` member of `_attachments`, in CouchDB's key order (couch_att:to_json). `data`
// is the identity bytes (only for AttOutput::data). With `encoding_info`, encoded attachments add
// "encoding" and "encoded_length".
std::string att_member_json(const AttInfo& a, AttOutput out, bool encoding_info,
                            std::string_view data = {});

// An attachment of an edit as the client sent it.
struct AttUpload {
  std::string name;
  // Named without data ({"stub": true} in CouchDB's JSON): kept as the revision the edit is
  // based on has it, bytes and all.
  bool carried_over = false;
  // New data: everything but revpos is set by the caller (revpos 0 on an interactive edit means
  // "the new revision's pos", as CouchDB's set_new_att_revpos). Ignored when carried_over.
  AttInfo info;
  std::string stored;        // the bytes to write in the document's transaction
  bool preuploaded = false;  // the bytes were written under info.address by earlier transactions
  // Multipart uploads: the bytes come in a later part ("follows": true); `follows_length` is the
  // length the JSON announced (-1 if none).
  bool follows = false;
  std::int64_t follows_length = -1;
  std::string follows_encoding;  // "gzip" when the part holds encoded bytes
  std::int64_t follows_encoded_length = -1;
};

// Sets `u`'s data from identity bytes: lengths, digests, address. A compressible content type
// (is_compressible_type) is stored gzip-compressed, as CouchDB does, so the digest is the MD5 of
// the gzip stream (what CouchDB reports too); other types are stored as given.
void set_att_data(AttUpload& u, std::string data);
// Sets `u`'s data from bytes already encoded with `encoding` ("gzip"), as CouchDB's replicator
// sends them: stored as given; `identity_length` is the decoded length the JSON announced.
void set_att_encoded_data(AttUpload& u, std::string encoded, std::string encoding,
                          std::int64_t identity_length);
// The identity bytes of stored bytes (gunzip for "gzip"); nullopt if they do not decode.
std::optional<std::string> att_identity(const AttInfo& a, std::string stored);

// An attachment name a document may hold (chttpd_db:validate_attachment_name): nullopt, or
// {400, bad_request, "Attachment name '_x' starts with prohibited character '_'"} /
// "Attachment name is not UTF-8 encoded".
std::optional<CouchError> validate_att_name(std::string_view name);

// A document's `_attachments` object as uploads, in document order (couch_att:from_json): a
// member with "stub": true is a stub; "follows": true waits for a multipart part; otherwise
// "data" must be base64 ({400, bad_request, "Invalid attachment data for <name>"}). content_type
// defaults to application/octet-stream. A name starting with '_' or not UTF-8 is a 400. Data
// larger than `max_attachment_size` is {413, attachment_too_large, <name>}.
std::variant<std::vector<AttUpload>, CouchError> parse_attachments_json(
    const nlohmann::ordered_json& atts, std::size_t max_attachment_size);

// ---- Storage of the bytes ----
std::string att_chunk_key(const DbRef& db, std::string_view address, std::int64_t chunk);
std::pair<std::string, std::string> att_chunks_range(const DbRef& db, std::string_view address);
std::string att_ref_key(const DbRef& db, std::string_view address);

// Writes the stored bytes under their address (blind sets; rewriting equal bytes is harmless).
void write_att_chunks(Transaction& tr, const DbRef& db, std::string_view address,
                      std::string_view stored);
// The stored bytes [offset, offset+len) of an attachment (len clipped to the stored length);
// snapshot reads. A missing chunk is io_error (a stored revision names bytes that are gone).
StorageResult<std::string> read_att_stored(Transaction& tr, const DbRef& db, const AttInfo& a,
                                           std::int64_t offset, std::int64_t len);
// True if the last chunk of `address` (holding `stored_len` bytes) exists; a read with conflict,
// so that a concurrent compaction clearing it fails one of the two transactions.
StorageResult<bool> att_present(Transaction& tr, const DbRef& db, std::string_view address,
                                std::int64_t stored_len);

}  // namespace chaise::core

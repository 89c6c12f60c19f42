// core/docs/attachments.cc — attachment metadata, digests, gzip and chunked byte storage.
//
// Attachment list encoding (encode_atts), stored in a revision's header:
//   atts := tuple( att* )
//   att  := tuple( Name:unicode, ContentType:unicode, RevPos:int, Md5:bytes(16), Length:int,
//                  Encoding:unicode ("" | "gzip"), EncodedLength:int, Address:bytes(32) )
// Chunk keys: (kAtts, Address:bytes, Chunk:int) with Chunk = offset / kAttChunkBytes.
#include "core/docs/attachments.h"

#include <openssl/evp.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "core/docs/doc_json.h"

namespace chaise::core {

using storage::KeyValue;
using storage::Reverse;
using storage::Snapshot;
using storage::Tuple;

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "chaise: %s failed\n", what);
    std::abort();
  }
}

std::string lower_ascii(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

}  // namespace

std::string att_digest_str(std::string_view md5_raw) { return "md5-" + base64_encode(md5_raw); }

std::optional<std::string> att_digest_from_str(std::string_view digest) {
  if (!digest.starts_with("md5-")) return std::nullopt;
  auto raw = base64_decode(digest.substr(4));
  if (!raw || raw->size() != 16) return std::nullopt;
  return raw;
}

struct AttHasher::Impl {
  EVP_MD_CTX* md5 = nullptr;
  EVP_MD_CTX* sha = nullptr;
};

AttHasher::AttHasher() : impl_(new Impl) {
  impl_->md5 = EVP_MD_CTX_new();
  impl_->sha = EVP_MD_CTX_new();
  check(impl_->md5 && impl_->sha && EVP_DigestInit_ex(impl_->md5, EVP_md5(), nullptr) == 1 &&
            EVP_DigestInit_ex(impl_->sha, EVP_sha256(), nullptr) == 1,
        "OpenSSL digest init");
}

AttHasher::~AttHasher() {
  EVP_MD_CTX_free(impl_->md5);
  EVP_MD_CTX_free(impl_->sha);
  delete impl_;
}

void AttHasher::update(std::string_view bytes) {
  check(EVP_DigestUpdate(impl_->md5, bytes.data(), bytes.size()) == 1 &&
            EVP_DigestUpdate(impl_->sha, bytes.data(), bytes.size()) == 1,
        "OpenSSL digest update");
}

void AttHasher::finish(std::string& md5, std::string& address) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> buf{};
  unsigned int len = 0;
  check(EVP_DigestFinal_ex(impl_->md5, buf.data(), &len) == 1, "OpenSSL md5 final");
  md5.assign(reinterpret_cast<const char*>(buf.data()), len);
  check(EVP_DigestFinal_ex(impl_->sha, buf.data(), &len) == 1, "OpenSSL sha256 final");
  address.assign(reinterpret_cast<const char*>(buf.data()), len);
}

bool is_compressible_type(std::string_view content_type) {
  std::string t = lower_ascii(content_type.substr(0, content_type.find(';')));
  while (!t.empty() && t.back() == ' ') t.pop_back();
  while (!t.empty() && t.front() == ' ') t.erase(t.begin());
  return t.starts_with("text/") || t == "application/javascript" || t == "application/json" ||
         t == "application/xml";
}

std::string gzip_compress(std::string_view data) {
  z_stream zs{};
  // windowBits 15 + 16: a gzip wrapper; level 8 is CouchDB's default compression_level.
  check(deflateInit2(&zs, 8, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK, "deflateInit2");
  std::string out(deflateBound(&zs, static_cast<uLong>(data.size())), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  check(rc == Z_STREAM_END, "deflate");
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

struct GzipStream::Impl {
  z_stream zs{};
  bool finished = false;
};

GzipStream::GzipStream() : impl_(std::make_unique<Impl>()) {
  // The same parameters as gzip_compress.
  check(deflateInit2(&impl_->zs, 8, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK,
        "deflateInit2");
}

GzipStream::~GzipStream() { deflateEnd(&impl_->zs); }

namespace {
void deflate_into(z_stream& zs, std::string_view data, int flush, std::string& out) {
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  std::array<char, 64 * 1024> buf{};
  for (;;) {
    zs.next_out = reinterpret_cast<Bytef*>(buf.data());
    zs.avail_out = static_cast<uInt>(buf.size());
    const int rc = deflate(&zs, flush);
    check(rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR, "deflate");
    out.append(buf.data(), buf.size() - zs.avail_out);
    if (flush == Z_FINISH ? rc == Z_STREAM_END : (zs.avail_in == 0 && zs.avail_out != 0)) break;
  }
}
}  // namespace

void GzipStream::add(std::string_view data, std::string& out) {
  check(!impl_->finished, "GzipStream::add after finish");
  // zlib counts in uInt: feed large inputs in pieces.
  constexpr std::size_t kPiece = 1 << 30;
  for (std::size_t off = 0; off < data.size(); off += kPiece)
    deflate_into(impl_->zs, data.substr(off, kPiece), Z_NO_FLUSH, out);
}

void GzipStream::finish(std::string& out) {
  check(!impl_->finished, "GzipStream::finish twice");
  impl_->finished = true;
  deflate_into(impl_->zs, {}, Z_FINISH, out);
}

struct GunzipStream::Impl {
  z_stream zs{};
  bool ended = false;
  bool failed = false;
  std::size_t produced = 0;
  std::size_t max_bytes = 0;
};

GunzipStream::GunzipStream(std::size_t max_bytes) : impl_(std::make_unique<Impl>()) {
  impl_->max_bytes = max_bytes;
  check(inflateInit2(&impl_->zs, 15 + 32) == Z_OK, "inflateInit2");  // as gzip_decompress
}

GunzipStream::~GunzipStream() { inflateEnd(&impl_->zs); }

bool GunzipStream::add(std::string_view data, std::string& out) {
  Impl& m = *impl_;
  if (m.failed) return false;
  if (data.empty()) return true;
  if (m.ended) return m.failed = true, false;  // bytes after the end of the stream
  m.zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  m.zs.avail_in = static_cast<uInt>(data.size());
  std::array<char, 64 * 1024> buf{};
  while (m.zs.avail_in > 0 && !m.ended) {
    m.zs.next_out = reinterpret_cast<Bytef*>(buf.data());
    m.zs.avail_out = static_cast<uInt>(buf.size());
    const int rc = inflate(&m.zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) return m.failed = true, false;
    const std::size_t n = buf.size() - m.zs.avail_out;
    m.produced += n;
    if (m.produced > m.max_bytes) return m.failed = true, false;
    out.append(buf.data(), n);
    m.ended = rc == Z_STREAM_END;
    if (rc == Z_OK && n == 0 && m.zs.avail_in > 0 && m.zs.avail_out != 0)
      return m.failed = true, false;  // no progress
  }
  if (m.ended && m.zs.avail_in > 0) return m.failed = true, false;
  return true;
}

bool GunzipStream::finish() const { return impl_->ended && !impl_->failed; }

std::optional<std::string> gzip_decompress(std::string_view data, std::size_t max_bytes) {
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 32) != Z_OK) return std::nullopt;  // gzip or zlib, auto-detected
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  std::string out;
  std::array<char, 64 * 1024> buf{};
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    zs.next_out = reinterpret_cast<Bytef*>(buf.data());
    zs.avail_out = static_cast<uInt>(buf.size());
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) break;
    out.append(buf.data(), buf.size() - zs.avail_out);
    if (out.size() > max_bytes) break;
    if (rc == Z_OK && zs.avail_in == 0 && zs.avail_out != 0) break;  // truncated input
  }
  inflateEnd(&zs);
  if (rc != Z_STREAM_END || out.size() > max_bytes) return std::nullopt;
  return out;
}

std::string encode_atts(const std::vector<AttInfo>& atts) {
  Tuple t;
  for (const AttInfo& a : atts) {
    t.add(Tuple()
              .add(std::string_view(a.name))
              .add(std::string_view(a.content_type))
              .add(a.revpos)
              .add_bytes(a.md5)
              .add(a.length)
              .add(std::string_view(a.encoding))
              .add(a.encoded_length)
              .add_bytes(a.address));
  }
  return t.pack();
}

std::optional<std::vector<AttInfo>> decode_atts(std::string_view bytes) {
  auto t = Tuple::unpack(bytes);
  if (!t) return std::nullopt;
  std::vector<AttInfo> out;
  out.reserve(t->size());
  for (std::size_t i = 0; i < t->size(); ++i) {
    const Tuple* e = t->get_tuple(i);
    if (!e || e->size() != 8) return std::nullopt;
    const std::string *name = e->get_string(0), *type = e->get_string(1), *md5 = e->get_bytes(3),
                      *enc = e->get_string(5), *addr = e->get_bytes(7);
    auto revpos = e->get_int(2), len = e->get_int(4), enc_len = e->get_int(6);
    if (!name || !type || !md5 || !enc || !addr || !revpos || !len || !enc_len) return std::nullopt;
    out.push_back(AttInfo{*name, *type, *revpos, *md5, *len, *enc, *enc_len, *addr});
  }
  return out;
}

std::string att_member_json(const AttInfo& a, AttOutput out, bool encoding_info,
                            std::string_view data) {
  std::string j = json_string(a.name) + ":{\"content_type\":" + json_string(a.content_type) +
                  ",\"revpos\":" + std::to_string(a.revpos) +
                  ",\"digest\":" + json_string(att_digest_str(a.md5));
  switch (out) {
    case AttOutput::stub:
      j += ",\"length\":" + std::to_string(a.length) + ",\"stub\":true";
      break;
    case AttOutput::follows:
      j += ",\"length\":" + std::to_string(a.length) + ",\"follows\":true";
      break;
    case AttOutput::data:
      j += ",\"data\":\"" + base64_encode(data) + "\"";
      break;
  }
  if (encoding_info && !a.encoding.empty())
    j += ",\"encoding\":" + json_string(a.encoding) +
         ",\"encoded_length\":" + std::to_string(a.encoded_length);
  return j + "}";
}

void set_att_data(AttUpload& u, std::string data) {
  const auto length = static_cast<std::int64_t>(data.size());
  if (is_compressible_type(u.info.content_type)) {
    set_att_encoded_data(u, gzip_compress(data), "gzip", length);
    return;
  }
  set_att_encoded_data(u, std::move(data), "", length);
}

void set_att_encoded_data(AttUpload& u, std::string encoded, std::string encoding,
                          std::int64_t identity_length) {
  AttHasher h;
  h.update(encoded);
  h.finish(u.info.md5, u.info.address);
  u.info.length = identity_length;
  u.info.encoded_length = static_cast<std::int64_t>(encoded.size());
  u.info.encoding = std::move(encoding);
  u.stored = std::move(encoded);
  u.follows = false;
}

std::optional<std::string> att_identity(const AttInfo& a, std::string stored) {
  if (a.encoding.empty()) return stored;
  if (a.encoding != "gzip") return std::nullopt;
  return gzip_decompress(stored, static_cast<std::size_t>(std::max<std::int64_t>(a.length, 0)));
}

std::optional<CouchError> validate_att_name(std::string_view name) {
  if (name.starts_with("_"))
    return err::bad_request("Attachment name '" + std::string(name) +
                            "' starts with prohibited character '_'");
  if (!is_valid_utf8(name)) return err::bad_request("Attachment name is not UTF-8 encoded");
  return std::nullopt;
}

std::variant<std::vector<AttUpload>, CouchError> parse_attachments_json(
    const nlohmann::ordered_json& atts, std::size_t max_attachment_size) {
  std::vector<AttUpload> out;
  if (!atts.is_object()) return err::bad_request("Bad special document member: _attachments");
  for (const auto& [name, props] : atts.items()) {
    if (auto e = validate_att_name(name)) return std::move(*e);
    AttUpload u;
    u.name = name;
    u.info.name = name;
    u.info.content_type = "application/octet-stream";
    if (!props.is_object()) return err::bad_request("Invalid attachment data for " + name);
    if (auto t = props.find("content_type"); t != props.end() && t->is_string())
      u.info.content_type = t->get<std::string>();
    if (auto r = props.find("revpos"); r != props.end() && r->is_number_integer())
      u.info.revpos = r->get<std::int64_t>();
    auto flag = [&props = props](const char* key) {
      auto it = props.find(key);
      return it != props.end() && it->is_boolean() && it->get<bool>();
    };
    if (flag("stub")) {
      u.carried_over = true;
    } else if (flag("follows")) {
      u.follows = true;
      auto len = props.find("length");
      if (len != props.end() && len->is_number_integer())
        u.follows_length = len->get<std::int64_t>();
      if (auto enc = props.find("encoding"); enc != props.end() && enc->is_string()) {
        u.follows_encoding = enc->get<std::string>();
        if (u.follows_encoding != "gzip" && u.follows_encoding != "identity")
          return err::bad_request("Unsupported attachment encoding for " + name);
        if (u.follows_encoding == "identity") u.follows_encoding.clear();
        auto el = props.find("encoded_length");
        if (el != props.end() && el->is_number_integer())
          u.follows_encoded_length = el->get<std::int64_t>();
      }
      if (u.follows_length > static_cast<std::int64_t>(max_attachment_size))
        return err::attachment_too_large(name);
    } else {
      auto data = props.find("data");
      if (data == props.end() || !data->is_string())
        return err::bad_request("Invalid attachment data for " + name);
      const std::string& text = data->get_ref<const std::string&>();
      if (text.size() / 4 * 3 > max_attachment_size + 3) return err::attachment_too_large(name);
      auto bytes = base64_decode(text);
      if (!bytes) return err::bad_request("Invalid attachment data for " + name);
      if (bytes->size() > max_attachment_size) return err::attachment_too_large(name);
      set_att_data(u, std::move(*bytes));
    }
    out.push_back(std::move(u));
  }
  return out;
}

std::string att_chunk_key(const DbRef& db, std::string_view address, std::int64_t chunk) {
  return db.space.atts().pack(Tuple().add_bytes(address).add(chunk));
}

std::pair<std::string, std::string> att_chunks_range(const DbRef& db, std::string_view address) {
  return db.space.atts().range(Tuple().add_bytes(address));
}

std::string att_ref_key(const DbRef& db, std::string_view address) {
  return db.space.att_refs().pack(Tuple().add_bytes(address));
}

void write_att_chunks(Transaction& tr, const DbRef& db, std::string_view address,
                      std::string_view stored) {
  std::int64_t chunk = 0;
  for (std::size_t off = 0; off < stored.size(); off += kAttChunkBytes)
    tr.set(att_chunk_key(db, address, chunk++), stored.substr(off, kAttChunkBytes));
}

StorageResult<std::string> read_att_stored(Transaction& tr, const DbRef& db, const AttInfo& a,
                                           std::int64_t offset, std::int64_t len) {
  std::string out;
  const std::int64_t total = a.encoded_length;
  if (offset >= total || len <= 0) return out;
  len = std::min(len, total - offset);
  const auto chunk_bytes = static_cast<std::int64_t>(kAttChunkBytes);
  const std::int64_t first = offset / chunk_bytes, last = (offset + len - 1) / chunk_bytes;
  auto kvs = tr.get_range(att_chunk_key(db, a.address, first),
                          att_chunk_key(db, a.address, last + 1), 0, Reverse::no, Snapshot::yes);
  if (!kvs.ok()) return kvs.error();
  if (kvs->size() != static_cast<std::size_t>(last - first + 1)) return storage::Error::io_error;
  out.reserve(static_cast<std::size_t>(len));
  std::int64_t pos = first * chunk_bytes;
  for (const KeyValue& kv : *kvs) {
    const std::int64_t size = static_cast<std::int64_t>(kv.value.size());
    const std::int64_t from = std::max<std::int64_t>(0, offset - pos);
    const std::int64_t to = std::min<std::int64_t>(size, offset + len - pos);
    if (to > from)
      out.append(kv.value, static_cast<std::size_t>(from), static_cast<std::size_t>(to - from));
    pos += size;
  }
  if (static_cast<std::int64_t>(out.size()) != len) return storage::Error::io_error;
  return out;
}

StorageResult<bool> att_present(Transaction& tr, const DbRef& db, std::string_view address,
                                std::int64_t stored_len) {
  const std::int64_t last =
      stored_len == 0 ? 0 : (stored_len - 1) / static_cast<std::int64_t>(kAttChunkBytes);
  if (stored_len == 0) return true;  // nothing stored for empty attachments
  auto v = tr.get(att_chunk_key(db, address, last));
  if (!v.ok()) return v.error();
  return v->has_value();
}

}  // namespace chaise::core

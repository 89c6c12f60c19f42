// core/rev/rev.cc — revision ids, revision hashes and branch merging.
//
// Revision hash encoding (compute_rev_hash), version 1. The hash is MD5 over these bytes:
//
//   input      := magic deleted parent body digests
//   magic      := "chaise-rev-1" 0x00                       (13 bytes; bump on any layout change)
//   deleted    := 0x00 | 0x01                               (1 byte)
//   parent     := pos:int64-BE hash_len:uint32-BE hash      (pos 0 and hash_len 0 for a new doc;
//                                                            hash is the parent's raw hash bytes)
//   body       := len:uint64-BE bytes                       (canonical body JSON, see doc_json.h)
//   digests    := count:uint32-BE { len:uint32-BE bytes }*  (in the caller's order)
//
// Every variable-length field is length-prefixed, so distinct edits never encode to the same
// bytes. This does not reproduce CouchDB's hashes (those are MD5 over Erlang's external term
// format of the EJSON body); replication does not need that, only determinism within Chaise.
#include "core/rev/rev.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>

namespace chaise::core {
namespace {

constexpr std::string_view kRevHashMagic{"chaise-rev-1\0", 13};

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Streams bytes into an MD5. MD5 is always available from OpenSSL's default provider, so a
// failure here is a broken installation, not an input error: abort loudly.
class Md5 {
 public:
  Md5() : ctx_(EVP_MD_CTX_new()) {
    check(ctx_ != nullptr && EVP_DigestInit_ex(ctx_.get(), EVP_md5(), nullptr) == 1);
  }
  void update(std::string_view bytes) {
    check(EVP_DigestUpdate(ctx_.get(), bytes.data(), bytes.size()) == 1);
  }
  // Appends the low `bytes` bytes of v, big-endian. Precondition: bytes <= 8.
  void update_uint(std::uint64_t v, std::size_t bytes) {
    assert(bytes <= 8);
    std::array<char, 8> buf{};
    for (std::size_t i = 0; i < bytes; ++i) {
      buf[i] = static_cast<char>((v >> (8 * (bytes - 1 - i))) & 0xff);
    }
    update(std::string_view(buf.data(), bytes));
  }
  std::string finish() {
    std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
    unsigned int len = 0;
    check(EVP_DigestFinal_ex(ctx_.get(), md.data(), &len) == 1 && len == kRevHashBytes);
    return std::string(reinterpret_cast<const char*>(md.data()), len);
  }

 private:
  static void check(bool ok) {
    if (!ok) {
      std::fputs("chaise: OpenSSL MD5 failed\n", stderr);
      std::abort();
    }
  }
  struct Free {
    void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
  };
  std::unique_ptr<EVP_MD_CTX, Free> ctx_;
};

int clamp_revs_limit(int revs_limit) { return std::max(1, revs_limit); }

}  // namespace

namespace {
// out += rev_hash_to_str(hash).
void append_rev_hash(std::string& out, std::string_view hash) {
  if (hash.size() != kRevHashBytes) {
    out += hash;
    return;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  const std::size_t at = out.size();
  out.resize(at + 2 * kRevHashBytes);
  for (std::size_t i = 0; i < kRevHashBytes; ++i) {
    const auto b = static_cast<unsigned char>(hash[i]);
    out[at + 2 * i] = kHex[b >> 4];
    out[at + 2 * i + 1] = kHex[b & 0xf];
  }
}
}  // namespace

std::string rev_hash_to_str(std::string_view hash) {
  std::string out;
  append_rev_hash(out, hash);
  return out;
}

std::optional<std::string> rev_hash_from_str(std::string_view text) {
  if (text.size() != 2 * kRevHashBytes) return std::string(text);
  // CouchDB's parse_revid decodes every 32-byte hash as hex and rejects it when it is not.
  std::string out(kRevHashBytes, '\0');
  for (std::size_t i = 0; i < kRevHashBytes; ++i) {
    const int hi = hex_value(text[2 * i]);
    const int lo = hex_value(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<char>((hi << 4) | lo);
  }
  return out;
}

std::optional<RevId> RevId::parse(std::string_view text) {
  const std::size_t dash = text.find('-');
  if (dash == std::string_view::npos || dash == 0) return std::nullopt;
  const std::string_view digits = text.substr(0, dash);
  // from_chars accepts a leading '-' but not '+'; require digits only.
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  std::int64_t pos = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), pos);
  if (ec != std::errc() || end != digits.data() + digits.size() || pos < 1) return std::nullopt;
  auto hash = rev_hash_from_str(text.substr(dash + 1));
  if (!hash) return std::nullopt;
  return RevId{pos, std::move(*hash)};
}

std::string RevId::str() const {
  std::string out;
  append_str(out);
  return out;
}

void RevId::append_str(std::string& out) const {
  char digits[24];
  const auto r = std::to_chars(digits, digits + sizeof digits, pos);
  out.append(digits, r.ptr);
  out.push_back('-');
  append_rev_hash(out, hash);
}

std::string RevId::hash_str() const { return rev_hash_to_str(hash); }

std::string compute_rev_hash(bool deleted, const std::optional<RevId>& parent,
                             std::string_view body_json,
                             const std::vector<std::string>& attachment_digests) {
  Md5 md5;
  md5.update(kRevHashMagic);
  md5.update_uint(deleted ? 1 : 0, 1);
  md5.update_uint(parent ? static_cast<std::uint64_t>(parent->pos) : 0, 8);
  const std::string_view parent_hash = parent ? std::string_view(parent->hash) : "";
  md5.update_uint(parent_hash.size(), 4);
  md5.update(parent_hash);
  md5.update_uint(body_json.size(), 8);
  md5.update(body_json);
  md5.update_uint(attachment_digests.size(), 4);
  for (const std::string& d : attachment_digests) {
    md5.update_uint(d.size(), 4);
    md5.update(d);
  }
  return md5.finish();
}

RevId Branch::rev_at(std::size_t i) const {
  assert(i <= ancestors.size());
  if (i == 0) return leaf;
  return RevId{leaf.pos - static_cast<std::int64_t>(i), ancestors[i - 1]};
}

bool winner_less(const Branch& a, const Branch& b) {
  // Tuple comparison of {not deleted, pos, hash}; std::string compares bytes as unsigned char,
  // as Erlang compares binaries.
  if (a.deleted != b.deleted) return a.deleted;  // the deleted one sorts first (loses)
  if (a.leaf.pos != b.leaf.pos) return a.leaf.pos < b.leaf.pos;
  return a.leaf.hash < b.leaf.hash;
}

std::size_t winner_index(const std::vector<Branch>& branches) {
  assert(!branches.empty());
  std::size_t best = 0;
  for (std::size_t i = 1; i < branches.size(); ++i) {
    if (winner_less(branches[best], branches[i])) best = i;
  }
  return best;
}

namespace {

// True if `rev` is on the (stored part of the) path of `b`.
bool path_contains(const Branch& b, const RevId& rev) {
  if (rev.pos < 1 || rev.pos > b.leaf.pos) return false;
  const auto steps = static_cast<std::uint64_t>(b.leaf.pos - rev.pos);
  if (steps > b.ancestors.size()) return false;
  return steps == 0 ? b.leaf.hash == rev.hash : b.ancestors[steps - 1] == rev.hash;
}

}  // namespace

bool contains_rev(const std::vector<Branch>& branches, const RevId& rev) {
  return std::any_of(branches.begin(), branches.end(),
                     [&](const Branch& b) { return path_contains(b, rev); });
}

void stem(Branch& b, int revs_limit) {
  const auto keep = static_cast<std::size_t>(clamp_revs_limit(revs_limit) - 1);
  if (b.ancestors.size() > keep) b.ancestors.resize(keep);
}

MergeResult merge_path(const std::vector<Branch>& branches, const Branch& incoming,
                       int revs_limit) {
  assert(incoming.leaf.pos >= 1);
  assert(incoming.ancestors.size() < static_cast<std::uint64_t>(incoming.leaf.pos));
  MergeResult result;
  if (contains_rev(branches, incoming.leaf)) {
    result.kind = MergeResult::Kind::already_present;
    return result;
  }
  result.branch = incoming;
  // Walk the incoming ancestors nearest first, so the nearest stored leaf on the path is chosen.
  for (std::size_t i = 0; i < incoming.ancestors.size(); ++i) {
    const RevId ancestor = incoming.rev_at(i + 1);
    for (std::size_t j = 0; j < branches.size(); ++j) {
      const Branch& old = branches[j];
      if (old.leaf != ancestor) continue;
      // old.ancestors[k] sits i + 2 + k steps below the incoming leaf; the incoming path ends at
      // step incoming.ancestors.size(), so old.ancestors[k] for k >= size - 1 - i is older
      // history the client did not send.
      const std::size_t first_older = incoming.ancestors.size() - 1 - i;
      for (std::size_t k = first_older; k < old.ancestors.size(); ++k) {
        result.branch.ancestors.push_back(old.ancestors[k]);
      }
      result.kind = MergeResult::Kind::extends_branch;
      result.replaced = j;
      stem(result.branch, revs_limit);
      return result;
    }
  }
  // A new branch that forks from inside an existing one: the history below the fork is shared,
  // so it is known here even when the client sent less of it (CouchDB's key tree merges the two
  // paths). If the client's oldest revision is on a stored branch, continue with what is below.
  if (!incoming.ancestors.empty()) {
    const RevId oldest = incoming.rev_at(incoming.ancestors.size());
    for (const Branch& old : branches) {
      const std::int64_t depth = old.leaf.pos - oldest.pos;
      if (depth < 1 || depth > static_cast<std::int64_t>(old.ancestors.size()) ||
          old.ancestors[static_cast<std::size_t>(depth - 1)] != oldest.hash)
        continue;
      for (std::size_t k = static_cast<std::size_t>(depth); k < old.ancestors.size(); ++k)
        result.branch.ancestors.push_back(old.ancestors[k]);
      break;
    }
  }
  result.kind = MergeResult::Kind::new_branch;
  stem(result.branch, revs_limit);
  return result;
}

nlohmann::ordered_json revisions_json(const Branch& b) {
  nlohmann::ordered_json ids = nlohmann::ordered_json::array();
  ids.push_back(b.leaf.hash_str());
  for (const std::string& h : b.ancestors) ids.push_back(rev_hash_to_str(h));
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  out["start"] = b.leaf.pos;
  out["ids"] = std::move(ids);
  return out;
}

std::variant<Branch, std::string> parse_revisions_or_reason(
    const nlohmann::ordered_json& revisions) {
  if (!revisions.is_object()) return std::string("_revisions isn't an object.");
  const auto start_it = revisions.find("start");
  if (start_it == revisions.end() || !start_it->is_number_integer()) {
    return std::string("_revisions.start isn't an integer.");
  }
  std::int64_t start = 0;
  if (start_it->is_number_unsigned()) {
    const auto u = start_it->get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return std::string("_revisions.start is out of range.");
    }
    start = static_cast<std::int64_t>(u);
  } else {
    start = start_it->get<std::int64_t>();
  }
  if (start < 1) return std::string("_revisions.start must be positive.");
  const auto ids_it = revisions.find("ids");
  if (ids_it == revisions.end() || !ids_it->is_array()) {
    return std::string("_revisions.ids isn't a array.");
  }
  const auto& ids = *ids_it;
  if (ids.empty()) return std::string("_revisions.ids is empty.");
  if (ids.size() > static_cast<std::uint64_t>(start)) {
    return std::string("_revisions.ids is longer than _revisions.start.");
  }
  Branch b;
  b.ancestors.reserve(ids.size() - 1);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (!ids[i].is_string()) return std::string("RevId isn't a string");
    const auto& text = ids[i].get_ref<const std::string&>();
    auto hash = rev_hash_from_str(text);
    if (!hash) return std::string("RevId isn't a valid hexadecimal");
    if (i == 0) {
      b.leaf = RevId{start, std::move(*hash)};
    } else {
      b.ancestors.push_back(std::move(*hash));
    }
  }
  return b;
}

std::optional<Branch> parse_revisions(const nlohmann::ordered_json& revisions) {
  auto r = parse_revisions_or_reason(revisions);
  if (auto* b = std::get_if<Branch>(&r)) return std::move(*b);
  return std::nullopt;
}

}  // namespace chaise::core

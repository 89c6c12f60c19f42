// storage/subspace.cc — see subspace.h. The key layout is prefix ‖ tuple (tuple.cc has the tuple
// grammar); nothing here adds bytes of its own except range()'s 0x00 / 0xff bounds.
#include "storage/subspace.h"

namespace chaise::storage {

Subspace::Subspace(const Tuple& t, std::string_view raw_prefix) : prefix_(raw_prefix) {
  t.pack_to(&prefix_);
}

Subspace Subspace::from_raw(std::string_view raw_prefix) {
  Subspace s;
  s.prefix_ = std::string(raw_prefix);
  return s;
}

Subspace Subspace::sub(const Tuple& t) const { return Subspace(t, prefix_); }

std::string Subspace::pack(const Tuple& t) const {
  std::string out = prefix_;
  t.pack_to(&out);
  return out;
}

Result<std::string> Subspace::pack_with_versionstamp(const Tuple& t) const {
  return t.pack_with_versionstamp(prefix_);
}

std::optional<Tuple> Subspace::unpack(std::string_view key) const {
  if (!contains(key)) return std::nullopt;
  return Tuple::unpack(key.substr(prefix_.size()));
}

bool Subspace::contains(std::string_view key) const { return key.starts_with(prefix_); }

std::pair<std::string, std::string> Subspace::range(const Tuple& t) const {
  std::string begin = pack(t);
  std::string end = begin;
  begin.push_back('\x00');
  end.push_back('\xff');
  return {std::move(begin), std::move(end)};
}

}  // namespace chaise::storage

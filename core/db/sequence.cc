#include "core/db/sequence.h"

#include <charconv>

namespace chaise::core {

namespace {
constexpr char kHex[] = "0123456789abcdef";
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

bool Sequence::is_zero() const {
  if (incarnation != 0) return false;
  for (auto b : versionstamp.tr_version)
    if (b != 0) return false;
  return versionstamp.user_version == 0;
}

std::string Sequence::str() const {
  std::string out;
  append_str(out);
  return out;
}

void Sequence::append_str(std::string& out) const {
  if (is_zero()) {
    out.push_back('0');
    return;
  }
  const std::string stamp = versionstamp.to_bytes();
  char buf[24 + 2 + 2 * 16];
  std::size_t n = 0;
  if (count > 0) {
    const auto r = std::to_chars(buf, buf + 24, count);
    n = static_cast<std::size_t>(r.ptr - buf);
    buf[n++] = '-';
  }
  buf[n++] = kHex[(incarnation >> 4) & 0xf];
  buf[n++] = kHex[incarnation & 0xf];
  for (std::size_t i = 0; i < stamp.size() && i < 16; ++i) {
    const auto c = static_cast<unsigned char>(stamp[i]);
    buf[n++] = kHex[c >> 4];
    buf[n++] = kHex[c & 0xf];
  }
  out.append(buf, n);
}

std::optional<Sequence> Sequence::parse(std::string_view text) {
  if (text == "0") return Sequence{};
  std::int64_t count = 0;
  if (auto dash = text.find('-'); dash != std::string_view::npos) {
    if (dash == 0 || dash > 18) return std::nullopt;
    for (char c : text.substr(0, dash)) {
      if (c < '0' || c > '9') return std::nullopt;
      count = count * 10 + (c - '0');
    }
    text.remove_prefix(dash + 1);
  }
  if (text.size() != 26) return std::nullopt;
  std::string bytes;
  for (std::size_t i = 0; i < 26; i += 2) {
    int hi = hex_value(text[i]), lo = hex_value(text[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    bytes.push_back(static_cast<char>(hi * 16 + lo));
  }
  Sequence s;
  s.incarnation = static_cast<std::uint8_t>(bytes[0]);
  s.versionstamp = storage::Versionstamp::from_bytes(std::string_view(bytes).substr(1));
  s.count = count;
  return s;
}

storage::Tuple Sequence::tuple() const {
  return storage::Tuple().add(incarnation).add(versionstamp);
}

std::optional<Sequence> Sequence::read(storage::TupleReader& r) {
  auto inc = r.read_int();
  if (!inc || *inc < 0 || *inc > 255) return std::nullopt;
  auto vs = r.read_versionstamp();
  if (!vs) return std::nullopt;
  Sequence s{*inc, *vs};
  if (auto c = r.read_int()) s.count = *c;
  return s;
}

std::optional<Sequence> Sequence::from_tuple(const storage::Tuple& t, std::size_t index) {
  if (t.size() < index + 2) return std::nullopt;
  auto inc = t.get_int(index);
  const storage::Versionstamp* vs = t.get_versionstamp(index + 1);
  if (!inc || !vs || *inc < 0 || *inc > 255) return std::nullopt;
  Sequence s{*inc, *vs};
  if (t.size() > index + 2) s.count = t.get_int(index + 2).value_or(0);
  return s;
}

}  // namespace chaise::core

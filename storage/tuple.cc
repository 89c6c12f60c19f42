// storage/tuple.cc — FoundationDB tuple layer encoding (design/tuple.md).
//
// Byte layout. A packed tuple is its elements' encodings concatenated; no header, no terminator.
//
//   tuple         := element*
//   element       := null | bytes | string | nested | integer | float | double | false | true
//                  | uuid | versionstamp
//   null          := 0x00                                   (top level)
//   nested        := 0x05 ( 0x00 0xff | element-but-null )* 0x00
//                                                           (null inside a nested tuple is 0x00
//                                                           0xff,
//                                                            so that () < (null,) bytewise)
//   bytes         := 0x01 escaped 0x00
//   string        := 0x02 escaped 0x00                      (escaped UTF-8)
//   escaped       := ( byte-but-0x00 | 0x00 0xff )*         (each 0x00 of the value becomes 0x00
//   0xff) integer       := 0x14                                   zero
//                  | (0x14 + n) be(m, n)                    +m, n = 1..8
//                  | (0x14 - n) ~be(m, n)                   -m, n = 1..8
//                  | 0x1d n be(m, n)                        +m, n = 9..255
//                  | 0x0b (n ^ 0xff) ~be(m, n)              -m, n = 9..255
//                    be(m, n) = magnitude m as n big-endian bytes, first byte != 0x00 (n minimal);
//                    ~ = one's complement of every byte
//   float         := 0x20 ordered(4-byte big-endian IEEE 754 binary32)
//   double        := 0x21 ordered(8-byte big-endian IEEE 754 binary64)
//                    ordered(b) = sign bit clear ? b with the sign bit set : ~b
//   false         := 0x26
//   true          := 0x27
//   uuid          := 0x30 16 bytes                          (RFC 4122 network byte order)
//   versionstamp  := 0x33 tr_version(10) user_version(2, big-endian)
//                    incomplete: tr_version = ten 0xff bytes
//
//   pack_with_versionstamp := prefix tuple offset(4, little-endian)
//                    offset = position of the incomplete versionstamp's tr_version in prefix tuple
//
// Why the decoder is strict. Only the canonical form above is accepted (minimal integer length,
// 0x1d / 0x0b only for 9+ bytes, no unknown codes). Then every byte string decodes to at most one
// tuple and back to itself, so two distinct keys never name the same tuple. FoundationDB's own
// decoders are lenient; the one encoder difference that matters is Python's, which writes
// 2^64 - 1 and -(2^64 - 1) with 0x1d / 0x0b and length 8 where Java and Go (and this file) use
// 0x1c / 0x0c. We reject Python's form: Chaise only reads keys it wrote.
#include "storage/tuple.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace chaise::storage {
namespace {

constexpr std::uint8_t kNullCode = 0x00;
constexpr std::uint8_t kBytesCode = 0x01;
constexpr std::uint8_t kStringCode = 0x02;
constexpr std::uint8_t kNestedCode = 0x05;
constexpr std::uint8_t kNegBigIntCode = 0x0b;
constexpr std::uint8_t kIntZeroCode = 0x14;
constexpr std::uint8_t kPosBigIntCode = 0x1d;
constexpr std::uint8_t kFloatCode = 0x20;
constexpr std::uint8_t kDoubleCode = 0x21;
constexpr std::uint8_t kFalseCode = 0x26;
constexpr std::uint8_t kTrueCode = 0x27;
constexpr std::uint8_t kUuidCode = 0x30;
constexpr std::uint8_t kVersionstampCode = 0x33;
constexpr std::uint8_t kEscape = 0xff;
constexpr std::size_t kSmallIntBytesMax = 8;  // magnitudes up to 8 bytes use codes 0x0c..0x1c
constexpr std::size_t kVersionstampOffsetSize = 4;

std::uint8_t byte_at(std::string_view s, std::size_t i) { return static_cast<std::uint8_t>(s[i]); }

void put(std::string* out, std::uint8_t b) { out->push_back(static_cast<char>(b)); }

// |v| as minimal big-endian bytes ("" for zero), written into *buf; returns a view of them.
std::string_view int64_magnitude(std::int64_t v, std::array<char, 8>* buf) {
  // 0 - v computed in uint64 is |v| for every v, INT64_MIN included.
  std::uint64_t m = v < 0 ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
  std::size_t n = 0;
  for (std::uint64_t x = m; x != 0; x >>= 8) ++n;
  for (std::size_t i = 0; i < n; ++i) {
    (*buf)[i] = static_cast<char>(m >> (8 * (n - 1 - i)));
  }
  return std::string_view(buf->data(), n);
}

std::string_view strip_leading_zeros(std::string_view magnitude) {
  std::size_t i = 0;
  while (i < magnitude.size() && magnitude[i] == '\0') ++i;
  return magnitude.substr(i);
}

// -------------------------------------------------------------------------------------------------
// Encoding

class Encoder {
 public:
  explicit Encoder(std::string* out) : out_(out) {}

  void tuple_elements(const Tuple& t, bool nested) {
    for (const Element& e : t.elements()) element(e, nested);
  }

  std::size_t incomplete_stamps() const { return incomplete_stamps_; }
  std::size_t stamp_offset() const { return stamp_offset_; }

  // One top-level element (the element packers below).
  void string_element(std::uint8_t code, std::string_view s) { escaped(code, s); }
  void int_element(std::int64_t v) { encode(v, false); }
  void bool_element(bool v) { encode(v, false); }
  void versionstamp_element(const Versionstamp& v) { encode(v, false); }

 private:
  void element(const Element& e, bool nested) {
    std::visit([&](const auto& v) { encode(v, nested); }, e.value);
  }

  void encode(std::nullptr_t, bool nested) {
    put(out_, kNullCode);
    if (nested) put(out_, kEscape);
  }
  void encode(const Bytes& b, bool) { escaped(kBytesCode, b.data); }
  void encode(const std::string& s, bool) { escaped(kStringCode, s); }
  void encode(const Tuple& t, bool) {
    put(out_, kNestedCode);
    tuple_elements(t, /*nested=*/true);
    put(out_, 0x00);
  }
  void encode(std::int64_t v, bool) {
    std::array<char, 8> buf;
    integer(v < 0, int64_magnitude(v, &buf));
  }
  void encode(const BigInteger& v, bool) { integer(v.negative, strip_leading_zeros(v.magnitude)); }
  void encode(float v, bool) {
    put(out_, kFloatCode);
    big_endian(ordered_bits(std::bit_cast<std::uint32_t>(v)));
  }
  void encode(double v, bool) {
    put(out_, kDoubleCode);
    big_endian(ordered_bits(std::bit_cast<std::uint64_t>(v)));
  }
  void encode(bool v, bool) { put(out_, v ? kTrueCode : kFalseCode); }
  void encode(const Uuid& v, bool) {
    put(out_, kUuidCode);
    out_->append(reinterpret_cast<const char*>(v.bytes.data()), v.bytes.size());
  }
  void encode(const Versionstamp& v, bool) {
    put(out_, kVersionstampCode);
    if (!v.complete()) {
      ++incomplete_stamps_;
      stamp_offset_ = out_->size();
    }
    out_->append(v.to_bytes());
  }

  void escaped(std::uint8_t code, std::string_view s) {
    put(out_, code);
    for (;;) {
      const std::size_t nul = s.find('\0');
      if (nul == std::string_view::npos) break;
      out_->append(s.data(), nul + 1);
      put(out_, kEscape);
      s.remove_prefix(nul + 1);
    }
    out_->append(s);
    put(out_, 0x00);
  }

  // `magnitude` has no leading zero bytes; empty means zero (whatever `negative` says).
  void integer(bool negative, std::string_view magnitude) {
    const std::size_t n = magnitude.size();
    assert(n <= kBigIntegerBytesMax);
    if (n == 0) {
      put(out_, kIntZeroCode);
      return;
    }
    if (n <= kSmallIntBytesMax) {
      put(out_, static_cast<std::uint8_t>(negative ? kIntZeroCode - n : kIntZeroCode + n));
    } else {
      put(out_, negative ? kNegBigIntCode : kPosBigIntCode);
      put(out_, negative ? static_cast<std::uint8_t>(n ^ 0xff) : static_cast<std::uint8_t>(n));
    }
    for (char c : magnitude) put(out_, static_cast<std::uint8_t>(negative ? ~c : c));
  }

  // Maps IEEE bits to an unsigned integer whose order is the IEEE total order.
  template <typename U>
  static U ordered_bits(U bits) {
    constexpr U kSign = U{1} << (8 * sizeof(U) - 1);
    return (bits & kSign) ? static_cast<U>(~bits) : static_cast<U>(bits ^ kSign);
  }

  template <typename U>
  void big_endian(U bits) {
    for (std::size_t i = sizeof(U); i-- > 0;) put(out_, static_cast<std::uint8_t>(bits >> (8 * i)));
  }

  std::string* out_;
  std::size_t incomplete_stamps_ = 0;
  std::size_t stamp_offset_ = 0;
};

// -------------------------------------------------------------------------------------------------
// Decoding. Every read is bounds-checked against in_; any violation makes the whole unpack fail.

class Decoder {
 public:
  explicit Decoder(std::string_view in) : in_(in) {}

  bool top_level(Tuple* out) {
    while (pos_ < in_.size()) {
      if (!element(out, /*depth=*/0)) return false;
    }
    return true;
  }

  // Decodes the one element at the start of the input into *out; the bytes it took in *used.
  bool first(Tuple* out, std::size_t* used) {
    if (!element(out, /*depth=*/0)) return false;
    *used = pos_;
    return true;
  }

 private:
  bool remaining(std::size_t n) const { return in_.size() - pos_ >= n; }

  // Decodes one element at pos_ into *out. At top level 0x00 is null; nested() handles 0x00 itself.
  bool element(Tuple* out, std::size_t depth) {
    const std::uint8_t code = byte_at(in_, pos_++);
    switch (code) {
      case kNullCode:
        out->add(nullptr);
        return true;
      case kBytesCode: {
        Bytes b;
        if (!escaped(&b.data)) return false;
        out->add(std::move(b));
        return true;
      }
      case kStringCode: {
        std::string s;
        if (!escaped(&s)) return false;
        out->add(std::move(s));
        return true;
      }
      case kNestedCode:
        return nested(out, depth + 1);
      case kFloatCode:
        return floating<float, std::uint32_t>(out);
      case kDoubleCode:
        return floating<double, std::uint64_t>(out);
      case kFalseCode:
        out->add(false);
        return true;
      case kTrueCode:
        out->add(true);
        return true;
      case kUuidCode: {
        Uuid u;
        if (!remaining(u.bytes.size())) return false;
        std::memcpy(u.bytes.data(), in_.data() + pos_, u.bytes.size());
        pos_ += u.bytes.size();
        out->add(u);
        return true;
      }
      case kVersionstampCode:
        if (!remaining(Versionstamp::kSize)) return false;
        out->add(Versionstamp::from_bytes(in_.substr(pos_, Versionstamp::kSize)));
        pos_ += Versionstamp::kSize;
        return true;
      default:
        if (code >= kNegBigIntCode && code <= kPosBigIntCode) return integer(code, out);
        return false;  // reserved or unknown type code (0x03, 0x04, 0x22, 0x25, 0xff, ...)
    }
  }

  bool nested(Tuple* out, std::size_t depth) {
    if (depth > kTupleDepthMax) return false;
    Tuple t;
    for (;;) {
      if (!remaining(1)) return false;  // no terminator
      if (byte_at(in_, pos_) == 0x00) {
        if (remaining(2) && byte_at(in_, pos_ + 1) == kEscape) {
          t.add(nullptr);
          pos_ += 2;
          continue;
        }
        ++pos_;
        break;
      }
      if (!element(&t, depth)) return false;
    }
    out->add(std::move(t));
    return true;
  }

  // Copies runs between NULs whole (byte by byte, decoding took a tenth of a _changes scan).
  bool escaped(std::string* out) {
    for (;;) {
      const void* nul = std::memchr(in_.data() + pos_, '\0', in_.size() - pos_);
      if (!nul) return false;  // no terminator
      const std::size_t at = static_cast<std::size_t>(static_cast<const char*>(nul) - in_.data());
      out->append(in_.data() + pos_, at - pos_);
      pos_ = at + 1;
      if (remaining(1) && byte_at(in_, pos_) == kEscape) {
        out->push_back('\0');
        ++pos_;
      } else {
        return true;
      }
    }
  }

  bool integer(std::uint8_t code, Tuple* out) {
    bool negative = code < kIntZeroCode;
    std::size_t n;
    if (code == kPosBigIntCode || code == kNegBigIntCode) {
      if (!remaining(1)) return false;
      n = byte_at(in_, pos_++);
      if (negative) n ^= 0xff;
      if (n <= kSmallIntBytesMax) return false;  // must use 0x0c..0x1c
    } else {
      n = negative ? kIntZeroCode - code : code - kIntZeroCode;
    }
    if (!remaining(n)) return false;
    std::string magnitude(in_.substr(pos_, n));
    pos_ += n;
    if (negative) {
      for (char& c : magnitude) c = static_cast<char>(~static_cast<std::uint8_t>(c));
    }
    if (n > 0 && magnitude[0] == '\0') return false;  // not minimal
    out->add(
        BigInteger{negative, std::move(magnitude)});  // add() turns int64-range values to int64
    return true;
  }

  template <typename F, typename U>
  bool floating(Tuple* out) {
    if (!remaining(sizeof(U))) return false;
    U bits = 0;
    for (std::size_t i = 0; i < sizeof(U); ++i) bits = (bits << 8) | byte_at(in_, pos_ + i);
    pos_ += sizeof(U);
    constexpr U kSign = U{1} << (8 * sizeof(U) - 1);
    // Encoded sign bit set = the value was positive (only its sign bit was flipped).
    bits = (bits & kSign) ? static_cast<U>(bits ^ kSign) : static_cast<U>(~bits);
    out->add(std::bit_cast<F>(bits));
    return true;
  }

  std::string_view in_;
  std::size_t pos_ = 0;
};

// -------------------------------------------------------------------------------------------------
// Value comparison. Deliberately not written in terms of the encoding, so the order tests compare
// two independent implementations.

int sign_of(int c) { return (c > 0) - (c < 0); }

template <typename T>
int three_way(const T& a, const T& b) {
  return a < b ? -1 : (b < a ? 1 : 0);
}

int compare_bytes(std::string_view a, std::string_view b) {
  const int c = std::memcmp(a.data(), b.data(), std::min(a.size(), b.size()));
  if (c != 0) return sign_of(c);
  return three_way(a.size(), b.size());
}

// Rank of the element's type in the tuple type order. false and true share a rank; within it, false
// sorts first.
int type_rank(const Element& e) {
  struct Ranker {
    int operator()(std::nullptr_t) const { return 0; }
    int operator()(const Bytes&) const { return 1; }
    int operator()(const std::string&) const { return 2; }
    int operator()(const Tuple&) const { return 3; }
    int operator()(std::int64_t) const { return 4; }
    int operator()(const BigInteger&) const { return 4; }
    int operator()(float) const { return 5; }
    int operator()(double) const { return 6; }
    int operator()(bool) const { return 7; }
    int operator()(const Uuid&) const { return 8; }
    int operator()(const Versionstamp&) const { return 9; }
  };
  return std::visit(Ranker{}, e.value);
}

// An integer as (sign, magnitude without leading zeros), for comparing int64 with BigInteger.
struct SignedMagnitude {
  int sign;  // -1, 0, 1
  std::string_view magnitude;
};

SignedMagnitude signed_magnitude(const Element& e, std::array<char, 8>* buf) {
  if (const auto* i = e.get_if<std::int64_t>()) {
    return {three_way<std::int64_t>(*i, 0), int64_magnitude(*i, buf)};
  }
  const BigInteger& b = *e.get_if<BigInteger>();
  std::string_view m = strip_leading_zeros(b.magnitude);
  return {m.empty() ? 0 : (b.negative ? -1 : 1), m};
}

int compare_integers(const Element& a, const Element& b) {
  std::array<char, 8> buf_a, buf_b;
  const SignedMagnitude x = signed_magnitude(a, &buf_a);
  const SignedMagnitude y = signed_magnitude(b, &buf_b);
  if (x.sign != y.sign) return three_way(x.sign, y.sign);
  // Same sign: a longer magnitude is larger; equal lengths compare bytewise.
  int c = three_way(x.magnitude.size(), y.magnitude.size());
  if (c == 0) c = compare_bytes(x.magnitude, y.magnitude);
  return x.sign < 0 ? -c : c;
}

// IEEE 754 totalOrder on values: -NaN < -inf < ... < -0.0 < +0.0 < ... < +inf < +NaN.
template <typename F, typename U>
int compare_floating(F a, F b) {
  const auto nan_rank = [](F x) { return std::isnan(x) ? (std::signbit(x) ? -1 : 1) : 0; };
  const int ra = nan_rank(a);
  const int rb = nan_rank(b);
  if (ra != rb) return three_way(ra, rb);
  if (ra == 0) {
    if (a < b) return -1;
    if (b < a) return 1;
    return three_way(!std::signbit(a), !std::signbit(b));  // -0.0 before +0.0
  }
  // Two NaNs of the same sign: by payload, which for negative NaNs runs the other way.
  constexpr U kSign = U{1} << (8 * sizeof(U) - 1);
  const int c = three_way(std::bit_cast<U>(a) & ~kSign, std::bit_cast<U>(b) & ~kSign);
  return ra < 0 ? -c : c;
}

int compare_same_rank(const Element& a, const Element& b) {
  if (const auto* x = a.get_if<Bytes>()) return compare_bytes(x->data, b.get_if<Bytes>()->data);
  if (const auto* x = a.get_if<std::string>()) return compare_bytes(*x, *b.get_if<std::string>());
  if (const auto* x = a.get_if<Tuple>()) return compare(*x, *b.get_if<Tuple>());
  if (a.holds<std::int64_t>() || a.holds<BigInteger>()) return compare_integers(a, b);
  if (const auto* x = a.get_if<float>()) {
    return compare_floating<float, std::uint32_t>(*x, *b.get_if<float>());
  }
  if (const auto* x = a.get_if<double>()) {
    return compare_floating<double, std::uint64_t>(*x, *b.get_if<double>());
  }
  if (const auto* x = a.get_if<bool>()) return three_way(*x, *b.get_if<bool>());
  if (const auto* x = a.get_if<Uuid>()) return three_way(x->bytes, b.get_if<Uuid>()->bytes);
  if (const auto* x = a.get_if<Versionstamp>()) {
    const Versionstamp& y = *b.get_if<Versionstamp>();
    const int c = three_way(x->tr_version, y.tr_version);
    return c != 0 ? c : three_way(x->user_version, y.user_version);
  }
  assert(a.holds<std::nullptr_t>());
  return 0;
}

}  // namespace

// -------------------------------------------------------------------------------------------------
// Versionstamp

Versionstamp Versionstamp::incomplete(std::uint16_t user_version) {
  Versionstamp v;
  v.tr_version.fill(0xff);
  v.user_version = user_version;
  return v;
}

bool Versionstamp::complete() const {
  for (std::uint8_t b : tr_version) {
    if (b != 0xff) return true;
  }
  return false;
}

std::string Versionstamp::to_bytes() const {
  std::string out(reinterpret_cast<const char*>(tr_version.data()), tr_version.size());
  out.push_back(static_cast<char>(user_version >> 8));
  out.push_back(static_cast<char>(user_version & 0xff));
  return out;
}

Versionstamp Versionstamp::from_bytes(std::string_view twelve_bytes) {
  assert(twelve_bytes.size() == kSize);
  Versionstamp v;
  std::memcpy(v.tr_version.data(), twelve_bytes.data(), kTrVersionSize);
  v.user_version = static_cast<std::uint16_t>((byte_at(twelve_bytes, kTrVersionSize) << 8) |
                                              byte_at(twelve_bytes, kTrVersionSize + 1));
  return v;
}

// -------------------------------------------------------------------------------------------------
// Tuple: building

Tuple& Tuple::add(std::nullptr_t) {
  elements_.emplace_back();
  return *this;
}
Tuple& Tuple::add(std::string_view s) { return add(std::string(s)); }
Tuple& Tuple::add(const char* s) {
  assert(s != nullptr);
  return add(std::string(s));
}
Tuple& Tuple::add(std::string s) {
  elements_.emplace_back(Element::Value(std::in_place_type<std::string>, std::move(s)));
  return *this;
}
Tuple& Tuple::add(Bytes b) {
  elements_.emplace_back(Element::Value(std::move(b)));
  return *this;
}
Tuple& Tuple::add_bytes(std::string_view b) { return add(Bytes{std::string(b)}); }
Tuple& Tuple::add(Tuple t) {
  elements_.emplace_back(Element::Value(std::move(t)));
  return *this;
}
Tuple& Tuple::add(float v) {
  elements_.emplace_back(Element::Value(v));
  return *this;
}
Tuple& Tuple::add(double v) {
  elements_.emplace_back(Element::Value(v));
  return *this;
}
Tuple& Tuple::add(bool v) {
  elements_.emplace_back(Element::Value(v));
  return *this;
}
Tuple& Tuple::add(Uuid v) {
  elements_.emplace_back(Element::Value(v));
  return *this;
}
Tuple& Tuple::add(Versionstamp v) {
  elements_.emplace_back(Element::Value(v));
  return *this;
}
Tuple& Tuple::add_int64(std::int64_t v) {
  elements_.emplace_back(Element::Value(v));
  return *this;
}
Tuple& Tuple::add_uint64(std::uint64_t v) {
  if (v <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    return add_int64(static_cast<std::int64_t>(v));
  }
  BigInteger b;
  for (int shift = 56; shift >= 0; shift -= 8) b.magnitude.push_back(static_cast<char>(v >> shift));
  elements_.emplace_back(Element::Value(std::move(b)));
  return *this;
}

Tuple& Tuple::add(BigInteger v) {
  const std::string_view m = strip_leading_zeros(v.magnitude);
  assert(m.size() <= kBigIntegerBytesMax);
  if (m.size() <= sizeof(std::uint64_t)) {
    std::uint64_t u = 0;
    for (char c : m) u = (u << 8) | static_cast<std::uint8_t>(c);
    constexpr std::uint64_t kMax = std::numeric_limits<std::int64_t>::max();
    if (!v.negative && u <= kMax) return add_int64(static_cast<std::int64_t>(u));
    // -u for u <= 2^63; the uint64 -> int64 conversion is modular (C++20), so -2^63 is exact.
    if (v.negative && u <= kMax + 1) return add_int64(static_cast<std::int64_t>(0 - u));
  }
  v.magnitude.erase(0, v.magnitude.size() - m.size());
  elements_.emplace_back(Element::Value(std::move(v)));
  return *this;
}

Tuple& Tuple::add(Element e) {
  return std::visit(
      [this](auto&& v) -> Tuple& {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, std::int64_t>) {
          return add_int64(v);
        } else {
          return add(std::forward<decltype(v)>(v));
        }
      },
      std::move(e.value));
}

// -------------------------------------------------------------------------------------------------
// Tuple: access

const Element& Tuple::operator[](std::size_t i) const {
  assert(i < elements_.size());
  return elements_[i];
}

namespace {
template <typename T>
const T* element_if(const std::vector<Element>& elements, std::size_t i) {
  return i < elements.size() ? elements[i].get_if<T>() : nullptr;
}
template <typename T>
std::optional<T> value_if(const std::vector<Element>& elements, std::size_t i) {
  const T* p = element_if<T>(elements, i);
  return p ? std::optional<T>(*p) : std::nullopt;
}
}  // namespace

bool Tuple::is_null(std::size_t i) const {
  return element_if<std::nullptr_t>(elements_, i) != nullptr;
}
const std::string* Tuple::get_string(std::size_t i) const {
  return element_if<std::string>(elements_, i);
}
const std::string* Tuple::get_bytes(std::size_t i) const {
  const Bytes* b = element_if<Bytes>(elements_, i);
  return b ? &b->data : nullptr;
}
const Tuple* Tuple::get_tuple(std::size_t i) const { return element_if<Tuple>(elements_, i); }
std::optional<std::int64_t> Tuple::get_int(std::size_t i) const {
  return value_if<std::int64_t>(elements_, i);
}
const BigInteger* Tuple::get_big_integer(std::size_t i) const {
  return element_if<BigInteger>(elements_, i);
}
std::optional<float> Tuple::get_float(std::size_t i) const { return value_if<float>(elements_, i); }
std::optional<double> Tuple::get_double(std::size_t i) const {
  return value_if<double>(elements_, i);
}
std::optional<bool> Tuple::get_bool(std::size_t i) const { return value_if<bool>(elements_, i); }
const Uuid* Tuple::get_uuid(std::size_t i) const { return element_if<Uuid>(elements_, i); }
const Versionstamp* Tuple::get_versionstamp(std::size_t i) const {
  return element_if<Versionstamp>(elements_, i);
}

// -------------------------------------------------------------------------------------------------
// Tuple: pack / unpack

std::string Tuple::pack() const {
  std::string out;
  pack_to(&out);
  return out;
}

void Tuple::pack_to(std::string* out) const {
  Encoder(out).tuple_elements(*this, /*nested=*/false);
}

Result<std::string> Tuple::pack_with_versionstamp() const { return pack_with_versionstamp({}); }

Result<std::string> Tuple::pack_with_versionstamp(std::string_view prefix) const {
  std::string out(prefix);
  Encoder encoder(&out);
  encoder.tuple_elements(*this, /*nested=*/false);
  if (encoder.incomplete_stamps() != 1) return Error::invalid_option_value;
  const std::size_t offset = encoder.stamp_offset();
  if (offset > std::numeric_limits<std::uint32_t>::max()) return Error::invalid_option_value;
  append_versionstamp_offset(&out, offset);
  return out;
}

std::optional<Tuple> Tuple::unpack(std::string_view bytes) {
  Tuple t;
  // Most stored tuples have a handful of elements: one allocation instead of growing 1, 2, 4, 8.
  t.reserve(8);
  if (!Decoder(bytes).top_level(&t)) return std::nullopt;
  return t;
}

// -------------------------------------------------------------------------------------------------
// Element packers

void pack_string(std::string* out, std::string_view s) {
  Encoder(out).string_element(kStringCode, s);
}
void pack_bytes(std::string* out, std::string_view b) {
  Encoder(out).string_element(kBytesCode, b);
}
void pack_int(std::string* out, std::int64_t v) { Encoder(out).int_element(v); }
void pack_bool(std::string* out, bool v) { Encoder(out).bool_element(v); }
void pack_null(std::string* out) { put(out, kNullCode); }
void pack_nested_open(std::string* out) { put(out, kNestedCode); }
void pack_nested_close(std::string* out) { put(out, 0x00); }
std::size_t pack_incomplete_versionstamp(std::string* out, std::uint16_t user_version) {
  Encoder encoder(out);
  encoder.versionstamp_element(Versionstamp::incomplete(user_version));
  return encoder.stamp_offset();
}
void append_versionstamp_offset(std::string* out, std::size_t offset) {
  assert(offset <= std::numeric_limits<std::uint32_t>::max());
  for (std::size_t i = 0; i < kVersionstampOffsetSize; ++i)
    out->push_back(static_cast<char>(offset >> (8 * i)));
}

// -------------------------------------------------------------------------------------------------
// TupleReader

std::optional<std::int64_t> TupleReader::read_int() {
  if (at_end()) return std::nullopt;
  const std::uint8_t code = byte_at(in_, pos_);
  if (code < kIntZeroCode - kSmallIntBytesMax || code > kIntZeroCode + kSmallIntBytesMax)
    return std::nullopt;  // another type, or an integer beyond 8 bytes (never in int64 range)
  const bool negative = code < kIntZeroCode;
  const std::size_t n = negative ? kIntZeroCode - code : code - kIntZeroCode;
  if (in_.size() - pos_ - 1 < n) return std::nullopt;
  std::uint64_t u = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint8_t b = byte_at(in_, pos_ + 1 + i);
    if (negative) b = static_cast<std::uint8_t>(~b);
    if (i == 0 && b == 0) return std::nullopt;  // not minimal
    u = (u << 8) | b;
  }
  constexpr std::uint64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::int64_t v;
  if (!negative && u <= kMax) {
    v = static_cast<std::int64_t>(u);
  } else if (negative && u <= kMax + 1) {
    v = static_cast<std::int64_t>(0 - u);
  } else {
    return std::nullopt;  // a BigInteger
  }
  pos_ += 1 + n;
  return v;
}

bool TupleReader::read_escaped(std::uint8_t code, std::string* out) {
  if (at_end() || byte_at(in_, pos_) != code) return false;
  std::size_t at = pos_ + 1;
  std::size_t used = 0;
  // The common case, one run without an escaped NUL, is one assign.
  for (;;) {
    const void* nul = std::memchr(in_.data() + at, '\0', in_.size() - at);
    if (!nul) return false;  // no terminator
    const std::size_t end = static_cast<std::size_t>(static_cast<const char*>(nul) - in_.data());
    if (used == 0) {
      out->assign(in_.data() + at, end - at);
    } else {
      out->append(in_.data() + at, end - at);
    }
    ++used;
    at = end + 1;
    if (at < in_.size() && byte_at(in_, at) == kEscape) {
      out->push_back('\0');
      ++at;
    } else {
      break;
    }
  }
  pos_ = at;
  return true;
}

bool TupleReader::read_string(std::string* out) { return read_escaped(kStringCode, out); }
bool TupleReader::read_bytes(std::string* out) { return read_escaped(kBytesCode, out); }

std::optional<bool> TupleReader::read_bool() {
  if (at_end()) return std::nullopt;
  const std::uint8_t code = byte_at(in_, pos_);
  if (code != kFalseCode && code != kTrueCode) return std::nullopt;
  ++pos_;
  return code == kTrueCode;
}

std::optional<Versionstamp> TupleReader::read_versionstamp() {
  if (at_end() || byte_at(in_, pos_) != kVersionstampCode) return std::nullopt;
  if (in_.size() - pos_ - 1 < Versionstamp::kSize) return std::nullopt;
  Versionstamp v = Versionstamp::from_bytes(in_.substr(pos_ + 1, Versionstamp::kSize));
  pos_ += 1 + Versionstamp::kSize;
  return v;
}

bool TupleReader::skip() {
  if (at_end()) return false;
  if (read_int()) return true;  // the common case, without decoding into a Tuple
  Tuple scratch;
  std::size_t used = 0;
  if (!Decoder(in_.substr(pos_)).first(&scratch, &used)) return false;
  pos_ += used;
  return true;
}

bool Tuple::operator==(const Tuple& other) const { return compare(*this, other) == 0; }
bool Element::operator==(const Element& other) const { return compare(*this, other) == 0; }

// -------------------------------------------------------------------------------------------------
// Ordering

int compare(const Element& a, const Element& b) {
  const int ra = type_rank(a);
  const int rb = type_rank(b);
  if (ra != rb) return three_way(ra, rb);
  return compare_same_rank(a, b);
}

int compare(const Tuple& a, const Tuple& b) {
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const int c = compare(a[i], b[i]);
    if (c != 0) return c;
  }
  return three_way(a.size(), b.size());
}

std::string strinc(std::string_view prefix) {
  std::size_t end = prefix.size();
  while (end > 0 && byte_at(prefix, end - 1) == 0xff) --end;
  assert(end > 0 && "strinc: prefix is empty or all 0xff");
  std::string out(prefix.substr(0, end));
  out.back() = static_cast<char>(byte_at(out, end - 1) + 1);
  return out;
}

}  // namespace chaise::storage

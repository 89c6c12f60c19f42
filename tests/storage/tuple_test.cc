// tests/storage/tuple_test.cc — the tuple layer and Subspace: round trips, FoundationDB's published
// encodings, value order == byte order, versionstamp offsets, hostile input, subspace ranges.
#include "storage/tuple.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "storage/subspace.h"
#include "storage/tuple_prefix.h"

namespace chaise::storage {
namespace {

using namespace std::string_literals;

constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kInt64Min = std::numeric_limits<std::int64_t>::min();

// "01 66 6f" -> "\x01\x66\x6f". Spaces are ignored.
std::string hex(std::string_view h) {
  std::string out;
  int nibbles = 0;
  unsigned acc = 0;
  for (char c : h) {
    if (c == ' ') continue;
    const unsigned v = (c >= '0' && c <= '9')   ? c - '0'
                       : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                                : 99;
    EXPECT_NE(v, 99u) << "bad hex digit in test vector: " << c;
    acc = acc * 16 + v;
    if (++nibbles == 2) {
      out.push_back(static_cast<char>(acc));
      acc = 0;
      nibbles = 0;
    }
  }
  EXPECT_EQ(nibbles, 0) << "odd hex length in test vector";
  return out;
}

std::string to_hex(std::string_view s) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    if (!out.empty()) out.push_back(' ');
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

int sign(int c) { return (c > 0) - (c < 0); }

// Unsigned lexicographic byte order, written out (not std::string::compare) to be explicit.
int byte_order(std::string_view a, std::string_view b) {
  const int c = std::memcmp(a.data(), b.data(), std::min(a.size(), b.size()));
  if (c != 0) return sign(c);
  return a.size() < b.size() ? -1 : (a.size() > b.size() ? 1 : 0);
}

// Unpacks from an allocation of exactly s.size() bytes, so AddressSanitizer flags any read past it.
std::optional<Tuple> unpack_exact(std::string_view s) {
  auto buf = std::make_unique<char[]>(s.size());
  if (!s.empty()) std::memcpy(buf.get(), s.data(), s.size());
  return Tuple::unpack(std::string_view(buf.get(), s.size()));
}

BigInteger big(bool negative, std::string_view magnitude_hex) {
  return BigInteger{negative, hex(magnitude_hex)};
}

Uuid uuid_from(std::string_view h) {
  const std::string b = hex(h);
  Uuid u;
  EXPECT_EQ(b.size(), u.bytes.size());
  std::memcpy(u.bytes.data(), b.data(), std::min(b.size(), u.bytes.size()));
  return u;
}

Versionstamp stamp_from(std::string_view h) { return Versionstamp::from_bytes(hex(h)); }

// Asserts that t survives pack -> unpack -> pack unchanged and returns the unpacked tuple.
Tuple round_trip(const Tuple& t) {
  const std::string packed = t.pack();
  std::optional<Tuple> back = unpack_exact(packed);
  EXPECT_TRUE(back.has_value()) << to_hex(packed);
  if (!back) return Tuple();
  EXPECT_TRUE(*back == t) << to_hex(packed);
  EXPECT_EQ(compare(*back, t), 0) << to_hex(packed);
  EXPECT_EQ(back->pack(), packed);
  EXPECT_EQ(back->size(), t.size());
  return *back;
}

// -------------------------------------------------------------------------------------------------
// Round trips

TEST(TupleRoundTrip, EmptyTupleIsEmptyString) {
  EXPECT_EQ(Tuple().pack(), "");
  std::optional<Tuple> t = unpack_exact("");
  ASSERT_TRUE(t.has_value());
  EXPECT_TRUE(t->empty());
}

TEST(TupleRoundTrip, NullBoolAndStringsKeepTypeAndValue) {
  Tuple t;
  t.add(nullptr).add(true).add(false).add("").add_bytes("").add("plain").add("a\0b\0"s).add(
      Bytes{"\0\xff\0"s});
  t.add(std::string("\xff\xfe", 2)).add(std::string_view("view"));
  const Tuple back = round_trip(t);
  EXPECT_TRUE(back.is_null(0));
  EXPECT_EQ(back.get_bool(1), true);
  EXPECT_EQ(back.get_bool(2), false);
  ASSERT_NE(back.get_string(3), nullptr);
  EXPECT_EQ(*back.get_string(3), "");
  ASSERT_NE(back.get_bytes(4), nullptr);
  EXPECT_EQ(*back.get_bytes(4), "");
  EXPECT_EQ(back.get_string(4), nullptr) << "bytes must not come back as a unicode string";
  EXPECT_EQ(*back.get_string(6), "a\0b\0"s);
  EXPECT_EQ(*back.get_bytes(7), "\0\xff\0"s);
  EXPECT_EQ(*back.get_string(8), "\xff\xfe");
  EXPECT_EQ(*back.get_string(9), "view");
}

TEST(TupleRoundTrip, IntegersAtEveryLengthBoundary) {
  // clang-format off
  const std::int64_t values[] = {
      0, 1, -1, 255, -255, 256, -256, 65535, -65535, 65536, -65536,
      kInt64Max, kInt64Min, kInt64Max - 1, kInt64Min + 1,
      1LL << 55, -(1LL << 55), (1LL << 56) - 1, -((1LL << 56) - 1), 1LL << 56, -(1LL << 56)};
  // clang-format on
  for (std::int64_t v : values) {
    const Tuple back = round_trip(Tuple().add(v));
    EXPECT_EQ(back.get_int(0), v) << v;
    EXPECT_EQ(back.get_big_integer(0), nullptr) << v;
  }
  // Narrow and unsigned types go through the same path.
  const Tuple narrow = round_trip(Tuple()
                                      .add(std::int8_t{-128})
                                      .add(std::uint8_t{255})
                                      .add(std::uint16_t{65535})
                                      .add(std::int32_t{-7})
                                      .add(std::uint64_t{kInt64Max}));
  EXPECT_EQ(narrow.get_int(0), -128);
  EXPECT_EQ(narrow.get_int(1), 255);
  EXPECT_EQ(narrow.get_int(2), 65535);
  EXPECT_EQ(narrow.get_int(3), -7);
  EXPECT_EQ(narrow.get_int(4), kInt64Max);
}

TEST(TupleRoundTrip, IntegersOutsideInt64AreBigIntegers) {
  const BigInteger values[] = {
      big(false, "80 00 00 00 00 00 00 00"),       // INT64_MAX + 1
      big(true, "80 00 00 00 00 00 00 01"),        // INT64_MIN - 1
      big(false, "ff ff ff ff ff ff ff ff"),       // 2^64 - 1
      big(true, "ff ff ff ff ff ff ff ff"),        // -(2^64 - 1)
      big(false, "01 00 00 00 00 00 00 00 00"),    // 2^64
      big(true, "01 00 00 00 00 00 00 00 00"),     // -2^64
      big(false, "01 00 00 00 00 00 00 00 01"),    // 2^64 + 1
      big(true, "ff ff ff ff ff ff ff ff ff ff"),  // 10 bytes, complement starts with 0x00
      big(false, std::string(255 * 2, 'f')),       // the largest encodable magnitude, 255 bytes
      big(true, std::string(255 * 2, 'f')),
  };
  for (const BigInteger& v : values) {
    const Tuple back = round_trip(Tuple().add(v));
    ASSERT_NE(back.get_big_integer(0), nullptr) << to_hex(v.magnitude);
    EXPECT_EQ(*back.get_big_integer(0), v) << to_hex(v.magnitude);
    EXPECT_FALSE(back.get_int(0).has_value());
  }
  // uint64 above INT64_MAX becomes a BigInteger.
  const Tuple u = Tuple().add(std::numeric_limits<std::uint64_t>::max());
  ASSERT_NE(u.get_big_integer(0), nullptr);
  EXPECT_EQ(*u.get_big_integer(0), big(false, "ff ff ff ff ff ff ff ff"));
}

TEST(TupleRoundTrip, BigIntegerInsideInt64IsNormalizedToInt64) {
  const Tuple t = Tuple()
                      .add(big(false, "00 00 05"))
                      .add(big(true, "80 00 00 00 00 00 00 00"))
                      .add(big(true, ""))
                      .add(big(false, "00 7f ff ff ff ff ff ff ff"));
  EXPECT_EQ(t.get_int(0), 5);
  EXPECT_EQ(t.get_int(1), kInt64Min);
  EXPECT_EQ(t.get_int(2), 0);
  EXPECT_EQ(t.get_int(3), kInt64Max);
  EXPECT_EQ(t.pack(), Tuple().add(5).add(kInt64Min).add(0).add(kInt64Max).pack());
  // Leading zeros are stripped from out-of-range values too.
  const Tuple z = Tuple().add(big(false, "00 00 01 00 00 00 00 00 00 00 00"));
  EXPECT_EQ(*z.get_big_integer(0), big(false, "01 00 00 00 00 00 00 00 00"));
}

TEST(TupleRoundTrip, DoublesBitwiseIncludingZerosInfinitiesAndNaNs) {
  const std::uint64_t bit_patterns[] = {
      0x0000000000000000,  // +0.0
      0x8000000000000000,  // -0.0
      0x7ff0000000000000,  // +inf
      0xfff0000000000000,  // -inf
      0x7ff8000000000000,  // quiet NaN
      0xfff8000000000000,  // negative quiet NaN
      0x7ff0000000000001,  // signalling NaN, payload 1
      0xffffffffffffffff,  // negative NaN, all payload bits
      0x0000000000000001,  // smallest subnormal
      0x7fefffffffffffff,  // DBL_MAX
      0xc045000000000000,  // -42.0
  };
  for (std::uint64_t bits : bit_patterns) {
    const Tuple back = round_trip(Tuple().add(std::bit_cast<double>(bits)));
    ASSERT_TRUE(back.get_double(0).has_value());
    EXPECT_EQ(std::bit_cast<std::uint64_t>(*back.get_double(0)), bits) << std::hex << bits;
    EXPECT_FALSE(back.get_float(0).has_value()) << "a double must not come back as a float";
  }
}

TEST(TupleRoundTrip, FloatsBitwiseIncludingZerosInfinitiesAndNaNs) {
  const std::uint32_t bit_patterns[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000,
                                        0xffc00000, 0x7f800001, 0xffffffff, 0x00000001, 0xc2280000};
  for (std::uint32_t bits : bit_patterns) {
    const Tuple back = round_trip(Tuple().add(std::bit_cast<float>(bits)));
    ASSERT_TRUE(back.get_float(0).has_value());
    EXPECT_EQ(std::bit_cast<std::uint32_t>(*back.get_float(0)), bits) << std::hex << bits;
    EXPECT_FALSE(back.get_double(0).has_value());
  }
}

TEST(TupleRoundTrip, UuidsAndVersionstamps) {
  const Uuid u = uuid_from("00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff");
  const Versionstamp v = stamp_from("00 00 00 00 00 00 12 34 00 01 ab cd");
  const Versionstamp incomplete = Versionstamp::incomplete(9);
  const Tuple back = round_trip(Tuple().add(u).add(Uuid{}).add(v).add(incomplete));
  ASSERT_NE(back.get_uuid(0), nullptr);
  EXPECT_EQ(*back.get_uuid(0), u);
  EXPECT_EQ(*back.get_uuid(1), Uuid{});
  ASSERT_NE(back.get_versionstamp(2), nullptr);
  EXPECT_EQ(*back.get_versionstamp(2), v);
  EXPECT_TRUE(back.get_versionstamp(2)->complete());
  EXPECT_EQ(back.get_versionstamp(2)->user_version, 0xabcd);
  EXPECT_FALSE(back.get_versionstamp(3)->complete());
  EXPECT_EQ(back.get_versionstamp(3)->user_version, 9);
}

TEST(TupleRoundTrip, VersionstampBytesAreTrVersionThenBigEndianUserVersion) {
  const Versionstamp v = stamp_from("01 02 03 04 05 06 07 08 09 0a 0b 0c");
  EXPECT_EQ(v.tr_version[0], 1);
  EXPECT_EQ(v.tr_version[9], 10);
  EXPECT_EQ(v.user_version, 0x0b0c);
  EXPECT_EQ(v.to_bytes(), hex("01 02 03 04 05 06 07 08 09 0a 0b 0c"));
  EXPECT_EQ(Versionstamp::incomplete(0x0102).to_bytes(),
            hex("ff ff ff ff ff ff ff ff ff ff 01 02"));
  Versionstamp almost = Versionstamp::incomplete();
  almost.tr_version[9] = 0xfe;
  EXPECT_TRUE(almost.complete());
}

TEST(TupleRoundTrip, NestedTuplesWithNullsToDepthThree) {
  const Tuple inner = Tuple().add(nullptr).add("x\0"s).add(nullptr);
  const Tuple middle =
      Tuple().add(inner).add(Tuple()).add(nullptr).add(-3).add(Tuple().add(nullptr));
  const Tuple t = Tuple().add(middle).add(nullptr).add(Tuple().add(Tuple().add(Tuple())));
  const Tuple back = round_trip(t);
  ASSERT_NE(back.get_tuple(0), nullptr);
  const Tuple& m = *back.get_tuple(0);
  ASSERT_EQ(m.size(), 5u);
  ASSERT_NE(m.get_tuple(0), nullptr);
  EXPECT_TRUE(m.get_tuple(0)->is_null(0));
  EXPECT_EQ(*m.get_tuple(0)->get_string(1), "x\0"s);
  EXPECT_TRUE(m.get_tuple(0)->is_null(2));
  EXPECT_TRUE(m.get_tuple(1)->empty());
  EXPECT_TRUE(m.is_null(2));
  EXPECT_EQ(m.get_int(3), -3);
  EXPECT_EQ(m.get_tuple(4)->size(), 1u);
  EXPECT_TRUE(back.is_null(1));
}

TEST(TupleAccess, TypedAccessorsRejectOtherTypesAndOutOfRange) {
  const Tuple t = Tuple().add("s").add(1).add(1.0).add(1.0f);
  EXPECT_EQ(t.get_bytes(0), nullptr);
  EXPECT_FALSE(t.get_int(0).has_value());
  EXPECT_FALSE(t.get_double(1).has_value());
  EXPECT_FALSE(t.get_bool(1).has_value());
  EXPECT_FALSE(t.get_float(2).has_value());
  EXPECT_FALSE(t.get_double(3).has_value());
  EXPECT_EQ(t.get_tuple(0), nullptr);
  EXPECT_FALSE(t.is_null(0));
  EXPECT_EQ(t.get_string(4), nullptr);
  EXPECT_FALSE(t.get_int(99).has_value());
  EXPECT_FALSE(t.is_null(4));
  EXPECT_TRUE(t[0].holds<std::string>());
  EXPECT_TRUE(t[1].holds<std::int64_t>());
  // add(Element) re-normalizes, so an Element holding an in-range BigInteger becomes int64.
  Tuple e;
  e.add(Element(BigInteger{false, "\x07"}));
  EXPECT_EQ(e.get_int(0), 7);
}

// -------------------------------------------------------------------------------------------------
// FoundationDB's published encodings

TEST(TupleGolden, SpecTestCases) {
  // design/tuple.md test cases, verbatim.
  EXPECT_EQ(to_hex(Tuple().add_bytes("foo\0bar"s).pack()),
            to_hex(hex("01 66 6f 6f 00 ff 62 61 72 00")));
  EXPECT_EQ(to_hex(Tuple().add("F\xc3\x94O\0bar"s).pack()),
            to_hex(hex("02 46 c3 94 4f 00 ff 62 61 72 00")));
  EXPECT_EQ(to_hex(Tuple().add(Tuple().add_bytes("foo\0bar"s).add(nullptr).add(Tuple())).pack()),
            to_hex(hex("05 01 66 6f 6f 00 ff 62 61 72 00 00 ff 05 00 00")));
  EXPECT_EQ(to_hex(Tuple().add(-5551212).pack()), to_hex(hex("11 ab 4b 93")));
  EXPECT_EQ(to_hex(Tuple().add(-42.0f).pack()), to_hex(hex("20 3d d7 ff ff")));
  EXPECT_EQ(to_hex(Tuple().add(-1).pack()), to_hex(hex("13 fe")));  // "-1 is 0x13 0xfe"
  // The spec's nested-tuple rationale: () is 05 00, (None,) is 05 00 ff 00.
  EXPECT_EQ(to_hex(Tuple().add(Tuple()).pack()), "05 00");
  EXPECT_EQ(to_hex(Tuple().add(Tuple().add(nullptr)).pack()), "05 00 ff 00");
}

TEST(TupleGolden, TypeCodes) {
  EXPECT_EQ(to_hex(Tuple().add(nullptr).pack()), "00");
  EXPECT_EQ(to_hex(Tuple().add(0).pack()), "14");
  EXPECT_EQ(to_hex(Tuple().add(false).pack()), "26");
  EXPECT_EQ(to_hex(Tuple().add(true).pack()), "27");
  EXPECT_EQ(to_hex(Tuple().add(-42.0).pack()), "21 3f ba ff ff ff ff ff ff");
  EXPECT_EQ(to_hex(Tuple().add(1.0f).pack()), "20 bf 80 00 00");
  EXPECT_EQ(to_hex(Tuple().add(0.0).pack()), "21 80 00 00 00 00 00 00 00");
  EXPECT_EQ(to_hex(Tuple().add(-0.0).pack()), "21 7f ff ff ff ff ff ff ff");
  EXPECT_EQ(to_hex(Tuple().add(uuid_from("00112233445566778899aabbccddeeff")).pack()),
            "30 00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff");
  EXPECT_EQ(to_hex(Tuple().add(stamp_from("000000000000123400010203")).pack()),
            "33 00 00 00 00 00 00 12 34 00 01 02 03");
  EXPECT_EQ(to_hex(Tuple().add("hi").add("there").pack()), "02 68 69 00 02 74 68 65 72 65 00");
}

// Integer boundaries, derived from the spec's rules (minimal big-endian length; negatives one's
// complement; 0x1d/0x0b with a length byte beyond 8 bytes), as the Java and Go bindings write them.
TEST(TupleGolden, IntegerBoundaries) {
  struct Case {
    Tuple t;
    const char* expected;
  };
  const Case cases[] = {
      {Tuple().add(1), "15 01"},
      {Tuple().add(255), "15 ff"},
      {Tuple().add(256), "16 01 00"},
      {Tuple().add(-255), "13 00"},
      {Tuple().add(-256), "12 fe ff"},
      {Tuple().add(kInt64Max), "1c 7f ff ff ff ff ff ff ff"},
      {Tuple().add(kInt64Min), "0c 7f ff ff ff ff ff ff ff"},
      {Tuple().add(std::uint64_t{1} << 63), "1c 80 00 00 00 00 00 00 00"},
      {Tuple().add(big(true, "80 00 00 00 00 00 00 01")), "0c 7f ff ff ff ff ff ff fe"},
      {Tuple().add(std::numeric_limits<std::uint64_t>::max()), "1c ff ff ff ff ff ff ff ff"},
      {Tuple().add(big(true, "ff ff ff ff ff ff ff ff")), "0c 00 00 00 00 00 00 00 00"},
      {Tuple().add(big(false, "01 00 00 00 00 00 00 00 00")), "1d 09 01 00 00 00 00 00 00 00 00"},
      {Tuple().add(big(true, "01 00 00 00 00 00 00 00 00")), "0b f6 fe ff ff ff ff ff ff ff ff"},
  };
  for (const Case& c : cases) EXPECT_EQ(to_hex(c.t.pack()), c.expected);
}

// -------------------------------------------------------------------------------------------------
// Value order == byte order

class RandomTuples {
 public:
  explicit RandomTuples(std::uint64_t seed) : rng_(seed) {}

  Tuple tuple(int depth) {
    Tuple t;
    const std::uint64_t n = pick(depth == 0 ? 5 : 4);
    for (std::uint64_t i = 0; i < n; ++i) t.add(element(depth));
    return t;
  }

  // b derived from a, so that many pairs share a prefix and then differ in one element, usually
  // between two values of the same type (where the encodings' subtle orders live).
  Tuple near(const Tuple& a, int depth) {
    std::vector<Element> e = a.elements();
    const std::size_t i = e.empty() ? 0 : pick(e.size());
    switch (pick(6)) {
      case 0:
        if (!e.empty()) e.pop_back();
        break;
      case 1:
        e.push_back(element(depth));
        break;
      case 2:
        if (!e.empty()) e[i] = element(depth);
        break;
      case 3:
      case 4:
        if (!e.empty()) {
          if (const Tuple* nested = e[i].get_if<Tuple>()) {
            e[i] = Element(near(*nested, depth + 1));
          } else {
            e[i] = element_of(kind_of(e[i]), depth);
          }
        }
        break;
      default:
        break;  // identical
    }
    Tuple b;
    for (Element& x : e) b.add(std::move(x));
    return b;
  }

  Element element(int depth) {
    return element_of(static_cast<Kind>(pick(depth < 3 ? kKinds : kKinds - 1)), depth);
  }

 private:
  enum Kind {
    kNull,
    kBytes,
    kString,
    kInteger,
    kFloat,
    kDouble,
    kBool,
    kUuid,
    kStamp,
    kNested,
    kKinds
  };

  static Kind kind_of(const Element& e) {
    if (e.holds<Bytes>()) return kBytes;
    if (e.holds<std::string>()) return kString;
    if (e.holds<std::int64_t>() || e.holds<BigInteger>()) return kInteger;
    if (e.holds<float>()) return kFloat;
    if (e.holds<double>()) return kDouble;
    if (e.holds<bool>()) return kBool;
    if (e.holds<Uuid>()) return kUuid;
    if (e.holds<Versionstamp>()) return kStamp;
    if (e.holds<Tuple>()) return kNested;
    return kNull;
  }

  Element element_of(Kind kind, int depth) {
    switch (kind) {
      case kNull:
        return Element(nullptr);
      case kBytes:
        return Element(Bytes{small_string()});
      case kString:
        return Element(small_string());
      case kInteger:
        return integer();
      case kFloat:
        return Element(random_float());
      case kDouble:
        return Element(random_double());
      case kBool:
        return Element(pick(2) == 0);
      case kUuid:
        return Element(random_uuid());
      case kStamp:
        return Element(random_stamp());
      default:
        return Element(tuple(depth + 1));
    }
  }

  std::uint64_t pick(std::uint64_t n) { return rng_() % n; }

  char small_byte() {
    static const unsigned char kAlphabet[] = {0x00, 0x00, 0x01, 'a',  'b',
                                              0x7f, 0x80, 0xfe, 0xff, 0xff};
    return static_cast<char>(kAlphabet[pick(sizeof kAlphabet)]);
  }

  std::string small_string() {
    std::string s(pick(5), '\0');
    for (char& c : s) c = small_byte();
    return s;
  }

  Element integer() {
    // clang-format off
    static const std::int64_t kBoundaries[] = {
        0, 1, -1, 2, -2, 255, -255, 256, -256, 65535, -65536,
        kInt64Max, kInt64Min, kInt64Max - 1, kInt64Min + 1,
        1LL << 56, -(1LL << 56), (1LL << 56) - 1};
    // clang-format on
    Tuple t;
    switch (pick(6)) {
      case 0:
        t.add(kBoundaries[pick(std::size(kBoundaries))]);
        break;
      case 1:
        t.add(static_cast<std::int64_t>(rng_()));
        break;
      case 2:
        t.add(static_cast<std::int64_t>(pick(600)) - 300);
        break;
      case 3:
        t.add(static_cast<std::int64_t>(rng_()) >> pick(64));
        break;
      default: {  // a BigInteger of 8..11 bytes (8-byte ones straddle the int64 boundary)
        std::string m(8 + pick(4), '\0');
        for (char& c : m) c = pick(3) == 0 ? small_byte() : static_cast<char>(rng_());
        t.add(BigInteger{pick(2) == 0, m});
      }
    }
    return t[0];
  }

  float random_float() {
    static const std::uint32_t kSpecial[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000,
                                             0x7fc00000, 0xffc00000, 0x7f800001, 0xffffffff,
                                             0x00000001, 0x80000001, 0x3f800000, 0xbf800000};
    if (pick(2) == 0) return std::bit_cast<float>(kSpecial[pick(std::size(kSpecial))]);
    return std::bit_cast<float>(static_cast<std::uint32_t>(rng_()));
  }

  double random_double() {
    static const std::uint64_t kSpecial[] = {
        0x0000000000000000, 0x8000000000000000, 0x7ff0000000000000, 0xfff0000000000000,
        0x7ff8000000000000, 0xfff8000000000000, 0x7ff0000000000001, 0xfff0000000000001,
        0xffffffffffffffff, 0x7fffffffffffffff, 0x0000000000000001, 0x8000000000000001,
        0x3ff0000000000000, 0xbff0000000000000, 0x7fefffffffffffff, 0xffefffffffffffff};
    switch (pick(3)) {
      case 0:
        return std::bit_cast<double>(kSpecial[pick(std::size(kSpecial))]);
      case 1:
        return static_cast<double>(static_cast<std::int64_t>(pick(21)) - 10) / 4;
      default:
        return std::bit_cast<double>(rng_());
    }
  }

  Uuid random_uuid() {
    Uuid u;
    for (std::uint8_t& b : u.bytes)
      b = pick(4) == 0 ? static_cast<std::uint8_t>(small_byte()) : 0x00;
    return u;
  }

  Versionstamp random_stamp() {
    static const std::uint16_t kUser[] = {0, 1, 255, 256, 65535};
    Versionstamp v = pick(4) == 0 ? Versionstamp::incomplete() : Versionstamp{};
    if (v.complete()) {
      for (std::uint8_t& b : v.tr_version)
        b = pick(3) == 0 ? static_cast<std::uint8_t>(small_byte()) : 0;
    }
    v.user_version = kUser[pick(std::size(kUser))];
    return v;
  }

  std::mt19937_64 rng_;
};

TEST(TupleOrder, ByteOrderOfPackedMatchesValueOrderForRandomPairs) {
  RandomTuples gen(20240607);
  constexpr int kPairs = 20000;
  int less = 0, equal = 0, greater = 0;
  for (int i = 0; i < kPairs; ++i) {
    const Tuple a = gen.tuple(0);
    const Tuple b = i % 2 == 0 ? gen.near(a, 0) : gen.tuple(0);
    const std::string pa = a.pack();
    const std::string pb = b.pack();
    const int by_value = sign(compare(a, b));
    ASSERT_EQ(by_value, byte_order(pa, pb)) << to_hex(pa) << "  vs  " << to_hex(pb);
    ASSERT_EQ(sign(compare(b, a)), -by_value);
    ASSERT_EQ(a == b, pa == pb);
    (by_value < 0 ? less : by_value == 0 ? equal : greater)++;
  }
  // The generator must exercise all three outcomes, or the test proves little.
  EXPECT_GT(less, kPairs / 10);
  EXPECT_GT(equal, kPairs / 50);
  EXPECT_GT(greater, kPairs / 10);
}

TEST(TupleOrder, SortingByValueSortsThePackedBytes) {
  RandomTuples gen(7);
  std::vector<Tuple> tuples;
  for (int i = 0; i < 3000; ++i) tuples.push_back(gen.tuple(0));
  std::sort(tuples.begin(), tuples.end(),
            [](const Tuple& a, const Tuple& b) { return compare(a, b) < 0; });
  for (std::size_t i = 1; i < tuples.size(); ++i) {
    ASSERT_LE(byte_order(tuples[i - 1].pack(), tuples[i].pack()), 0) << i;
  }
}

TEST(TupleOrder, TypeOrderAndBoundaryValuesInAscendingOrder) {
  // Each tuple strictly greater than the one before, both by value and by bytes.
  const std::vector<Tuple> ascending = {
      Tuple(),
      Tuple().add(nullptr),
      Tuple().add(nullptr).add(nullptr),
      Tuple().add_bytes(""),
      Tuple().add_bytes("\0"s),
      Tuple().add_bytes("\0\0"s),
      Tuple().add_bytes("\x01"),
      Tuple().add_bytes("\xff"),
      Tuple().add(""),
      Tuple().add("a"),
      Tuple().add("a").add(nullptr),
      Tuple().add("a\0"s),
      Tuple().add("b"),
      Tuple().add(Tuple()),
      Tuple().add(Tuple()).add(nullptr),
      Tuple().add(Tuple().add(nullptr)),
      Tuple().add(Tuple().add(nullptr).add(nullptr)),
      Tuple().add(Tuple().add_bytes("")),
      Tuple().add(Tuple().add(0)),
      Tuple().add(big(true, std::string(255 * 2, 'f'))),
      Tuple().add(big(true, "01 00 00 00 00 00 00 00 00")),
      Tuple().add(big(true, "ff ff ff ff ff ff ff ff")),
      Tuple().add(big(true, "80 00 00 00 00 00 00 01")),
      Tuple().add(kInt64Min),
      Tuple().add(kInt64Min + 1),
      Tuple().add(-256),
      Tuple().add(-255),
      Tuple().add(-1),
      Tuple().add(0),
      Tuple().add(1),
      Tuple().add(255),
      Tuple().add(256),
      Tuple().add(kInt64Max),
      Tuple().add(std::uint64_t{1} << 63),
      Tuple().add(std::numeric_limits<std::uint64_t>::max()),
      Tuple().add(big(false, "01 00 00 00 00 00 00 00 00")),
      Tuple().add(big(false, std::string(255 * 2, 'f'))),
      Tuple().add(std::bit_cast<float>(0xffffffffu)),
      Tuple().add(-std::numeric_limits<float>::infinity()),
      Tuple().add(-0.0f),
      Tuple().add(0.0f),
      Tuple().add(std::numeric_limits<float>::infinity()),
      Tuple().add(std::bit_cast<float>(0x7fc00000u)),
      Tuple().add(std::bit_cast<double>(0xffffffffffffffffull)),
      Tuple().add(std::bit_cast<double>(0xfff8000000000000ull)),
      Tuple().add(std::bit_cast<double>(0xfff0000000000001ull)),
      Tuple().add(-std::numeric_limits<double>::infinity()),
      Tuple().add(-std::numeric_limits<double>::max()),
      Tuple().add(-1.0),
      Tuple().add(-std::numeric_limits<double>::denorm_min()),
      Tuple().add(-0.0),
      Tuple().add(0.0),
      Tuple().add(std::numeric_limits<double>::denorm_min()),
      Tuple().add(1.0),
      Tuple().add(std::numeric_limits<double>::infinity()),
      Tuple().add(std::bit_cast<double>(0x7ff0000000000001ull)),
      Tuple().add(std::bit_cast<double>(0x7ff8000000000000ull)),
      Tuple().add(false),
      Tuple().add(true),
      Tuple().add(Uuid{}),
      Tuple().add(uuid_from("000000000000000000000000000000ff")),
      Tuple().add(uuid_from("ff000000000000000000000000000000")),
      Tuple().add(stamp_from("000000000000000000000000")),
      Tuple().add(stamp_from("000000000000000000000001")),
      Tuple().add(stamp_from("00000000000000000001ffff")),
      Tuple().add(Versionstamp::incomplete(0)),
      Tuple().add(Versionstamp::incomplete(1)),
  };
  for (std::size_t i = 1; i < ascending.size(); ++i) {
    const Tuple& a = ascending[i - 1];
    const Tuple& b = ascending[i];
    EXPECT_LT(compare(a, b), 0) << "value order broken at " << i << ": " << to_hex(b.pack());
    EXPECT_LT(byte_order(a.pack(), b.pack()), 0)
        << "byte order broken at " << i << ": " << to_hex(a.pack()) << " / " << to_hex(b.pack());
  }
}

TEST(TupleOrder, EqualityIsByValue) {
  EXPECT_TRUE(Tuple().add(std::nan("")) == Tuple().add(std::nan("")));
  EXPECT_FALSE(Tuple().add(0.0) == Tuple().add(-0.0));
  EXPECT_FALSE(Tuple().add(1.0f) == Tuple().add(1.0));
  EXPECT_FALSE(Tuple().add(1) == Tuple().add(1.0));
  EXPECT_FALSE(Tuple().add("a") == Tuple().add_bytes("a"));
  EXPECT_TRUE(Tuple().add(5) == Tuple().add(big(false, "05")));
  // compare() on raw Elements normalizes numerically too.
  EXPECT_EQ(compare(Element(BigInteger{false, "\0\x05"s}), Element(std::int64_t{5})), 0);
  EXPECT_LT(compare(Element(BigInteger{true, "\x05"s}), Element(std::int64_t{-4})), 0);
}

// -------------------------------------------------------------------------------------------------
// pack_with_versionstamp

std::uint32_t offset_suffix(const std::string& s) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[s.size() - 4 + i]);
  return v;
}

// Checks the layout: the offset points at ten 0xff bytes right after a 0x33 code, and the key
// (without the suffix) is the plain packing. Returns the offset.
std::uint32_t check_stamped(const Result<std::string>& r, const std::string& plain) {
  EXPECT_TRUE(r.ok());
  if (!r.ok()) return 0;
  const std::string& s = *r;
  EXPECT_EQ(s.size(), plain.size() + 4);
  EXPECT_EQ(s.substr(0, plain.size()), plain);
  const std::uint32_t offset = offset_suffix(s);
  EXPECT_GE(offset, 1u);
  EXPECT_LE(offset + 12u, plain.size());
  if (offset < 1 || offset + 12 > plain.size()) return offset;
  EXPECT_EQ(static_cast<unsigned char>(plain[offset - 1]), 0x33);
  EXPECT_EQ(plain.substr(offset, 10), std::string(10, '\xff'));
  return offset;
}

TEST(TupleVersionstamp, OffsetAtTopLevel) {
  const Tuple t = Tuple().add("a").add(Versionstamp::incomplete(7));
  const Result<std::string> r = t.pack_with_versionstamp();
  EXPECT_EQ(check_stamped(r, t.pack()), 4u);  // 02 61 00 | 33 <here>
  EXPECT_EQ(to_hex(*r), "02 61 00 33 ff ff ff ff ff ff ff ff ff ff 00 07 04 00 00 00");
}

TEST(TupleVersionstamp, OffsetInsideNestedTupleAndAfterCompleteStamps) {
  const Tuple t = Tuple()
                      .add(stamp_from("000000000000000100000000"))
                      .add(1)
                      .add(Tuple().add("x").add(nullptr).add(Versionstamp::incomplete(3)));
  // 33 + 12 bytes (13) | 15 01 (2) | 05 02 78 00 00 ff (6) | 33 <here>
  EXPECT_EQ(check_stamped(t.pack_with_versionstamp(), t.pack()), 22u);
}

TEST(TupleVersionstamp, CommitFillInUnpacksAsCompleteStamp) {
  const Tuple t = Tuple().add("k").add(Tuple().add(Versionstamp::incomplete(42)));
  Result<std::string> r = t.pack_with_versionstamp();
  ASSERT_TRUE(r.ok());
  std::string key = *r;
  const std::uint32_t offset = offset_suffix(key);
  key.resize(key.size() - 4);
  const std::string commit_version = hex("00 00 00 00 00 00 99 99 00 02");
  key.replace(offset, 10, commit_version);  // what the commit does
  std::optional<Tuple> back = unpack_exact(key);
  ASSERT_TRUE(back.has_value());
  const Versionstamp* v = back->get_tuple(1)->get_versionstamp(0);
  ASSERT_NE(v, nullptr);
  EXPECT_TRUE(v->complete());
  EXPECT_EQ(v->user_version, 42);
  EXPECT_EQ(v->to_bytes(), commit_version + hex("00 2a"));
}

TEST(TupleVersionstamp, OffsetCountsSubspacePrefix) {
  const Subspace space(Tuple().add("db").add(3),
                       "\xfe"
                       "raw");
  const Tuple t = Tuple().add(Versionstamp::incomplete());
  const Result<std::string> r = space.pack_with_versionstamp(t);
  const std::uint32_t offset = check_stamped(r, space.pack(t));
  EXPECT_EQ(offset, space.key().size() + 1);
  EXPECT_EQ(space.key(),
            "\xfe"
            "raw" +
                hex("02 64 62 00 15 03"));
  // Tuple's prefix overload is the same thing.
  const Result<std::string> direct = t.pack_with_versionstamp(space.key());
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(*direct, *r);
}

TEST(TupleVersionstamp, ErrorUnlessExactlyOneIncompleteStamp) {
  const Result<std::string> none =
      Tuple().add("a").add(stamp_from("000000000000000000000000")).pack_with_versionstamp();
  EXPECT_FALSE(none.ok());
  EXPECT_EQ(none.error(), Error::invalid_option_value);
  EXPECT_EQ(Tuple().pack_with_versionstamp().error(), Error::invalid_option_value);

  const Result<std::string> two = Tuple()
                                      .add(Versionstamp::incomplete(1))
                                      .add(Versionstamp::incomplete(2))
                                      .pack_with_versionstamp();
  EXPECT_EQ(two.error(), Error::invalid_option_value);
  const Result<std::string> two_nested =
      Tuple()
          .add(Versionstamp::incomplete(1))
          .add(Tuple().add(Tuple().add(Versionstamp::incomplete(2))))
          .pack_with_versionstamp();
  EXPECT_EQ(two_nested.error(), Error::invalid_option_value);
  EXPECT_EQ(Subspace::from_raw("p").pack_with_versionstamp(Tuple().add(1)).error(),
            Error::invalid_option_value);
}

// -------------------------------------------------------------------------------------------------
// Hostile input

std::vector<std::string> valid_encodings() {
  std::vector<std::string> out = {
      hex("01 66 6f 6f 00 ff 62 61 72 00"),
      hex("05 01 66 6f 6f 00 ff 62 61 72 00 00 ff 05 00 00"),
      Tuple().add(kInt64Min).add(kInt64Max).add(-1).add(0).pack(),
      Tuple()
          .add(big(false, "01 00 00 00 00 00 00 00 00"))
          .add(big(true, "ff ff ff ff ff ff ff ff ff"))
          .pack(),
      Tuple().add(-42.0f).add(-42.0).add(true).add(false).add(nullptr).pack(),
      Tuple()
          .add(uuid_from("00112233445566778899aabbccddeeff"))
          .add(Versionstamp::incomplete(5))
          .pack(),
      Tuple().add(Tuple().add(Tuple().add("deep\0"s).add(nullptr)).add(nullptr)).add("tail").pack(),
  };
  RandomTuples gen(99);
  for (int i = 0; i < 300; ++i) out.push_back(gen.tuple(0).pack());
  return out;
}

TEST(TupleUnpack, EveryTruncationFailsOrRepacksToItself) {
  int rejected = 0;
  for (const std::string& full : valid_encodings()) {
    ASSERT_TRUE(unpack_exact(full).has_value()) << to_hex(full);
    for (std::size_t n = 0; n < full.size(); ++n) {
      const std::string_view cut(full.data(), n);
      std::optional<Tuple> t = unpack_exact(cut);
      if (!t) {
        ++rejected;
        continue;
      }
      // A truncation at an element boundary is a shorter valid tuple; then it must be canonical.
      ASSERT_EQ(to_hex(t->pack()), to_hex(cut));
    }
  }
  EXPECT_GT(rejected, 1000);
}

TEST(TupleUnpack, TruncatedElementsAreRejected) {
  const char* truncated[] = {
      "01",                             // bytes without terminator
      "01 61 62",                       //
      "02 61 00 ff",                    // escaped 0x00 with no terminator after it
      "05",                             // nested without terminator
      "05 00 ff",                       // nested null, then no terminator
      "05 02 61 00",                    // nested string, then no terminator
      "05 05 00",                       // inner closed, outer not
      "15",                             // 1-byte integer, 0 bytes
      "1c 7f ff ff ff ff ff ff",        // 8-byte integer, 7 bytes
      "0c 7f",                          //
      "1d",                             // no length byte
      "1d 09 01 00 00 00 00 00 00 00",  // 9 bytes announced, 8 present
      "0b",                             //
      "0b f6 fe ff ff ff ff ff ff ff",  //
      "20 3d d7 ff",                    // float, 3 of 4 bytes
      "21 3f ba ff ff ff ff ff",        // double, 7 of 8 bytes
      "30 00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee",  // uuid, 15 of 16
      "33 ff ff ff ff ff ff ff ff ff ff 00",              // versionstamp, 11 of 12
  };
  for (const char* h : truncated) EXPECT_FALSE(unpack_exact(hex(h)).has_value()) << h;
}

TEST(TupleUnpack, NonCanonicalAndUnknownCodesAreRejected) {
  const char* bad[] = {
      "15 00",                             // leading zero byte: 0 written in 1 byte
      "16 00 ff",                          // 255 written in 2 bytes
      "13 ff",                             // -0 (complement of 00)
      "12 ff 00",                          // -255 written in 2 bytes
      "1d 08 ff ff ff ff ff ff ff ff",     // Python's form of 2^64-1: 0x1d only for 9+ bytes
      "0b f7 00 00 00 00 00 00 00 00",     // Python's form of -(2^64-1)
      "1d 09 00 ff ff ff ff ff ff ff ff",  // leading zero in a big magnitude
      "0b f6 ff 00 00 00 00 00 00 00 00",  // leading zero (complemented) in a big negative
      "1d 00",                             // zero-length big integer
      "0b ff",                             //
      "00 ff",                             // top-level null followed by 0xff
      "03 00",
      "04",
      "06",
      "0a 00",
      "1e 00",
      "22 00 00 00 00 00 00 00 00 00 00",
      "25",
      "31",
      "32",
      "40",
      "ff",
  };
  for (const char* h : bad) EXPECT_FALSE(unpack_exact(hex(h)).has_value()) << h;
  // The canonical spellings of the values above do decode.
  EXPECT_TRUE(unpack_exact(hex("1c ff ff ff ff ff ff ff ff")).has_value());
  EXPECT_TRUE(unpack_exact(hex("0c 00 00 00 00 00 00 00 00")).has_value());
}

TEST(TupleUnpack, RandomAndMutatedBytesNeverCrashAndDecodeCanonically) {
  std::mt19937_64 rng(12345);
  const unsigned char kAlphabet[] = {0x00, 0xff, 0x01, 0x02, 0x05, 0x0b, 0x0c, 0x13, 0x14, 0x15,
                                     0x1c, 0x1d, 0x20, 0x21, 0x26, 0x27, 0x30, 0x33, 0xf6, 0x09};
  const std::vector<std::string> seeds = valid_encodings();
  int decoded = 0;
  for (int i = 0; i < 200000; ++i) {
    std::string s;
    if (i % 2 == 0) {
      s.resize(rng() % 40);
      for (char& c : s) {
        c = rng() % 3 == 0 ? static_cast<char>(rng()) : static_cast<char>(kAlphabet[rng() % 20]);
      }
    } else {
      s = seeds[rng() % seeds.size()];
      for (int m = 1 + rng() % 3; m > 0; --m) {
        const std::size_t at = s.empty() ? 0 : rng() % s.size();
        switch (rng() % 3) {
          case 0:
            if (!s.empty()) s[at] = static_cast<char>(rng());
            break;
          case 1:
            s.insert(s.begin() + at, static_cast<char>(kAlphabet[rng() % 20]));
            break;
          default:
            if (!s.empty()) s.erase(at, 1);
            break;
        }
      }
    }
    std::optional<Tuple> t = unpack_exact(s);
    if (t) {
      ++decoded;
      ASSERT_EQ(to_hex(t->pack()), to_hex(s));
    }
  }
  EXPECT_GT(decoded, 1000);  // the fuzz reaches the success path too
}

// What TupleReader reads of `s`, element by element, checked against unpack(): the reader gets to
// the end exactly when unpack() succeeds, and then every element it read has unpack()'s value.
void expect_reader_agrees(const std::string& s) {
  const std::optional<Tuple> u = Tuple::unpack(s);
  TupleReader r(s);
  std::size_t i = 0;
  bool reached_end = true;
  while (!r.at_end()) {
    std::string text = "left over";
    if (auto v = r.read_int()) {
      if (u) {
        ASSERT_EQ(u->get_int(i), v) << to_hex(s) << " element " << i;
      }
    } else if (r.read_string(&text)) {
      if (u) {
        ASSERT_TRUE(u->get_string(i) && *u->get_string(i) == text) << to_hex(s);
      }
    } else if (r.read_bytes(&text)) {
      if (u) {
        ASSERT_TRUE(u->get_bytes(i) && *u->get_bytes(i) == text) << to_hex(s);
      }
    } else if (auto b = r.read_bool()) {
      if (u) {
        ASSERT_EQ(u->get_bool(i), b) << to_hex(s);
      }
    } else if (auto vs = r.read_versionstamp()) {
      if (u) {
        ASSERT_TRUE(u->get_versionstamp(i) && *u->get_versionstamp(i) == *vs) << to_hex(s);
      }
    } else if (!r.skip()) {
      reached_end = false;
      break;
    } else if (u) {
      // Skipped: a type without a typed read here (or an integer beyond int64).
      ASSERT_FALSE(u->get_int(i) || u->get_string(i) || u->get_bytes(i) || u->get_bool(i) ||
                   u->get_versionstamp(i))
          << to_hex(s) << " element " << i;
    }
    ++i;
  }
  ASSERT_EQ(reached_end, u.has_value()) << to_hex(s);
  if (u) {
    ASSERT_EQ(i, u->size()) << to_hex(s);
  }
}

TEST(TupleReaderTest, ReadsWhatUnpackReadsAndRejectsWhatItRejects) {
  for (const std::string& s : valid_encodings()) expect_reader_agrees(s);
  std::mt19937_64 rng(777);
  const std::vector<std::string> seeds = valid_encodings();
  for (int i = 0; i < 100000; ++i) {
    std::string s = seeds[rng() % seeds.size()];
    for (int m = static_cast<int>(rng() % 3); m > 0; --m) {
      const std::size_t at = s.empty() ? 0 : rng() % s.size();
      if (rng() % 2 == 0 && !s.empty()) {
        s[at] = static_cast<char>(rng());
      } else {
        s.erase(at, s.empty() ? 0 : 1);
      }
    }
    expect_reader_agrees(s);
  }
}

TEST(TuplePackers, WriteWhatPackWritesForEachElement) {
  std::mt19937_64 rng(4242);
  const std::int64_t ints[] = {0,
                               1,
                               -1,
                               255,
                               256,
                               -255,
                               -256,
                               65535,
                               -65536,
                               std::numeric_limits<std::int64_t>::max(),
                               std::numeric_limits<std::int64_t>::min()};
  for (int i = 0; i < 2000; ++i) {
    Tuple t;
    std::string packed = "prefix";
    for (int n = static_cast<int>(rng() % 6); n > 0; --n) {
      std::string s(rng() % 5, '\0');
      for (char& c : s) c = static_cast<char>(rng() % 3 == 0 ? 0 : rng());  // NULs escaped
      switch (rng() % 4) {
        case 0:
          t.add(s);
          pack_string(&packed, s);
          break;
        case 1:
          t.add_bytes(s);
          pack_bytes(&packed, s);
          break;
        case 2: {
          const std::int64_t v =
              rng() % 2 ? ints[rng() % std::size(ints)] : static_cast<std::int64_t>(rng());
          t.add(v);
          pack_int(&packed, v);
          break;
        }
        default: {
          const bool b = rng() % 2 == 0;
          t.add(b);
          pack_bool(&packed, b);
          break;
        }
      }
    }
    ASSERT_EQ(to_hex(packed), to_hex("prefix" + t.pack()));
  }
}

// Nulls, nested tuples and an incomplete versionstamp written by the packers: the same bytes, and
// the same versionstamp offset, as pack_with_versionstamp of the equivalent Tuple.
TEST(TuplePackers, NestedTuplesNullsAndAVersionstampAsPackWithVersionstamp) {
  std::mt19937_64 rng(2611);
  for (int i = 0; i < 1000; ++i) {
    Tuple t;
    std::string packed = "pre";
    const int stamp_at = static_cast<int>(rng() % 4);
    std::size_t offset = 0;
    for (int n = 0; n < 4; ++n) {
      if (n == stamp_at) {
        const auto user = static_cast<std::uint16_t>(rng());
        if (rng() % 2 == 0) {
          t.add(Versionstamp::incomplete(user));
          offset = pack_incomplete_versionstamp(&packed, user);
        } else {  // inside a nested tuple, between other elements
          const std::int64_t a = static_cast<std::int64_t>(rng() % 1000) - 500;
          t.add(Tuple().add(a).add(Versionstamp::incomplete(user)).add(std::string("x\0y", 3)));
          pack_nested_open(&packed);
          pack_int(&packed, a);
          offset = pack_incomplete_versionstamp(&packed, user);
          pack_string(&packed, std::string("x\0y", 3));
          pack_nested_close(&packed);
        }
        continue;
      }
      switch (rng() % 3) {
        case 0:
          t.add(nullptr);
          pack_null(&packed);
          break;
        case 1: {
          Tuple nested;
          pack_nested_open(&packed);
          for (int k = static_cast<int>(rng() % 4); k > 0; --k) {
            std::string b(rng() % 4, '\0');
            for (char& c : b) c = static_cast<char>(rng() % 2 ? 0 : rng());
            nested.add_bytes(b);
            pack_bytes(&packed, b);
          }
          pack_nested_close(&packed);
          t.add(nested);
          break;
        }
        default: {
          const auto v = static_cast<std::int64_t>(rng());
          t.add(v);
          pack_int(&packed, v);
        }
      }
    }
    append_versionstamp_offset(&packed, offset);
    auto want = t.pack_with_versionstamp("pre");
    ASSERT_TRUE(want.ok());
    ASSERT_EQ(to_hex(packed), to_hex(*want));
  }
}

TEST(TupleReaderTest, TypedReadsOfAKnownLayout) {
  const std::string packed = Tuple()
                                 .add(std::string("a\0b", 3))
                                 .add(-300)
                                 .add_bytes(std::string("\0\xff", 2))
                                 .add(std::numeric_limits<std::int64_t>::min())
                                 .add(true)
                                 .add(BigInteger{false, std::string("\x01") + std::string(9, '\0')})
                                 .add(Versionstamp::incomplete(7))
                                 .pack();
  TupleReader r(packed);
  std::string text = "reused buffer, longer than what it gets";
  EXPECT_FALSE(r.read_int());  // a string: the reader stays put
  ASSERT_TRUE(r.read_string(&text));
  EXPECT_EQ(text, std::string("a\0b", 3));
  EXPECT_FALSE(r.read_bytes(&text));
  EXPECT_EQ(r.read_int(), -300);
  ASSERT_TRUE(r.read_bytes(&text));
  EXPECT_EQ(text, std::string("\0\xff", 2));
  EXPECT_EQ(r.read_int(), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(r.read_bool(), true);
  EXPECT_FALSE(r.read_int());  // 2^72: no int64
  EXPECT_TRUE(r.skip());
  auto vs = r.read_versionstamp();
  ASSERT_TRUE(vs);
  EXPECT_EQ(vs->user_version, 7);
  EXPECT_TRUE(r.at_end());
  EXPECT_FALSE(r.skip());
  EXPECT_FALSE(r.read_int());
}

TEST(TupleReaderTest, SkipStepsOverEveryKindOfElement) {
  const std::string packed = Tuple()
                                 .add(-70000)
                                 .add(std::string("s\0", 2))
                                 .add(Tuple().add(1).add(nullptr))
                                 .add(2.5)
                                 .add(nullptr)
                                 .add(BigInteger{true, std::string(9, '\x07')})
                                 .add(false)
                                 .add("end")
                                 .pack();
  TupleReader r(packed);
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(r.skip()) << "element " << i;
  std::string last;
  ASSERT_TRUE(r.read_string(&last));
  EXPECT_EQ(last, "end");
  EXPECT_TRUE(r.at_end());
  // A truncated integer is not skipped.
  TupleReader cut(std::string_view(packed).substr(0, 2));
  EXPECT_FALSE(cut.skip());
}

TEST(TupleUnpack, NestingDepthIsBounded) {
  auto nested = [](std::size_t depth) {
    return std::string(depth, '\x05') + std::string(depth, '\x00');
  };
  EXPECT_TRUE(unpack_exact(nested(kTupleDepthMax)).has_value());
  EXPECT_FALSE(unpack_exact(nested(kTupleDepthMax + 1)).has_value());
  EXPECT_FALSE(unpack_exact(std::string(1'000'000, '\x05')).has_value());  // no stack overflow
}

// -------------------------------------------------------------------------------------------------
// Subspace and strinc

TEST(SubspaceTest, PackUnpackContains) {
  const Subspace docs(Tuple().add("docs"));
  EXPECT_EQ(docs.key(), hex("02 64 6f 63 73 00"));
  const std::string key = docs.pack(Tuple().add("id1").add(7));
  EXPECT_EQ(key, docs.key() + Tuple().add("id1").add(7).pack());
  EXPECT_TRUE(docs.contains(key));
  EXPECT_TRUE(docs.contains(docs.key()));
  EXPECT_FALSE(docs.contains(Tuple().add("doc").pack()));
  EXPECT_FALSE(docs.contains(""));

  std::optional<Tuple> t = docs.unpack(key);
  ASSERT_TRUE(t.has_value());
  EXPECT_TRUE(*t == Tuple().add("id1").add(7));
  EXPECT_TRUE(docs.unpack(docs.key())->empty());
  EXPECT_FALSE(docs.unpack(Tuple().add("other").add(1).pack()).has_value());  // wrong prefix
  EXPECT_FALSE(docs.unpack(docs.key() + "\x15").has_value());                 // malformed rest
  EXPECT_EQ(docs.pack(), docs.key());
}

TEST(SubspaceTest, SubAndRawPrefixCompose) {
  const Subspace root = Subspace::from_raw("\x01\x02");
  const Subspace db = root.sub(Tuple().add("db"));
  const Subspace seq = db.sub(Tuple().add("seq").add(2));
  EXPECT_EQ(seq.key(), "\x01\x02"s + Tuple().add("db").add("seq").add(2).pack());
  EXPECT_EQ(seq.key(), Subspace(Tuple().add("db").add("seq").add(2), "\x01\x02").key());
  EXPECT_TRUE(root.contains(seq.key()));
  EXPECT_TRUE(db.contains(seq.key()));
  EXPECT_FALSE(seq.contains(db.key()));
  // Unpacking with the outer subspace yields the whole remaining tuple.
  EXPECT_TRUE(*db.unpack(seq.pack(Tuple().add(9))) == Tuple().add("seq").add(2).add(9));
  EXPECT_EQ(Subspace().key(), "");
  EXPECT_TRUE(Subspace().contains("anything"));
}

TEST(SubspaceTest, RangeHoldsEveryExtensionAndNothingOutside) {
  const Subspace space(Tuple().add("s").add(1));
  const auto bounds = space.range();
  const std::string& begin = bounds.first;
  const std::string& end = bounds.second;
  EXPECT_EQ(begin, space.key() + "\x00"s);
  EXPECT_EQ(end, space.key() + "\xff");
  auto inside = [&](const std::string& k) { return begin <= k && k < end; };
  RandomTuples gen(3);
  for (int i = 0; i < 500; ++i) {
    Tuple t = gen.tuple(0);
    if (t.empty()) t.add(nullptr);
    EXPECT_TRUE(inside(space.pack(t))) << to_hex(space.pack(t));
  }
  EXPECT_FALSE(inside(space.key()));  // FDB's range() excludes the prefix itself
  EXPECT_FALSE(inside(Subspace(Tuple().add("s").add(2)).pack(Tuple().add(0))));
  EXPECT_FALSE(inside(Subspace(Tuple().add("s").add(0)).pack(Tuple().add(0))));

  const auto [b2, e2] = space.range(Tuple().add("x"));
  EXPECT_EQ(b2, space.pack(Tuple().add("x")) + "\x00"s);
  EXPECT_EQ(e2, space.pack(Tuple().add("x")) + "\xff");
  EXPECT_TRUE(b2 <= space.pack(Tuple().add("x").add(5)) &&
              space.pack(Tuple().add("x").add(5)) < e2);
  EXPECT_FALSE(b2 <= space.pack(Tuple().add("y")) && space.pack(Tuple().add("y")) < e2);
}

TEST(Strinc, IncrementsLastByteAfterStrippingTrailingFf) {
  EXPECT_EQ(strinc("abc"), "abd");
  EXPECT_EQ(strinc("ab\xff"), "ac");
  EXPECT_EQ(strinc("a\xff\xff"), "b");
  EXPECT_EQ(strinc("\x00"s), "\x01");
  EXPECT_EQ(strinc("\x01\xfe"), "\x01\xff");
  EXPECT_EQ(strinc("\xfe\xff"), "\xff");
  // Everything with the prefix sorts below strinc(prefix).
  const Subspace space(Tuple().add("p"));
  const std::string upper = strinc(space.key());
  EXPECT_LT(space.pack(Tuple().add("\xff\xff")), upper);
  EXPECT_LT(space.key() + "\xff\xff\xff", upper);
  EXPECT_GE(Tuple().add("q").pack(), upper);
}

// The prefix RocksDB's bloom filters are built on (tuple_prefix.h): exactly the bytes of the
// first N elements, the same for every key of a Subspace::range and for both of its bounds.
TEST(TuplePrefix, LengthOfTheFirstElements) {
  for (const std::string& id : {std::string("doc"), std::string("a\0b", 3), std::string("\0", 1),
                                std::string("end\0", 4), std::string()}) {
    const Subspace docs(Tuple().add(std::int64_t{1}).add(std::int64_t{-300}).add(std::int64_t{2}));
    const std::string prefix = docs.pack(Tuple().add(id));
    const auto [b, e] = docs.range(Tuple().add(id));
    for (const std::string& k :
         {prefix, b, e, docs.pack(Tuple().add(id).add(true).add(std::int64_t{7}).add_bytes("h")),
          docs.pack(Tuple().add(id).add(std::int64_t{0}))}) {
      auto n = tuple_prefix_length(k, 4);
      ASSERT_TRUE(n.has_value()) << id.size();
      EXPECT_EQ(k.substr(0, *n), prefix) << id.size();
    }
    EXPECT_EQ(tuple_prefix_length(prefix, 3), docs.key().size());
    EXPECT_FALSE(tuple_prefix_length(prefix, 5).has_value());  // too few elements
  }
  // 8-byte integers and byte strings are parsed; anything else is outside the domain.
  EXPECT_EQ(tuple_prefix_length(Tuple().add(INT64_MIN).add_bytes(std::string("\0", 1)).pack(), 2),
            Tuple().add(INT64_MIN).add_bytes(std::string("\0", 1)).pack().size());
  EXPECT_FALSE(tuple_prefix_length(Tuple().add(1.5).add("x").pack(), 2).has_value());
  EXPECT_FALSE(tuple_prefix_length(Tuple().add(Tuple().add("n")).pack(), 1).has_value());
  EXPECT_FALSE(tuple_prefix_length(std::string("\x02unterminated"), 1).has_value());
  EXPECT_FALSE(tuple_prefix_length(std::string("\x15"), 1).has_value());  // int missing its byte
  EXPECT_FALSE(tuple_prefix_length("", 1).has_value());
}

}  // namespace
}  // namespace chaise::storage

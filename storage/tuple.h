// storage/tuple.h — FoundationDB's tuple layer: typed values packed into byte strings
// whose byte order is the tuple order, so that a range of keys is a range of tuples.
//
// The encoding is FoundationDB's (design/tuple.md, API >= 520), byte for byte, so keys written
// here read the same through any FoundationDB binding. The byte layout is at the top of tuple.cc.
//
// Contract:
// - pack() never fails. unpack() never crashes and never reads outside its input; it returns
//   nullopt for anything that is not the canonical encoding of a tuple. When unpack(b)
//   succeeds, pack() of the result is b again, byte for byte; pack(t) unpacks to a tuple equal
//   to t (for t nested at most kTupleDepthMax deep).
// - compare(a, b) orders tuples by value, and sign(compare(a, b)) is the sign of the memcmp
//   order of pack(a) and pack(b); a == b exactly when pack(a) == pack(b).
// - Values are plain data: a Tuple owns its elements (deep copies, no sharing). Distinct objects
//   may be used from distinct threads; const objects may be shared.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "storage/error.h"

namespace chaise::storage {

// Largest magnitude of an arbitrary-size integer, in bytes: the encoding stores its length in one
// byte.
inline constexpr std::size_t kBigIntegerBytesMax = 255;

// Deepest nesting unpack() accepts (a top-level tuple is depth 0; a tuple inside it is depth 1).
// The encoding has no limit; this one keeps decoding's recursion bounded on hostile input. pack()
// does not check it: do not build tuples nested deeper than this.
inline constexpr std::size_t kTupleDepthMax = 64;

// A tuple "byte string" (code 0x01). Distinct from std::string, which is a unicode string (code
// 0x02): the same bytes sort differently depending on which of the two they are.
struct Bytes {
  std::string data;
  bool operator==(const Bytes&) const = default;
};

// An RFC 4122 UUID in network byte order (code 0x30).
struct Uuid {
  std::array<std::uint8_t, 16> bytes{};
  bool operator==(const Uuid&) const = default;
};

// A 96-bit versionstamp (code 0x33): the 10-byte transaction version that a commit assigns (8-byte
// big-endian commit version + 2-byte batch order) and a 2-byte big-endian user version that orders
// writes within one transaction. An incomplete versionstamp has tr_version all 0xff; the commit
// replaces those ten bytes (see Tuple::pack_with_versionstamp).
struct Versionstamp {
  static constexpr std::size_t kTrVersionSize = 10;
  static constexpr std::size_t kSize = 12;

  std::array<std::uint8_t, kTrVersionSize> tr_version{};
  std::uint16_t user_version = 0;

  static Versionstamp incomplete(std::uint16_t user_version = 0);
  // False when tr_version is the all-0xff placeholder.
  bool complete() const;
  // The 12 bytes: tr_version, then user_version big-endian.
  std::string to_bytes() const;
  // Inverse of to_bytes(). Precondition: twelve_bytes.size() == kSize (asserted).
  static Versionstamp from_bytes(std::string_view twelve_bytes);

  bool operator==(const Versionstamp&) const = default;
};

// An integer outside the int64 range, as sign + big-endian magnitude with no leading zero bytes.
// Tuples hold integers that fit in int64 as std::int64_t, and only the others as BigInteger: add()
// normalizes (strips leading zeros, turns in-range values into int64), and unpack() produces the
// same split. Precondition of Tuple::add(BigInteger): at most kBigIntegerBytesMax magnitude bytes
// (asserted).
struct BigInteger {
  bool negative = false;
  std::string magnitude;
  // Structural equality; use compare() on tuples for numeric equality of unnormalized values.
  bool operator==(const BigInteger&) const = default;
};

struct Element;

// An ordered list of typed elements. Build with chained add() calls:
//   Tuple().add("docs").add(5).add(true)
class Tuple {
 public:
  Tuple() = default;

  // Each add() appends one element and returns *this.
  Tuple& add(std::nullptr_t);
  Tuple& add(std::string_view s);  // unicode string, carried as given (the caller supplies UTF-8)
  Tuple& add(const char* s);       // unicode string; precondition: s != nullptr
  Tuple& add(std::string s);       // unicode string
  Tuple& add(Bytes b);
  Tuple& add(Tuple t);       // nested tuple
  Tuple& add(BigInteger v);  // normalized: an in-range value is stored as std::int64_t
  Tuple& add(float v);
  Tuple& add(double v);
  Tuple& add(bool v);
  Tuple& add(Uuid v);
  Tuple& add(Versionstamp v);
  Tuple& add(Element e);  // normalized like the typed overload it holds
  // Any integer type but bool. Unsigned values above INT64_MAX become BigInteger.
  template <std::integral T>
  requires(!std::same_as<T, bool>) Tuple& add(T v);
  // Pointers other than const char* would otherwise convert silently to bool.
  template <typename T>
  Tuple& add(const T*) = delete;
  // Appends a Bytes element.
  Tuple& add_bytes(std::string_view b);

  std::size_t size() const;
  bool empty() const;
  // Precondition: i < size() (asserted).
  const Element& operator[](std::size_t i) const;
  const std::vector<Element>& elements() const { return elements_; }
  void reserve(std::size_t n);

  // Typed access. Each returns nullptr / nullopt / false when i >= size() or element i has another
  // type. Pointers stay valid until this tuple is modified or destroyed.
  bool is_null(std::size_t i) const;
  const std::string* get_string(std::size_t i) const;  // unicode string
  const std::string* get_bytes(std::size_t i) const;   // byte string
  const Tuple* get_tuple(std::size_t i) const;
  std::optional<std::int64_t> get_int(std::size_t i) const;  // nullopt for BigInteger too
  const BigInteger* get_big_integer(std::size_t i) const;    // only integers outside int64
  std::optional<float> get_float(std::size_t i) const;
  std::optional<double> get_double(std::size_t i) const;  // doubles only, not floats
  std::optional<bool> get_bool(std::size_t i) const;
  const Uuid* get_uuid(std::size_t i) const;
  const Versionstamp* get_versionstamp(std::size_t i) const;

  // The order-preserving encoding. An incomplete versionstamp is packed as its placeholder bytes;
  // to have a commit fill it in, use pack_with_versionstamp().
  std::string pack() const;
  // Appends pack() to *out.
  void pack_to(std::string* out) const;

  // For SET_VERSIONSTAMPED_KEY: prefix + pack() + the 4-byte little-endian offset (API >= 520) of
  // the incomplete versionstamp's 10-byte tr_version within prefix + pack(). The versionstamp may
  // be inside a nested tuple. Error::invalid_option_value unless there is exactly one incomplete
  // versionstamp, or if the offset does not fit in 32 bits.
  Result<std::string> pack_with_versionstamp() const;
  Result<std::string> pack_with_versionstamp(std::string_view prefix) const;

  // The tuple `bytes` encodes, or nullopt if `bytes` is not a canonical tuple encoding (truncated,
  // unknown type code, non-minimal integer, nesting deeper than kTupleDepthMax, ...). Unicode
  // strings are not checked for valid UTF-8. The empty string is the empty tuple.
  static std::optional<Tuple> unpack(std::string_view bytes);

  // Value equality: compare(*this, other) == 0, i.e. equal packed bytes. NaNs equal bitwise-equal
  // NaNs; -0.0 != +0.0; a float never equals a double.
  bool operator==(const Tuple& other) const;

 private:
  Tuple& add_int64(std::int64_t v);
  Tuple& add_uint64(std::uint64_t v);

  std::vector<Element> elements_;
};

// Append one element's encoding to *out, byte for byte what pack() writes for it inside a tuple:
// for hot paths that build a key from a prefix and a few known elements without a Tuple (its
// vector and a string per element). prefix + pack_*(a) + pack_*(b) == prefix + Tuple().add(a)
// .add(b).pack().
void pack_string(std::string* out, std::string_view s);  // a unicode string
void pack_bytes(std::string* out, std::string_view b);   // a byte string
void pack_int(std::string* out, std::int64_t v);
void pack_bool(std::string* out, bool v);
void pack_null(std::string* out);  // a null at the top level (inside a nested tuple it differs)
// A nested tuple: pack_nested_open, its elements with the packers above (no null), then
// pack_nested_close.
void pack_nested_open(std::string* out);
void pack_nested_close(std::string* out);
// An incomplete versionstamp; returns where its 10-byte placeholder starts in *out, to be
// appended with append_versionstamp_offset once the key or value is complete (what
// pack_with_versionstamp() appends).
std::size_t pack_incomplete_versionstamp(std::string* out, std::uint16_t user_version);
void append_versionstamp_offset(std::string* out, std::size_t offset);

// Reads a packed tuple's top-level elements front to back without building a Tuple: for the hot
// paths that know the layout they read (a scan's keys and values), where unpack()'s element vector
// and its strings cost more than the rest of the row. It accepts exactly what unpack() accepts:
// each read_*() that returns a value (true) decoded the next element as unpack() would, and
// advanced past it. When the next element has another type, or is not canonical, it returns
// nullopt (false) and the reader does not move; once the tuple is bad, nothing more reads.
class TupleReader {
 public:
  explicit TupleReader(std::string_view packed) : in_(packed) {}
  bool at_end() const { return pos_ == in_.size(); }
  // An integer in int64 range (as get_int: nullopt for a BigInteger).
  std::optional<std::int64_t> read_int();
  // A unicode string / byte string, assigned to *out (its buffer is reused).
  bool read_string(std::string* out);
  bool read_bytes(std::string* out);
  std::optional<bool> read_bool();
  std::optional<Versionstamp> read_versionstamp();
  // Steps over the next element, whatever its type (nested tuples included).
  bool skip();

 private:
  bool read_escaped(std::uint8_t code, std::string* out);
  std::string_view in_;
  std::size_t pos_ = 0;
};

// One element of a tuple. Default-constructed: null.
struct Element {
  using Value = std::variant<std::nullptr_t, Bytes, std::string, Tuple, std::int64_t, BigInteger,
                             float, double, bool, Uuid, Versionstamp>;
  Value value;

  Element() = default;
  Element(Value v) : value(std::move(v)) {}  // NOLINT: implicit, like the variant it wraps

  template <typename T>
  bool holds() const {
    return std::holds_alternative<T>(value);
  }
  template <typename T>
  const T* get_if() const {
    return std::get_if<T>(&value);
  }
  bool operator==(const Element& other) const;  // compare(*this, other) == 0
};

// Value order of tuples, written from the values and not from their encoding (the tests check that
// the two agree). Type order: null < bytes < string < nested tuple < integer < float < double <
// false < true < uuid < versionstamp. Within a type: bytes and strings by unsigned bytes; integers
// by numeric value (int64 and BigInteger alike); floats and doubles by IEEE total order (-NaN <
// -inf < ... < -0.0 < +0.0 < ... < +inf < +NaN, NaNs by payload); uuids by bytes; versionstamps by
// their 12 bytes (an incomplete one, tr_version all 0xff, sorts after the complete ones); nested
// tuples element by element, then shorter first. Returns <0, 0 or >0.
int compare(const Tuple& a, const Tuple& b);
int compare(const Element& a, const Element& b);

// The first key greater than every key that starts with `prefix`: drop trailing 0xff bytes, then
// increment the last byte. Precondition: prefix contains a byte other than 0xff (asserted).
std::string strinc(std::string_view prefix);

// ---- inline definitions (need Element complete) ----

inline std::size_t Tuple::size() const { return elements_.size(); }
inline void Tuple::reserve(std::size_t n) { elements_.reserve(n); }
inline bool Tuple::empty() const { return elements_.empty(); }

template <std::integral T>
requires(!std::same_as<T, bool>) Tuple& Tuple::add(T v) {
  static_assert(sizeof(T) <= sizeof(std::uint64_t), "integers wider than 64 bits: use BigInteger");
  if constexpr (std::is_signed_v<T>) {
    return add_int64(static_cast<std::int64_t>(v));
  } else {
    return add_uint64(static_cast<std::uint64_t>(v));
  }
}

}  // namespace chaise::storage

// core/util/ascii.h — ASCII case folding for protocol tokens: header names and values, media types,
// cookie attributes, boolean parameters. Only A-Z change, whatever the process's locale is.
#pragma once

#include <string>
#include <string_view>

namespace chaise::core {

inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

}  // namespace chaise::core

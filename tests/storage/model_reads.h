// tests/storage/model_reads.h — what a range read should answer, from a model of the store (a map
// of its keys to values). Shared by the storage tests that check reads against a model.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "storage/database.h"

namespace chaise::storage {

// The pairs of `model` in [begin, end), in the order `rev` reads them, at most `limit` (0: all).
inline std::vector<KeyValue> model_range(const std::map<std::string, std::string>& model,
                                         const std::string& begin, const std::string& end,
                                         int limit = 0, Reverse rev = Reverse::no) {
  std::vector<KeyValue> out;
  for (auto it = model.lower_bound(begin); it != model.end() && it->first < end; ++it)
    out.push_back({it->first, it->second});
  if (rev == Reverse::yes) std::reverse(out.begin(), out.end());
  if (limit > 0 && out.size() > static_cast<std::size_t>(limit)) out.resize(limit);
  return out;
}

}  // namespace chaise::storage

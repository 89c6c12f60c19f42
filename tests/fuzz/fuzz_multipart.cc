// libFuzzer target: multipart bodies (http/multipart), as the replicator sends documents with
// their attachments. The input is "Content-Type header\nbody".
#include <cstdint>
#include <string_view>

#include "http/multipart.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t split = input.find('\n');
  if (split == std::string_view::npos) return 0;
  auto boundary = chaise::http::multipart_boundary(input.substr(0, split));
  if (!boundary) return 0;
  if (auto parts = chaise::http::parse_multipart(input.substr(split + 1), *boundary)) {
    for (const auto& part : *parts) (void)part.header("content-type");
  }
  return 0;
}

// libFuzzer target: multipart bodies (http/multipart), as the replicator sends documents with
// their attachments. The input is "Content-Type header\nbody".
//
// Differential: the streaming reader (http/multipart_reader, used for large uploads), fed the
// body in pieces of pseudo-random sizes, must agree with parse_multipart on the whole body:
// whatever it accepts, the whole parser accepts with the same parts; and below its own size
// limits it accepts whatever the whole parser does.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http/transport/multipart.h"
#include "http/transport/multipart_reader.h"
#include "http/transport/request_parse.h"

namespace {

using Headers = std::vector<std::pair<std::string, std::string>>;
struct Part {
  Headers headers;
  std::string body;
};

using Pull = chaise::http::MultipartReader::Pull;

// Reads every part into `parts`; throws HttpError when the reader refuses the body.
boost::asio::awaitable<void> read_all(Pull pull, std::string boundary, std::vector<Part>& parts) {
  chaise::http::MultipartReader reader(std::move(pull), std::move(boundary));
  Headers headers;
  while (co_await reader.next_part(headers)) {
    Part p;
    p.headers = headers;
    while (co_await reader.read(p.body, 1 + p.body.size() % 13) > 0) {
    }
    parts.push_back(std::move(p));
  }
}

// The body in pieces of pseudo-random sizes.
struct Feeder {
  std::string_view body;
  std::size_t offset = 0;
  std::uint32_t state = 1;
  boost::asio::awaitable<std::optional<std::size_t>> next(std::string& out, std::size_t max) {
    state = state * 1103515245u + 12345u;
    const std::size_t n =
        std::min<std::size_t>({max, body.size() - offset, 1 + (state >> 16) % 97});
    out.append(body.substr(offset, n));
    offset += n;
    co_return n;
  }
};

// The parts the streaming reader finds, or nullopt when it refuses the body.
std::optional<std::vector<Part>> read_streaming(std::string_view body, const std::string& boundary,
                                                std::uint32_t seed) {
  boost::asio::io_context ctx;
  Feeder feeder{body, 0, seed | 1};
  std::vector<Part> parts;
  bool refused = false;
  Pull pull = [&feeder](std::string& out, std::size_t max) { return feeder.next(out, max); };
  boost::asio::co_spawn(ctx, read_all(std::move(pull), boundary, parts),
                        [&refused](std::exception_ptr e) {
                          if (!e) return;
                          try {
                            std::rethrow_exception(e);
                          } catch (const chaise::http::HttpError&) {
                            refused = true;
                          }
                        });
  ctx.run();
  if (refused) return std::nullopt;
  return parts;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t split = input.find('\n');
  if (split == std::string_view::npos) return 0;
  auto boundary = chaise::http::multipart_boundary(input.substr(0, split));
  if (!boundary) return 0;
  const std::string_view body = input.substr(split + 1);
  auto whole = chaise::http::parse_multipart(body, *boundary);
  if (whole) {
    for (const auto& part : *whole) (void)part.header("content-type");
  }
  auto streamed = read_streaming(body, *boundary, static_cast<std::uint32_t>(size));
  if (streamed) {
    if (!whole || whole->size() != streamed->size()) std::abort();
    for (std::size_t i = 0; i < whole->size(); ++i) {
      if ((*whole)[i].body != (*streamed)[i].body) std::abort();
      if ((*whole)[i].headers != (*streamed)[i].headers) std::abort();
    }
  } else if (whole && body.size() < 16 * 1024) {
    std::abort();  // refused what the whole parser accepts, below the streaming limits
  }
  return 0;
}

#include "http/request.h"
#include "http/router.h"

namespace chaise::http {

MaybeResponse handle_server(Call& /*call*/) {
  throw HttpError(404, "not_found", "missing");
  co_return std::nullopt;
}

}  // namespace chaise::http

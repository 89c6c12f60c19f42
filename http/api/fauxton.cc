// /_utils: the web UI (Fauxton), served as static files from [chaise] fauxton_dir (by default the
// pouchdb-fauxton npm package that `make run` installs into ui/). Open to everyone, as CouchDB's
// is: the UI logs in through /_session like any other client. /favicon.ico comes from there too.
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "config/config.h"
#include "http/api/request.h"

namespace chaise::http {

namespace {

namespace fs = std::filesystem;

constexpr std::uintmax_t kFileBytesMax = 64ull * 1024 * 1024;

std::string_view content_type_of(const fs::path& file) {
  const std::string ext = file.extension().string();
  if (ext == ".html") return "text/html; charset=utf-8";
  if (ext == ".js") return "application/javascript";
  if (ext == ".css") return "text/css";
  if (ext == ".json" || ext == ".map") return "application/json";
  if (ext == ".png") return "image/png";
  if (ext == ".gif") return "image/gif";
  if (ext == ".svg") return "image/svg+xml";
  if (ext == ".ico") return "image/x-icon";
  if (ext == ".woff") return "font/woff";
  if (ext == ".woff2") return "font/woff2";
  if (ext == ".ttf") return "font/ttf";
  if (ext == ".eot") return "application/vnd.ms-fontobject";
  return "application/octet-stream";
}

[[noreturn]] void not_found() { throw HttpError(err::not_found()); }

// A static answer: `body` with its type and caching (no body for HEAD).
Response static_answer(const Call& call, Status status, std::string_view content_type,
                       std::string_view cache_control, std::string body) {
  Response r{status, call.req.version()};
  r.set(beast_http::field::server, kServerHeader);
  r.set(beast_http::field::date, http_date_now());
  r.set(beast_http::field::content_type, content_type);
  r.set(beast_http::field::cache_control, cache_control);
  r.keep_alive(call.req.keep_alive());
  r.body() = std::move(body);
  r.prepare_payload();
  if (call.is(beast_http::verb::head)) r.body().clear();
  return r;
}

// The bytes of `real` (a regular file of at most kFileBytesMax) as a 200 answer; nullopt when it
// cannot be read.
std::optional<Response> file_response(const Call& call, const fs::path& real,
                                      std::string_view cache_control) {
  std::error_code ec;
  if (fs::is_directory(real, ec)) return std::nullopt;
  const auto size = fs::file_size(real, ec);
  if (ec || size > kFileBytesMax) return std::nullopt;
  std::ifstream in(real, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return static_answer(call, Status::ok, content_type_of(real), cache_control, bytes.str());
}

std::string ui_dir(const Call& call) {
  return call.ctx.config ? call.ctx.config->get("chaise", "fauxton_dir").value_or("") : "";
}

}  // namespace

// chttpd_misc:handle_favicon_req: the icon of the UI's directory, cached for a year; without one,
// CouchDB's plain-text 404 (with the same caching).
Response handle_favicon(Call& call) {
  if (!is_get(call)) throw_method_not_allowed("GET,HEAD");
  constexpr std::string_view kCache = "public, max-age=31536000";
  const std::string dir = ui_dir(call);
  if (!dir.empty()) {
    if (auto r = file_response(call, fs::path(dir) / "favicon.ico", kCache)) return std::move(*r);
  }
  return static_answer(call, Status::not_found, "text/plain", kCache, "Not found.");
}

Response handle_utils(Call& call) {
  if (!is_get(call)) throw_method_not_allowed("GET,HEAD");
  // /_utils without the slash: the UI's relative links need it (CouchDB redirects too).
  const std::string_view target = call.req.target();
  const std::string_view path_part = target.substr(0, target.find('?'));
  if (call.path.size() == 1 && !path_part.ends_with("/")) {
    Response r = json_response(call.req, Status::moved_permanently, Json::object());
    r.set(beast_http::field::location, "/_utils/");
    return r;
  }
  const std::string dir = ui_dir(call);
  std::error_code exists_ec;
  if (call.path.size() == 2 && call.path[1] == "session.html" &&
      (dir.empty() || !fs::exists(fs::path(dir) / "session.html", exists_ec))) {
    // CouchDB's login page, where a browser that must log in is sent ([chttpd_auth]
    // authentication_redirect). Fauxton has none of its own: its login view takes the visit.
    Response r = json_response(call.req, Status::found, Json::object());
    r.set(beast_http::field::location, "/_utils/#login");
    return r;
  }
  if (dir.empty()) throw HttpError(err::not_found("no web UI installed: set [chaise] fauxton_dir"));
  std::error_code ec;
  const fs::path root = fs::canonical(dir, ec);
  if (ec) throw HttpError(err::not_found("no web UI installed at " + dir));

  fs::path file = root;
  for (std::size_t i = 1; i < call.path.size(); ++i) {
    const std::string& segment = call.path[i];
    if (segment == "." || segment == ".." || segment.find('/') != std::string::npos ||
        segment.find('\0') != std::string::npos) {
      not_found();
    }
    file /= segment;
  }
  if (call.path.size() == 1) file /= "index.html";
  const fs::path real = fs::canonical(file, ec);
  if (ec) not_found();
  // A symlink inside the UI must not lead out of it.
  const auto [root_end, real_it] =
      std::mismatch(root.begin(), root.end(), real.begin(), real.end());
  if (root_end != root.end()) not_found();
  auto r = file_response(call, real, "private, must-revalidate");
  if (!r) not_found();
  return std::move(*r);
}

}  // namespace chaise::http

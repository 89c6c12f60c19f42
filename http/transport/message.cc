#include "http/transport/message.h"

#include <array>
#include <cstdio>
#include <ctime>

namespace chaise::http {

Response json_response(const Request& request, Status status, const Json& body) {
  Response response{status, request.version()};
  response.set(beast_http::field::server, kServerHeader);
  response.set(beast_http::field::date, http_date_now());
  response.set(beast_http::field::content_type, "application/json");
  response.set(beast_http::field::cache_control, "must-revalidate");
  response.keep_alive(request.keep_alive());
  // Invalid UTF-8 from client input must not turn an answer into a 500: replace, don't throw.
  response.body() = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  response.body().push_back('\n');
  response.prepare_payload();
  if (request.method() == beast_http::verb::head) {
    // Content-Length stays what GET would send; the body goes.
    response.body().clear();
  }
  return response;
}

Response error_response(const Request& request, const core::CouchError& error) {
  return json_response(request, static_cast<Status>(error.status),
                       Json{{"error", error.error}, {"reason", error.reason}});
}

Response method_not_allowed(const Request& request, std::string_view allowed) {
  std::string reason = "Only ";
  reason.append(allowed).append(" allowed");
  Response response = error_response(request, core::err::method_not_allowed(std::move(reason)));
  response.set(beast_http::field::allow, allowed);
  return response;
}

std::string http_date_now() {
  // Formatted by hand: strftime's %a/%b follow the C locale, which a library may have changed.
  static constexpr std::array<const char*, 7> kDays = {"Sun", "Mon", "Tue", "Wed",
                                                       "Thu", "Fri", "Sat"};
  static constexpr std::array<const char*, 12> kMonths = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                          "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  // Every answer carries one; the text changes once a second, so each thread keeps the last.
  thread_local std::time_t formatted_at = -1;
  thread_local std::string formatted;
  const std::time_t now = std::time(nullptr);
  if (now == formatted_at) return formatted;
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%s, %02d %s %04d %02d:%02d:%02d GMT", kDays[tm.tm_wday],
                tm.tm_mday, kMonths[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
                tm.tm_sec);
  formatted = buffer;
  formatted_at = now;
  return formatted;
}

}  // namespace chaise::http

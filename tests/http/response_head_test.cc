// response_head() must write exactly the bytes Beast's serializer writes before a string body:
// clients parse them.
#include "http/transport/response_head.h"

#include <gtest/gtest.h>

#include <boost/beast/http/write.hpp>
#include <sstream>

namespace chaise::http {
namespace {

std::string beast_bytes(const Response& r) {
  std::ostringstream out;
  out << r;
  return out.str();
}

TEST(ResponseHead, IsWhatBeastWritesBeforeTheBody) {
  Response ok{Status::ok, 11};
  ok.set(beast_http::field::server, "CouchDB/3.5.0 (Erlang OTP/26)");
  ok.set(beast_http::field::content_type, "application/json");
  ok.body() = "{\"ok\":true}\n";
  ok.prepare_payload();
  EXPECT_EQ(response_head(ok) + ok.body(), beast_bytes(ok));
  EXPECT_TRUE(response_head(ok).starts_with("HTTP/1.1 200 OK\r\nServer: CouchDB/3.5.0"));
  EXPECT_TRUE(response_head(ok).ends_with("Content-Length: 12\r\n\r\n"));
}

TEST(ResponseHead, KeepsRepeatedFieldsUnknownNamesAndTheCloseOfHttp10) {
  Response r{Status::not_found, 10};
  r.insert(beast_http::field::set_cookie, "a=1");
  r.insert(beast_http::field::set_cookie, "b=2");
  r.insert("X-Couch-Request-ID", "abc");
  r.keep_alive(false);
  r.body() = "{}";
  r.prepare_payload();
  const std::string head = response_head(r);
  EXPECT_EQ(head + r.body(), beast_bytes(r));
  EXPECT_TRUE(head.starts_with("HTTP/1.0 404 Not Found\r\n"));
  EXPECT_NE(head.find("Set-Cookie: a=1\r\nSet-Cookie: b=2\r\n"), std::string::npos);
}

TEST(ResponseHead, UsesTheMessagesOwnReasonAndAnUnknownStatus) {
  Response custom{Status::ok, 11};
  custom.reason("Fine");
  EXPECT_TRUE(response_head(custom).starts_with("HTTP/1.1 200 Fine\r\n"));
  EXPECT_EQ(response_head(custom), beast_bytes(custom));
  Response odd{static_cast<Status>(599), 11};
  EXPECT_EQ(response_head(odd), beast_bytes(odd));
}

}  // namespace
}  // namespace chaise::http

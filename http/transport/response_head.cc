#include "http/transport/response_head.h"

#include <charconv>

namespace chaise::http {

std::string response_head(const Response& response) {
  std::string head;
  head.reserve(256);
  const unsigned version = response.version();
  head.append("HTTP/");
  head.push_back(static_cast<char>('0' + version / 10 % 10));
  head.push_back('.');
  head.push_back(static_cast<char>('0' + version % 10));
  head.push_back(' ');
  char code[8];
  const auto end = std::to_chars(code, code + sizeof code, response.result_int()).ptr;
  head.append(code, end);
  head.push_back(' ');
  const std::string_view reason = response.reason();
  head.append(reason.empty() ? beast_http::obsolete_reason(response.result()) : reason);
  head.append("\r\n");
  for (const auto& field : response) {
    head.append(field.name_string()).append(": ").append(field.value()).append("\r\n");
  }
  head.append("\r\n");
  return head;
}

}  // namespace chaise::http

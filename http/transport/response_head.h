// http/transport/response_head.h — a complete Response's status line and header fields as bytes.
//
// The server writes a whole (not streamed) response as two buffers, this head and the body, with
// one sendmsg when the socket takes it at once. Beast's serializer wrote the same bytes through
// nested buffer views that cost more instructions than the rest of a small GET (bench/README.md,
// "Server CPU per request").
#pragma once

#include <string>

#include "http/transport/message.h"

namespace chaise::http {

// "HTTP/1.1 200 OK\r\n" + each field as "Name: value\r\n" in the message's order + "\r\n": the
// bytes Beast's serializer writes before a string body. The reason is the message's own, or the
// standard one for its status.
std::string response_head(const Response& response);

}  // namespace chaise::http

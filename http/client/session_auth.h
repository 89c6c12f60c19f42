// http/client/session_auth.h — a replication endpoint's credentials sent as a cookie session, as
// CouchDB's replicator does (couch_replicator_auth_session): the user name and password go once
// to the server's /_session, and every request then carries the AuthSession cookie it gave, so
// the server checks a password once per session instead of once per request.
//
// Contract
// - The first request starts the session: POST /_session with the name and password as a form.
//   200 with an AuthSession cookie: cookies from then on. 404 (no sessions there): every request
//   carries Basic credentials instead. 401 with WWW-Authenticate (the server wants Basic even for
//   /_session): the session request is sent again with Basic credentials, and so is every later
//   one. Any other answer is the answer of the request that needed the session (a 401 or 403
//   fails the job as refused credentials); a failed exchange is that request's error.
// - A cookie's age counts from when the request that brought it was sent (the server made it
//   while answering, so no earlier): a long poll's answer brings a cookie already as old as the
//   poll. A 2xx answer's cookie replaces the session's unless the session's came from a request
//   sent later.
// - The cookie is renewed when 90% of its Max-Age has passed (550 s without one), when a 2xx
//   answer sets a new one, and when a request is refused (401, 403) with a cookie older than
//   `min_update_interval` or past its renewal time: that request is then sent again once with
//   the new cookie. A request refused with a cookie newer than that is answered as it is, and
//   the cookie renewed next time.
// - A request whose body is pulled piece by piece (send_streamed) is not sent again: its answer
//   stands, and the job's retry sends the document again.
// - Threading: thread-safe; sessions are started and renewed under one lock, requests are sent
//   outside it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "http/client/couch_endpoint.h"

namespace chaise::http::client {

struct SessionOptions {
  // A cookie refused this soon after it was given is not renewed at once (the server refuses
  // the user, not the cookie). 5 s (CouchDB's session_min_update_interval).
  std::chrono::seconds min_update_interval{5};
  // How long a cookie without Max-Age is used before it is renewed. 550 s (CouchDB's
  // session_refresh_interval_sec).
  std::chrono::seconds refresh_interval{550};
  // Seconds on a monotonic clock; empty: std::chrono::steady_clock. Tests step it by hand.
  std::function<std::int64_t()> now_s;
};

class SessionSender : public Sender {
 public:
  SessionSender(std::unique_ptr<Sender> inner, std::string user, std::string password,
                SessionOptions options = {});

  ClientResult<ClientResponse> send(boost::beast::http::verb method, std::string_view target,
                                    const Headers& headers, std::string body) override;
  ClientResult<std::unique_ptr<ResponseReader>> open(boost::beast::http::verb method,
                                                     std::string_view target,
                                                     const Headers& headers) override;
  ClientResult<ClientResponse> send_streamed(boost::beast::http::verb method,
                                             std::string_view target, const Headers& headers,
                                             const BodyPull& pull) override;
  void cancel() override { inner_->cancel(); }

 private:
  enum class Mode : std::uint8_t { unstarted, cookie, basic };
  // The credentials a request carries now and the session epoch they belong to; or the answer
  // (or error) that refused the session, which the request then answers with.
  struct Credentials {
    std::pair<std::string, std::string> header;
    std::uint64_t epoch = 0;
    std::int64_t sent_s = 0;  // now_s() as the request goes out
  };
  using Started = std::variant<Credentials, ClientResult<ClientResponse>>;
  Started credentials();
  // POST /_session under mu_: the new cookie, the mode, or the answer that refused it.
  std::optional<ClientResult<ClientResponse>> start_session_locked();
  // Takes the AuthSession cookie set by the answer to a request sent at `sent_s`, if any; true
  // when the answer set one.
  bool take_cookie_locked(const boost::beast::http::fields& headers, std::int64_t sent_s);
  // After a 401/403 answered to a request that carried `epoch`'s credentials: whether to send
  // it again (a newer session exists, or one was started now).
  bool renew_after_refusal(std::uint64_t epoch);
  void note_answer(unsigned status, const boost::beast::http::fields& headers, std::int64_t sent_s);
  std::string basic_header() const;
  std::int64_t now_s() const;

  std::unique_ptr<Sender> inner_;
  const std::string user_;
  const std::string password_;
  const SessionOptions options_;

  std::mutex mu_;  // guards everything below
  Mode mode_ = Mode::unstarted;
  bool session_needs_basic_ = false;  // /_session itself wants Basic credentials
  std::string cookie_;
  std::uint64_t epoch_ = 0;         // counts the cookies taken
  std::int64_t cookie_time_s_ = 0;  // when the request that brought the cookie was sent
  std::int64_t renew_at_s_ = 0;     // when to renew it before the next request
};

}  // namespace chaise::http::client

// http/client/session_auth.cc — see session_auth.h. Reference: CouchDB 3.5
// couch_replicator_auth_session.erl.
#include "http/client/session_auth.h"

#include <charconv>

#include "core/util/base64.h"
#include "http/transport/request_parse.h"

namespace chaise::http::client {

namespace bhttp = boost::beast::http;

namespace {

bool refused(unsigned status) { return status == 401 || status == 403; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// An AuthSession cookie a Set-Cookie value gives ("AuthSession=v; Version=1; Path=/;
// Max-Age=600; HttpOnly"): its value and Max-Age (seconds, when given and valid).
struct SetCookie {
  std::string value;
  std::optional<std::int64_t> max_age_s;
};
std::optional<SetCookie> auth_session_cookie(std::string_view header) {
  std::optional<SetCookie> out;
  std::optional<std::int64_t> max_age;
  std::size_t pos = 0;
  for (int parts = 0; pos <= header.size() && parts < 64; ++parts) {
    std::size_t end = header.find(';', pos);
    if (end == std::string_view::npos) end = header.size();
    const std::string_view part = trim(header.substr(pos, end - pos));
    pos = end + 1;
    const std::size_t eq = part.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view name = trim(part.substr(0, eq));
    const std::string_view value = trim(part.substr(eq + 1));
    if (iequals(name, "AuthSession")) {
      if (!value.empty()) out = SetCookie{std::string(value), std::nullopt};
    } else if (iequals(name, "Max-Age")) {
      std::int64_t n = 0;
      const auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec == std::errc() && p == value.data() + value.size() && n >= 0) max_age = n;
    }
  }
  if (out) out->max_age_s = max_age;
  return out;
}

// An answer already read whole, given as a ResponseReader: /_session's refusal, answered to a
// request that opens its answer.
class AnswerReader : public ResponseReader {
 public:
  explicit AnswerReader(ClientResponse res) : body_(std::move(res.body)) {
    status_ = res.status;
    headers_ = std::move(res.headers);
  }
  ClientResult<std::size_t> read(std::string& out, std::size_t max) override {
    const std::size_t n = std::min(max, body_.size() - pos_);
    out.append(body_, pos_, n);
    pos_ += n;
    return n;
  }

 private:
  std::string body_;
  std::size_t pos_ = 0;
};

}  // namespace

SessionSender::SessionSender(std::unique_ptr<Sender> inner, std::string user, std::string password,
                             SessionOptions options)
    : inner_(std::move(inner)),
      user_(std::move(user)),
      password_(std::move(password)),
      options_(std::move(options)) {}

std::int64_t SessionSender::now_s() const {
  if (options_.now_s) return options_.now_s();
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string SessionSender::basic_header() const {
  return "Basic " + core::base64_encode(user_ + ":" + password_);
}

bool SessionSender::take_cookie_locked(const bhttp::fields& headers, std::int64_t sent_s) {
  bool found = false;
  for (const auto& field : headers) {
    if (field.name() != bhttp::field::set_cookie) continue;
    auto cookie = auth_session_cookie(field.value());
    if (!cookie) continue;
    found = true;
    // The session's cookie came from a request sent later: it lives at least as long.
    if (cookie->value == cookie_ || sent_s < cookie_time_s_) continue;
    cookie_ = std::move(cookie->value);
    ++epoch_;
    cookie_time_s_ = sent_s;
    // 90% of the cookie's life leaves room for a request sent near its end to reach the server.
    renew_at_s_ = cookie->max_age_s ? sent_s + *cookie->max_age_s * 9 / 10
                                    : sent_s + options_.refresh_interval.count();
  }
  return found;
}

std::optional<ClientResult<ClientResponse>> SessionSender::start_session_locked() {
  // Twice at most: the second time with Basic credentials when the first answer asked for them.
  for (int attempt = 0; attempt < 2; ++attempt) {
    Headers headers = {{"Content-Type", "application/x-www-form-urlencoded"},
                       {"Accept", "application/json"}};
    if (session_needs_basic_) headers.emplace_back("Authorization", basic_header());
    const std::string body = "name=" + url_encode(user_) + "&password=" + url_encode(password_);
    const std::int64_t sent_s = now_s();
    auto r = inner_->send(bhttp::verb::post, "/_session", headers, body);
    if (!r.ok()) return r;
    const ClientResponse& res = r.value();
    if (res.status == 200) {
      // A server that answers without a cookie (no cookie sessions behind its /_session) gets
      // Basic credentials, as one without /_session does.
      if (take_cookie_locked(res.headers, sent_s)) {
        mode_ = Mode::cookie;
      } else {
        mode_ = Mode::basic;
      }
      return std::nullopt;
    }
    if (res.status == 404) {
      mode_ = Mode::basic;
      return std::nullopt;
    }
    if (res.status == 401 && !session_needs_basic_ &&
        res.headers.find(bhttp::field::www_authenticate) != res.headers.end()) {
      session_needs_basic_ = true;
      continue;
    }
    return r;
  }
  return ClientResult<ClientResponse>(ClientError{"/_session refused the credentials"});
}

SessionSender::Started SessionSender::credentials() {
  std::lock_guard lock(mu_);
  if (mode_ == Mode::unstarted || (mode_ == Mode::cookie && now_s() >= renew_at_s_)) {
    if (auto answer = start_session_locked()) return std::move(*answer);
  }
  const std::int64_t now = now_s();
  if (mode_ == Mode::cookie) {
    return Credentials{{"Cookie", "AuthSession=" + cookie_}, epoch_, now};
  }
  return Credentials{{"Authorization", basic_header()}, epoch_, now};
}

bool SessionSender::renew_after_refusal(std::uint64_t epoch) {
  std::lock_guard lock(mu_);
  if (mode_ != Mode::cookie) return false;
  // Another request renewed the session since this one was sent: send it again with that.
  if (epoch_ > epoch) return true;
  const std::int64_t now = now_s();
  if (now - cookie_time_s_ < options_.min_update_interval.count() && now < renew_at_s_) {
    // The server refused a fresh cookie that has not run out: the user, not the cookie. Renew
    // it once the interval has passed, and let this answer stand.
    renew_at_s_ = std::min(renew_at_s_, cookie_time_s_ + options_.min_update_interval.count());
    return false;
  }
  return !start_session_locked().has_value() && mode_ == Mode::cookie && epoch_ > epoch;
}

void SessionSender::note_answer(unsigned status, const bhttp::fields& headers,
                                std::int64_t sent_s) {
  if (status < 200 || status >= 300) return;
  std::lock_guard lock(mu_);
  if (mode_ == Mode::cookie) take_cookie_locked(headers, sent_s);
}

ClientResult<ClientResponse> SessionSender::send(bhttp::verb method, std::string_view target,
                                                 const Headers& headers, std::string body) {
  for (int attempt = 0;; ++attempt) {
    Started started = credentials();
    if (auto* answer = std::get_if<ClientResult<ClientResponse>>(&started)) return *answer;
    const Credentials& c = std::get<Credentials>(started);
    Headers with = headers;
    with.push_back(c.header);
    const bool last = attempt > 0;
    auto r = inner_->send(method, target, with, last ? std::move(body) : body);
    if (!r.ok()) return r;
    const unsigned status = r.value().status;
    if (!last && refused(status) && renew_after_refusal(c.epoch)) continue;
    note_answer(status, r.value().headers, c.sent_s);
    return r;
  }
}

ClientResult<std::unique_ptr<ResponseReader>> SessionSender::open(bhttp::verb method,
                                                                  std::string_view target,
                                                                  const Headers& headers) {
  for (int attempt = 0;; ++attempt) {
    Started started = credentials();
    if (auto* answer = std::get_if<ClientResult<ClientResponse>>(&started)) {
      if (!answer->ok()) return answer->error();
      return std::unique_ptr<ResponseReader>(new AnswerReader(std::move(answer->value())));
    }
    const Credentials& c = std::get<Credentials>(started);
    Headers with = headers;
    with.push_back(c.header);
    auto r = inner_->open(method, target, with);
    if (!r.ok()) return r;
    const unsigned status = r.value()->status();
    if (attempt == 0 && refused(status)) {
      const std::uint64_t epoch = c.epoch;
      if (renew_after_refusal(epoch)) {
        r.value().reset();  // its connection goes back before the request is sent again
        continue;
      }
    }
    note_answer(status, r.value()->headers(), c.sent_s);
    return r;
  }
}

ClientResult<ClientResponse> SessionSender::send_streamed(bhttp::verb method,
                                                          std::string_view target,
                                                          const Headers& headers,
                                                          const BodyPull& pull) {
  Started started = credentials();
  if (auto* answer = std::get_if<ClientResult<ClientResponse>>(&started)) return *answer;
  const Credentials& c = std::get<Credentials>(started);
  Headers with = headers;
  with.push_back(c.header);
  auto r = inner_->send_streamed(method, target, with, pull);
  if (r.ok()) note_answer(r.value().status, r.value().headers, c.sent_s);
  return r;
}

}  // namespace chaise::http::client

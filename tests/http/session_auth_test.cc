// SessionSender: the replicator's cookie sessions, against a scripted server (a Sender that
// answers from a queue and records what it was sent), on a clock the test steps.
#include "http/client/session_auth.h"

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <utility>

namespace chaise::http::client {
namespace {

namespace bhttp = boost::beast::http;

struct Sent {
  bhttp::verb method;
  std::string target;
  Sender::Headers headers;
  std::string body;
  std::string header(std::string_view name) const {
    for (const auto& [k, v] : headers)
      if (k == name) return v;
    return "";
  }
};

class ScriptedSender : public Sender {
 public:
  std::deque<ClientResponse> answers;
  std::vector<Sent> sent;
  // Runs once, while the next request is being answered (after its answer is taken from the
  // queue): the time an answer takes, and requests sent meanwhile.
  std::function<void()> while_answering;

  ClientResult<ClientResponse> send(bhttp::verb method, std::string_view target,
                                    const Headers& headers, std::string body) override {
    sent.push_back({method, std::string(target), headers, std::move(body)});
    if (answers.empty()) return ClientError{"no answer scripted"};
    ClientResponse r = std::move(answers.front());
    answers.pop_front();
    if (auto during = std::exchange(while_answering, nullptr)) during();
    return r;
  }
  ClientResult<std::unique_ptr<ResponseReader>> open(bhttp::verb, std::string_view,
                                                     const Headers&) override {
    return ClientError{"not scripted"};
  }
  ClientResult<ClientResponse> send_streamed(bhttp::verb method, std::string_view target,
                                             const Headers& headers, const BodyPull&) override {
    return send(method, target, headers, "");
  }
  void cancel() override {}
};

ClientResponse answer(unsigned status, std::string set_cookie = "", bool www_auth = false) {
  ClientResponse r;
  r.status = status;
  if (!set_cookie.empty()) r.headers.insert(bhttp::field::set_cookie, set_cookie);
  if (www_auth) r.headers.insert(bhttp::field::www_authenticate, "Basic realm=\"server\"");
  r.body = status < 300 ? R"({"ok":true})" : R"({"error":"unauthorized","reason":"no"})";
  return r;
}

struct Fixture {
  ScriptedSender* inner = nullptr;
  std::int64_t now = 1000;
  std::unique_ptr<SessionSender> sender;
  Fixture() {
    auto s = std::make_unique<ScriptedSender>();
    inner = s.get();
    SessionOptions o;
    o.now_s = [this] { return now; };
    sender = std::make_unique<SessionSender>(std::move(s), "bob", "p@ss word", o);
  }
  ClientResult<ClientResponse> get() { return sender->send(bhttp::verb::get, "/db/", {}, ""); }
};

const std::string kBasic = "Basic Ym9iOnBAc3Mgd29yZA==";  // bob:p@ss word

TEST(SessionAuth, TheFirstRequestStartsASessionAndEveryRequestCarriesItsCookie) {
  Fixture f;
  f.inner->answers = {answer(200, "AuthSession=c1; Version=1; Path=/; HttpOnly"), answer(200),
                      answer(200)};
  ASSERT_TRUE(f.get().ok());
  ASSERT_TRUE(f.get().ok());
  ASSERT_EQ(f.inner->sent.size(), 3u);
  const Sent& session = f.inner->sent[0];
  EXPECT_EQ(session.method, bhttp::verb::post);
  EXPECT_EQ(session.target, "/_session");
  EXPECT_EQ(session.header("Content-Type"), "application/x-www-form-urlencoded");
  EXPECT_EQ(session.body, "name=bob&password=p%40ss%20word");
  EXPECT_EQ(session.header("Authorization"), "");
  for (int i = 1; i < 3; ++i) {
    EXPECT_EQ(f.inner->sent[i].header("Cookie"), "AuthSession=c1");
    EXPECT_EQ(f.inner->sent[i].header("Authorization"), "");
  }
}

TEST(SessionAuth, AServerWithoutSessionsGetsBasicCredentials) {
  Fixture f;
  f.inner->answers = {answer(404), answer(200), answer(200)};
  ASSERT_TRUE(f.get().ok());
  ASSERT_TRUE(f.get().ok());
  ASSERT_EQ(f.inner->sent.size(), 3u);  // /_session asked once
  EXPECT_EQ(f.inner->sent[1].header("Authorization"), kBasic);
  EXPECT_EQ(f.inner->sent[2].header("Authorization"), kBasic);
  EXPECT_EQ(f.inner->sent[2].header("Cookie"), "");
}

TEST(SessionAuth, ASessionThatWantsBasicCredentialsIsAskedAgainWithThem) {
  Fixture f;
  f.inner->answers = {answer(401, "", true), answer(200, "AuthSession=c1"), answer(200)};
  ASSERT_TRUE(f.get().ok());
  ASSERT_EQ(f.inner->sent.size(), 3u);
  EXPECT_EQ(f.inner->sent[0].header("Authorization"), "");
  EXPECT_EQ(f.inner->sent[1].target, "/_session");
  EXPECT_EQ(f.inner->sent[1].header("Authorization"), kBasic);
  EXPECT_EQ(f.inner->sent[2].header("Cookie"), "AuthSession=c1");
}

TEST(SessionAuth, RefusedCredentialsAnswerTheRequest) {
  Fixture f;
  f.inner->answers = {answer(401)};
  auto r = f.get();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().status, 401u);
  EXPECT_EQ(f.inner->sent.size(), 1u);  // the request itself was never sent
}

TEST(SessionAuth, AnExpiredCookieIsRenewedAndTheRequestSentAgain) {
  Fixture f;
  f.inner->answers = {answer(200, "AuthSession=c1"), answer(200)};
  ASSERT_TRUE(f.get().ok());
  f.now += 60;
  f.inner->answers = {answer(401), answer(200, "AuthSession=c2"), answer(200)};
  auto r = f.get();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().status, 200u);
  ASSERT_EQ(f.inner->sent.size(), 5u);
  EXPECT_EQ(f.inner->sent[2].header("Cookie"), "AuthSession=c1");
  EXPECT_EQ(f.inner->sent[3].target, "/_session");
  EXPECT_EQ(f.inner->sent[4].header("Cookie"), "AuthSession=c2");
}

TEST(SessionAuth, AFreshCookieRefusedIsNotRenewedAtOnce) {
  Fixture f;
  f.inner->answers = {answer(200, "AuthSession=c1"), answer(403)};
  auto r = f.get();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().status, 403u);
  EXPECT_EQ(f.inner->sent.size(), 2u);
  // Once the minimum interval has passed, the next request renews it first.
  f.now += 5;
  f.inner->answers = {answer(200, "AuthSession=c2"), answer(200)};
  ASSERT_TRUE(f.get().ok());
  ASSERT_EQ(f.inner->sent.size(), 4u);
  EXPECT_EQ(f.inner->sent[2].target, "/_session");
  EXPECT_EQ(f.inner->sent[3].header("Cookie"), "AuthSession=c2");
}

TEST(SessionAuth, TheCookieIsRenewedBeforeItsMaxAgeRunsOutAndTakenFromAnswers) {
  Fixture f;
  f.inner->answers = {answer(200, "AuthSession=c1; Max-Age=100"), answer(200)};
  ASSERT_TRUE(f.get().ok());
  // An answer that sets a new cookie replaces the session's.
  f.now += 10;
  f.inner->answers = {answer(200, "AuthSession=c2; Max-Age=100"), answer(200)};
  ASSERT_TRUE(f.get().ok());
  ASSERT_TRUE(f.get().ok());
  EXPECT_EQ(f.inner->sent[3].header("Cookie"), "AuthSession=c2");
  // 90 s after c2 came (90% of its Max-Age), it is renewed before the request.
  f.now += 90;
  f.inner->answers = {answer(200, "AuthSession=c3"), answer(200)};
  ASSERT_TRUE(f.get().ok());
  ASSERT_EQ(f.inner->sent.size(), 6u);
  EXPECT_EQ(f.inner->sent[4].target, "/_session");
  EXPECT_EQ(f.inner->sent[5].header("Cookie"), "AuthSession=c3");
}

TEST(SessionAuth, AnAnswersCookieIsAsOldAsTheRequestThatBroughtIt) {
  Fixture f;
  f.inner->answers = {answer(200, "AuthSession=c1; Max-Age=10"), answer(200)};
  ASSERT_TRUE(f.get().ok());
  // A long poll sent now is answered 20 s later with the cookie the server made as it started:
  // that cookie has run out by then, so the next request starts a new session first.
  f.inner->answers = {answer(200, "AuthSession=c2; Max-Age=10")};
  f.inner->while_answering = [&] { f.now += 20; };
  ASSERT_TRUE(f.get().ok());
  f.inner->answers = {answer(200, "AuthSession=c3; Max-Age=10"), answer(200)};
  ASSERT_TRUE(f.get().ok());
  ASSERT_EQ(f.inner->sent.size(), 5u);
  EXPECT_EQ(f.inner->sent[3].target, "/_session");
  EXPECT_EQ(f.inner->sent[4].header("Cookie"), "AuthSession=c3");
}

TEST(SessionAuth, AnOlderRequestsCookieDoesNotReplaceANewerSessions) {
  Fixture f;
  f.inner->answers = {answer(200, "AuthSession=c1; Max-Age=10"), answer(200)};
  ASSERT_TRUE(f.get().ok());
  // While a long poll sent at 1000 waits, a request at 1009 renews the session (c3). The poll's
  // answer then brings c2, made at 1000: the session keeps c3.
  f.inner->answers = {answer(200, "AuthSession=c2; Max-Age=10"),
                      answer(200, "AuthSession=c3; Max-Age=10"), answer(200)};
  f.inner->while_answering = [&] {
    f.now += 9;
    EXPECT_TRUE(f.get().ok());
  };
  ASSERT_TRUE(f.get().ok());
  f.inner->answers = {answer(200)};
  ASSERT_TRUE(f.get().ok());
  ASSERT_EQ(f.inner->sent.size(), 6u);
  EXPECT_EQ(f.inner->sent[3].target, "/_session");
  EXPECT_EQ(f.inner->sent[5].header("Cookie"), "AuthSession=c3");
}

TEST(SessionAuth, ACookiePastItsRenewalTimeRefusedIsRenewedAtOnce) {
  Fixture f;
  f.inner->answers = {answer(200, "AuthSession=c1; Max-Age=3"), answer(200)};
  ASSERT_TRUE(f.get().ok());
  // Refused 3 s after it came, under the 5 s minimum interval, but at the end of its life:
  // the cookie, not the user, so the request goes again with a new one.
  f.inner->answers = {answer(401), answer(200, "AuthSession=c2; Max-Age=3"), answer(200)};
  f.inner->while_answering = [&] { f.now += 3; };
  auto r = f.get();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().status, 200u);
  ASSERT_EQ(f.inner->sent.size(), 5u);
  EXPECT_EQ(f.inner->sent[3].target, "/_session");
  EXPECT_EQ(f.inner->sent[4].header("Cookie"), "AuthSession=c2");
}

TEST(SessionAuth, ANetworkFailureOfTheSessionIsTheRequestsError) {
  Fixture f;
  auto r = f.get();  // nothing scripted: the exchange fails
  ASSERT_FALSE(r.ok());
  f.inner->answers = {answer(200, "AuthSession=c1"), answer(200)};
  ASSERT_TRUE(f.get().ok());
  EXPECT_EQ(f.inner->sent.back().header("Cookie"), "AuthSession=c1");
}

}  // namespace
}  // namespace chaise::http::client

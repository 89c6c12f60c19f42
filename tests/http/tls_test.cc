// HTTPS on the [ssl] port, driven with curl as an administrator would check it: a self-signed
// certificate made with the openssl tool, the server's TLS listener on an OS-assigned port beside
// the plain one, and what TLS changes in CouchDB's answers (the AuthSession cookie is Secure,
// Location headers say https). Bad TLS input costs only its connection.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "tests/http/test_server.h"

namespace chaise::test {
namespace {

using beast_http::verb;

// Runs a shell command; its stdout, and its exit code in `code`.
std::string run(const std::string& command, int& code) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    code = -1;
    return out;
  }
  std::array<char, 4096> chunk;
  std::size_t n = 0;
  while ((n = std::fread(chunk.data(), 1, chunk.size(), pipe)) > 0) out.append(chunk.data(), n);
  const int status = ::pclose(pipe);
  code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cert_ = dir_.path() / "cert.pem";
    key_ = dir_.path() / "key.pem";
    int code = 0;
    run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2"
        " -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1,DNS:localhost"
        " -keyout " +
            key_.string() + " -out " + cert_.string() + " 2>/dev/null",
        code);
    ASSERT_EQ(code, 0) << "openssl could not make a test certificate";
  }
  void TearDown() override { server_.reset(); }

  // A server with admin/secret and HTTPS on a free port; `extra` is more ini text.
  void start(const std::string& extra = {}) {
    const auto ini = dir_.path() / "local.ini";
    write_file(ini,
               "[chttpd_auth]\niterations = 10\n[admins]\nadmin = secret\n[ssl]\nenable = true\n"
               "port = 0\ncert_file = " +
                   cert_.string() + "\nkey_file = " + key_.string() + "\n" + extra);
    server_.emplace(dir_.path() / "data",
                    std::vector<std::string>{"--no-admin-party", "--config", ini.string()});
    const std::string line = server_->read_stdout_line(10s);
    ASSERT_EQ(line.rfind("chaise listening with TLS on 127.0.0.1:", 0), 0u) << line;
    tls_port_ = static_cast<std::uint16_t>(std::stoul(line.substr(line.rfind(':') + 1)));
  }
  std::string https(std::string_view path) const {
    return "https://127.0.0.1:" + std::to_string(tls_port_) + std::string(path);
  }
  // curl against the TLS port, trusting the test certificate; `-sS` plus `args`. Headers and body.
  std::string curl(const std::string& args, int& code) const {
    return run("curl -sS -i --max-time 20 --cacert " + cert_.string() + " " + args + " 2>&1", code);
  }

  TempDir dir_;
  fs::path cert_, key_;
  std::optional<ServerProcess> server_;
  std::uint16_t tls_port_ = 0;
};

TEST_F(TlsTest, CurlSpeaksHttpsToTheSslPort) {
  start();
  int code = 0;
  std::string out = curl("-u admin:secret " + https("/"), code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("HTTP/1.1 200 OK"), std::string::npos) << out;
  EXPECT_NE(out.find("\"couchdb\":\"Welcome\""), std::string::npos) << out;

  // Documents over TLS: Location says https.
  out = curl("-u admin:secret -X PUT " + https("/db"), code);
  EXPECT_NE(out.find("HTTP/1.1 201"), std::string::npos) << out;
  EXPECT_NE(out.find("Location: https://127.0.0.1:" + std::to_string(tls_port_) + "/db"),
            std::string::npos)
      << out;
  out = curl("-u admin:secret -X PUT -H 'Content-Type: application/json' -d '{\"a\":1}' " +
                 https("/db/doc"),
             code);
  EXPECT_NE(out.find("HTTP/1.1 201"), std::string::npos) << out;
  EXPECT_NE(out.find("Location: https://"), std::string::npos) << out;

  // A streamed (chunked) answer: a continuous feed that ends at its timeout.
  out = curl("-u admin:secret '" + https("/db/_changes?feed=continuous&timeout=300") + "'", code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("\"id\":\"doc\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"last_seq\""), std::string::npos) << out;

  // The plain port still answers plain HTTP, and its Location says http.
  HttpClient plain(server_->port());
  const auto r =
      plain.request(verb::put, "/db2", {}, {{"Authorization", "Basic YWRtaW46c2VjcmV0"}});
  EXPECT_EQ(r.status, 201u);
  EXPECT_EQ(std::string(r.headers[beast_http::field::location]).rfind("http://", 0), 0u);
}

// CouchDB sets the AuthSession cookie `Secure` when the login came over https, not otherwise.
TEST_F(TlsTest, SessionCookieIsSecureOnlyOverTls) {
  start();
  int code = 0;
  const std::string out = curl(
      "-X POST -H 'Content-Type: application/json' -d "
      "'{\"name\":\"admin\",\"password\":\"secret\"}' " +
          https("/_session"),
      code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("HTTP/1.1 200"), std::string::npos) << out;
  const auto cookie = out.find("Set-Cookie: AuthSession=");
  ASSERT_NE(cookie, std::string::npos) << out;
  const std::string line = out.substr(cookie, out.find('\n', cookie) - cookie);
  EXPECT_NE(line.find("; Secure"), std::string::npos) << line;

  HttpClient plain(server_->port());
  const auto r = plain.request(verb::post, "/_session", R"({"name":"admin","password":"secret"})",
                               {{"Content-Type", "application/json"}});
  EXPECT_EQ(r.status, 200u);
  const std::string set_cookie(r.headers[beast_http::field::set_cookie]);
  EXPECT_NE(set_cookie.find("AuthSession="), std::string::npos);
  EXPECT_EQ(set_cookie.find("Secure"), std::string::npos) << set_cookie;
}

// Plain HTTP, garbage and an untrusting client at the TLS port cost only their connection.
TEST_F(TlsTest, BadTlsInputOnlyCostsItsConnection) {
  start();
  int code = 0;
  // curl without the CA refuses the self-signed certificate.
  std::string out = run("curl -sS --max-time 10 " + https("/") + " 2>&1", code);
  EXPECT_NE(code, 0) << out;
  // Plain HTTP to the TLS port: the handshake fails and the connection closes.
  out =
      run("curl -sS --max-time 10 http://127.0.0.1:" + std::to_string(tls_port_) + "/ 2>&1", code);
  EXPECT_NE(code, 0) << out;
  // Raw garbage, then silence.
  out =
      run("printf '\\x16\\x03\\x01\\x00\\x05hello' | timeout 5 curl -sS --max-time 3 "
          "telnet://127.0.0.1:" +
              std::to_string(tls_port_) + " 2>&1",
          code);
  // The server still serves both ports.
  out = curl(https("/_up"), code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("\"status\":\"ok\""), std::string::npos) << out;
  HttpClient plain(server_->port());
  EXPECT_EQ(plain.get("/_up").status, 200u);
}

// [ssl] settings that cannot work stop startup with a message, as a bad config value does.
// The replicator reaches an https:// database: with [replicator] verify_ssl_certificates and the
// test certificate as the trusted CA file it pulls; trusting nothing else, it refuses the peer.
TEST_F(TlsTest, TheReplicatorPullsOverHttpsAndChecksTheCertificate) {
  start();
  HttpClient admin(server_->port());
  const std::vector<std::pair<std::string, std::string>> auth = {
      {"Authorization", "Basic YWRtaW46c2VjcmV0"}, {"Content-Type", "application/json"}};
  ASSERT_EQ(admin.request(verb::put, "/src", {}, auth).status, 201u);
  ASSERT_EQ(admin.request(verb::put, "/src/d1", R"({"x":1})", auth).status, 201u);
  const std::string source = "https://admin:secret@127.0.0.1:" + std::to_string(tls_port_) + "/src";
  const auto replicator = [&](const std::string& name, const std::string& replicator_ini) {
    const auto ini = dir_.path() / (name + ".ini");
    write_file(ini, "[replicator]\nverify_ssl_certificates = true\n" + replicator_ini);
    return std::make_unique<ServerProcess>(dir_.path() / name,
                                           std::vector<std::string>{"--config", ini.string()});
  };
  {
    auto trusting =
        replicator("trusting", "ssl_trusted_certificates_file = " + cert_.string() + "\n");
    HttpClient c(trusting->port(), 30s);
    const auto r =
        c.request(verb::post, "/_replicate",
                  R"({"source":")" + source + R"(","target":"copy","create_target":true})",
                  {{"Content-Type", "application/json"}});
    ASSERT_EQ(r.status, 200u) << r.body;
    EXPECT_EQ(r.json()["history"][0]["docs_written"], 1);
    EXPECT_EQ(c.get("/copy/d1").json()["x"], 1);
  }
  auto wary =
      replicator("wary", "ssl_trusted_certificates_file = /etc/ssl/certs/ca-certificates.crt\n");
  HttpClient c(wary->port(), 30s);
  const auto r = c.request(verb::post, "/_replicate",
                           R"({"source":")" + source +
                               R"(","target":"copy","create_target":true,"retries_per_request":0})",
                           {{"Content-Type", "application/json"}});
  EXPECT_EQ(r.status, 500u) << r.body;
  EXPECT_NE(r.body.find("certificate verify failed"), std::string::npos) << r.body;
}

TEST_F(TlsTest, MissingCertificateStopsStartup) {
  const auto ini = dir_.path() / "bad.ini";
  write_file(ini, "[ssl]\nenable = true\nport = 0\ncert_file = " +
                      (dir_.path() / "none.pem").string() + "\nkey_file = " + key_.string() + "\n");
  EXPECT_THROW(ServerProcess(dir_.path() / "bad", {"--config", ini.string()}), std::runtime_error);
  write_file(ini, "[ssl]\nenable = true\nport = 0\n");
  EXPECT_THROW(ServerProcess(dir_.path() / "bad2", {"--config", ini.string()}), std::runtime_error);
}

}  // namespace
}  // namespace chaise::test

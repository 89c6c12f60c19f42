// JWT bearer authentication through the real server ([chttpd] authentication_handlers with
// jwt_authentication_handler, [jwt_keys], [jwt_auth]). Tokens are made here with OpenSSL; the
// expected bodies were checked against CouchDB 3.5.0 with the same keys and tokens.
#include <gtest/gtest.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include <fstream>

#include "tests/http/test_credentials.h"
#include "tests/http/test_server.h"

namespace chaise::test {
namespace {

using beast_http::field;
using beast_http::verb;
using Headers = std::vector<std::pair<std::string, std::string>>;

using Key = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

// The public half as PEM, with its newlines written as \n for an ini value.
std::string public_pem(EVP_PKEY* key) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PUBKEY(bio, key);
  char* data = nullptr;
  const long len = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<std::size_t>(len));
  BIO_free(bio);
  std::string out;
  for (char c : pem) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out;
}

std::string sign(EVP_PKEY* key, std::string_view message) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestSignInit(ctx, nullptr, EVP_sha256(), nullptr, key);
  std::size_t len = 0;
  EVP_DigestSign(ctx, nullptr, &len, reinterpret_cast<const unsigned char*>(message.data()),
                 message.size());
  std::string sig(len, '\0');
  EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &len,
                 reinterpret_cast<const unsigned char*>(message.data()), message.size());
  sig.resize(len);
  EVP_MD_CTX_free(ctx);
  return sig;
}

// ES256 signs r || s, 32 bytes each, not OpenSSL's DER.
std::string der_to_jose(const std::string& der) {
  const auto* p = reinterpret_cast<const unsigned char*>(der.data());
  ECDSA_SIG* sig = d2i_ECDSA_SIG(nullptr, &p, static_cast<long>(der.size()));
  std::string out(64, '\0');
  BN_bn2binpad(ECDSA_SIG_get0_r(sig), reinterpret_cast<unsigned char*>(out.data()), 32);
  BN_bn2binpad(ECDSA_SIG_get0_s(sig), reinterpret_cast<unsigned char*>(out.data()) + 32, 32);
  ECDSA_SIG_free(sig);
  return out;
}

const std::string kHmacSecret = "chaise-jwt-test-secret";

// header.payload.signature for `alg` (HS256 with kHmacSecret, RS256 / ES256 with `key`).
std::string token(const std::string& alg, const nlohmann::json& claims, EVP_PKEY* key = nullptr,
                  nlohmann::json header = nlohmann::json::object()) {
  if (!header.contains("alg")) header["alg"] = alg;
  header["typ"] = "JWT";
  const std::string message = base64url(header.dump()) + "." + base64url(claims.dump());
  std::string sig;
  if (alg == "HS256") {
    sig = hmac_sha256(kHmacSecret, message);
  } else {
    sig = sign(key, message);
    if (alg == "ES256") sig = der_to_jose(sig);
  }
  return message + "." + base64url(sig);
}

Headers bearer(const std::string& t) { return {{"Authorization", "Bearer " + t}}; }

std::int64_t in_an_hour() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
             .count() +
         3600;
}

class JwtTest : public ::testing::Test {
 protected:
  void start(const std::string& extra) {
    const auto ini = dir_.path() / "local.ini";
    std::ofstream(ini) << "[chttpd_auth]\niterations = 10\n[admins]\nadmin = secret\n" << extra;
    server_ = std::make_unique<ServerProcess>(
        dir_.path() / "data",
        std::vector<std::string>{"--no-admin-party", "--config", ini.string()});
    client_ = std::make_unique<HttpClient>(server_->port());
  }
  HttpResponse get(const std::string& target, const Headers& headers) {
    return client_->request(verb::get, target, {}, headers);
  }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<HttpClient> client_;
};

TEST_F(JwtTest, BearerTokensSignedWithConfiguredKeys) {
  Key rsa(EVP_RSA_gen(2048), EVP_PKEY_free);
  Key ec(EVP_EC_gen("P-256"), EVP_PKEY_free);
  ASSERT_TRUE(rsa && ec);
  start(
      "[chttpd]\nauthentication_handlers = {chttpd_auth, jwt_authentication_handler}, "
      "{chttpd_auth, cookie_authentication_handler}, {chttpd_auth, "
      "default_authentication_handler}\n"
      "[jwt_keys]\nhmac:_default = " +
      base64(kHmacSecret) + "\nrsa:r1 = " + public_pem(rsa.get()) +
      "\nec:e1 = " + public_pem(ec.get()) + "\nrsa:not_rsa = " + public_pem(ec.get()) +
      "\n[jwt_auth]\nroles_claim_path = app.couch\\.roles\n");
  const std::int64_t exp = in_an_hour();

  // HS256 with the default key, roles from the nested claim path ("\." is a dot in a name).
  auto r =
      get("/_session",
          bearer(token("HS256",
                       {{"sub", "jo"}, {"exp", exp}, {"app", {{"couch.roles", {"r1", "r2"}}}}})));
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.json()["userCtx"], nlohmann::json::parse(R"({"name":"jo","roles":["r1","r2"]})"));
  EXPECT_EQ(r.json()["info"]["authenticated"], "jwt");
  EXPECT_EQ(r.json()["info"]["authentication_handlers"],
            nlohmann::json::parse(R"(["jwt","cookie","default"])"));
  // RS256 and ES256 with the key their kid names; a roles string is split at commas.
  r = get("/_session",
          bearer(token("RS256", {{"sub", "rs"}, {"exp", exp}}, rsa.get(), {{"kid", "r1"}})));
  EXPECT_EQ(r.json()["userCtx"]["name"], "rs") << r.body;
  r = get(
      "/_session",
      bearer(token("ES256", {{"sub", "es"}, {"exp", exp}, {"app", {{"couch.roles", "x, y ,z"}}}},
                   ec.get(), {{"kid", "e1"}})));
  EXPECT_EQ(r.json()["userCtx"], nlohmann::json::parse(R"({"name":"es","roles":["x","y","z"]})"))
      << r.body;

  // The roles decide access like any user's: _admin is a server admin.
  EXPECT_EQ(get("/_all_dbs", bearer(token("HS256", {{"sub", "jo"}, {"exp", exp}}))).status, 401u);
  EXPECT_EQ(
      get("/_all_dbs",
          bearer(token("HS256",
                       {{"sub", "boss"}, {"exp", exp}, {"app", {{"couch.roles", {"_admin"}}}}})))
          .status,
      200u);

  // Refused tokens, each with CouchDB's answer.
  auto refused = [&](const std::string& t, unsigned status, const std::string& reason) {
    const auto res = get("/_session", bearer(t));
    EXPECT_EQ(res.status, status) << res.body;
    EXPECT_EQ(res.json()["reason"], reason) << res.body;
  };
  const std::string good = token("HS256", {{"sub", "jo"}, {"exp", exp}});
  refused(good.substr(0, good.size() - 2) + "AA", 400, "Bad HMAC");
  refused(token("HS256", {{"sub", "jo"}, {"exp", 1}}), 401, "exp not in future");
  refused(token("HS256", {{"sub", "jo"}}), 400, "Missing exp claim");
  refused(token("HS256", {{"exp", exp}}), 401, "Token missing sub claim.");
  refused(token("HS256", {{"sub", "jo"}, {"exp", exp}, {"app", {{"couch.roles", {1}}}}}), 400,
          "Malformed token");
  refused(token("RS256", {{"sub", "rs"}, {"exp", exp}}, rsa.get()), 400, "Unknown kid");
  refused(token("ES256", {{"sub", "rs"}, {"exp", exp}}, ec.get(), {{"kid", "r1"}}), 400,
          "Unknown kid");
  refused(token("RS256", {{"sub", "rs"}, {"exp", exp}}, ec.get(), {{"kid", "not_rsa"}}), 400,
          "not an RSA public key");
  refused(token("HS256", {{"sub", "jo"}, {"exp", exp}}, nullptr, {{"alg", "none"}}), 400,
          "Invalid alg header parameter");
  refused("abc.def", 400, "Malformed token");
  refused("a.b.c", 400, "Malformed token");
  // A signature made with another RSA key.
  Key other(EVP_RSA_gen(2048), EVP_PKEY_free);
  refused(token("RS256", {{"sub", "rs"}, {"exp", exp}}, other.get(), {{"kid", "r1"}}), 400,
          "Bad signature");

  // required_claims: {iss, "value"} and nbf, changed through the config API.
  const Headers admin = {basic_auth("admin", "secret")};
  ASSERT_EQ(client_
                ->request(verb::put, "/_node/_local/_config/jwt_auth/required_claims",
                          R"("exp, nbf, {iss, \"https://issuer\"}")", admin)
                .status,
            200u);
  refused(good, 400, "Missing iss claim");
  refused(token("HS256", {{"sub", "jo"}, {"exp", exp}, {"iss", "https://other"}}), 400,
          "Invalid iss claim");
  refused(token("HS256", {{"sub", "jo"}, {"exp", exp}, {"iss", "https://issuer"}}), 400,
          "Missing nbf claim");
  refused(token("HS256", {{"sub", "jo"}, {"exp", exp}, {"iss", "https://issuer"}, {"nbf", exp}}),
          401, "nbf not in past");
  r = get(
      "/_session",
      bearer(token("HS256", {{"sub", "jo"}, {"exp", exp}, {"iss", "https://issuer"}, {"nbf", 1}})));
  EXPECT_EQ(r.json()["userCtx"]["name"], "jo") << r.body;
}

TEST_F(JwtTest, BearerIsIgnoredUnlessTheHandlerIsConfigured) {
  start("[jwt_keys]\nhmac:_default = " + base64(kHmacSecret) + "\n");
  const auto r = get("/_session", bearer(token("HS256", {{"sub", "jo"}, {"exp", in_an_hour()}})));
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_TRUE(r.json()["userCtx"]["name"].is_null()) << r.body;
  EXPECT_EQ(r.json()["info"]["authentication_handlers"],
            nlohmann::json::parse(R"(["cookie","default"])"));
}

}  // namespace
}  // namespace chaise::test

// Integration tests of attachments against the real chaise binary: inline base64 uploads, stubs,
// /{db}/{doc}/{att} GET/HEAD/PUT/DELETE with ETag, If-None-Match and Range, attachments=true and
// atts_since, multipart/related answers, open_revs with attachments, superseded revisions and
// compaction, large attachments, max_attachment_size.
//
// Expected answers come from CouchDB 3.5 (chttpd_db:db_attachment_req, couch_att:to_json,
// couch_doc:doc_to_multi_part_stream), checked side by side against a CouchDB 3.5.0.
#include "core/docs/attachments.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "http/transport/multipart.h"
#include "tests/http/feed_client.h"
#include "tests/http/test_server.h"

namespace chaise::test {
namespace {

using beast_http::field;
using beast_http::verb;
using Json = nlohmann::ordered_json;
using Headers = std::vector<std::pair<std::string, std::string>>;

const Headers kJson = {{"Content-Type", "application/json"}};
const Headers kAcceptJson = {{"Accept", "application/json"}};

std::string md5_digest(const std::string& bytes) {
  core::AttHasher h;
  h.update(bytes);
  std::string md5, address;
  h.finish(md5, address);
  return core::att_digest_str(md5);
}

class AttachmentsTest : public ::testing::Test {
 protected:
  void SetUp() override { start({}); }
  void start(const std::vector<std::string>& args) {
    server_.emplace(dir_.path() / "data", args);
    client_ = std::make_unique<HttpClient>(server_->port());
    auto r = call(verb::put, "/db");
    ASSERT_TRUE(r.status == 201u || r.status == 412u) << r.body;
  }
  void TearDown() override {
    client_.reset();
    EXPECT_EQ(server_->stop().exit_code, 0);
  }

  HttpResponse call(verb method, const std::string& target, std::string body = {},
                    const Headers& headers = {}) {
    return client_->request(method, target, std::move(body), headers);
  }
  HttpResponse get(const std::string& target, const Headers& headers = {}) {
    return call(verb::get, target, {}, headers);
  }
  HttpResponse put(const std::string& target, const std::string& body,
                   const Headers& headers = kJson) {
    return call(verb::put, target, body, headers);
  }
  std::string rev_of(const std::string& doc) { return get("/db/" + doc).json()["_rev"]; }
  // PUTs 100 MB to /db/huge<round>/blob over a plain socket, reads it back, checks the bytes, and
  // keeps the largest server RSS seen in `peak`.
  void stream_hundred_megabytes(int round, long& peak);

  TempDir dir_;
  std::optional<ServerProcess> server_;
  std::unique_ptr<HttpClient> client_;
};

void expect_error(const HttpResponse& r, unsigned status, const std::string& error,
                  const std::string& reason) {
  EXPECT_EQ(r.status, status) << r.body;
  ASSERT_FALSE(r.body.empty());
  EXPECT_EQ(r.json(), (Json{{"error", error}, {"reason", reason}})) << r.body;
}

TEST_F(AttachmentsTest, InlineUploadReadsBackAsStubDataAndBytes) {
  auto p = put("/db/d", R"({"a":1,"_attachments":{"h.txt":{"content_type":"text/plain",
                              "data":"aGVsbG8gd29ybGQ="}}})");
  ASSERT_EQ(p.status, 201u) << p.body;
  auto doc = get("/db/d");
  ASSERT_EQ(doc.status, 200u);
  // couch_att:to_json key order; _attachments comes last. text/plain is stored gzip'd, as CouchDB
  // does, and the digest is the MD5 of that gzip stream: this is CouchDB 3.5.0's exact value.
  const std::string digest = "md5-7mkg+nM0HN26sZkLN8KVSA==";
  EXPECT_EQ(doc.body.substr(doc.body.find("\"a\":1")),
            R"("a":1,"_attachments":{"h.txt":{"content_type":"text/plain","revpos":1,)"
            R"("digest":")" +
                digest +
                R"(","length":11,"stub":true}}})"
                "\n");
  EXPECT_EQ(doc.json()["_rev"], "1-6b398848b10263f158e521ce8aae8029");  // CouchDB's rev too
  auto info = get("/db/d?att_encoding_info=true").json()["_attachments"]["h.txt"];
  EXPECT_EQ(info["encoding"], "gzip");
  EXPECT_EQ(info["encoded_length"], 31);
  auto inl = get("/db/d?attachments=true", kAcceptJson);
  EXPECT_EQ(inl.json()["_attachments"]["h.txt"], (Json{{"content_type", "text/plain"},
                                                       {"revpos", 1},
                                                       {"digest", digest},
                                                       {"data", "aGVsbG8gd29ybGQ="}}));
  auto raw = get("/db/d/h.txt");
  ASSERT_EQ(raw.status, 200u);
  EXPECT_EQ(raw.body, "hello world");
  EXPECT_EQ(raw.header(field::content_type), "text/plain");
  EXPECT_EQ(raw.header(field::etag), "\"" + digest.substr(4) + "\"");
  EXPECT_EQ(raw.header(field::accept_ranges), "none");  // encoded: no ranges (CouchDB)
  auto gz = get("/db/d/h.txt", {{"Accept-Encoding", "gzip"}});
  EXPECT_EQ(gz.header(field::content_encoding), "gzip");
  EXPECT_EQ(core::gzip_decompress(gz.body, 100), std::optional<std::string>("hello world"));
  EXPECT_EQ(raw.header("Content-Security-Policy"), "sandbox");
  auto head = call(verb::head, "/db/d/h.txt");
  EXPECT_EQ(head.status, 200u);
  EXPECT_EQ(head.header(field::content_length), "11");
  EXPECT_EQ(get("/db/d/h.txt", {{"If-None-Match", raw.header(field::etag)}}).status, 304u);
  expect_error(get("/db/d/nope.txt"), 404, "not_found", "Document is missing attachment");
  expect_error(get("/db/none/x"), 404, "not_found", "missing");
}

// A multipart/form-data body: (field name, file name or "", content type or "", value).
std::string form_body(const std::string& boundary,
                      const std::vector<std::array<std::string, 4>>& fields) {
  std::string out;
  for (const auto& [name, file, type, value] : fields) {
    out += "--" + boundary + "\r\nContent-Disposition: form-data; name=\"" + name + "\"";
    if (!file.empty()) out += "; filename=\"" + file + "\"";
    out += "\r\n";
    if (!type.empty()) out += "Content-Type: " + type + "\r\n";
    out += "\r\n" + value + "\r\n";
  }
  return out + "--" + boundary + "--\r\n";
}

// The attachment upload form of Futon and Fauxton, as CouchDB 3.5 answers it (the revisions are
// the ones CouchDB gives the same edits).
TEST_F(AttachmentsTest, FormUploadAddsAttachmentsAsCouchDbDoes) {
  ASSERT_EQ(put("/db/d", R"({"a":1})").status, 201u);
  const std::string referer = "http://127.0.0.1:" + std::to_string(server_->port()) + "/_utils";
  const Headers form = {{"Content-Type", "multipart/form-data; boundary=XyZ"},
                        {"Referer", referer}};
  auto upload = [&](const std::string& doc, const std::vector<std::array<std::string, 4>>& f,
                    const Headers& h) {
    return call(verb::post, "/db/" + doc, form_body("XyZ", f), h);
  };
  const std::vector<std::array<std::string, 4>> hello = {
      {"_rev", "", "", rev_of("d")}, {"_attachments", "hello.txt", "text/plain", "hello\n"}};

  expect_error(upload("d", hello, {{"Content-Type", "multipart/form-data; boundary=XyZ"}}), 400,
               "bad_request", "Referer header required.");
  expect_error(upload("d", hello,
                      {{"Content-Type", "multipart/form-data; boundary=XyZ"},
                       {"Referer", "http://elsewhere.example/"}}),
               400, "bad_request", "Referer header must match host.");
  expect_error(upload("d", hello, {{"Content-Type", "application/json"}, {"Referer", referer}}),
               415, "bad_content_type", "Content-Type must be multipart/form-data");

  auto r = upload("d", hello, form);
  ASSERT_EQ(r.status, 201u) << r.body;
  EXPECT_EQ(r.json()["rev"], "2-93978ddc64d9f04c2fb2cfc4a6316171");
  EXPECT_EQ(r.header("ETag"), "\"2-93978ddc64d9f04c2fb2cfc4a6316171\"");
  EXPECT_EQ(get("/db/d/hello.txt").body, "hello\n");
  // A file of a name the document has replaces that attachment; the others stay.
  r = upload("d",
             {{"_rev", "", "", rev_of("d")},
              {"_attachments", "hello.txt", "text/x-a", "hello\n"},
              {"_attachments", "h2.txt", "text/plain", "second"}},
             form);
  ASSERT_EQ(r.status, 201u) << r.body;
  EXPECT_EQ(r.json()["rev"], "3-cd2a7fdf6eb69687973b3e7797433dc5");
  auto doc = get("/db/d").json();
  EXPECT_EQ(doc["a"], 1);
  EXPECT_EQ(doc["_attachments"]["hello.txt"]["content_type"], "text/x-a");
  EXPECT_EQ(get("/db/d/h2.txt").body, "second");
  // A stale revision conflicts; one the document never had is not found.
  expect_error(upload("d", hello, form), 409, "conflict", "Document update conflict.");
  expect_error(upload("d", {{"_rev", "", "", "9-abc"}, hello[1]}, form), 404, "not_found",
               "missing");
  // `_doc` gives the document itself.
  r = upload("new2", {{"_doc", "", "", R"({"x":2})"}, hello[1]}, form);
  ASSERT_EQ(r.status, 201u) << r.body;
  EXPECT_EQ(r.json()["rev"], "1-e68d20239d2d34f4c064f58e8750f8f7");
  EXPECT_EQ(get("/db/new2").json()["x"], 2);
  expect_error(upload("new3", {{"_doc", "", "", R"({})"}, {"_attachments", "_x", "", "y"}}, form),
               400, "bad_request", "Attachment name '_x' starts with prohibited character '_'");
  // Neither: the form creates the document (CouchDB answers 500), once.
  EXPECT_EQ(upload("new4", {hello[1]}, form).status, 201u);
  EXPECT_EQ(upload("new4", {hello[1]}, form).status, 409u);
  EXPECT_EQ(get("/db/new4/hello.txt").body, "hello\n");
}

TEST_F(AttachmentsTest, StubsCarryAttachmentsOverAndUnknownStubsAre412) {
  const std::string r1 =
      put("/db/d", R"({"_attachments":{"a":{"data":"YWFh"},"b":{"data":"YmJi"}}})").json()["rev"];
  auto p = put("/db/d", R"({"_rev":")" + r1 +
                            R"(","v":2,"_attachments":{"a":{"stub":true},"c":{"data":"Y2Nj"}}})");
  ASSERT_EQ(p.status, 201u) << p.body;
  auto doc = get("/db/d").json();
  EXPECT_EQ(doc["_attachments"].size(), 2u);
  EXPECT_EQ(doc["_attachments"]["a"]["revpos"], 1);
  EXPECT_EQ(doc["_attachments"]["c"]["revpos"], 2);
  EXPECT_EQ(get("/db/d/a").body, "aaa");
  EXPECT_EQ(get("/db/d/c").body, "ccc");
  expect_error(get("/db/d/b"), 404, "not_found", "Document is missing attachment");
  // The superseded revision keeps its attachments until compaction.
  EXPECT_EQ(get("/db/d/b?rev=" + r1).body, "bbb");
  const std::string r2 = p.json()["rev"];
  expect_error(put("/db/d", R"({"_rev":")" + r2 + R"(","_attachments":{"zz":{"stub":true}}})"), 412,
               "missing_stub", "Invalid attachment stub in d for zz");
  expect_error(put("/db/new", R"({"_attachments":{"a":{"stub":true}}})"), 412, "missing_stub",
               "Invalid attachment stub in new for a");
  expect_error(put("/db/d2", R"({"_attachments":{"_a":{"data":"YQ=="}}})"), 400, "bad_request",
               "Attachment name '_a' starts with prohibited character '_'");
}

TEST_F(AttachmentsTest, StandalonePutAndDeleteMakeRevisions) {
  // No document yet: PUT creates it with the attachment alone.
  auto p = put("/db/d/f.bin", "BINARYDATA", {{"Content-Type", "application/octet-stream"}});
  ASSERT_EQ(p.status, 201u) << p.body;
  const std::string r1 = p.json()["rev"];
  EXPECT_EQ(p.header(field::etag), "\"" + r1 + "\"");
  EXPECT_EQ(get("/db/d/f.bin").body, "BINARYDATA");
  EXPECT_EQ(get("/db/d/f.bin?rev=" + r1).body, "BINARYDATA");
  // The document exists: an edit must name its revision.
  expect_error(put("/db/d/g.txt", "x", {{"Content-Type", "text/plain"}}), 409, "conflict",
               "Document update conflict.");
  auto p2 = put("/db/d/g.txt?rev=" + r1, "gee", {{"Content-Type", "text/plain"}});
  ASSERT_EQ(p2.status, 201u) << p2.body;
  const std::string r2 = p2.json()["rev"];
  auto doc = get("/db/d").json();
  ASSERT_EQ(doc["_attachments"].size(), 2u);
  EXPECT_EQ(doc["_attachments"].begin().key(), "g.txt");  // CouchDB puts the new one first
  expect_error(call(verb::delete_, "/db/d/f.bin?rev=" + r1), 409, "conflict",
               "Document update conflict.");
  expect_error(call(verb::delete_, "/db/d/g.txt?rev=" + r1), 404, "not_found",
               "Document is missing attachment");  // r1 has no g.txt (CouchDB answers the same)
  expect_error(call(verb::delete_, "/db/d/g.txt"), 409, "conflict", "Document update conflict.");
  expect_error(call(verb::delete_, "/db/d/zzz?rev=" + r2), 404, "not_found",
               "Document is missing attachment");
  auto d = call(verb::delete_, "/db/d/g.txt", {}, {{"If-Match", r2}});
  ASSERT_EQ(d.status, 200u) << d.body;
  EXPECT_EQ(get("/db/d").json()["_attachments"].size(), 1u);
  expect_error(get("/db/d/g.txt"), 404, "not_found", "Document is missing attachment");
  EXPECT_EQ(get("/db/d/g.txt?rev=" + r2).body, "gee");
}

TEST_F(AttachmentsTest, RangeRequests) {
  put("/db/d/r", "0123456789", {{"Content-Type", "application/octet-stream"}});
  auto r = get("/db/d/r", {{"Range", "bytes=2-4"}});
  EXPECT_EQ(r.status, 206u);
  EXPECT_EQ(r.body, "234");
  EXPECT_EQ(r.header(field::content_range), "bytes 2-4/10");
  EXPECT_EQ(get("/db/d/r", {{"Range", "bytes=7-"}}).body, "789");
  EXPECT_EQ(get("/db/d/r", {{"Range", "bytes=-3"}}).body, "789");
  EXPECT_EQ(get("/db/d/r", {{"Range", "bytes=5-100"}}).body, "56789");
  expect_error(get("/db/d/r", {{"Range", "bytes=10-12"}}), 416, "requested_range_not_satisfiable",
               "Requested range not satisfiable");
  EXPECT_EQ(get("/db/d/r", {{"Range", "bytes=4-2"}}).status, 200u);  // invalid: ignored
}

TEST_F(AttachmentsTest, AttsSinceSendsOnlyNewerBodies) {
  const std::string r1 = put("/db/d", R"({"_attachments":{"a":{"data":"YWFh"}}})").json()["rev"];
  const std::string r2 =
      put("/db/d/b?rev=" + r1, "bbb", {{"Content-Type", "text/plain"}}).json()["rev"];
  auto j = get("/db/d?atts_since=[\"" + r1 + "\"]", kAcceptJson).json();
  EXPECT_TRUE(j["_attachments"]["a"]["stub"].get<bool>());
  EXPECT_EQ(j["_attachments"]["b"]["data"], "YmJi");
  auto all = get("/db/d?atts_since=[\"9-" + std::string(32, 'a') + "\"]", kAcceptJson).json();
  EXPECT_EQ(all["_attachments"]["a"]["data"], "YWFh");
  EXPECT_EQ(all["_rev"], r2);
}

TEST_F(AttachmentsTest, MultipartRelatedAnswerWhenAccepted) {
  put("/db/d", R"({"x":1,"_attachments":{"a.txt":{"content_type":"text/plain","data":"aGk="}}})");
  auto r = get("/db/d?attachments=true", {{"Accept", "multipart/related"}});
  ASSERT_EQ(r.status, 200u) << r.body;
  const std::string ctype = r.header(field::content_type);
  ASSERT_TRUE(ctype.starts_with("multipart/related")) << ctype;
  auto boundary = http::multipart_boundary(ctype);
  ASSERT_TRUE(boundary);
  auto parts = http::parse_multipart(r.body, *boundary);
  ASSERT_TRUE(parts);
  ASSERT_EQ(parts->size(), 2u);
  Json doc = Json::parse((*parts)[0].body);
  EXPECT_TRUE(doc["_attachments"]["a.txt"]["follows"].get<bool>());
  // Multipart parts carry the bytes as stored (gzip for text), as CouchDB sends them.
  EXPECT_EQ((*parts)[1].header("content-encoding"), "gzip");
  EXPECT_EQ(core::gzip_decompress((*parts)[1].body, 10), std::optional<std::string>("hi"));
  EXPECT_EQ(doc["_attachments"]["a.txt"]["encoding"], "gzip");
  EXPECT_EQ((*parts)[1].header("content-disposition"), "attachment; filename=\"a.txt\"");
  // Asking for JSON gets JSON.
  EXPECT_EQ(get("/db/d?attachments=true", kAcceptJson).json()["_attachments"]["a.txt"]["data"],
            "aGk=");
}

TEST_F(AttachmentsTest, OpenRevsMultipartNestsAttachments) {
  const std::string r1 =
      put("/db/d", R"({"_attachments":{"a.txt":{"content_type":"text/plain","data":"aGk="}}})")
          .json()["rev"];
  auto r = get("/db/d?open_revs=[\"" + r1 + "\"]&attachments=true&revs=true",
               {{"Accept", "multipart/mixed"}});
  ASSERT_EQ(r.status, 200u) << r.body;
  auto outer =
      http::parse_multipart(r.body, *http::multipart_boundary(r.header(field::content_type)));
  ASSERT_TRUE(outer);
  ASSERT_EQ(outer->size(), 1u);
  const std::string inner_type((*outer)[0].header("content-type"));
  ASSERT_TRUE(inner_type.starts_with("multipart/related")) << inner_type;
  auto inner = http::parse_multipart((*outer)[0].body, *http::multipart_boundary(inner_type));
  ASSERT_TRUE(inner);
  ASSERT_EQ(inner->size(), 2u);
  EXPECT_EQ(Json::parse((*inner)[0].body)["_revisions"]["start"], 1);
  EXPECT_EQ(core::gzip_decompress((*inner)[1].body, 10), std::optional<std::string>("hi"));
  // Multipart open_revs always carries the bytes (CouchDB's replicator does not ask for
  // attachments=true); atts_since naming a revision at or after the revpos leaves a stub.
  auto plain = get("/db/d?open_revs=all", {{"Accept", "multipart/mixed"}});
  EXPECT_NE(plain.body.find("\"follows\":true"), std::string::npos) << plain.body;
  auto since =
      get("/db/d?open_revs=all&atts_since=[\"" + r1 + "\"]", {{"Accept", "multipart/mixed"}});
  EXPECT_NE(since.body.find("\"stub\":true"), std::string::npos) << since.body;
  // JSON open_revs without attachments=true: stubs.
  auto json = get("/db/d?open_revs=all", kAcceptJson);
  EXPECT_EQ(json.json()[0]["ok"]["_attachments"]["a.txt"]["stub"], true);
}

TEST_F(AttachmentsTest, CompactionRemovesBytesNoRevisionNames) {
  const std::string r1 = put("/db/d/a", "first", {{"Content-Type", "text/plain"}}).json()["rev"];
  const std::string r2 =
      put("/db/d/a?rev=" + r1, "second", {{"Content-Type", "text/plain"}}).json()["rev"];
  EXPECT_EQ(get("/db/d/a?rev=" + r1).body, "first");
  ASSERT_EQ(call(verb::post, "/db/_compact", "{}", kJson).status, 202u);
  expect_error(get("/db/d/a?rev=" + r1), 404, "not_found", "missing");
  EXPECT_EQ(get("/db/d/a").body, "second");
  // Equal bytes in two documents are stored once; compaction keeps them while one names them.
  put("/db/e", R"({"_attachments":{"s":{"data":")" + core::base64_encode("second") + "\"}}}");
  const std::string e_rev = rev_of("e");
  ASSERT_EQ(call(verb::delete_, "/db/e/s?rev=" + e_rev).status, 200u);
  ASSERT_EQ(call(verb::post, "/db/_compact", "{}", kJson).status, 202u);
  EXPECT_EQ(get("/db/d/a").body, "second");
  EXPECT_EQ(get("/db/d/a?rev=" + r2).body, "second");
}

TEST_F(AttachmentsTest, LargeAttachmentRoundTrips) {
  std::string big(3 * 1024 * 1024 + 17, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 7919) % 251);
  auto p = put("/db/big/blob", big, {{"Content-Type", "application/octet-stream"}});
  ASSERT_EQ(p.status, 201u) << p.body;
  auto g = get("/db/big/blob");
  ASSERT_EQ(g.status, 200u);
  EXPECT_EQ(g.body.size(), big.size());
  EXPECT_TRUE(g.body == big);
  EXPECT_EQ(get("/db/big").json()["_attachments"]["blob"]["digest"], md5_digest(big));
  auto tail = get("/db/big/blob", {{"Range", "bytes=-5"}});
  EXPECT_EQ(tail.body, big.substr(big.size() - 5));
}

TEST_F(AttachmentsTest, MaxAttachmentSizeIsEnforced) {
  TearDown();
  const auto ini = dir_.path() / "small.ini";
  std::ofstream(ini) << "[couchdb]\nmax_attachment_size = 4\n";
  start({"--config", ini.string()});
  expect_error(put("/db/d/a", "12345", {{"Content-Type", "text/plain"}}), 413,
               "attachment_too_large", "a");
  expect_error(put("/db/d", R"({"_attachments":{"b":{"data":"MTIzNDU="}}})"), 413,
               "attachment_too_large", "b");
  EXPECT_EQ(put("/db/d/a", "1234", {{"Content-Type", "text/plain"}}).status, 201u);
}

TEST_F(AttachmentsTest, BulkDocsAndReplicatedWritesCarryAttachments) {
  auto r = call(verb::post, "/db/_bulk_docs",
                R"({"docs":[{"_id":"x","_attachments":{"f":{"data":"eHg="}}}]})", kJson);
  ASSERT_EQ(r.status, 201u) << r.body;
  EXPECT_EQ(get("/db/x/f").body, "xx");
  const std::string rx = r.json()[0]["rev"];
  // A replicated child revision whose attachment is a stub of its parent's.
  const std::string child = "2-" + std::string(32, 'c');
  auto rep = call(verb::post, "/db/_bulk_docs",
                  R"({"new_edits":false,"docs":[{"_id":"x","_rev":")" + child +
                      R"(","_revisions":{"start":2,"ids":[")" + std::string(32, 'c') + R"(",")" +
                      rx.substr(2) + R"("]},"_attachments":{"f":{"stub":true,"revpos":1}}}]})",
                  kJson);
  ASSERT_EQ(rep.status, 201u) << rep.body;
  EXPECT_EQ(rep.json(), Json::array());
  EXPECT_EQ(get("/db/x/f").body, "xx");
  EXPECT_EQ(rev_of("x"), child);
}

TEST_F(AttachmentsTest, IncludeDocsWithAttachmentsInAllDocsAndChanges) {
  put("/db/d", R"({"_attachments":{"a":{"content_type":"text/plain","data":"aGk="}}})");
  auto all = get("/db/_all_docs?include_docs=true&attachments=true").json();
  EXPECT_EQ(all["rows"][0]["doc"]["_attachments"]["a"]["data"], "aGk=");
  auto stubs = get("/db/_all_docs?include_docs=true").json();
  EXPECT_EQ(stubs["rows"][0]["doc"]["_attachments"]["a"]["stub"], true);
  auto ch = get("/db/_changes?include_docs=true&attachments=true").json();
  EXPECT_EQ(ch["results"][0]["doc"]["_attachments"]["a"]["data"], "aGk=");
  auto keyed = get("/db/_all_docs?include_docs=true&attachments=true&keys=[\"d\"]").json();
  EXPECT_EQ(keyed["rows"][0]["doc"]["_attachments"]["a"]["data"], "aGk=");
}

TEST_F(AttachmentsTest, CopyCarriesAttachments) {
  put("/db/src", R"({"v":1,"_attachments":{"a.bin":{"content_type":"application/octet-stream",
                    "data":"AAEC"},"t.txt":{"content_type":"text/plain","data":"aGk="}}})");
  auto c = call(verb::copy, "/db/src", {}, {{"Destination", "dst"}});
  ASSERT_EQ(c.status, 201u) << c.body;
  auto dst = get("/db/dst").json();
  EXPECT_EQ(dst["v"], 1);
  ASSERT_EQ(dst["_attachments"].size(), 2u) << dst.dump();
  EXPECT_EQ(dst["_attachments"]["a.bin"]["digest"],
            get("/db/src").json()["_attachments"]["a.bin"]["digest"]);
  EXPECT_EQ(get("/db/dst/a.bin").body, std::string("\0\1\2", 3));
  EXPECT_EQ(get("/db/dst/t.txt").body, "hi");
  // The copy holds its own reference: deleting and compacting the source keeps the bytes.
  ASSERT_EQ(call(verb::delete_, "/db/src?rev=" + rev_of("src")).status, 200u);
  ASSERT_EQ(call(verb::post, "/db/_compact", "{}", kJson).status, 202u);
  EXPECT_EQ(get("/db/dst/t.txt").body, "hi");
}

TEST_F(AttachmentsTest, RevsInfoReadsTheStatusOfEveryStoredRevision) {
  // A revision with attachments (a header is stored), its tombstone, then a re-creation: CouchDB
  // 3.5 answers available, deleted, available for the same edits.
  const std::string r1 = put("/db/d", R"({"_attachments":{"a":{"data":"AAEC"}}})").json()["rev"];
  ASSERT_EQ(call(verb::delete_, "/db/d?rev=" + r1).status, 200u);
  ASSERT_EQ(put("/db/d", R"({"v":3})").status, 201u);
  auto info = get("/db/d?revs_info=true").json()["_revs_info"];
  ASSERT_EQ(info.size(), 3u) << info.dump();
  EXPECT_EQ(info[0]["status"], "available");
  EXPECT_EQ(info[1]["status"], "deleted");
  EXPECT_EQ(info[2]["status"], "available");
  EXPECT_EQ(info[2]["rev"], r1);
}

// ---- Streamed uploads (bodies over 1 MiB, or chunked, are never held whole) ----

// Deterministic bytes that do not compress, and that differ piece by piece.
std::string pseudo_random_piece(std::uint64_t& state, std::size_t n) {
  std::string out(n, '\0');
  for (std::size_t i = 0; i < n; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    out[i] = static_cast<char>(state >> 56);
  }
  return out;
}

// Two of them, in and out: 400 MB through the server.
TEST_F(AttachmentsTest, HundredMegabyteAttachmentStreamsInAndOutWithFlatMemory) {
  // The storage engine's memtables made small, so that what is left to grow is the server's
  // buffering and the block cache (32 MiB by default), which streamed bytes must not fill.
  TearDown();
  const auto ini = dir_.path() / "small-memtables.ini";
  std::ofstream(ini) << "[chaise]\nwrite_buffer_bytes = 8388608\n";
  start({"--config", ini.string()});
  const long before = process_rss_kib(server_->pid());
  long peak = before;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    stream_hundred_megabytes(round, peak);
  }
  std::printf("server RSS: %ld KiB before, %ld KiB at most while 2 x 100 MB went in and out\n",
              before, peak);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // Flat: a few 8 MiB memtables and the buffers of a request, where one body held whole, or
  // read through the block cache, would add 100 MB.
  EXPECT_LT(peak - before, 80 * 1024);
#endif
}

void AttachmentsTest::stream_hundred_megabytes(int round, long& peak) {
  constexpr std::size_t kSize = 100u << 20, kPiece = 1u << 20;
  const std::string doc = "/db/huge" + std::to_string(round);
  core::AttHasher sent_hash;
  {
    RawConnection c(server_->port());
    ASSERT_TRUE(c.send_all("PUT " + doc +
                           "/blob HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           "Content-Type: application/octet-stream\r\nContent-Length: " +
                           std::to_string(kSize) + "\r\n\r\n"));
    std::uint64_t state = 42 + static_cast<std::uint64_t>(round);
    for (std::size_t sent = 0; sent < kSize; sent += kPiece) {
      const std::string piece = pseudo_random_piece(state, kPiece);
      sent_hash.update(piece);
      ASSERT_TRUE(c.send_all(piece)) << sent;
      if (sent % (8 * kPiece) == 0) peak = std::max(peak, process_rss_kib(server_->pid()));
    }
    std::string rest;
    const std::string head = c.read_head(rest);
    ASSERT_TRUE(head.starts_with("HTTP/1.1 201")) << head << rest;
  }
  std::string md5, address;
  sent_hash.finish(md5, address);
  auto stored = get(doc).json();
  EXPECT_EQ(stored["_attachments"]["blob"]["length"], kSize);
  EXPECT_EQ(stored["_attachments"]["blob"]["digest"], core::att_digest_str(md5));
  // And out again, read piece by piece while the server's memory is watched.
  {
    RawConnection c(server_->port());
    ASSERT_TRUE(c.send_all("GET " + doc + "/blob HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    std::string body;
    const std::string head = c.read_head(body);
    ASSERT_TRUE(head.starts_with("HTTP/1.1 200")) << head;
    // Chunked: decode as it comes, hashing the bytes.
    core::AttHasher got_hash;
    std::size_t got = 0, reads = 0;
    std::string buf = std::move(body);
    for (;;) {
      auto eol = buf.find("\r\n");
      if (eol == std::string::npos) {
        std::string more = c.read_some();
        ASSERT_FALSE(more.empty()) << "stream ended after " << got;
        buf += more;
        continue;
      }
      const std::size_t n = std::stoul(buf.substr(0, eol), nullptr, 16);
      while (buf.size() < eol + 2 + n + 2) {
        std::string more = c.read_some();
        ASSERT_FALSE(more.empty()) << "stream ended after " << got;
        buf += more;
      }
      if (n == 0) break;
      got_hash.update(std::string_view(buf).substr(eol + 2, n));
      got += n;
      buf.erase(0, eol + 2 + n + 2);
      if (++reads % 64 == 0) peak = std::max(peak, process_rss_kib(server_->pid()));
    }
    EXPECT_EQ(got, kSize);
    std::string got_md5;
    got_hash.finish(got_md5, address);
    EXPECT_TRUE(got_md5 == md5);
  }
  // The replicator's read of it (open_revs, multipart/mixed) is streamed too.
  {
    RawConnection c(server_->port());
    ASSERT_TRUE(c.send_all("GET " + doc +
                           "?open_revs=all HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           "Accept: multipart/mixed\r\nConnection: close\r\n\r\n"));
    std::string body;
    const std::string head = c.read_head(body);
    ASSERT_TRUE(head.starts_with("HTTP/1.1 200")) << head;
    std::size_t total = body.size(), reads = 0;
    for (std::string more; !(more = c.read_some()).empty();) {
      total += more.size();
      if (++reads % 64 == 0) peak = std::max(peak, process_rss_kib(server_->pid()));
    }
    EXPECT_GT(total, kSize);
  }
}

TEST_F(AttachmentsTest, ChunkedUploadsAreStreamedAndCompressedLikeWholeOnes) {
  std::string text;
  for (int i = 0; text.size() < 3 * 1024 * 1024; ++i) text += "line " + std::to_string(i) + "\n";
  RawConnection c(server_->port());
  std::string req =
      "PUT /db/t/log.txt HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  for (std::size_t off = 0; off < text.size(); off += 100'000) {
    const std::string piece = text.substr(off, 100'000);
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
    req += size + piece + "\r\n";
  }
  req += "0\r\n\r\n";
  ASSERT_TRUE(c.send_all(req));
  std::string rest;
  ASSERT_TRUE(c.read_head(rest).starts_with("HTTP/1.1 201"));
  auto att = get("/db/t?att_encoding_info=true").json()["_attachments"]["log.txt"];
  EXPECT_EQ(att["length"], text.size());
  EXPECT_EQ(att["encoding"], "gzip");
  // The same digest as the same bytes uploaded whole (the MD5 of the stored gzip stream).
  EXPECT_EQ(att["digest"], md5_digest(core::gzip_compress(text)));
  EXPECT_TRUE(get("/db/t/log.txt").body == text);
  // Equal bytes uploaded again share the stored copy and read back the same.
  auto again = put("/db/t2/copy.txt", text, {{"Content-Type", "text/plain"}});
  ASSERT_EQ(again.status, 201u) << again.body;
  EXPECT_TRUE(get("/db/t2/copy.txt").body == text);
}

TEST_F(AttachmentsTest, RefusedStreamedUploadsKeepNothingAndAnswerFirst) {
  const std::string big(2 * 1024 * 1024, 'z');
  // A conflict (the document exists, no rev): the answer arrives and the document is unchanged.
  ASSERT_EQ(put("/db/c", R"({"v":1})").status, 201u);
  expect_error(put("/db/c/a", big, {{"Content-Type", "application/octet-stream"}}), 409, "conflict",
               "Document update conflict.");
  EXPECT_FALSE(get("/db/c").json().contains("_attachments"));
  // Over max_attachment_size, by Content-Length before any byte is read, or as the bytes come.
  TearDown();
  const auto ini = dir_.path() / "small.ini";
  std::ofstream(ini) << "[couchdb]\nmax_attachment_size = 1500000\n";
  start({"--config", ini.string()});
  expect_error(put("/db/d/a", big, {{"Content-Type", "text/plain"}}), 413, "attachment_too_large",
               "a");
  client_ = std::make_unique<HttpClient>(server_->port());  // that answer closed the connection
  RawConnection c(server_->port());
  std::string req = "PUT /db/d/b HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 4; ++i) req += "7a120\r\n" + std::string(500'000, 'y') + "\r\n";
  req += "0\r\n\r\n";
  c.send_all(req);
  std::string rest;
  const std::string head = c.read_head(rest);
  EXPECT_TRUE(head.starts_with("HTTP/1.1 413")) << head;
  EXPECT_EQ(get("/db/d").status, 404u);
  // The server is still fine, and a small upload on a fresh connection works.
  EXPECT_EQ(put("/db/d/ok", "1234", {{"Content-Type", "text/plain"}}).status, 201u);
}

// The replicator's upload of a document with large attachments (multipart/related, "follows"),
// streamed: sent in odd pieces, with bytes that look like the start of a delimiter inside.
TEST_F(AttachmentsTest, StreamedMultipartPutStoresEachFollowsPart) {
  std::uint64_t state = 7;
  std::string blob = pseudo_random_piece(state, 3 * 1024 * 1024 + 5);
  const std::string boundary = "abc123boundary";
  blob.replace(1000, 20, "\r\n--abc123boundar");  // almost a delimiter
  std::string text;
  for (int i = 0; text.size() < 200'000; ++i) text += "row " + std::to_string(i) + "\n";
  const std::string gz = core::gzip_compress(text);
  Json doc = {{"_id", "m"},
              {"_rev", "2-0123456789abcdef0123456789abcdef"},
              {"_revisions", {{"start", 2}, {"ids", {"0123456789abcdef0123456789abcdef", "aa"}}}},
              {"v", 1},
              {"_attachments",
               {{"blob.bin",
                 {{"content_type", "application/octet-stream"},
                  {"revpos", 2},
                  {"follows", true},
                  {"length", blob.size()}}},
                {"log.txt",
                 {{"content_type", "text/plain"},
                  {"revpos", 1},
                  {"follows", true},
                  {"encoding", "gzip"},
                  {"length", text.size()},
                  {"encoded_length", gz.size()}}}}}};
  std::string body = "--" + boundary + "\r\nContent-Type: application/json\r\n\r\n" + doc.dump() +
                     "\r\n--" + boundary +
                     "\r\nContent-Disposition: attachment; filename=\"blob.bin\"\r\n\r\n" + blob +
                     "\r\n--" + boundary + "\r\n\r\n" + gz + "\r\n--" + boundary + "--";
  RawConnection c(server_->port());
  ASSERT_TRUE(
      c.send_all("PUT /db/m?new_edits=false HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 "Content-Type: multipart/related; boundary=\"" +
                 boundary + "\"\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n"));
  for (std::size_t off = 0; off < body.size(); off += 7777) {
    ASSERT_TRUE(c.send_all(std::string_view(body).substr(off, 7777)));
  }
  std::string rest;
  const std::string head = c.read_head(rest);
  ASSERT_TRUE(head.starts_with("HTTP/1.1 201")) << head << rest;
  auto stored = get("/db/m?att_encoding_info=true").json();
  EXPECT_EQ(stored["_rev"], "2-0123456789abcdef0123456789abcdef");
  EXPECT_EQ(stored["_attachments"]["blob.bin"]["digest"], md5_digest(blob));
  EXPECT_EQ(stored["_attachments"]["blob.bin"]["revpos"], 2);
  EXPECT_EQ(stored["_attachments"]["log.txt"]["digest"], md5_digest(gz));
  EXPECT_EQ(stored["_attachments"]["log.txt"]["encoding"], "gzip");
  EXPECT_EQ(stored["_attachments"]["log.txt"]["length"], text.size());
  EXPECT_TRUE(get("/db/m/blob.bin").body == blob);
  EXPECT_TRUE(get("/db/m/log.txt").body == text);

  // Broken uploads: a length that does not match, a body without its closing delimiter. Each
  // is refused and writes no revision.
  doc["_id"] = "bad";
  doc["_attachments"]["blob.bin"]["length"] = blob.size() + 1;
  std::string bad = "--" + boundary + "\r\n\r\n" + doc.dump() + "\r\n--" + boundary + "\r\n\r\n" +
                    blob + "\r\n--" + boundary + "\r\n\r\n" + gz + "\r\n--" + boundary + "--";
  auto r = put("/db/bad?new_edits=false", bad,
               {{"Content-Type", "multipart/related; boundary=" + boundary}});
  EXPECT_EQ(r.status, 400u) << r.body;
  client_ = std::make_unique<HttpClient>(server_->port());  // the unread rest closed it
  EXPECT_EQ(get("/db/bad").status, 404u);
  doc["_attachments"]["blob.bin"]["length"] = blob.size();
  bad = "--" + boundary + "\r\n\r\n" + doc.dump() + "\r\n--" + boundary + "\r\n\r\n" + blob;
  r = put("/db/bad?new_edits=false", bad,
          {{"Content-Type", "multipart/related; boundary=" + boundary}});
  EXPECT_EQ(r.status, 400u) << r.body;
  client_ = std::make_unique<HttpClient>(server_->port());  // the unread rest closed it
  EXPECT_EQ(get("/db/bad").status, 404u);
}

// Multipart answers and encoded attachments over 1 MiB are streamed (chunked) from storage, and
// carry exactly the bytes the whole ones did.
TEST_F(AttachmentsTest, LargeMultipartAnswersAndEncodedAttachmentsAreStreamedExactly) {
  std::uint64_t state = 11;
  const std::string blob = pseudo_random_piece(state, 3 * 1024 * 1024 + 1);
  // Hex text: compressible (stored gzip), but only to about half, so still over 1 MiB stored.
  std::string text;
  for (unsigned char c : pseudo_random_piece(state, 1536 * 1024)) {
    static constexpr char kHex[] = "0123456789abcdef";
    text += kHex[c >> 4];
    text += kHex[c & 15];
  }
  ASSERT_EQ(put("/db/big/blob.bin", blob, {{"Content-Type", "application/octet-stream"}}).status,
            201u);
  const std::string rev =
      put("/db/big/log.txt?rev=" + rev_of("big"), text, {{"Content-Type", "text/plain"}})
          .json()["rev"];
  const std::string gz = core::gzip_compress(text);

  // The identity bytes of a gzip-stored attachment, decoded as they are read; or as stored.
  auto plain = get("/db/big/log.txt");
  EXPECT_EQ(plain.header(field::transfer_encoding), "chunked");
  EXPECT_TRUE(plain.body == text);
  auto encoded = get("/db/big/log.txt", {{"Accept-Encoding", "gzip"}});
  EXPECT_EQ(encoded.header(field::content_encoding), "gzip");
  EXPECT_TRUE(encoded.body == gz);
  auto head = call(verb::head, "/db/big/log.txt");
  EXPECT_EQ(head.header(field::content_length), std::to_string(text.size()));

  // Checks a multipart/related document body: the JSON, then the stored bytes of each.
  auto check_related = [&](std::string_view body, std::string_view ctype) {
    auto boundary = http::multipart_boundary(ctype);
    ASSERT_TRUE(boundary) << ctype;
    auto parts = http::parse_multipart(body, *boundary);
    ASSERT_TRUE(parts);
    ASSERT_EQ(parts->size(), 3u);
    Json doc = Json::parse((*parts)[0].body);
    EXPECT_EQ(doc["_rev"], rev);
    // The attachment edited last comes first, as on CouchDB.
    EXPECT_EQ((*parts)[1].header("content-disposition"), "attachment; filename=\"log.txt\"");
    EXPECT_TRUE((*parts)[1].body == gz);
    EXPECT_EQ((*parts)[1].header("content-encoding"), "gzip");
    EXPECT_TRUE((*parts)[2].body == blob);
    EXPECT_EQ((*parts)[2].header("content-length"), std::to_string(blob.size()));
  };
  auto related = get("/db/big?attachments=true", {{"Accept", "multipart/related"}});
  ASSERT_EQ(related.status, 200u);
  EXPECT_EQ(related.header(field::transfer_encoding), "chunked");
  check_related(related.body, related.header(field::content_type));
  auto related_head =
      call(verb::head, "/db/big?attachments=true", {}, {{"Accept", "multipart/related"}});
  EXPECT_GT(std::stoull(related_head.header(field::content_length)), blob.size() + gz.size());

  auto mixed = get("/db/big?open_revs=all&revs=true", {{"Accept", "multipart/mixed"}});
  ASSERT_EQ(mixed.status, 200u);
  auto outer = http::parse_multipart(mixed.body,
                                     *http::multipart_boundary(mixed.header(field::content_type)));
  ASSERT_TRUE(outer);
  ASSERT_EQ(outer->size(), 1u);
  check_related((*outer)[0].body, (*outer)[0].header("content-type"));

  auto bulk = call(verb::post, "/db/_bulk_get?revs=true",
                   Json{{"docs", {{{"id", "big"}, {"rev", rev}}}}}.dump(),
                   {{"Content-Type", "application/json"}, {"Accept", "multipart/mixed"}});
  ASSERT_EQ(bulk.status, 200u);
  auto bulk_parts =
      http::parse_multipart(bulk.body, *http::multipart_boundary(bulk.header(field::content_type)));
  ASSERT_TRUE(bulk_parts);
  ASSERT_EQ(bulk_parts->size(), 1u);
  EXPECT_EQ((*bulk_parts)[0].header("x-doc-id"), "big");
  check_related((*bulk_parts)[0].body, (*bulk_parts)[0].header("content-type"));
}

}  // namespace
}  // namespace chaise::test

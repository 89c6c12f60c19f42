// http/client/couch_endpoint.h — the replicator's Endpoint (core/replication/endpoint.h) as
// CouchDB API requests: one implementation for a database on another server (over HttpClient)
// and for one of this server (a Sender that hands the request to the router in process).
//
// Contract: as Endpoint's. The database's path prefix, credentials (URL user:password,
// "auth": {"basic": ...}, an Authorization: Basic header) and custom headers are fixed at
// construction and sent with every request: credentials for another server as a cookie session
// (session_auth.h), for this one as Basic.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/replication/endpoint.h"
#include "http/client/http_client.h"

namespace chaise::http::client {

// Sends one request and reads its whole answer: HttpClient for a remote server, the router for
// this one.
class Sender {
 public:
  using Headers = std::vector<std::pair<std::string, std::string>>;
  virtual ~Sender() = default;
  virtual ClientResult<ClientResponse> send(boost::beast::http::verb method,
                                            std::string_view target, const Headers& headers,
                                            std::string body) = 0;
  // The answer's head at once, its body read piece by piece (HttpClient::open).
  virtual ClientResult<std::unique_ptr<ResponseReader>> open(boost::beast::http::verb method,
                                                             std::string_view target,
                                                             const Headers& headers) = 0;
  // A request whose body is pulled piece by piece (HttpClient::request_streamed).
  virtual ClientResult<ClientResponse> send_streamed(boost::beast::http::verb method,
                                                     std::string_view target,
                                                     const Headers& headers,
                                                     const BodyPull& pull) = 0;
  virtual void cancel() = 0;
};

// A Sender over an HttpClient of its own.
class RemoteSender : public Sender {
 public:
  RemoteSender(Url base, ClientOptions options) : client_(std::move(base), std::move(options)) {}
  ClientResult<ClientResponse> send(boost::beast::http::verb method, std::string_view target,
                                    const std::vector<std::pair<std::string, std::string>>& headers,
                                    std::string body) override {
    return client_.request(method, target, headers, std::move(body));
  }
  ClientResult<std::unique_ptr<ResponseReader>> open(boost::beast::http::verb method,
                                                     std::string_view target,
                                                     const Headers& headers) override {
    return client_.open(method, target, headers);
  }
  ClientResult<ClientResponse> send_streamed(boost::beast::http::verb method,
                                             std::string_view target, const Headers& headers,
                                             const BodyPull& pull) override {
    return client_.request_streamed(method, target, headers, pull);
  }
  void cancel() override { client_.cancel(); }

 private:
  HttpClient client_;
};

class CouchEndpoint : public core::replication::Endpoint {
 public:
  // `db_path`: the database's path on the server ("/db/" or "/prefix/db/"), percent-encoded,
  // ending in '/'. `headers`: sent with every request (credentials included). `display`: what
  // display() answers.
  CouchEndpoint(std::unique_ptr<Sender> sender, std::string db_path,
                std::vector<std::pair<std::string, std::string>> headers, std::string display);

  // The endpoint for a replication's "source" or "target" value (URL or object), over `sender`
  // (nullptr: a RemoteSender to the URL's server). 400 bad_request for a URL that cannot be used.
  static core::Outcome<std::unique_ptr<core::replication::Endpoint>> from_json(
      const core::replication::Json& endpoint, const ClientOptions& options,
      std::unique_ptr<Sender> sender);

  std::string display() const override { return display_; }
  core::Outcome<core::replication::Json> info() override;
  core::Outcome<core::replication::Json> create(const core::replication::Json& params) override;
  core::Outcome<std::optional<core::replication::Json>> get_local(std::string_view id) override;
  core::Outcome<core::replication::Json> put_local(std::string_view id,
                                                   const core::replication::Json& doc) override;
  core::Outcome<core::replication::Json> get_doc(std::string_view id) override;
  core::Outcome<core::replication::Json> put_doc(std::string_view id,
                                                 const core::replication::Json& doc) override;
  core::Outcome<core::replication::Json> changes(const core::replication::ChangesQuery& q) override;
  core::Outcome<core::replication::Json> revs_diff(const core::replication::Json& id_revs) override;
  core::Outcome<core::replication::Json> bulk_get(const core::replication::Json& docs,
                                                  bool use_bulk_get) override;
  core::Outcome<core::replication::Json> bulk_docs(const core::replication::Json& docs) override;
  core::Outcome<core::replication::Json> ensure_full_commit() override;
  core::Outcome<std::unique_ptr<BodyReader>> open_doc_with_attachments(
      std::string_view id, const core::replication::Json& rev,
      const core::replication::Json& atts_since, bool multipart) override;
  bool takes_encoded_multipart() override;
  core::Outcome<core::replication::Json> put_replicated(std::string_view id,
                                                        BodyReader& body) override;
  void cancel() override { sender_->cancel(); }

 private:
  core::Outcome<core::replication::Json> call(boost::beast::http::verb method,
                                              const std::string& target, std::string body);
  // The answer as it came (2xx), or the error it says.
  core::Outcome<ClientResponse> raw_call(
      boost::beast::http::verb method, const std::string& target, std::string body,
      const std::vector<std::pair<std::string, std::string>>& extra_headers);
  // open_revs of one document, as a _bulk_get result row.
  core::Outcome<core::replication::Json> open_revs(const core::replication::Json& entries);
  std::string doc_path(std::string_view id) const;

  // The largest revision body put_replicated sends whole instead of streaming it.
  static constexpr std::size_t kWholeBodyBytes = 4u << 20;

  std::unique_ptr<Sender> sender_;
  std::string db_path_;
  std::vector<std::pair<std::string, std::string>> headers_;
  std::string display_;
  bool bulk_get_missing_ = false;          // the server has no _bulk_get: open_revs from now on
  std::optional<bool> encoded_multipart_;  // takes_encoded_multipart(), once asked
};

}  // namespace chaise::http::client

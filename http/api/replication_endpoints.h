// http/api/replication_endpoints.h — where the replicator's endpoints come from on this server:
// a URL naming this server's own listener is answered by its router in process (no socket, no
// HTTP parsing; the request still authenticates with the credentials the replication gives), any
// other URL over HTTP(S) (http/client/).
//
// Contract: thread-safe once set_router() and set_listener() were called (before the first
// endpoint is opened); the Router must outlive every endpoint.
#pragma once

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/replication/endpoint.h"

namespace chaise::http {

class Router;

struct RemoteEndpointOptions {
  // [replicator] verify_ssl_certificates: check a remote server's certificate and name.
  bool verify_peer = false;
  // [replicator] ssl_trusted_certificates_file: the CA certificates to trust; empty: the system's.
  std::string ca_file;
};

class ReplicationEndpoints : public core::replication::EndpointFactory {
 public:
  explicit ReplicationEndpoints(RemoteEndpointOptions remote);
  // Joins the in-process io threads: after the scheduler stopped (no endpoint is in use).
  ~ReplicationEndpoints() override;

  // The router that answers this server's own URLs (the router holds the scheduler that holds
  // this factory, so it comes after construction).
  void set_router(const Router& router) { router_ = &router; }
  // The listener's address and ports once it listens (tls_port 0: none).
  void set_listener(std::string host, std::uint16_t port, std::uint16_t tls_port);
  // "http://host:port", the URL of this server (for _replicate's database names).
  std::string own_url() const;

  core::Outcome<std::unique_ptr<core::replication::Endpoint>> open(
      const core::replication::Json& endpoint, const Options& o) override;
  std::unique_ptr<core::replication::Endpoint> replicator_db(std::string_view db_name) override;

 private:
  bool is_self(std::string_view scheme, std::string_view host, std::uint16_t port) const;
  // Threads running the router for in-process requests.
  static constexpr int kIoThreads = 2;
  boost::asio::io_context ioc_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::vector<std::thread> threads_;
  const Router* router_ = nullptr;
  RemoteEndpointOptions remote_;
  // Set once the listener is up, while io threads may already read it.
  mutable std::mutex host_mu_;
  std::string host_;  // guarded by host_mu_
  std::atomic<std::uint16_t> port_{0};
  std::atomic<std::uint16_t> tls_port_{0};
};

}  // namespace chaise::http

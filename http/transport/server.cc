#include "http/transport/server.h"

#include <malloc.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <any>
#include <array>
#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream_base.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <cerrno>
#include <condition_variable>
#include <exception>
#include <future>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "http/transport/response_head.h"

namespace chaise::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

// After answering 413 the client may still be sending the body it was refused; closing a socket with
// unread input makes the kernel send RST, which can destroy the 413 before the client reads it. So
// read and discard for a short while first. Both bounds keep a hostile client from holding us.
constexpr std::chrono::milliseconds kLingerTimeout{1000};
constexpr std::size_t kLingerBytesMax = 4 * 1024 * 1024;

// Accept errors other than "acceptor closed" (e.g. EMFILE) are retried after this pause, so a
// persistent error does not spin a core.
constexpr std::chrono::milliseconds kAcceptErrorPause{100};

// The answer, with Retry-After, when the bytes of bodies in flight are over the server's limit.
core::CouchError too_many_bytes() {
  return core::err::service_unavailable("Too many request bytes in flight; retry later");
}

void log_coroutine_exception(const char* what, const std::exception_ptr& error) {
  if (!error) return;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    spdlog::error("http: {} ended with an exception: {}", what, e.what());
  } catch (...) {
    spdlog::error("http: {} ended with an unknown exception", what);
  }
}

// A connection's byte stream: plain TCP, or TLS over it ([ssl]). Timeouts, cancellation and the
// socket itself always belong to the TCP layer.
using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;
beast::tcp_stream& tcp_layer(PlainStream& stream) { return stream; }
beast::tcp_stream& tcp_layer(TlsStream& stream) { return stream.next_layer(); }

// Calls `closed` once the peer has closed (or reset) `socket`, unless `alive` expires first. A
// readable socket is checked with a non-consuming peek: end of stream means closed; bytes are a
// pipelined request (or a TLS record) left for the next read, and the watch ends; nothing at all
// (a wake-up with no data, seen on TLS connections) re-arms the watch.
void arm_peer_watch(tcp::socket& socket, std::weak_ptr<bool> alive, std::function<void()> closed) {
  socket.async_wait(
      tcp::socket::wait_read, [&socket, alive, closed = std::move(closed)](error_code ec) mutable {
        if (ec || alive.expired()) return;
        char byte = 0;
        const ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n > 0) return;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
          arm_peer_watch(socket, std::move(alive), std::move(closed));
          return;
        }
        closed();
      });
}

}  // namespace

class SessionBase;
template <typename Stream>
class Session;
struct BodyReservation;

struct Server::State {
  State(ServerOptions opts, Handler h) : options(std::move(opts)), handler(std::move(h)) {}

  const ServerOptions options;
  const Handler handler;
  std::uint16_t port = 0;

  // Guards everything below up to `ioc`. Sessions register here so stop() can reach them.
  std::mutex mutex;
  std::condition_variable threads_done;
  bool stopping = false;
  unsigned running_threads = 0;
  std::uint64_t next_session_id = 0;
  std::unordered_map<std::uint64_t, std::weak_ptr<SessionBase>> sessions;
  std::unordered_map<std::string, std::size_t> sessions_per_address;  // open sessions by peer
  // The refused-connection warning, rate-limited to one line a second.
  std::chrono::steady_clock::time_point last_refusal_warning{};
  std::uint64_t refused_since_warning = 0;
  // Read without the mutex on every request to decide keep-alive.
  std::atomic<bool> stopping_flag{false};
  // Bytes of request bodies reserved by the requests being read or handled.
  std::atomic<std::size_t> body_bytes_in_flight{0};

  // Serializes start() and stop() against each other.
  std::mutex lifecycle_mutex;
  bool started = false;
  bool stopped = false;
  std::vector<std::thread> threads;

  // One io_context per io thread, each run by its thread alone: a connection lives on one of them
  // (given out in turn as connections are accepted), so its handlers never need a strand and the
  // threads never hand work to each other. Created by start(); kept running by `guards` until
  // stop(). Declared last: destroying an io_context destroys abandoned sessions, whose destructors
  // use the members above.
  std::vector<std::unique_ptr<asio::io_context>> contexts;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards;
  std::atomic<std::size_t> next_context{0};
  std::optional<tcp::acceptor> acceptor;
  // The TLS listener and its context, when [ssl] enable is set.
  std::optional<asio::ssl::context> tls_context;
  std::optional<tcp::acceptor> tls_acceptor;
  std::uint16_t tls_port = 0;

  asio::awaitable<void> accept_loop(tcp::acceptor& listener, bool tls);
  void run_io_thread(asio::io_context& ioc);
};

// The bytes of request body one connection holds, counted against max_request_bytes_in_flight.
// Released when the request has been handled; a large release also hands freed heap back to the
// operating system (glibc keeps it otherwise: 60 MB bodies left RSS at 262 MB).
struct BodyReservation {
  BodyReservation(std::atomic<std::size_t>& in_flight, std::size_t limit)
      : in_flight(in_flight), limit(limit) {}
  ~BodyReservation() { release(); }
  BodyReservation(const BodyReservation&) = delete;
  BodyReservation& operator=(const BodyReservation&) = delete;

  // Adds `n` bytes; false (and nothing added) if that would pass the server's limit.
  bool add(std::size_t n) {
    std::size_t now = in_flight.load(std::memory_order_relaxed);
    do {
      if (now + n > limit) return false;
    } while (!in_flight.compare_exchange_weak(now, now + n, std::memory_order_relaxed));
    bytes += n;
    return true;
  }
  void release() {
    if (bytes == 0) return;
    in_flight.fetch_sub(bytes, std::memory_order_relaxed);
    // glibc's malloc keeps a large body's pages; jemalloc (the server's allocator unless built
    // with a sanitizer) returns them on its own, and glibc's trim then has nothing to do.
    if (bytes >= kTrimAfterBytes) ::malloc_trim(0);
    bytes = 0;
  }

  static constexpr std::size_t kTrimAfterBytes = 8 * 1024 * 1024;
  std::atomic<std::size_t>& in_flight;
  const std::size_t limit;
  std::size_t bytes = 0;
};

// The ResponseStream of one request: chunked transfer encoding over the session's stream.
template <typename Stream>
class StreamWriter final : public ResponseStream {
 public:
  StreamWriter(Session<Stream>& session, bool keep_alive)
      : session_(session), keep_alive_(keep_alive) {}

  asio::awaitable<bool> begin(Response head) override {
    co_return co_await on_connection_thread(do_begin(std::move(head)));
  }
  asio::awaitable<bool> write(std::string_view data) override {
    if (!ok_ || !begun_) co_return false;
    buffer_.append(data);
    if (buffer_.size() >= kFlushBytes) co_return co_await send_ahead();
    co_return true;
  }
  asio::awaitable<bool> flush() override {
    if (!ok_ || !begun_) co_return false;
    if (buffer_.empty() && !in_flight_.load(std::memory_order_acquire)) co_return true;
    co_return co_await on_connection_thread(send_chunk());
  }
  asio::awaitable<bool> finish() override { co_return co_await on_connection_thread(do_finish()); }
  bool begun() const override { return begun_; }
  void watch_peer(std::function<void()> closed) override;
  std::string peer_address() const override;
  bool secure() const override { return std::is_same_v<Stream, TlsStream>; }
  std::any* connection_memo() override { return &session_.memo(); }
  bool completed() const { return finished_ && ok_; }
  // A streamed request's body parser (ServerOptions::stream_body), set before the handler runs.
  void set_body_parser(beast_http::request_parser<beast_http::buffer_body>* parser,
                       std::chrono::steady_clock::time_point deadline) {
    body_parser_ = parser;
    body_deadline_ = deadline;
  }
  bool body_streamed() const override { return body_parser_ != nullptr; }
  asio::awaitable<std::optional<std::size_t>> read_body(std::string& out, std::size_t max) override;
  // False while a streamed body has bytes the handler did not read.
  bool body_complete() const { return body_parser_ == nullptr || body_parser_->is_done(); }
  // Ends the peer watch (the handler is done; the connection may read its next request).
  void stop_watching();
  // Waits until no chunk is being sent (the handler may return while one still is). On the
  // connection's io thread, before the writer goes away.
  asio::awaitable<void> settle() {
    if (in_flight_.load(std::memory_order_acquire)) co_await wait_flight();
  }

 private:
  // Socket work happens on the connection's io thread; a handler running on the worker pool
  // (http/transport/workers.h) hops there for it and back.
  template <typename T>
  asio::awaitable<T> on_connection_thread(asio::awaitable<T> work);
  asio::awaitable<std::optional<std::size_t>> do_read_body(std::string& out, std::size_t max);
  asio::awaitable<bool> do_begin(Response head);
  asio::awaitable<bool> do_finish();
  asio::awaitable<bool> send_chunk();
  // On the io thread: `data` as one HTTP chunk; false if the write failed or timed out.
  asio::awaitable<bool> write_chunk(const std::string& data);
  // A full buffer goes to the io thread to be sent while the handler produces the next one (a
  // handler on the worker pool no longer waits for its hop there, the socket and the hop back,
  // about a fifth of a _changes stream's time). One chunk at most is in flight: the next waits
  // for it, so a client that does not read still stalls its producer.
  asio::awaitable<bool> send_ahead();
  asio::awaitable<void> send_flight();
  // On the io thread: until the chunk in flight is sent; false if sending it failed.
  asio::awaitable<bool> wait_flight();

  Session<Stream>& session_;
  const bool keep_alive_;
  std::optional<Response> head_;
  std::string buffer_;
  // The chunk being sent: written by the handler's thread only while in_flight_ is false, read
  // by the io thread while it is true; flight_ok_ is the io thread's, published by the release
  // of in_flight_. flight_sent_ (io thread) wakes wait_flight.
  std::string flight_;
  std::atomic<bool> in_flight_{false};
  bool flight_ok_ = true;
  std::optional<asio::steady_timer> flight_sent_;
  bool begun_ = false;
  bool ok_ = true;
  bool finished_ = false;
  bool watching_ = false;
  std::shared_ptr<bool> watch_alive_ = std::make_shared<bool>(true);
  beast_http::request_parser<beast_http::buffer_body>* body_parser_ = nullptr;
  std::chrono::steady_clock::time_point body_deadline_;
  bool body_failed_ = false;
};

// What Server::State keeps of a connection, whatever its stream: enough to close it, and its
// place in the connection counts (given back when it ends).
class SessionBase {
 public:
  SessionBase(Server::State& state, std::uint64_t id, std::string address)
      : state_(state), id_(id), address_(std::move(address)) {}
  virtual ~SessionBase() {
    std::lock_guard lock(state_.mutex);
    state_.sessions.erase(id_);
    if (auto it = state_.sessions_per_address.find(address_);
        it != state_.sessions_per_address.end() && --it->second == 0) {
      state_.sessions_per_address.erase(it);
    }
  }
  SessionBase(const SessionBase&) = delete;
  SessionBase& operator=(const SessionBase&) = delete;

  virtual asio::any_io_executor executor() = 0;
  // Runs on the connection's io thread (posted by Server::stop). A connection waiting for a request
  // is closed now; one busy with a request finishes its response and then closes.
  virtual void request_close() = 0;

 protected:
  Server::State& state_;
  const std::uint64_t id_;
  const std::string address_;
};

// One connection over `Stream` (PlainStream or TlsStream). Lives as long as its coroutine (run()
// holds a shared_ptr); everything in it is touched only by the io thread running its io_context,
// the executor of its socket.
template <typename Stream>
class Session final : public SessionBase {
 public:
  friend class StreamWriter<Stream>;
  // PlainStream: `args` is the accepted socket; TlsStream: the socket and the TLS context.
  template <typename... Args>
  Session(Server::State& state, asio::io_context& context, std::uint64_t id, std::string address,
          Args&&... args)
      : SessionBase(state, id, std::move(address)),
        context_(context),
        stream_(std::forward<Args>(args)...) {}

  asio::any_io_executor executor() override { return stream_.get_executor(); }
  // The io_context the connection lives on, run by one io thread.
  asio::io_context& context() const { return context_; }
  // The peer's address as read when the connection was accepted (no getpeername per request).
  std::string remote_address() const { return address_; }
  // What the router keeps between this connection's requests (ResponseStream::connection_memo).
  std::any& memo() { return memo_; }

  static asio::awaitable<void> run(std::shared_ptr<Session> self) { co_await self->serve(); }

  void request_close() override {
    close_requested_ = true;
    if (phase_ == Phase::waiting_for_request) tcp_layer(stream_).cancel();
    // A handler that waits for the client (a live feed) ends now, as if the client had left.
    if (peer_closed_) std::exchange(peer_closed_, nullptr)();
  }

 private:
  enum class Phase { waiting_for_request, responding };

  asio::awaitable<void> serve();
  // `streamed` is set when the body is left for the handler (ServerOptions::stream_body).
  asio::awaitable<bool> read_request(beast_http::request_parser<beast_http::string_body>& parser,
                                     bool& streamed);
  // Answers an error the request cannot be read past (413, 431, 400, 501, 503), then closes.
  asio::awaitable<void> refuse(const Request& header, const core::CouchError& error,
                               bool retry_later = false);
  asio::awaitable<void> linger_and_close();
  // Writes a complete response: head and body in one sendmsg when the socket takes them at once
  // (the usual case), the rest asynchronously within write_timeout.
  asio::awaitable<error_code> write_response(const Response& response);
  // TLS: the handshake, within header_timeout. False: the connection is closed.
  asio::awaitable<bool> handshake();
  void close();
  beast::tcp_stream& transport() { return tcp_layer(stream_); }

  asio::io_context& context_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::size_t requests_read_ = 0;
  BodyReservation reservation_{state_.body_bytes_in_flight,
                               state_.options.max_request_bytes_in_flight};
  Phase phase_ = Phase::waiting_for_request;
  bool close_requested_ = false;
  std::function<void()> peer_closed_;  // set while a handler watches the peer (StreamWriter)
  std::any memo_;
};

template <typename Stream>
std::string StreamWriter<Stream>::peer_address() const {
  return session_.remote_address();
}

template <typename Stream>
asio::awaitable<bool> Session<Stream>::handshake() {
  if constexpr (std::is_same_v<Stream, TlsStream>) {
    error_code ec;
    transport().expires_after(std::min(state_.options.header_timeout, state_.options.idle_timeout));
    co_await stream_.async_handshake(asio::ssl::stream_base::server,
                                     asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      spdlog::debug("http: TLS handshake with {} failed: {}", address_, ec.message());
      close();
      co_return false;
    }
  }
  co_return true;
}

template <typename Stream>
asio::awaitable<void> Session<Stream>::serve() {
  const ServerOptions& options = state_.options;
  if (!co_await handshake()) co_return;
  if constexpr (std::is_same_v<Stream, PlainStream>) {
    // write_response's first attempt must not block the io thread.
    error_code ignored;
    transport().socket().non_blocking(true, ignored);
  }
  for (;;) {
    phase_ = Phase::waiting_for_request;
    reservation_.release();  // the previous request's body is gone
    if (close_requested_) break;

    beast_http::request_parser<beast_http::string_body> parser;
    parser.header_limit(
        static_cast<std::uint32_t>(std::min<std::size_t>(options.max_header_bytes, UINT32_MAX)));
    // No limit while the header is read (Beast would refuse a large Content-Length there, before
    // streaming is decided); read_request sets max_request_body_bytes for bodies read whole.
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    bool streamed = false;
    if (!co_await read_request(parser, streamed)) co_return;

    phase_ = Phase::responding;
    // A streamed body is parsed into the handler's buffers (buffer_body) as it pulls them.
    std::optional<beast_http::request_parser<beast_http::buffer_body>> body_parser;
    Request request;
    if (streamed) {
      request = Request(beast_http::request_header<>(parser.get().base()));
      body_parser.emplace(std::move(parser));
      body_parser->body_limit(std::numeric_limits<std::uint64_t>::max());
    } else {
      request = parser.release();
    }
    const bool keep_alive_allowed = request.keep_alive() && !close_requested_ &&
                                    !state_.stopping_flag.load(std::memory_order_relaxed);
    StreamWriter<Stream> writer(*this, keep_alive_allowed);
    if (body_parser) {
      // However fast the handler consumes it, the body must keep coming: at least 64 KiB/s
      // on average beyond idle_timeout.
      const auto length = body_parser->content_length().value_or(0);
      writer.set_body_parser(&*body_parser, std::chrono::steady_clock::now() +
                                                options.idle_timeout +
                                                std::chrono::seconds(length / (64 * 1024)));
    }
    std::optional<Response> response;
    bool handler_failed = false;
    // The handler's contract is not to throw (Router::handle catches); if one does anyway, the
    // connection is dropped rather than answered, because the handler's state is unknown.
    try {
      response = co_await state_.handler(request, writer);
    } catch (const std::exception& e) {
      spdlog::error("http: handler threw for {} {}: {}", std::string_view(request.method_string()),
                    std::string_view(request.target()), e.what());
      handler_failed = true;
    } catch (...) {
      spdlog::error("http: handler threw a non-exception");
      handler_failed = true;
    }
    co_await writer.settle();
    writer.stop_watching();
    // The handler is done with the body: give its bytes back now, before the answer goes out, so a
    // client that reads the answer and sends the next request already finds them free.
    request.body().clear();
    request.body().shrink_to_fit();
    reservation_.release();
    if (handler_failed) break;
    // A streamed body the handler did not read to its end cannot be skipped to the next request.
    const bool body_left = !writer.body_complete();
    if (!response) {
      // Streamed: the connection stays usable only if the whole body went out.
      spdlog::debug("http: {} {} -> streamed", std::string_view(request.method_string()),
                    std::string_view(request.target()));
      if (!writer.completed() || !keep_alive_allowed || body_left) break;
      continue;
    }
    const bool keep_alive = response->keep_alive() && keep_alive_allowed && !body_left;
    response->keep_alive(keep_alive);
    spdlog::debug("http: {} {} -> {}", std::string_view(request.method_string()),
                  std::string_view(request.target()), response->result_int());

    const error_code ec = co_await write_response(*response);
    if (!ec && body_left) {
      // Let the answer reach the client before its unread body makes the kernel reset.
      co_await linger_and_close();
      co_return;
    }
    if (ec || !keep_alive || response->need_eof()) break;
  }
  close();
}

// Reads one complete request into `parser`. Returns false when the connection is finished: the peer
// closed it, it timed out, it was cancelled by stop(), or the request could not be read past
// (answered, then closed): 413 body too large, 431 headers too large, 400 malformed, 501 a
// transfer coding other than chunked, 503 too many body bytes in flight.
template <typename Stream>
asio::awaitable<bool> Session<Stream>::read_request(
    beast_http::request_parser<beast_http::string_body>& parser, bool& streamed) {
  const ServerOptions& options = state_.options;
  error_code ec;
  // A new connection gets header_timeout to begin its first request; a keep-alive connection may
  // wait idle_timeout for its next one.
  transport().expires_after(requests_read_++ == 0
                                ? std::min(options.header_timeout, options.idle_timeout)
                                : options.idle_timeout);
  if (buffer_.size() == 0) {
    const std::size_t n = co_await stream_.async_read_some(
        buffer_.prepare(4096), asio::redirect_error(asio::use_awaitable, ec));
    buffer_.commit(n);
  }
  // Usually the whole header is in the buffer by now: parse it here, without an asynchronous
  // operation (Beast's read_header costs more instructions than the parsing).
  if (!ec) {
    error_code parse_ec;
    const std::size_t used = parser.put(buffer_.data(), parse_ec);
    buffer_.consume(used);
    if (parse_ec && parse_ec != beast_http::error::need_more) ec = parse_ec;
  }
  // From its first byte, the request line and headers must arrive within header_timeout, however
  // the client trickles them (slowloris).
  if (!ec && !parser.is_header_done()) {
    transport().expires_after(std::min(options.header_timeout, options.idle_timeout));
    co_await beast_http::async_read_header(stream_, buffer_, parser,
                                           asio::redirect_error(asio::use_awaitable, ec));
  }
  if (!ec) {
    // Beast reads "gzip, chunked" as chunked and would hand the handler gzip bytes as the body.
    const std::string_view coding = parser.get()[beast_http::field::transfer_encoding];
    if (!coding.empty() && !beast::iequals(coding, "chunked")) {
      co_await refuse(parser.get(),
                      core::err::not_implemented("Transfer-Encoding " + std::string(coding) +
                                                 " is not supported"));
      co_return false;
    }
    const auto length = parser.content_length();
    streamed = !parser.is_done() && (parser.chunked() || (length && *length > 0)) &&
               options.stream_body && options.stream_body(parser.get());
    if (!streamed) {
      parser.body_limit(options.max_request_body_bytes);
      if (length && *length > options.max_request_body_bytes) ec = beast_http::error::body_limit;
    }
  }
  if (!ec) {
    const auto length = parser.content_length();
    // The body's bytes count against the server-wide limit: all of a Content-Length up front,
    // chunked bodies as their chunks arrive.
    if (!streamed && length &&
        !reservation_.add(static_cast<std::size_t>(
            std::min<std::uint64_t>(*length, options.max_request_body_bytes)))) {
      co_await refuse(parser.get(), too_many_bytes(), true);
      co_return false;
    }
  }
  bool over_in_flight = false;
  // With this callback set, the parser leaves storing the chunk to it.
  auto on_chunk = [this, &parser, &over_in_flight](std::uint64_t, std::string_view data,
                                                   error_code& chunk_ec) -> std::size_t {
    if (!reservation_.add(data.size())) {
      over_in_flight = true;
      chunk_ec = beast_http::error::body_limit;
      return 0;
    }
    parser.get().body().append(data);
    return data.size();
  };
  parser.on_chunk_body(on_chunk);
  if (!ec && !parser.is_done() &&
      beast::iequals(parser.get()[beast_http::field::expect], "100-continue")) {
    // curl and others wait for this before sending a large body.
    phase_ = Phase::responding;
    beast_http::response<beast_http::empty_body> go_on{beast_http::status::continue_,
                                                       parser.get().version()};
    co_await beast_http::async_write(stream_, go_on, asio::redirect_error(asio::use_awaitable, ec));
    phase_ = Phase::waiting_for_request;
    if (!ec && close_requested_) ec = asio::error::operation_aborted;
  }
  if (!ec && streamed) co_return true;  // the handler reads the body
  // The body: each read must bring bytes within body_timeout, the whole within idle_timeout.
  const auto body_deadline = std::chrono::steady_clock::now() + options.idle_timeout;
  while (!ec && !parser.is_done()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        body_deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ec = beast::error::timeout;
      break;
    }
    transport().expires_after(std::min(options.body_timeout, left));
    co_await beast_http::async_read_some(stream_, buffer_, parser,
                                         asio::redirect_error(asio::use_awaitable, ec));
  }
  if (!ec) co_return true;

  if (over_in_flight) {
    co_await refuse(parser.get(), too_many_bytes(), true);
  } else if (ec == beast_http::error::body_limit) {
    co_await refuse(parser.get(), core::err::too_large());
  } else if (ec == beast_http::error::header_limit) {
    co_await refuse(parser.get(), core::err::header_fields_too_large());
  } else if (ec.category() == error_code(beast_http::error::body_limit).category() &&
             ec != beast_http::error::end_of_stream && ec != beast_http::error::partial_message) {
    // Malformed framing: say so once, then close (the rest of the stream cannot be trusted).
    co_await refuse(parser.get(),
                    core::err::bad_request("Malformed HTTP request: " + ec.message()));
  } else {
    if (ec != beast_http::error::end_of_stream && ec != asio::error::operation_aborted) {
      spdlog::debug("http: connection {} closed: {}", id_, ec.message());
    }
    close();
  }
  co_return false;
}

template <typename Stream>
asio::awaitable<void> Session<Stream>::refuse(const Request& header, const core::CouchError& error,
                                              bool retry_later) {
  phase_ = Phase::responding;
  Response response = error_response(header, error);
  if (retry_later) response.set(beast_http::field::retry_after, "1");
  response.keep_alive(false);
  co_await write_response(response);
  co_await linger_and_close();
}

template <typename Stream>
asio::awaitable<error_code> Session<Stream>::write_response(const Response& response) {
  const std::string head = response_head(response);
  const std::array<asio::const_buffer, 2> buffers{asio::buffer(head),
                                                  asio::buffer(response.body())};
  const std::size_t total = head.size() + response.body().size();
  std::size_t sent = 0;
  error_code ec;
  if constexpr (std::is_same_v<Stream, PlainStream>) {
    // The socket is non-blocking (serve() set it), so this never waits: it sends what the
    // kernel's buffer takes now.
    sent = transport().socket().write_some(buffers, ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) ec = {};
    if (ec || sent == total) co_return ec;
  }
  beast::buffers_suffix<std::array<asio::const_buffer, 2>> rest(buffers);
  rest.consume(sent);
  transport().expires_after(state_.options.write_timeout);
  co_await asio::async_write(stream_, rest, asio::redirect_error(asio::use_awaitable, ec));
  co_return ec;
}

template <typename Stream>
asio::awaitable<void> Session<Stream>::linger_and_close() {
  error_code ec;
  transport().socket().shutdown(tcp::socket::shutdown_send, ec);
  std::array<char, 64 * 1024> sink;
  std::size_t discarded = 0;
  transport().expires_after(kLingerTimeout);
  while (!ec && discarded < kLingerBytesMax) {
    discarded += co_await transport().async_read_some(
        asio::buffer(sink), asio::redirect_error(asio::use_awaitable, ec));
  }
  close();
}

template <typename Stream>
void Session<Stream>::close() {
  error_code ignored;
  transport().socket().shutdown(tcp::socket::shutdown_both, ignored);
  transport().socket().close(ignored);
}

template <typename Stream>
void StreamWriter<Stream>::watch_peer(std::function<void()> closed) {
  if (watching_) return;
  watching_ = true;
  session_.peer_closed_ = closed;  // shutdown ends the handler the same way
  if (session_.close_requested_) {
    std::exchange(session_.peer_closed_, nullptr)();
    return;
  }
  arm_peer_watch(session_.transport().socket(), watch_alive_, std::move(closed));
}

template <typename Stream>
void StreamWriter<Stream>::stop_watching() {
  if (!watching_) return;
  session_.peer_closed_ = nullptr;
  watch_alive_.reset();
  error_code ignored;
  session_.transport().socket().cancel(ignored);
  watching_ = false;
}

template <typename Stream>
template <typename T>
asio::awaitable<T> StreamWriter<Stream>::on_connection_thread(asio::awaitable<T> work) {
  if (session_.context().get_executor().running_in_this_thread()) {
    co_return co_await std::move(work);
  }
  co_return co_await asio::co_spawn(session_.executor(), std::move(work), asio::use_awaitable);
}

template <typename Stream>
asio::awaitable<std::optional<std::size_t>> StreamWriter<Stream>::read_body(std::string& out,
                                                                            std::size_t max) {
  co_return co_await on_connection_thread(do_read_body(out, max));
}

template <typename Stream>
asio::awaitable<std::optional<std::size_t>> StreamWriter<Stream>::do_read_body(std::string& out,
                                                                               std::size_t max) {
  if (body_parser_ == nullptr || body_failed_ || max == 0) co_return std::nullopt;
  if (body_parser_->is_done()) co_return std::size_t{0};
  const std::size_t old_size = out.size();
  out.resize(old_size + max);
  auto& body = body_parser_->get().body();
  body.data = out.data() + old_size;
  body.size = max;
  body.more = true;
  error_code ec;
  // Until some bytes arrive: each read within body_timeout, the whole body before its deadline.
  while (!ec && !body_parser_->is_done() && body.size == max) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        body_deadline_ - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ec = beast::error::timeout;
      break;
    }
    session_.transport().expires_after(std::min(session_.state_.options.body_timeout, left));
    co_await beast_http::async_read_some(session_.stream_, session_.buffer_, *body_parser_,
                                         asio::redirect_error(asio::use_awaitable, ec));
    if (ec == beast_http::error::need_buffer) ec = {};
  }
  const std::size_t got = max - body.size;
  body.data = nullptr;
  body.size = 0;
  out.resize(old_size + got);
  if (ec) {
    spdlog::debug("http: connection {}: streamed body ended: {}", session_.id_, ec.message());
    body_failed_ = true;
    co_return std::nullopt;
  }
  co_return got;
}

template <typename Stream>
asio::awaitable<bool> StreamWriter<Stream>::do_begin(Response head) {
  if (begun_) co_return false;
  begun_ = true;
  head_ = std::move(head);
  head_->body().clear();
  head_->keep_alive(keep_alive_);
  head_->chunked(true);
  beast_http::response_serializer<beast_http::string_body> serializer{*head_};
  error_code ec;
  session_.transport().expires_after(session_.state_.options.write_timeout);
  co_await beast_http::async_write_header(session_.stream_, serializer,
                                          asio::redirect_error(asio::use_awaitable, ec));
  ok_ = !ec;
  co_return ok_;
}

template <typename Stream>
asio::awaitable<bool> StreamWriter<Stream>::send_ahead() {
  // (Two statements: GCC 12 miscompiles a co_await on the right of &&.)
  bool sent = true;
  if (in_flight_.load(std::memory_order_acquire))
    sent = co_await on_connection_thread(wait_flight());
  if (!sent || !flight_ok_) {
    ok_ = false;
    co_return false;
  }
  flight_.swap(buffer_);  // the buffers trade their memory: no allocation per chunk
  buffer_.clear();
  in_flight_.store(true, std::memory_order_relaxed);
  asio::co_spawn(session_.executor(), send_flight(), asio::detached);
  co_return true;
}

template <typename Stream>
asio::awaitable<bool> StreamWriter<Stream>::write_chunk(const std::string& data) {
  error_code ec;
  session_.transport().expires_after(session_.state_.options.write_timeout);
  co_await asio::async_write(session_.stream_, beast_http::make_chunk(asio::buffer(data)),
                             asio::redirect_error(asio::use_awaitable, ec));
  co_return !ec;
}

template <typename Stream>
asio::awaitable<void> StreamWriter<Stream>::send_flight() {
  // (Through a local: GCC 12 miscompiles a co_await assigned straight to a member.)
  const bool sent = co_await write_chunk(flight_);
  flight_ok_ = sent;
  in_flight_.store(false, std::memory_order_release);
  if (flight_sent_) flight_sent_->cancel();
}

template <typename Stream>
asio::awaitable<bool> StreamWriter<Stream>::wait_flight() {
  // send_flight runs on this thread too: it cannot finish between the check and the wait.
  while (in_flight_.load(std::memory_order_acquire)) {
    if (!flight_sent_) flight_sent_.emplace(session_.executor());
    flight_sent_->expires_at(asio::steady_timer::time_point::max());
    error_code ignored;
    co_await flight_sent_->async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  }
  co_return flight_ok_;
}

template <typename Stream>
asio::awaitable<bool> StreamWriter<Stream>::send_chunk() {
  if (!co_await wait_flight()) {
    ok_ = false;
    co_return false;
  }
  if (buffer_.empty()) co_return true;
  const bool sent = co_await write_chunk(buffer_);
  buffer_.clear();
  ok_ = sent;
  co_return ok_;
}

template <typename Stream>
asio::awaitable<bool> StreamWriter<Stream>::do_finish() {
  if (!ok_ || !begun_ || finished_) co_return false;
  if (!co_await send_chunk()) co_return false;  // waits for a chunk in flight too
  error_code ec;
  session_.transport().expires_after(session_.state_.options.write_timeout);
  co_await asio::async_write(session_.stream_, beast_http::make_chunk_last(),
                             asio::redirect_error(asio::use_awaitable, ec));
  ok_ = !ec;
  finished_ = true;
  co_return ok_;
}

asio::awaitable<void> Server::State::accept_loop(tcp::acceptor& listener, bool tls) {
  for (;;) {
    asio::io_context& context =
        *contexts[next_context.fetch_add(1, std::memory_order_relaxed) % contexts.size()];
    tcp::socket socket{context};
    error_code ec;
    co_await listener.async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !listener.is_open()) co_return;
    if (ec) {
      spdlog::warn("http: accept failed: {}", ec.message());
      asio::steady_timer pause{listener.get_executor(), kAcceptErrorPause};
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }

    error_code peer_ec;
    const auto peer = socket.remote_endpoint(peer_ec);
    std::string address = peer_ec ? std::string() : peer.address().to_string();
    std::shared_ptr<SessionBase> session;
    std::optional<asio::awaitable<void>> serve;
    {
      std::lock_guard lock(mutex);
      if (stopping) co_return;  // `socket` closes as it goes out of scope
      std::size_t& from_address = sessions_per_address[address];
      const bool over_total = sessions.size() >= options.max_connections;
      if (over_total || from_address >= options.max_connections_per_address) {
        if (from_address == 0) sessions_per_address.erase(address);
        // At most one line a second, however fast connections are refused.
        ++refused_since_warning;
        const auto now = std::chrono::steady_clock::now();
        if (now - last_refusal_warning >= std::chrono::seconds(1)) {
          spdlog::warn(
              "http: {} connections open ({}); refused {} new one(s)", sessions.size(),
              over_total ? "max_connections" : "max_connections_per_address for " + address,
              refused_since_warning);
          refused_since_warning = 0;
          last_refusal_warning = now;
        }
        continue;
      }
      ++from_address;
      const std::uint64_t id = next_session_id++;
      if (tls) {
        auto typed = std::make_shared<Session<TlsStream>>(*this, context, id, std::move(address),
                                                          std::move(socket), *tls_context);
        serve.emplace(Session<TlsStream>::run(typed));
        session = std::move(typed);
      } else {
        auto typed = std::make_shared<Session<PlainStream>>(*this, context, id, std::move(address),
                                                            std::move(socket));
        serve.emplace(Session<PlainStream>::run(typed));
        session = std::move(typed);
      }
      sessions.emplace(id, session);
    }
    const auto executor = session->executor();
    session.reset();
    asio::co_spawn(executor, std::move(*serve),
                   [](const std::exception_ptr& e) { log_coroutine_exception("session", e); });
  }
}

void Server::State::run_io_thread(asio::io_context& ioc) {
  // Completion handlers do not throw (coroutine exceptions go to the co_spawn handlers), but if one
  // ever does, keep the thread serving rather than letting std::terminate take the process down.
  for (;;) {
    try {
      ioc.run();
      break;
    } catch (const std::exception& e) {
      spdlog::error("http: io thread caught: {}", e.what());
    } catch (...) {
      spdlog::error("http: io thread caught a non-exception");
    }
  }
  std::lock_guard lock(mutex);
  --running_threads;
  threads_done.notify_all();
}

Server::Server(ServerOptions options, Handler handler)
    : state_(std::make_unique<State>(std::move(options), std::move(handler))) {}

Server::~Server() { stop(); }

bool Server::probe(std::chrono::milliseconds within) const {
  // Every io thread must answer: a connection stuck behind a busy one would not be served.
  const auto deadline = std::chrono::steady_clock::now() + within;
  std::vector<std::future<void>> futures;
  for (const auto& context : state_->contexts) {
    auto answered = std::make_shared<std::promise<void>>();
    futures.push_back(answered->get_future());
    asio::post(*context, [answered] { answered->set_value(); });
  }
  for (auto& future : futures) {
    if (future.wait_until(deadline) != std::future_status::ready) return false;
  }
  return true;
}

std::size_t Server::open_connections() const {
  std::lock_guard lock(state_->mutex);
  return state_->sessions.size();
}

std::uint16_t Server::port() const { return state_->port; }

std::uint16_t Server::tls_port() const { return state_->tls_port; }

namespace {

// Opens, binds and listens; the OS-assigned port goes to `port`.
error_code listen_on(tcp::acceptor& acceptor, const tcp::endpoint& endpoint, int backlog,
                     std::uint16_t& port) {
  error_code ec;
  if (acceptor.open(endpoint.protocol(), ec)) return ec;
  if (acceptor.set_option(asio::socket_base::reuse_address(true), ec)) return ec;
  if (acceptor.bind(endpoint, ec)) return ec;
  if (acceptor.listen(backlog, ec)) return ec;
  port = acceptor.local_endpoint(ec).port();
  return ec;
}

// The server's TLS context: certificate chain and key (decrypted with `password`), TLS 1.2+,
// client certificates when asked for.
error_code make_tls_context(const TlsOptions& tls, std::optional<asio::ssl::context>& out) {
  using asio::ssl::context;
  error_code ec;
  out.emplace(context::tls_server);
  context& ctx = *out;
  ctx.set_options(context::default_workarounds | context::no_sslv2 | context::no_sslv3 |
                      context::no_tlsv1 | context::no_tlsv1_1 | context::single_dh_use,
                  ec);
  if (ec) return ec;
  if (!tls.password.empty()) {
    ctx.set_password_callback(
        [password = tls.password](std::size_t, context::password_purpose) { return password; });
  }
  if (ctx.use_certificate_chain_file(tls.cert_file, ec)) {
    spdlog::critical("[ssl] cert_file {}: {}", tls.cert_file, ec.message());
    return ec;
  }
  if (ctx.use_private_key_file(tls.key_file, context::pem, ec)) {
    spdlog::critical("[ssl] key_file {}: {}", tls.key_file, ec.message());
    return ec;
  }
  if (!tls.cacert_file.empty() && ctx.load_verify_file(tls.cacert_file, ec)) {
    spdlog::critical("[ssl] cacert_file {}: {}", tls.cacert_file, ec.message());
    return ec;
  }
  if (tls.verify_peer) {
    int mode = asio::ssl::verify_peer;
    if (tls.fail_if_no_peer_cert) mode |= asio::ssl::verify_fail_if_no_peer_cert;
    if (ctx.set_verify_mode(mode, ec)) return ec;
  }
  if (!tls.ciphers.empty() &&
      SSL_CTX_set_cipher_list(ctx.native_handle(), tls.ciphers.c_str()) != 1) {
    spdlog::critical("[ssl] ciphers: OpenSSL accepts none of '{}'", tls.ciphers);
    return asio::error::invalid_argument;
  }
  return {};
}

}  // namespace

error_code Server::start() {
  State& s = *state_;
  std::lock_guard lifecycle(s.lifecycle_mutex);
  if (s.started) return asio::error::already_started;

  error_code ec;
  const asio::ip::address address = asio::ip::make_address(s.options.bind_address, ec);
  if (ec) return ec;
  unsigned threads = s.options.io_threads;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  s.contexts.clear();
  s.guards.clear();
  for (unsigned i = 0; i < threads; ++i) {
    s.contexts.push_back(std::make_unique<asio::io_context>(1));
    s.guards.push_back(asio::make_work_guard(*s.contexts.back()));
  }
  asio::io_context& first = *s.contexts.front();
  s.acceptor.emplace(first);
  if ((ec = listen_on(*s.acceptor, {address, s.options.port}, s.options.listen_backlog, s.port))) {
    return ec;
  }
  if (s.options.tls) {
    if ((ec = make_tls_context(*s.options.tls, s.tls_context))) return ec;
    s.tls_acceptor.emplace(first);
    if ((ec = listen_on(*s.tls_acceptor, {address, s.options.tls->port}, s.options.listen_backlog,
                        s.tls_port))) {
      return ec;
    }
    asio::co_spawn(s.tls_acceptor->get_executor(), s.accept_loop(*s.tls_acceptor, true),
                   [](const std::exception_ptr& e) { log_coroutine_exception("TLS listener", e); });
  }
  asio::co_spawn(s.acceptor->get_executor(), s.accept_loop(*s.acceptor, false),
                 [](const std::exception_ptr& e) { log_coroutine_exception("listener", e); });

  {
    std::lock_guard lock(s.mutex);
    s.running_threads = threads;
  }
  s.threads.reserve(threads);
  for (unsigned i = 0; i < threads; ++i) {
    s.threads.emplace_back([&s, &context = *s.contexts[i]] { s.run_io_thread(context); });
  }
  s.started = true;
  spdlog::info("http: listening on {}:{} with {} io threads", s.options.bind_address, s.port,
               threads);
  if (s.options.tls) spdlog::info("http: TLS on {}:{}", s.options.bind_address, s.tls_port);
  return {};
}

void Server::stop() {
  State& s = *state_;
  std::lock_guard lifecycle(s.lifecycle_mutex);
  if (!s.started || s.stopped) return;
  s.stopped = true;

  std::vector<std::shared_ptr<SessionBase>> open;
  {
    std::lock_guard lock(s.mutex);
    s.stopping = true;
    s.stopping_flag.store(true, std::memory_order_relaxed);
    for (auto& [id, weak] : s.sessions) {
      if (auto session = weak.lock()) open.push_back(std::move(session));
    }
  }
  asio::post(s.acceptor->get_executor(), [&s] {
    error_code ignored;
    s.acceptor->close(ignored);
  });
  if (s.tls_acceptor) {
    asio::post(s.tls_acceptor->get_executor(), [&s] {
      error_code ignored;
      s.tls_acceptor->close(ignored);
    });
  }
  for (auto& session : open) {
    const auto executor = session->executor();
    asio::post(executor, [session = std::move(session)] { session->request_close(); });
  }
  open.clear();
  s.guards.clear();

  // The io threads leave run() by themselves once the listener and every session have finished.
  {
    std::unique_lock lock(s.mutex);
    if (!s.threads_done.wait_for(lock, s.options.shutdown_grace,
                                 [&s] { return s.running_threads == 0; })) {
      spdlog::warn("http: {} connections still busy after {} ms; abandoning them",
                   s.sessions.size(), s.options.shutdown_grace.count());
      for (const auto& context : s.contexts) context->stop();
    }
  }
  for (std::thread& thread : s.threads) thread.join();
  s.threads.clear();
  spdlog::info("http: stopped");
}

}  // namespace chaise::http

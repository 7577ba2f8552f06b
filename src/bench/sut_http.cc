#include "bench/sut_http.h"

#include <sys/resource.h>

#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "bench/http_failure.h"
#include "util/error.h"

namespace moeserve::bench {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

// Thousands of concurrent streams need as many sockets: raise the soft file limit to the hard one.
void raise_file_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

ConnectFailure connect_failure_kind(const beast::error_code& ec) {
  if (ec == net::error::connection_refused) return ConnectFailure::refused;
  if (ec == beast::error::timeout) return ConnectFailure::timed_out;
  return ConnectFailure::other;
}

void set_api_key(http::fields& fields, const std::string& key) {
  if (!key.empty()) fields.set(http::field::authorization, "Bearer " + key);
}

// A blocking GET for the few requests made before a run (the served model, its description). A failure to
// connect is an Error saying what is wrong.
std::pair<int, std::string> blocking_get(const HttpSutOptions& options, const HttpEndpoint& endpoint,
                                         const std::string& path) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.expires_after(std::chrono::milliseconds(static_cast<int64_t>(options.connect_timeout_seconds * 1000)));
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  stream.connect(resolver.resolve(endpoint.host, endpoint.port), ec);
  if (ec) fail("{}", connect_failure_text(endpoint, connect_failure_kind(ec), ec.message()));
  http::request<http::empty_body> request(http::verb::get, endpoint.base_path + path, 11);
  request.set(http::field::host, endpoint.host);
  set_api_key(request, options.api_key);
  http::write(stream, request);
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  http::read(stream, buffer, response);
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  return {response.result_int(), response.body()};
}

}  // namespace

class HttpSut::Impl {
 public:
  class Request;

  explicit Impl(HttpSutOptions o) : options(std::move(o)), endpoint(parse_endpoint(options.endpoint)) {
    path = request_path(options.api, endpoint);
  }

  void start(SampleObserver& o) {
    observer = &o;
    ioc.restart();  // a later run (--find-peak's probes) after stop() let run() return
    raise_file_limit();
    try {
      tcp::resolver resolver(ioc);
      endpoints = resolver.resolve(endpoint.host, endpoint.port);
    } catch (const std::exception& e) {
      fail("--endpoint {}: cannot resolve {}:{}: {}", options.endpoint, endpoint.host, endpoint.port, e.what());
    }
    describe_server();
    work.emplace(net::make_work_guard(ioc));
    for (int i = 0; i < std::max(1, options.io_threads); ++i) threads.emplace_back([this] { ioc.run(); });
  }

  // Asks the server what it serves, for the result's record and, without --served-model, for the OpenAI "model"
  // field. Failing that is only an error when the model is needed; otherwise the preflight request reports it.
  void describe_server() {
    const std::string info_path = options.api == HttpApi::openai ? "/v1/models" : "/get_model_info";
    const bool model_needed = options.api == HttpApi::openai && options.model.empty();
    std::string failure;
    try {
      auto [status, body] = blocking_get(options, endpoint, info_path);
      server_info = {{"path", info_path}, {"status", status}};
      server_info["response"] = nlohmann::json::parse(body, nullptr, false);
      if (server_info["response"].is_discarded()) server_info["response"] = body.substr(0, 2000);
      if (status != 200) failure = http_status_text(status, status_context(endpoint.base_path + info_path), body);
    } catch (const std::exception& e) {
      server_info = {{"path", info_path}, {"error", e.what()}};
      failure = e.what();
    }
    model = options.model;
    if (!model_needed) return;
    MOESERVE_CHECK(failure.empty(), "--endpoint {}: {}", options.endpoint, failure);
    const nlohmann::json& r = server_info.value("response", nlohmann::json());
    MOESERVE_CHECK(r.is_object() && r.contains("data") && r["data"].is_array() && !r["data"].empty() &&
                       r["data"][0].is_object() && r["data"][0].contains("id") && r["data"][0]["id"].is_string(),
                   "--endpoint {}: cannot learn the served model from {} ({}); pass --served-model", options.endpoint,
                   info_path, server_info.dump().substr(0, 500));
    model = r["data"][0]["id"].get<std::string>();
  }

  HttpStatusContext status_context(std::string request_path) const {
    return {std::move(request_path), options.api, !options.api_key.empty()};
  }

  void stop() {
    work.reset();
    for (auto& t : threads) t.join();
    threads.clear();
  }

  // Connections whose last response ended cleanly with keep-alive.
  std::unique_ptr<beast::tcp_stream> take_idle() {
    std::lock_guard lock(mutex);
    if (idle.empty()) return nullptr;
    auto stream = std::move(idle.back());
    idle.pop_back();
    return stream;
  }
  void give_back(std::unique_ptr<beast::tcp_stream> stream) {
    std::lock_guard lock(mutex);
    idle.push_back(std::move(stream));
  }

  HttpSutOptions options;
  HttpEndpoint endpoint;
  std::string path;
  std::string model;
  nlohmann::json server_info;
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  tcp::resolver::results_type endpoints;
  SampleObserver* observer = nullptr;
  std::mutex mutex;
  std::vector<std::unique_ptr<beast::tcp_stream>> idle;
  std::unordered_map<uint64_t, std::weak_ptr<Request>> active;
};

// One sample's request: connect (or reuse), write, read the streamed body, report. Every handler runs on the
// connection's strand.
class HttpSut::Impl::Request : public std::enable_shared_from_this<Request> {
 public:
  Request(Impl& impl, const SampleRequest& sample) : impl_(impl), sample_(sample), decoder_(impl.options.api) {
    request_ = http::request<http::string_body>(http::verb::post, impl.path, 11);
    request_.set(http::field::host, impl.endpoint.host);
    request_.set(http::field::content_type, "application/json");
    request_.set(http::field::accept, "text/event-stream");
    set_api_key(request_, impl.options.api_key);
    request_.keep_alive(true);
    request_.body() = request_body(impl.options.api, sample, impl.model);
    request_.prepare_payload();
  }

  // Takes an idle connection or makes one, registers for cancellation, and starts on the connection's strand.
  void start() {
    stream_ = impl_.take_idle();
    reused_ = stream_ != nullptr;
    executor_ = reused_ ? stream_->get_executor() : net::make_strand(impl_.ioc);
    if (!stream_) stream_ = std::make_unique<beast::tcp_stream>(executor_);
    {
      std::lock_guard lock(impl_.mutex);
      impl_.active[sample_.id] = weak_from_this();
    }
    net::dispatch(executor_, [self = shared_from_this()] { self->begin(); });
  }

  void cancel() {
    net::post(executor_, [self = shared_from_this()] {
      self->cancelled_ = true;
      beast::error_code ignored;
      if (self->stream_ && !self->reported_) self->stream_->socket().close(ignored);
    });
  }

 private:
  void begin() {
    if (reused_) return write();
    stream_->expires_after(
        std::chrono::milliseconds(static_cast<int64_t>(impl_.options.connect_timeout_seconds * 1000)));
    stream_->async_connect(impl_.endpoints, [self = shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
      if (self->cancelled_) return self->fail_with("cancelled");
      if (ec)
        return self->fail_with(connect_failure_text(self->impl_.endpoint, connect_failure_kind(ec), ec.message()));
      self->write();
    });
  }

  void write() {
    stream_->expires_never();
    http::async_write(*stream_, request_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->retry_or_fail("writing the request: " + ec.message());
      self->read_header();
    });
  }

  void read_header() {
    parser_.emplace();
    // Not boost::none: Boost 1.74's parser then refuses every body with a Content-Length (it compares the length
    // against the empty optional).
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    http::async_read_header(*stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->retry_or_fail("reading the response: " + ec.message());
      self->status_ = self->parser_->get().result_int();
      self->read_body();
    });
  }

  void read_body() {
    parser_->get().body().data = chunk_.data();
    parser_->get().body().size = chunk_.size();
    http::async_read_some(*stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->on_body(ec, Clock::now());
    });
  }

  void on_body(beast::error_code ec, TimePoint now) {
    if (ec == http::error::need_buffer) ec = {};
    const size_t used = chunk_.size() - parser_->get().body().size;
    if (used > 0 && !reported_) {
      const std::string_view bytes(chunk_.data(), used);
      if (status_ == 200) {
        const StreamDecoder::Update update = decoder_.feed(bytes);
        if (update.first_token) impl_.observer->on_first_token(sample_.id, update.first_token_id, now);
        // The sample ends at [DONE]; it is reported once the body's last bytes are read, so that its connection
        // is back in the pool before the bench issues the next sample (SingleStream).
        if (update.done && !done_at_) done_at_ = now;
      } else if (error_body_.size() < 2000) {
        error_body_.append(bytes);
      }
    }
    // A server may close the connection right after [DONE]; the sample was complete by then.
    if (ec && done_at_ && !cancelled_) return finish(*done_at_, false);
    if (ec) return fail_with(cancelled_ ? "cancelled" : "reading the stream: " + ec.message());
    if (parser_->is_done()) return finish(now, parser_->get().keep_alive());
    read_body();
  }

  void finish(TimePoint now, bool reusable) {
    if (reusable && !cancelled_) impl_.give_back(std::move(stream_));
    if (status_ == 200) {
      report(decoder_.finish(), done_at_.value_or(now));
    } else {
      SampleOutput out;
      out.error = http_status_text(status_, impl_.status_context(impl_.path), error_body_);
      report(std::move(out), now);
    }
  }

  // A reused keep-alive connection may have been closed by the server meanwhile: retry once on a new one.
  void retry_or_fail(const std::string& message) {
    if (reused_ && status_ == 0 && !cancelled_) {
      reused_ = false;
      stream_ = std::make_unique<beast::tcp_stream>(executor_);
      buffer_.clear();
      return begin();
    }
    fail_with(cancelled_ ? "cancelled" : message);
  }

  void fail_with(const std::string& message) {
    SampleOutput out = decoder_.finish();
    out.error = message;
    report(std::move(out), done_at_.value_or(Clock::now()));
  }

  void report(SampleOutput output, TimePoint time) {
    if (reported_) return;
    reported_ = true;
    {
      std::lock_guard lock(impl_.mutex);
      impl_.active.erase(sample_.id);
    }
    impl_.observer->on_complete(sample_.id, std::move(output), time);
  }

  Impl& impl_;
  SampleRequest sample_;
  StreamDecoder decoder_;
  http::request<http::string_body> request_;
  net::any_io_executor executor_;  // the connection's strand: every handler of this request runs on it
  std::unique_ptr<beast::tcp_stream> stream_;
  bool reused_ = false;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::buffer_body>> parser_;
  std::array<char, 16384> chunk_{};
  int status_ = 0;
  std::optional<TimePoint> done_at_;  // when [DONE] arrived
  std::string error_body_;
  bool cancelled_ = false;
  bool reported_ = false;
};

std::string resolve_api_key(const std::string& given) {
  if (!given.empty()) return given;
  const char* environment = std::getenv("OPENAI_API_KEY");
  return environment ? environment : "";
}

HttpSut::HttpSut(HttpSutOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

HttpSut::~HttpSut() { stop(); }

std::string HttpSut::name() const {
  return fmt::format("moeserve-http-{}({})", impl_->options.api == HttpApi::openai ? "openai" : "sglang",
                     impl_->options.endpoint);
}

nlohmann::json HttpSut::describe() const {
  return {{"kind", "http"},
          {"api", impl_->options.api == HttpApi::openai ? "openai /v1/completions" : "sglang /generate"},
          {"endpoint", impl_->options.endpoint},
          {"model", impl_->model},
          {"server", impl_->server_info}};
}

void HttpSut::start(SampleObserver& observer) { impl_->start(observer); }

void HttpSut::issue(std::span<const SampleRequest> samples) {
  for (const SampleRequest& sample : samples) {
    std::make_shared<Impl::Request>(*impl_, sample)->start();
  }
}

void HttpSut::cancel_all() {
  std::vector<std::shared_ptr<Impl::Request>> requests;
  {
    std::lock_guard lock(impl_->mutex);
    for (auto& [id, weak] : impl_->active)
      if (auto r = weak.lock()) requests.push_back(std::move(r));
  }
  for (auto& r : requests) r->cancel();
}

void HttpSut::stop() { impl_->stop(); }

}  // namespace moeserve::bench

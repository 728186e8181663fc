#include "server/coordinator.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/transport.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/metrics_interceptor.h"

namespace lockstep::server {

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(
    const CoordinatorOptions& options) {
  if (options.heartbeat_interval_ms <= 0) {
    return absl::InvalidArgumentError("heartbeat_interval_ms: must be > 0");
  }
  if (options.jobs.scheduler.lease_ms <= options.heartbeat_interval_ms) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease_ms: ", options.jobs.scheduler.lease_ms,
                     " must exceed heartbeat_interval_ms (",
                     options.heartbeat_interval_ms, ")"));
  }
  if (options.jobs.scheduler.max_attempts < 1 ||
      options.jobs.scheduler.max_attempts > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_attempts: ", options.jobs.scheduler.max_attempts,
                     " is outside 1..100"));
  }
  if (options.jobs.scheduler.finished_jobs_in_memory < 0 ||
      options.jobs.scheduler.finished_jobs_in_memory > 1000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("finished_jobs_in_memory: ",
                     options.jobs.scheduler.finished_jobs_in_memory,
                     " is outside 0..1000000"));
  }
  if (options.jobs.submission.model.max_runs < 1 ||
      options.jobs.submission.model.max_runs > 100000) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_runs: ", options.jobs.submission.model.max_runs,
                     " is outside 1..100000"));
  }
  if (options.jobs.scheduler.pinned_wait_ms <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pinned_wait_ms: ", options.jobs.scheduler.pinned_wait_ms,
                     " must be > 0"));
  }
  if (options.jobs.submission.max_fingerprints_per_job <= 0 ||
      options.jobs.submission.max_fingerprint_bytes_per_job <= 0) {
    return absl::InvalidArgumentError(
        "max_fingerprints_per_job, max_fingerprint_bytes_per_job: must be > 0");
  }
  if (options.heartbeat_timeout_ms <= options.heartbeat_interval_ms) {
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeat_timeout_ms: ", options.heartbeat_timeout_ms,
                     " must exceed heartbeat_interval_ms (",
                     options.heartbeat_interval_ms, ")"));
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("tls_cert, tls_key: set both or neither");
  }
  if (!options.worker_ca_file.empty() && options.tls_cert_file.empty()) {
    return absl::InvalidArgumentError(
        "worker_ca: client certificates need TLS; set tls_cert and tls_key");
  }
  std::shared_ptr<grpc::ServerCredentials> credentials =
      grpc::InsecureServerCredentials();
  if (!options.tls_cert_file.empty()) {
    grpc::SslServerCredentialsOptions ssl(
        GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    LS_ASSIGN_OR_RETURN(pair.cert_chain,
                        ReadPemFile(options.tls_cert_file, "tls_cert"));
    LS_ASSIGN_OR_RETURN(pair.private_key,
                        ReadPemFile(options.tls_key_file, "tls_key"));
    ssl.pem_key_cert_pairs.push_back(std::move(pair));
    if (!options.worker_ca_file.empty()) {
      LS_ASSIGN_OR_RETURN(ssl.pem_root_certs,
                          ReadPemFile(options.worker_ca_file, "worker_ca"));
      // Optional for the connection (CLI clients come without one); the
      // gateway refuses a worker stream that has none.
      ssl.client_certificate_request =
          GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    credentials = grpc::SslServerCredentials(ssl);
  }
  auto c = std::unique_ptr<Coordinator>(new Coordinator());
  c->options_ = options;
  c->options_.auth.require_worker_certificates =
      options.auth.require_worker_certificates ||
      !options.worker_ca_file.empty();
  LS_ASSIGN_OR_RETURN(c->store_, store::Store::Open(options.store));
  RegistryOptions ropts;
  ropts.heartbeat_timeout_ms = options.heartbeat_timeout_ms;
  c->registry_ =
      std::make_unique<WorkerRegistry>(c->store_.get(), ropts, SystemClockMs);
  c->jobs_ = std::make_unique<JobManager>(c->store_.get(), c->registry_.get(),
                                          options.jobs, SystemClockMs);
  c->registry_->SetListener(c->jobs_.get());
  // The audit manager hooks into job endings before recovery, so an audit
  // whose job is judged during recovery is finished too.
  c->audits_ = std::make_unique<AuditManager>(
      c->store_.get(), c->registry_.get(), c->jobs_.get(), options.zoo_dir,
      SystemClockMs, options.jobs.submission.model.max_runs);
  LS_RETURN_IF_ERROR(c->jobs_->Recover());
  LS_RETURN_IF_ERROR(c->audits_->Recover());
  c->auth_ = std::make_unique<Authorizer>(c->store_.get(), c->options_.auth,
                                          SystemClockMs);
  BlobStoreOptions bopts = options.blobs;
  if (bopts.dir.empty()) bopts.dir = DefaultBlobDir(options.store.path);
  if (bopts.dir.empty()) {
    // An in-memory database (tests): blobs as short-lived as it, in a
    // temporary folder removed at destruction.
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        absl::StrCat(tmp == nullptr ? "/tmp" : tmp, "/lockstep-blobs-XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::InternalError(
          absl::StrCat("cannot create a folder like ", pattern));
    }
    bopts.dir = c->temporary_blob_dir_ = pattern;
  }
  LS_ASSIGN_OR_RETURN(c->blobs_,
                      BlobStore::Open(bopts, c->store_.get(), SystemClockMs));
  c->lockstep_service_ = std::make_unique<LockstepService>(
      c->registry_.get(), c->jobs_.get(), c->audits_.get(), c->blobs_.get(),
      c->auth_.get(), SystemClockMs);
  GatewayOptions gopts;
  gopts.heartbeat_interval_ms = options.heartbeat_interval_ms;
  gopts.heartbeat_timeout_ms = options.heartbeat_timeout_ms;
  gopts.max_message_bytes = options.max_message_bytes;
  c->gateway_service_ = std::make_unique<WorkerGatewayService>(
      c->registry_.get(), c->jobs_.get(), c->blobs_.get(), c->auth_.get(),
      gopts);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address, credentials, &c->port_);
  builder.RegisterService(c->lockstep_service_.get());
  builder.RegisterService(c->gateway_service_.get());
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(std::make_unique<MetricsInterceptorFactory>());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  // Workers send keepalive pings every 20 s; accept them.
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  c->server_ = builder.BuildAndStart();
  if (c->server_ == nullptr || c->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen_address,
                     " (address in use, or not a valid host:port)"));
  }
  if (!options.http_listen.empty()) {
    HttpServerOptions hopts;
    hopts.listen_address = options.http_listen;
    hopts.tls_cert_file = options.tls_cert_file;
    hopts.tls_key_file = options.tls_key_file;
    LS_ASSIGN_OR_RETURN(
        c->http_, HttpServer::Start(hopts, c->store_.get(), c->registry_.get(),
                                    c->jobs_.get(), c->audits_.get(),
                                    c->auth_.get(), SystemClockMs));
    LS_LOG(INFO) << "HTTP (dashboard, /api/v1, /metrics) on port "
                 << c->http_->port();
  }
  c->sweeper_ = std::thread([raw = c.get()] { raw->SweepLoop(); });
  LS_LOG(INFO) << "coordinator listening on port " << c->port_ << " ("
               << (options.tls_cert_file.empty() ? "plaintext" : "TLS")
               << (options.worker_ca_file.empty() ? ""
                                                  : ", worker certificates")
               << ", "
               << (c->options_.auth.require_tokens ? "bearer tokens"
                                                   : "no tokens")
               << "), database " << options.store.path << " (schema v"
               << c->store_->schema_version() << ")";
  return c;
}

void Coordinator::SweepLoop() {
  const int64_t period =
      std::max<int64_t>(50, std::min(options_.heartbeat_timeout_ms,
                                     options_.jobs.scheduler.lease_ms) /
                                4);
  // Blobs are collected every blob_gc_interval_ms.
  const int64_t blob_period =
      std::max<int64_t>(50, options_.blob_gc_interval_ms);
  absl::Time next_blob_sweep = absl::Now() + absl::Milliseconds(blob_period);
  while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(period))) {
    registry_->Sweep();
    jobs_->Sweep();
    if (absl::Now() >= next_blob_sweep) {
      next_blob_sweep = absl::Now() + absl::Milliseconds(blob_period);
      absl::StatusOr<std::vector<store::BlobRecord>> gone = blobs_->Collect();
      if (!gone.ok()) {
        LS_LOG(WARNING) << "blob collection failed: " << gone.status();
      }
    }
  }
}

std::shared_ptr<grpc::Channel> Coordinator::InProcessChannel() {
  return server_->InProcessChannel(grpc::ChannelArguments());
}

void Coordinator::Shutdown() {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  stop_.Notify();
  if (sweeper_.joinable()) sweeper_.join();
  if (http_ != nullptr) http_->Stop();
  // Streams get up to 2 s to end; then they are cancelled.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
  // Messages still being handled on the gateway's store pool finish first.
  gateway_service_->Drain();
  // Batches queued for the store's committer are committed (or refused)
  // and answered while the scheduler and the sessions they answer live.
  store_->StopIngest();
  // Verdicts already queued are stored before the store closes.
  jobs_->Shutdown();
  LS_LOG(INFO) << "coordinator stopped";
}

Coordinator::~Coordinator() {
  Shutdown();
  // Also when Start failed half-way: no verdict may reach a destroyed
  // audit manager.
  if (jobs_ != nullptr) jobs_->Shutdown();
  if (!temporary_blob_dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(temporary_blob_dir_, ignored);
  }
}

}  // namespace lockstep::server

// The coordinator process: store, worker registry, gRPC services (public
// Lockstep API, WorkerGateway, reflection, health) and the liveness sweep.
//
//   auto c = Coordinator::Start(options);   // listening when this returns
//   c.value()->port();                      // the bound port (for port 0)
//   c.value()->Shutdown();                  // or destroy it
#ifndef LOCKSTEP_SERVER_COORDINATOR_H_
#define LOCKSTEP_SERVER_COORDINATOR_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_limits.h"
#include "grpcpp/grpcpp.h"
#include "server/audit_manager.h"
#include "server/auth.h"
#include "server/blob_store.h"
#include "server/gateway_service.h"
#include "server/http/http_server.h"
#include "server/job_manager.h"
#include "server/lockstep_service.h"
#include "server/store/store.h"
#include "server/worker_registry.h"

namespace lockstep::server {

struct CoordinatorOptions {
  // host:port to listen on; port 0 picks a free one. Default: all
  // interfaces on 7070.
  std::string listen_address = "0.0.0.0:7070";
  store::StoreOptions store;
  // Heartbeat interval asked of workers. Default 2 s.
  int64_t heartbeat_interval_ms = 2000;
  // A worker silent this long is marked gone. Default 10 s.
  int64_t heartbeat_timeout_ms = 10000;
  // Largest message accepted from workers and clients, bytes; a larger one
  // is refused with RESOURCE_EXHAUSTED. Default kDefaultMaxMessageBytes
  // (16 MiB).
  int max_message_bytes = kDefaultMaxMessageBytes;
  // Scheduling: run leases, retries, pinned waits, limits.
  JobManagerOptions jobs;
  // Folder of the model zoo, whose models are the audit workloads.
  std::string zoo_dir = "examples";
  // host:port of the HTTP listener (health, metrics, JSON API, dashboard);
  // empty: none. Port 0 picks a free one.
  std::string http_listen;
  // TLS: PEM certificate chain and key of the gRPC listener; both or
  // neither. Empty: plaintext.
  std::string tls_cert_file;
  std::string tls_key_file;
  // PEM CA that signs worker certificates; needs TLS. Set: every
  // WorkerGateway stream must present a certificate it verifies, and the
  // worker's name must be the certificate's CN or a SAN (auth's
  // require_worker_certificates is then implied). Other clients may
  // present a certificate too (verified against it); they are authorised
  // by token alone.
  std::string worker_ca_file;
  // Bearer tokens (require_tokens) and worker certificates.
  AuthOptions auth;
  // The blob store (models' initial parameters): folder, limits, grace.
  // An empty dir means the database path + ".blobs" (for ":memory:", a
  // temporary folder removed with the coordinator).
  BlobStoreOptions blobs;
  // How often unreferenced blobs past their grace period are deleted.
  // Default 10 minutes.
  int64_t blob_gc_interval_ms = 10 * 60 * 1000;
};

class Coordinator {
 public:
  static absl::StatusOr<std::unique_ptr<Coordinator>> Start(
      const CoordinatorOptions& options);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  int port() const { return port_; }
  // The HTTP listener's bound port; 0 without one.
  int http_port() const { return http_ == nullptr ? 0 : http_->port(); }
  // Stops accepting calls, ends streams (waiting at most a few seconds for
  // them) and closes the store. Idempotent.
  void Shutdown();

  // For in-process tests.
  std::shared_ptr<grpc::Channel> InProcessChannel();
  WorkerRegistry* registry() { return registry_.get(); }
  JobManager* jobs() { return jobs_.get(); }
  store::Store* store() { return store_.get(); }
  const Authorizer* authorizer() const { return auth_.get(); }
  BlobStore* blobs() { return blobs_.get(); }

 private:
  Coordinator() = default;
  void SweepLoop();

  CoordinatorOptions options_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<AuditManager> audits_;
  std::unique_ptr<Authorizer> auth_;
  std::unique_ptr<BlobStore> blobs_;
  std::unique_ptr<LockstepService> lockstep_service_;
  std::unique_ptr<WorkerGatewayService> gateway_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpServer> http_;
  int port_ = 0;
  absl::Notification stop_;
  std::thread sweeper_;
  bool shut_down_ = false;
  // The blob folder of an in-memory database, removed at destruction.
  std::string temporary_blob_dir_;
};

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_COORDINATOR_H_

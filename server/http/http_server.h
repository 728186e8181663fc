// The coordinator's HTTP listener (--http_listen): health and readiness,
// Prometheus metrics, a read-only JSON API under /api/v1/ and the web
// dashboard, whose static assets are compiled into the binary.
//
//   GET /healthz                          200 "ok" while the process serves
//   GET /readyz                           200 once the store answers reads
//   GET /metrics                          Prometheus text format 0.0.4
//   GET /api/v1/jobs                      ListJobs (paging and filters)
//   GET /api/v1/jobs/{id}                 GetJob
//   GET /api/v1/jobs/{id}/report          GetReport
//   GET /api/v1/jobs/{id}/divergence_map  differing tensors per step and
//                                         (layer, phase) of two runs
//   GET /api/v1/jobs/{id}/loss            loss per step of each run
//   GET /api/v1/compare?run_a=&run_b=     CompareRuns
//   GET /api/v1/certificates[/{id}]       ListCertificates, GetCertificate
//   GET /api/v1/workers                   ListWorkers
//   GET /api/v1/workers/{id}/history      a worker's newest health events
//   GET /api/v1/audits[/{id}]             ListAudits, GetAudit
//   GET /api/v1/admin_log?limit=          the admin log, newest first
//                                         (admin role)
//   GET /  /app.js  /style.css            the dashboard
//
// With bearer tokens on (AuthOptions::require_tokens) every /api/v1/ route
// needs `Authorization: Bearer TOKEN` of a viewer or above (401 without a
// valid token, 403 for a role below the route's); /healthz, /readyz,
// /metrics and the dashboard's static files stay open (they carry no job,
// worker or audit data; the dashboard asks for a token on a 401). With
// tls_cert_file and tls_key_file the listener speaks HTTPS.
//
// Protobuf answers are rendered with protobuf's JSON mapping and come from
// the same code the gRPC service calls. Nothing here writes to the store.
// Every answer is bounded (page sizes, step limits), a fixed pool of
// threads serves connections, and a client that stops reading is cut off
// by the write timeout, so a slow browser cannot grow the coordinator's
// memory. A bad query parameter gets 400 naming the parameter and its
// limit.
#ifndef LOCKSTEP_SERVER_HTTP_HTTP_SERVER_H_
#define LOCKSTEP_SERVER_HTTP_HTTP_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "server/audit_manager.h"
#include "server/auth.h"
#include "server/job_manager.h"
#include "server/store/store.h"
#include "server/worker_registry.h"

namespace httplib {
class Server;
}

namespace lockstep::server {

struct HttpServerOptions {
  // host:port; port 0 picks a free one.
  std::string listen_address;
  // Threads serving connections (one per open connection).
  int threads = 8;
  // A connection that neither sends nor reads for this long is closed.
  int io_timeout_s = 10;
  // An idle keep-alive connection is closed after this long, freeing its
  // thread.
  int keep_alive_s = 2;
  // PEM certificate chain and key: HTTPS. Empty: plain HTTP.
  std::string tls_cert_file;
  std::string tls_key_file;
};

class HttpServer {
 public:
  // Everything must outlive the server.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const HttpServerOptions& options, store::Store* store,
      WorkerRegistry* registry, JobManager* jobs, AuditManager* audits,
      const Authorizer* auth, Clock clock);
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  // Stops listening and waits for the serving thread. Idempotent.
  void Stop();

  // The whole /metrics page (counters, histograms and the gauges read now).
  std::string RenderMetrics();

 private:
  HttpServer() = default;
  void Routes();

  store::Store* store_ = nullptr;
  WorkerRegistry* registry_ = nullptr;
  JobManager* jobs_ = nullptr;
  AuditManager* audits_ = nullptr;
  const Authorizer* auth_ = nullptr;
  Clock clock_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_HTTP_HTTP_SERVER_H_

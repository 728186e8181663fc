// lockstep.v1.WorkerGateway: one bidirectional stream per worker session.
#ifndef LOCKSTEP_SERVER_GATEWAY_SERVICE_H_
#define LOCKSTEP_SERVER_GATEWAY_SERVICE_H_

#include <cstdint>

#include "lockstep/v1/worker_gateway.grpc.pb.h"
#include "server/job_manager.h"
#include "server/worker_registry.h"

namespace lockstep::server {

struct GatewayOptions {
  // Interval the coordinator asks workers to heartbeat at. Default 2 s.
  int64_t heartbeat_interval_ms = 2000;
  // Reported to workers; enforced by the registry's sweep. Default 10 s.
  int64_t heartbeat_timeout_ms = 10000;
  // Worker messages larger than this are refused by gRPC. Default 64 MiB.
  int max_message_bytes = 64 << 20;
};

class WorkerGatewayService final
    : public lockstep::v1::WorkerGateway::CallbackService {
 public:
  // `registry` and `jobs` must outlive the service.
  WorkerGatewayService(WorkerRegistry* registry, JobManager* jobs,
                       GatewayOptions options)
      : registry_(registry), jobs_(jobs), options_(options) {}

  grpc::ServerBidiReactor<lockstep::v1::WorkerMessage,
                          lockstep::v1::CoordinatorMessage>*
  Connect(grpc::CallbackServerContext* context) override;

 private:
  WorkerRegistry* const registry_;
  JobManager* const jobs_;
  const GatewayOptions options_;
};

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_GATEWAY_SERVICE_H_

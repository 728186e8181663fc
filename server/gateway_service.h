// lockstep.v1.WorkerGateway: one bidirectional stream per worker session.
//
// Every message is checked before anything else sees it (message_checks.h):
// one carrying a field this coordinator does not know is refused with
// INVALID_ARGUMENT naming the field; a batch or run result over its limits
// (or with unknown fields) is answered with `rejected` and the stream stays
// open; a bad hello, heartbeat or progress ends the stream with
// INVALID_ARGUMENT naming the field and the limit.
#ifndef LOCKSTEP_SERVER_GATEWAY_SERVICE_H_
#define LOCKSTEP_SERVER_GATEWAY_SERVICE_H_

#include <cstdint>

#include "common/grpc_limits.h"
#include "lockstep/v1/worker_gateway.grpc.pb.h"
#include "server/job_manager.h"
#include "server/worker_registry.h"

namespace lockstep::server {

struct GatewayOptions {
  // Interval the coordinator asks workers to heartbeat at. Default 2 s.
  int64_t heartbeat_interval_ms = 2000;
  // Reported to workers; enforced by the registry's sweep. Default 10 s.
  int64_t heartbeat_timeout_ms = 10000;
  // Worker messages larger than this are refused by gRPC
  // (RESOURCE_EXHAUSTED naming both sizes). Default 16 MiB: a batch at
  // kMaxFingerprintsPerBatch is about 4 MiB.
  int max_message_bytes = kDefaultMaxMessageBytes;
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

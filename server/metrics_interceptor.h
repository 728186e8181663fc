// A gRPC server interceptor that counts every call by method and status
// code and records the latency of unary calls (lockstep_rpcs_total,
// lockstep_rpc_latency_seconds in GlobalMetrics()).
#ifndef LOCKSTEP_SERVER_METRICS_INTERCEPTOR_H_
#define LOCKSTEP_SERVER_METRICS_INTERCEPTOR_H_

#include <string>

#include "grpcpp/support/server_interceptor.h"

namespace lockstep::server {

class MetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;
};

// "OK", "INVALID_ARGUMENT", ... for a gRPC status code.
std::string GrpcCodeName(int code);

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_METRICS_INTERCEPTOR_H_

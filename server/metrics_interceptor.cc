#include "server/metrics_interceptor.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/metrics.h"

namespace lockstep::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

class MetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit MetricsInterceptor(grpc::experimental::ServerRpcInfo* info)
      : method_(info->method() == nullptr ? "unknown" : info->method()),
        unary_(info->type() == grpc::experimental::ServerRpcInfo::Type::UNARY),
        start_(absl::Now()) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      Metrics& m = GlobalMetrics();
      m.rpcs.Add({method_, GrpcCodeName(status.error_code())});
      if (unary_) {
        m.rpc_latency.Observe({method_},
                              absl::ToDoubleSeconds(absl::Now() - start_));
      }
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  const bool unary_;
  const absl::Time start_;
};

}  // namespace

std::string GrpcCodeName(int code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  if (code >= 0 && code < static_cast<int>(sizeof(kNames) / sizeof(*kNames))) {
    return kNames[code];
  }
  return absl::StrCat("CODE_", code);
}

grpc::experimental::Interceptor*
MetricsInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new MetricsInterceptor(info);
}

}  // namespace lockstep::server

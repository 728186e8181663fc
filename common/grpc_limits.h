// Message-size limits shared by every gRPC endpoint of Lockstep: the
// coordinator's server, the worker daemon's channel and the CLI's channel.
#ifndef LOCKSTEP_COMMON_GRPC_LIMITS_H_
#define LOCKSTEP_COMMON_GRPC_LIMITS_H_

namespace lockstep {

// Default largest gRPC message, in bytes, sent or received (16 MiB). Above
// any legal fingerprint batch, job spec or report page.
inline constexpr int kDefaultMaxMessageBytes = 16 << 20;
// Bounds of a --max_message_bytes flag, in bytes.
inline constexpr int kMinMaxMessageBytes = 1024;
inline constexpr int kMaxMaxMessageBytes = 256 << 20;

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_GRPC_LIMITS_H_

// Length-delimited protobuf frames over a file descriptor: a 4-byte
// little-endian length, then the serialized message. The pipe protocol
// between the worker daemon and its run processes.
#ifndef LOCKSTEP_WORKER_FRAMES_H_
#define LOCKSTEP_WORKER_FRAMES_H_

#include <cstdint>

#include "absl/status/status.h"
#include "google/protobuf/message_lite.h"

namespace lockstep::worker {

// Largest frame accepted (a fingerprint batch of a big model fits easily).
inline constexpr uint32_t kMaxFrameBytes = 256u << 20;

// Writes one frame, retrying short writes and EINTR.
absl::Status WriteFrame(int fd, const google::protobuf::MessageLite& m);
// Reads one frame into `m`. NOT_FOUND at a clean end of stream (no bytes),
// DATA_LOSS for a truncated or oversized frame or one that does not parse.
absl::Status ReadFrame(int fd, google::protobuf::MessageLite* m);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_FRAMES_H_

#include "worker/frames.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace lockstep::worker {
namespace {

absl::Status WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(
          absl::StrCat("write to pipe: ", std::strerror(errno)));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

// Reads exactly n bytes; returns the count read before EOF.
absl::StatusOr<size_t> ReadAll(int fd, char* p, size_t n) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, p + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(
          absl::StrCat("read from pipe: ", std::strerror(errno)));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

}  // namespace

absl::Status WriteFrame(int fd, const google::protobuf::MessageLite& m) {
  std::string body;
  if (!m.SerializeToString(&body)) {
    return absl::InternalError("frame does not serialize");
  }
  if (body.size() > kMaxFrameBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("frame of ", body.size(), " bytes exceeds the limit of ",
                     kMaxFrameBytes));
  }
  const uint32_t n = static_cast<uint32_t>(body.size());
  const char header[4] = {
      static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
      static_cast<char>((n >> 16) & 0xff), static_cast<char>((n >> 24) & 0xff)};
  absl::Status s = WriteAll(fd, header, 4);
  if (!s.ok()) return s;
  return WriteAll(fd, body.data(), body.size());
}

absl::Status ReadFrame(int fd, google::protobuf::MessageLite* m) {
  unsigned char header[4];
  absl::StatusOr<size_t> got = ReadAll(fd, reinterpret_cast<char*>(header), 4);
  if (!got.ok()) return got.status();
  if (*got == 0) return absl::NotFoundError("end of stream");
  if (*got < 4) return absl::DataLossError("truncated frame header");
  const uint32_t n = header[0] | (header[1] << 8) | (header[2] << 16) |
                     (static_cast<uint32_t>(header[3]) << 24);
  if (n > kMaxFrameBytes) {
    return absl::DataLossError(absl::StrCat(
        "frame of ", n, " bytes exceeds the limit of ", kMaxFrameBytes));
  }
  std::string body(n, '\0');
  got = ReadAll(fd, body.data(), n);
  if (!got.ok()) return got.status();
  if (*got < n) return absl::DataLossError("truncated frame");
  if (!m->ParseFromString(body)) {
    return absl::DataLossError("frame does not parse");
  }
  return absl::OkStatus();
}

}  // namespace lockstep::worker

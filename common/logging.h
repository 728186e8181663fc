// Minimal leveled logging to stderr (Debian's abseil 20220623 has no
// absl/log). One line per message: "I 2026-11-22T01:02:03.456Z file.cc:42]
// text".
//
//   LS_LOG(INFO) << "listening on " << address;
//
// Thread-safe: each message is written with a single write(2).
#ifndef LOCKSTEP_COMMON_LOGGING_H_
#define LOCKSTEP_COMMON_LOGGING_H_

#include <sstream>

namespace lockstep {

enum class LogSeverity { kInfo, kWarning, kError };

// Messages below this severity are dropped (default kInfo).
void SetMinLogSeverity(LogSeverity severity);

class LogMessage {
 public:
  LogMessage(LogSeverity severity, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;

  std::ostream& stream() { return stream_; }

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};

}  // namespace lockstep

#define LS_LOG_SEVERITY_INFO ::lockstep::LogSeverity::kInfo
#define LS_LOG_SEVERITY_WARNING ::lockstep::LogSeverity::kWarning
#define LS_LOG_SEVERITY_ERROR ::lockstep::LogSeverity::kError
#define LS_LOG(severity)                                                 \
  ::lockstep::LogMessage(LS_LOG_SEVERITY_##severity, __FILE__, __LINE__) \
      .stream()

#endif  // LOCKSTEP_COMMON_LOGGING_H_

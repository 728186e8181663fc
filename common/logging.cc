#include "common/logging.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace lockstep {
namespace {

std::atomic<int> min_severity{static_cast<int>(LogSeverity::kInfo)};

const char* Basename(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

}  // namespace

void SetMinLogSeverity(LogSeverity severity) {
  min_severity.store(static_cast<int>(severity));
}

LogMessage::LogMessage(LogSeverity severity, const char* file, int line)
    : severity_(severity) {
  static constexpr char kLetters[] = {'I', 'W', 'E'};
  stream_ << kLetters[static_cast<int>(severity)] << ' '
          << absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(),
                              absl::UTCTimeZone())
          << ' ' << Basename(file) << ':' << line << "] ";
}

LogMessage::~LogMessage() {
  if (static_cast<int>(severity_) < min_severity.load()) return;
  stream_ << '\n';
  const std::string text = stream_.str();
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n =
        ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

}  // namespace lockstep

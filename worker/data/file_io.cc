#include "worker/data/file_io.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace lockstep::worker {
namespace {

// Bytes handed to `on_chunk` (and requested from read()) at a time.
constexpr int64_t kChunkBytes = int64_t{1} << 20;

std::atomic<uint64_t> tmp_counter{0};

std::string ErrnoText(int err) { return std::strerror(err); }

absl::Status OpenError(absl::string_view what, int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(absl::StrCat(what, ": no such file"));
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(
          absl::StrCat(what, ": cannot open for reading: ", ErrnoText(err)));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": cannot open: ", ErrnoText(err)));
  }
}

// Whether `path` (canonical) is `root` (canonical) or inside it.
bool IsUnder(absl::string_view path, absl::string_view root) {
  if (root == "/") return absl::StartsWith(path, "/");
  return absl::StartsWith(path, root) &&
         (path.size() == root.size() || path[root.size()] == '/');
}

// Reads the open file `fd` whole (see ReadWholeFile); does not close it.
absl::StatusOr<std::string> ReadOpenFile(
    int fd, absl::string_view what, int64_t max_bytes,
    const std::function<void(absl::string_view)>& on_chunk) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::DataLossError(
        absl::StrCat(what, ": cannot stat: ", ErrnoText(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": not a regular file"));
  }
  const int64_t size = static_cast<int64_t>(st.st_size);
  if (size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": file is ", size,
                                                   " bytes, over the limit of ",
                                                   max_bytes, " bytes"));
  }

  std::string bytes;
  bytes.resize(static_cast<size_t>(size));
  int64_t done = 0;
  while (done < size) {
    const int64_t want = std::min(kChunkBytes, size - done);
    const ssize_t got = ::read(fd, &bytes[done], static_cast<size_t>(want));
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::DataLossError(absl::StrCat(what, ": read failed at byte ",
                                              done, ": ", ErrnoText(errno)));
    }
    if (got == 0) {
      return absl::DataLossError(
          absl::StrCat(what, ": file shrank while being read: expected ", size,
                       " bytes, got ", done));
    }
    if (on_chunk) on_chunk(absl::string_view(&bytes[done], got));
    done += got;
  }
  // The file must end where fstat said it does.
  char extra;
  ssize_t got;
  do {
    got = ::read(fd, &extra, 1);
  } while (got < 0 && errno == EINTR);
  if (got != 0) {
    return absl::DataLossError(absl::StrCat(
        what, ": file grew while being read (size was ", size, " bytes)"));
  }
  return bytes;
}

}  // namespace

std::string QuotedPath(absl::string_view path) {
  return absl::StrCat("\"", path, "\"");
}

absl::StatusOr<std::string> ReadWholeFile(
    const std::string& path, absl::string_view what, int64_t max_bytes,
    const std::function<void(absl::string_view)>& on_chunk) {
  if (path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": path is empty"));
  }
  int fd;
  do {
    // O_NONBLOCK: opening a FIFO must not wait for a writer; the file type
    // is checked before any read.
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return OpenError(what, errno);
  absl::Cleanup closer = [fd] { ::close(fd); };
  return ReadOpenFile(fd, what, max_bytes, on_chunk);
}

absl::StatusOr<std::string> CanonicalDataRoot(const std::string& root,
                                              absl::string_view flag) {
  if (root.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " is empty"));
  }
  if (root[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " ", QuotedPath(root), ": must be an absolute path"));
  }
  char resolved[PATH_MAX];
  if (::realpath(root.c_str(), resolved) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " ", QuotedPath(root), ": cannot resolve: ", ErrnoText(errno)));
  }
  struct stat st;
  if (::stat(resolved, &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", QuotedPath(root), ": not a directory"));
  }
  return std::string(resolved);
}

absl::StatusOr<std::string> ReadFileUnderRoot(
    const std::string& root, const std::string& path, absl::string_view what,
    int64_t max_bytes, const std::function<void(absl::string_view)>& on_chunk) {
  if (root.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        what,
        ": file datasets are disabled on this worker; start it with "
        "--data_root=DIR and keep dataset files under DIR"));
  }
  if (path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": path is empty"));
  }
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "..") {
      return absl::InvalidArgumentError(absl::StrCat(
          what,
          ": must not contain a \"..\" component (paths stay under "
          "the worker's --data_root)"));
    }
  }
  const std::string full =
      path[0] == '/' ? path : absl::StrCat(root, "/", path);
  const std::string outside = absl::StrCat(
      what, ": is outside the worker's --data_root ", QuotedPath(root),
      " (dataset files must lie under it, symbolic links included)");
  // Resolve every symbolic link first, so that a link pointing out of the
  // root is refused before anything is opened.
  char resolved[PATH_MAX];
  if (::realpath(full.c_str(), resolved) == nullptr) {
    const int err = errno;
    if (!IsUnder(full, root)) return absl::InvalidArgumentError(outside);
    // Say "no such file" only for a name inside the root: a dangling link,
    // or a missing name under a directory that resolves elsewhere, is
    // outside.
    struct stat lst;
    if (::lstat(full.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
      return absl::InvalidArgumentError(outside);
    }
    const std::string parent = full.substr(0, full.rfind('/'));
    char resolved_parent[PATH_MAX];
    if (!parent.empty() &&
        ::realpath(parent.c_str(), resolved_parent) != nullptr &&
        !IsUnder(resolved_parent, root)) {
      return absl::InvalidArgumentError(outside);
    }
    return OpenError(what, err);
  }
  if (!IsUnder(resolved, root)) return absl::InvalidArgumentError(outside);
  int fd;
  do {
    fd = ::open(resolved, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    // ELOOP: the last component became a symbolic link after realpath.
    if (errno == ELOOP) return absl::InvalidArgumentError(outside);
    return OpenError(what, errno);
  }
  absl::Cleanup closer = [fd] { ::close(fd); };
  // Check the file actually opened: a directory on the way may have been
  // replaced by a link since realpath.
  char opened[PATH_MAX];
  const std::string proc = absl::StrCat("/proc/self/fd/", fd);
  const ssize_t n = ::readlink(proc.c_str(), opened, sizeof(opened) - 1);
  if (n <= 0) {
    return absl::InternalError(absl::StrCat(
        what, ": cannot confirm the opened file's path: ", ErrnoText(errno)));
  }
  if (!IsUnder(absl::string_view(opened, static_cast<size_t>(n)), root)) {
    return absl::InvalidArgumentError(outside);
  }
  return ReadOpenFile(fd, what, max_bytes, on_chunk);
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::Span<const absl::string_view> pieces) {
  const std::string what = QuotedPath(path);
  if (path.empty()) {
    return absl::InvalidArgumentError("output path is empty");
  }
  // A unique name beside `path`: pid plus a process-wide counter, created
  // with O_EXCL (mode 0666 less the umask, like any new file).
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    tmp = absl::StrCat(path, ".tmp.", ::getpid(), ".",
                       tmp_counter.fetch_add(1, std::memory_order_relaxed));
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) break;
    const int err = errno;
    if (err == EINTR || (err == EEXIST && attempt < 100)) continue;
    const std::string msg = absl::StrCat(
        what, ": cannot create a temporary file beside it: ", ErrnoText(err));
    if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(msg);
    if (err == EACCES || err == EPERM || err == EROFS) {
      return absl::PermissionDeniedError(msg);
    }
    return absl::InternalError(msg);
  }
  bool keep = false;
  bool fd_open = true;
  absl::Cleanup cleanup = [&] {
    if (fd_open) ::close(fd);
    if (!keep) ::unlink(tmp.c_str());
  };
  for (absl::string_view piece : pieces) {
    size_t done = 0;
    while (done < piece.size()) {
      const ssize_t n = ::write(fd, piece.data() + done, piece.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return absl::InternalError(
            absl::StrCat(what, ": write failed: ", ErrnoText(errno)));
      }
      done += static_cast<size_t>(n);
    }
  }
  fd_open = false;
  if (::close(fd) != 0) {
    return absl::InternalError(
        absl::StrCat(what, ": close failed: ", ErrnoText(errno)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat(what, ": rename from ",
                                            QuotedPath(tmp),
                                            " failed: ", ErrnoText(errno)));
  }
  keep = true;
  return absl::OkStatus();
}

}  // namespace lockstep::worker

// Whole-file reads with a size limit and atomic whole-file writes, shared by
// the IDX and NPY readers and writers. Internal to worker/data.
//
// Errors name the file through `what`, a caller-chosen label such as
// `dataset.file.inputs_path "/data/train-images.idx"`, so that every message
// says which field or file it is about.
#ifndef LOCKSTEP_WORKER_DATA_FILE_IO_H_
#define LOCKSTEP_WORKER_DATA_FILE_IO_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace lockstep::worker {

// Default per-file size limit of the dataset and tensor readers: 4 GiB.
inline constexpr int64_t kDefaultMaxFileBytes = int64_t{4} << 30;

// `"<path>"`: the default `what` label of a file.
std::string QuotedPath(absl::string_view path);

// Reads the regular file at `path` into memory, once. When `on_chunk` is set,
// every chunk read is passed to it in file order before the next read (used
// to hash a file while loading it, without a second copy).
//
// Errors (each prefixed by `what`):
//   NOT_FOUND          the file does not exist
//   PERMISSION_DENIED  it cannot be opened for reading
//   INVALID_ARGUMENT   it is not a regular file, or it is larger than
//                      max_bytes ("is 5000 bytes, over the limit of 4096")
//   DATA_LOSS          a read fails or the file changes size while read
absl::StatusOr<std::string> ReadWholeFile(
    const std::string& path, absl::string_view what, int64_t max_bytes,
    const std::function<void(absl::string_view)>& on_chunk = nullptr);

// The canonical form of the data root directory `root` (realpath, no
// trailing '/'). INVALID_ARGUMENT when it is empty, relative, missing or not
// a directory; the message names `flag`.
absl::StatusOr<std::string> CanonicalDataRoot(const std::string& root,
                                              absl::string_view flag);

// ReadWholeFile, confined to the directory `root` (canonical, as
// CanonicalDataRoot returns it): `path` is absolute or relative to `root`,
// must not contain a ".." component, and must name, after every symbolic
// link is resolved, a regular file inside `root`. The file actually opened
// is checked (no window between the check and the open). FIFOs, devices and
// directories are refused without reading them. Errors name `what` and the
// rule; they never quote the file's bytes:
//   FAILED_PRECONDITION  `root` is empty (file datasets need a data root)
//   INVALID_ARGUMENT     a ".." component, a path outside `root`, not a
//                        regular file, over max_bytes
//   NOT_FOUND / PERMISSION_DENIED / DATA_LOSS  as ReadWholeFile
absl::StatusOr<std::string> ReadFileUnderRoot(
    const std::string& root, const std::string& path, absl::string_view what,
    int64_t max_bytes,
    const std::function<void(absl::string_view)>& on_chunk = nullptr);

// Writes the concatenation of `pieces` to `path` atomically: the bytes go to
// a temporary file in the same directory which is then renamed over `path`,
// so readers see the old file or the complete new one, never a partial one.
// (No fsync: the rename is atomic for readers, not durable across a crash.)
// On error the temporary file is removed and `path` is left untouched.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::Span<const absl::string_view> pieces);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_DATA_FILE_IO_H_

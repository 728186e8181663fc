// The worker's on-disk cache of blobs (models' initial parameters), keyed
// by digest: one file per blob, <dir>/<64 hex digits>, written to a
// temporary name and renamed once its SHA-256 matched. At most max_bytes
// are kept; the least recently used blobs are evicted first (a file's
// modification time is its last use). A second job with the same
// parameters reads them from here instead of fetching them again.
//
// Thread-safe within one process.
#ifndef LOCKSTEP_WORKER_BLOB_CACHE_H_
#define LOCKSTEP_WORKER_BLOB_CACHE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace lockstep::worker {

struct BlobCacheOptions {
  // Required.
  std::string dir;
  // Bytes kept; a blob larger than this is still fetched and kept until
  // the next one arrives. Default 4 GiB.
  int64_t max_bytes = int64_t{4} << 30;
};

// Where the cache at `dir` keeps `digest` ("sha256:<hex>").
std::string BlobCachePath(const std::string& dir, const std::string& digest);

// The bytes of the file at `path` if they hash to `digest`; DATA_LOSS
// naming both digests otherwise, NOT_FOUND when the file is missing.
absl::StatusOr<std::string> ReadVerifiedBlob(const std::string& path,
                                             const std::string& digest);

class BlobCache {
 public:
  // Fetches a blob's bytes from the coordinator.
  using Fetcher =
      std::function<absl::StatusOr<std::string>(const std::string& digest)>;

  // Creates `options.dir` if needed and removes leftover temporary files.
  static absl::StatusOr<std::unique_ptr<BlobCache>> Open(
      BlobCacheOptions options);

  // The path of `digest`'s verified file: the cached one (its SHA-256
  // checked again; a damaged file is fetched anew), else fetched with
  // `fetch`, verified (DATA_LOSS naming both digests on a mismatch; nothing
  // is kept) and stored, evicting least recently used blobs. `*fetched`
  // (may be null) says whether `fetch` was called.
  absl::StatusOr<std::string> Get(const std::string& digest,
                                  const Fetcher& fetch, bool* fetched);

  const BlobCacheOptions& options() const { return options_; }

 private:
  explicit BlobCache(BlobCacheOptions options) : options_(std::move(options)) {}
  void EvictLocked(const std::string& keep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const BlobCacheOptions options_;
  absl::Mutex mu_;
};

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_BLOB_CACHE_H_

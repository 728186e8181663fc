// The coordinator's content-addressed blob store: a model's initial
// parameters (lockstep.v1.ParameterSet), uploaded once by a client and
// fetched by the workers that run its jobs.
//
// Layout under `dir`: sha256/<first two hex digits>/<64 hex digits>, one
// file per blob, and tmp/ for uploads in flight. An upload is written to a
// file in tmp/ while it is hashed, fsynced, renamed into place (and the
// directory fsynced) only once its SHA-256 and size match what the client
// announced, and only then entered in the store's `blobs` table: a blob
// that the table lists is complete, and a reader never sees half a file.
// Files left in tmp/ by a crash are removed at start-up.
//
// Blobs are kept as files rather than SQLite rows: a ResNet-18 is 45 MB
// and the limit is a GiB, so rows would pass through the WAL, hold the
// database's single writer for the whole upload and count against the
// database's size limit; files stream in and out in chunks and a deletion
// returns the space at once.
//
// Thread-safe.
#ifndef LOCKSTEP_SERVER_BLOB_STORE_H_
#define LOCKSTEP_SERVER_BLOB_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/blob_digest.h"
#include "server/store/store.h"
#include "server/worker_registry.h"

namespace lockstep::server {

struct BlobStoreOptions {
  // Folder of the blob files. Default (empty): the database path +
  // ".blobs". Required when the database is ":memory:".
  std::string dir;
  // Largest blob, bytes. Default 1 GiB.
  int64_t max_blob_bytes = int64_t{1} << 30;
  // Bytes of blobs one principal may have uploaded (those still stored).
  // 0: no quota. Default 0.
  int64_t max_bytes_per_principal = 0;
  // Bytes of all stored blobs. 0: no limit. Default 0.
  int64_t max_total_bytes = 0;
  // A blob no unfinished job references is deleted once it was last
  // referenced (or uploaded) this long ago. Default 24 h.
  int64_t gc_grace_ms = int64_t{24} * 3600 * 1000;
};

// The database path + ".blobs" (empty for ":memory:").
std::string DefaultBlobDir(const std::string& database_path);

class BlobStore {
 public:
  // Creates `options.dir` if needed and empties its tmp/. `store` must
  // outlive the blob store.
  static absl::StatusOr<std::unique_ptr<BlobStore>> Open(
      const BlobStoreOptions& options, store::Store* store, Clock clock);

  // One upload in flight. Destroying it before Finish keeps nothing.
  class Upload {
   public:
    ~Upload();
    // The next chunk: INVALID_ARGUMENT for a chunk over kBlobChunkBytes or
    // bytes past the announced size.
    absl::Status Append(absl::string_view chunk);
    // Checks the count and the SHA-256 against the header and stores the
    // blob: INVALID_ARGUMENT naming both digests (or sizes) otherwise, and
    // nothing is kept.
    absl::StatusOr<store::BlobRecord> Finish();

   private:
    friend class BlobStore;
    Upload(BlobStore* owner, std::string digest, int64_t size,
           std::string principal, std::string tmp_path, int fd);
    void Discard();

    BlobStore* const owner_;
    const std::string digest_;
    const int64_t size_;
    const std::string principal_;
    const std::string tmp_path_;
    int fd_;
    int64_t received_ = 0;
    BlobHasher hasher_;
    bool done_ = false;
  };

  // Starts an upload of `size` bytes announced as `digest` by `principal`:
  // INVALID_ARGUMENT for a malformed digest or a size out of 0..the blob
  // limit, RESOURCE_EXHAUSTED naming the quota, the usage and the limit
  // when the principal's or the store's blob bytes would pass it. A blob
  // already stored needs no upload: `*exists` is set and nullptr returned.
  absl::StatusOr<std::unique_ptr<Upload>> BeginUpload(
      const std::string& digest, int64_t size, const std::string& principal,
      std::optional<store::BlobRecord>* exists);

  // The row of `digest`, or nullopt.
  absl::StatusOr<std::optional<store::BlobRecord>> Stat(
      const std::string& digest);
  // The file holding `digest` (NOT_FOUND naming it when it is not stored).
  absl::StatusOr<std::string> PathOf(const std::string& digest);

  // Deletes the blobs no unfinished job references and that were last
  // referenced more than gc_grace_ms ago: rows first, then files.
  absl::StatusOr<std::vector<store::BlobRecord>> Collect();

  const BlobStoreOptions& options() const { return options_; }

 private:
  BlobStore(BlobStoreOptions options, store::Store* store, Clock clock)
      : options_(std::move(options)), store_(store), clock_(std::move(clock)) {}
  std::string FilePath(const std::string& digest) const;
  void Unreserve(const std::string& principal, int64_t size);

  const BlobStoreOptions options_;
  store::Store* const store_;
  const Clock clock_;
  // Held while a finished upload's file is renamed in and its row added,
  // and while a collection deletes rows and files: a collection never
  // removes the file of a blob being stored again.
  absl::Mutex files_mu_;
  absl::Mutex mu_;
  // Bytes of uploads in flight, per principal and in all, counted against
  // the quotas with the stored ones.
  std::map<std::string, int64_t> pending_ ABSL_GUARDED_BY(mu_);
  int64_t pending_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_tmp_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_BLOB_STORE_H_

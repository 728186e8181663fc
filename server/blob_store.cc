#include "server/blob_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace lockstep::server {
namespace {

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::InternalError(
      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status MakeDir(const std::string& path) {
  if (mkdir(path.c_str(), 0700) == 0 || errno == EEXIST) {
    return absl::OkStatus();
  }
  return Errno("cannot create", path);
}

absl::Status SyncDir(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return Errno("cannot open", path);
  const int rc = fsync(fd);
  close(fd);
  if (rc != 0) return Errno("cannot fsync", path);
  return absl::OkStatus();
}

absl::Status OverQuota(const std::string& quota, const std::string& who,
                       int64_t used, int64_t add, int64_t limit) {
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s: %s holds %d blob bytes and this blob needs %d, over the limit of "
      "%d; wait for unreferenced blobs to be collected",
      quota, who, used, add, limit));
}

std::string WhoName(const std::string& principal) {
  return principal.empty() ? "the anonymous caller" : "\"" + principal + "\"";
}

}  // namespace

std::string DefaultBlobDir(const std::string& database_path) {
  if (database_path.empty() || database_path == ":memory:") return "";
  return database_path + ".blobs";
}

absl::StatusOr<std::unique_ptr<BlobStore>> BlobStore::Open(
    const BlobStoreOptions& options, store::Store* store, Clock clock) {
  if (options.dir.empty()) {
    return absl::InvalidArgumentError(
        "blob_dir: must be set (the database is not a file)");
  }
  if (options.max_blob_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_blob_bytes: ", options.max_blob_bytes, " must be > 0"));
  }
  if (options.max_bytes_per_principal < 0 || options.max_total_bytes < 0 ||
      options.gc_grace_ms < 0) {
    return absl::InvalidArgumentError(
        "blob_quota_bytes, max_blob_store_bytes, blob_gc_grace: must be >= 0");
  }
  LS_RETURN_IF_ERROR(MakeDir(options.dir));
  LS_RETURN_IF_ERROR(MakeDir(options.dir + "/sha256"));
  const std::string tmp = options.dir + "/tmp";
  LS_RETURN_IF_ERROR(MakeDir(tmp));
  // Uploads a crash interrupted: never entered in the table.
  if (DIR* d = opendir(tmp.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      unlink((tmp + "/" + name).c_str());
    }
    closedir(d);
  }
  return std::unique_ptr<BlobStore>(
      new BlobStore(options, store, std::move(clock)));
}

std::string BlobStore::FilePath(const std::string& digest) const {
  const std::string hex = digest.substr(sizeof(kBlobDigestPrefix) - 1);
  return absl::StrCat(options_.dir, "/sha256/", hex.substr(0, 2), "/", hex);
}

absl::StatusOr<std::unique_ptr<BlobStore::Upload>> BlobStore::BeginUpload(
    const std::string& digest, int64_t size, const std::string& principal,
    std::optional<store::BlobRecord>* exists) {
  LS_RETURN_IF_ERROR(ValidateBlobDigest(digest, "header.digest"));
  if (size < 0 || size > options_.max_blob_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("header.size: ", size, " bytes is outside 0..",
                     options_.max_blob_bytes, " (the blob size limit)"));
  }
  LS_ASSIGN_OR_RETURN(*exists, store_->GetBlob(digest));
  if (exists->has_value()) return std::unique_ptr<Upload>();
  LS_ASSIGN_OR_RETURN(int64_t mine, store_->BlobBytesOf(principal));
  LS_ASSIGN_OR_RETURN(int64_t total, store_->TotalBlobBytes());
  std::string tmp_path;
  {
    absl::MutexLock lock(&mu_);
    mine += pending_[principal];
    total += pending_total_;
    if (options_.max_bytes_per_principal > 0 &&
        mine + size > options_.max_bytes_per_principal) {
      return OverQuota("blob_quota_bytes", WhoName(principal), mine, size,
                       options_.max_bytes_per_principal);
    }
    if (options_.max_total_bytes > 0 &&
        total + size > options_.max_total_bytes) {
      return OverQuota("max_blob_store_bytes", "the blob store", total, size,
                       options_.max_total_bytes);
    }
    pending_[principal] += size;
    pending_total_ += size;
    tmp_path = absl::StrCat(options_.dir, "/tmp/", getpid(), "-", next_tmp_++,
                            ".part");
  }
  const int fd = open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) {
    absl::Status s = Errno("cannot create", tmp_path);
    Unreserve(principal, size);
    return s;
  }
  return std::unique_ptr<Upload>(
      new Upload(this, digest, size, principal, tmp_path, fd));
}

void BlobStore::Unreserve(const std::string& principal, int64_t size) {
  absl::MutexLock lock(&mu_);
  pending_total_ -= size;
  if ((pending_[principal] -= size) == 0) pending_.erase(principal);
}

BlobStore::Upload::Upload(BlobStore* owner, std::string digest, int64_t size,
                          std::string principal, std::string tmp_path, int fd)
    : owner_(owner),
      digest_(std::move(digest)),
      size_(size),
      principal_(std::move(principal)),
      tmp_path_(std::move(tmp_path)),
      fd_(fd) {}

BlobStore::Upload::~Upload() { Discard(); }

void BlobStore::Upload::Discard() {
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
  if (!done_) {
    done_ = true;
    unlink(tmp_path_.c_str());
    owner_->Unreserve(principal_, size_);
  }
}

absl::Status BlobStore::Upload::Append(absl::string_view chunk) {
  if (done_) return absl::FailedPreconditionError("upload already ended");
  if (static_cast<int64_t>(chunk.size()) > kBlobChunkBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk: ", chunk.size(), " bytes exceed the limit of ",
                     kBlobChunkBytes, " per message"));
  }
  if (received_ + static_cast<int64_t>(chunk.size()) > size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk: the upload passes the announced header.size of ",
                     size_, " bytes"));
  }
  received_ += chunk.size();
  hasher_.Update(chunk);
  while (!chunk.empty()) {
    const ssize_t n = write(fd_, chunk.data(), chunk.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("cannot write", tmp_path_);
    }
    chunk.remove_prefix(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<store::BlobRecord> BlobStore::Upload::Finish() {
  if (done_) return absl::FailedPreconditionError("upload already ended");
  if (received_ != size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("header.size: announced ", size_, " bytes, received ",
                     received_, "; nothing was stored"));
  }
  const std::string got = hasher_.Finish();
  if (got != digest_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header.digest: announced ", digest_, ", the bytes received hash to ",
        got, "; nothing was stored"));
  }
  if (fsync(fd_) != 0) return Errno("cannot fsync", tmp_path_);
  close(fd_);
  fd_ = -1;
  absl::MutexLock files(&owner_->files_mu_);
  const std::string path = owner_->FilePath(digest_);
  const std::string dir = path.substr(0, path.rfind('/'));
  LS_RETURN_IF_ERROR(MakeDir(dir));
  if (rename(tmp_path_.c_str(), path.c_str()) != 0) {
    return Errno("cannot rename into", path);
  }
  LS_RETURN_IF_ERROR(SyncDir(dir));
  store::BlobRecord r;
  r.digest = digest_;
  r.size = size_;
  r.created_unix_ms = owner_->clock_();
  r.uploaded_by = principal_;
  r.last_referenced_unix_ms = r.created_unix_ms;
  absl::StatusOr<bool> inserted = owner_->store_->InsertBlob(r);
  done_ = true;
  owner_->Unreserve(principal_, size_);
  if (!inserted.ok()) return inserted.status();
  if (!*inserted) {
    // Another upload of the same bytes won the race; the file is the same.
    LS_ASSIGN_OR_RETURN(std::optional<store::BlobRecord> now,
                        owner_->store_->GetBlob(digest_));
    if (now.has_value()) return *now;
  }
  LS_LOG(INFO) << "blob " << digest_ << " stored: " << size_ << " bytes from "
               << (principal_.empty() ? "anonymous" : principal_);
  return r;
}

absl::StatusOr<std::optional<store::BlobRecord>> BlobStore::Stat(
    const std::string& digest) {
  LS_RETURN_IF_ERROR(ValidateBlobDigest(digest, "digest"));
  return store_->GetBlob(digest);
}

absl::StatusOr<std::string> BlobStore::PathOf(const std::string& digest) {
  LS_ASSIGN_OR_RETURN(std::optional<store::BlobRecord> r, Stat(digest));
  if (!r.has_value()) {
    return absl::NotFoundError(
        absl::StrCat("digest: no blob \"", digest, "\" is stored"));
  }
  return FilePath(digest);
}

absl::StatusOr<std::vector<store::BlobRecord>> BlobStore::Collect() {
  absl::MutexLock files(&files_mu_);
  LS_ASSIGN_OR_RETURN(
      std::vector<store::BlobRecord> gone,
      store_->DeleteUnreferencedBlobs(clock_() - options_.gc_grace_ms));
  for (const store::BlobRecord& b : gone) {
    const std::string path = FilePath(b.digest);
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      LS_LOG(WARNING) << "blob " << b.digest << " collected but " << path
                      << " not removed: " << std::strerror(errno);
    }
    LS_LOG(INFO) << "blob " << b.digest << " collected (" << b.size
                 << " bytes, unreferenced since " << b.last_referenced_unix_ms
                 << ")";
  }
  return gone;
}

}  // namespace lockstep::server

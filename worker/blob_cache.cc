#include "worker/blob_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/blob_digest.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace lockstep::worker {
namespace {

constexpr char kTmpSuffix[] = ".part";

absl::Status WriteFileSynced(const std::string& path,
                             const std::string& bytes) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = std::strerror(errno);
      close(fd);
      return absl::InternalError(
          absl::StrCat("cannot write ", path, ": ", why));
    }
    done += n;
  }
  const bool synced = fsync(fd) == 0;
  close(fd);
  if (!synced) return absl::InternalError(absl::StrCat("cannot fsync ", path));
  return absl::OkStatus();
}

}  // namespace

std::string BlobCachePath(const std::string& dir, const std::string& digest) {
  absl::string_view hex = digest;
  absl::ConsumePrefix(&hex, kBlobDigestPrefix);
  return absl::StrCat(dir, "/", hex);
}

absl::StatusOr<std::string> ReadVerifiedBlob(const std::string& path,
                                             const std::string& digest) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("no file ", path));
  std::ostringstream buf;
  buf << in.rdbuf();
  std::string bytes = std::move(buf).str();
  if (const std::string got = BlobDigest(bytes); got != digest) {
    return absl::DataLossError(absl::StrCat("blob ", digest, ": ", path,
                                            " hashes to ", got, " instead"));
  }
  return bytes;
}

absl::StatusOr<std::unique_ptr<BlobCache>> BlobCache::Open(
    BlobCacheOptions options) {
  if (options.dir.empty()) {
    return absl::InvalidArgumentError("blob_cache_dir: must be set");
  }
  if (options.max_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("blob_cache_bytes: ", options.max_bytes, " must be > 0"));
  }
  if (mkdir(options.dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::InvalidArgumentError(
        absl::StrCat("blob_cache_dir: cannot create ", options.dir, ": ",
                     std::strerror(errno)));
  }
  if (DIR* d = opendir(options.dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (absl::EndsWith(e->d_name, kTmpSuffix)) {
        unlink(absl::StrCat(options.dir, "/", e->d_name).c_str());
      }
    }
    closedir(d);
  }
  return std::unique_ptr<BlobCache>(new BlobCache(std::move(options)));
}

absl::StatusOr<std::string> BlobCache::Get(const std::string& digest,
                                           const Fetcher& fetch,
                                           bool* fetched) {
  LS_RETURN_IF_ERROR(ValidateBlobDigest(digest, "parameters_digest"));
  if (fetched != nullptr) *fetched = false;
  const std::string path = BlobCachePath(options_.dir, digest);
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<std::string> cached = ReadVerifiedBlob(path, digest);
    if (cached.ok()) {
      utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // last use: now
      return path;
    }
    if (cached.status().code() == absl::StatusCode::kDataLoss) {
      LS_LOG(WARNING) << cached.status() << "; fetching it again";
      unlink(path.c_str());
    }
  }
  // Fetched without the lock: another blob may be read meanwhile.
  absl::StatusOr<std::string> bytes = fetch(digest);
  if (fetched != nullptr) *fetched = true;
  if (!bytes.ok()) return bytes.status();
  if (const std::string got = BlobDigest(*bytes); got != digest) {
    return absl::DataLossError(absl::StrCat("blob ", digest,
                                            ": the fetched bytes hash to ", got,
                                            "; nothing was cached"));
  }
  absl::MutexLock lock(&mu_);
  const std::string tmp = absl::StrCat(path, ".", getpid(), kTmpSuffix);
  absl::Status written = WriteFileSynced(tmp, *bytes);
  if (written.ok() && rename(tmp.c_str(), path.c_str()) != 0) {
    written = absl::InternalError(
        absl::StrCat("cannot rename into ", path, ": ", std::strerror(errno)));
  }
  if (!written.ok()) {
    unlink(tmp.c_str());
    return written;
  }
  EvictLocked(path);
  return path;
}

void BlobCache::EvictLocked(const std::string& keep) {
  struct Entry {
    std::string path;
    int64_t size;
    timespec used;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  DIR* d = opendir(options_.dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() != 64) continue;  // blobs only
    const std::string path = absl::StrCat(options_.dir, "/", name);
    struct stat st;
    if (stat(path.c_str(), &st) != 0) continue;
    entries.push_back({path, static_cast<int64_t>(st.st_size), st.st_mtim});
    total += st.st_size;
  }
  closedir(d);
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.used.tv_sec != b.used.tv_sec) return a.used.tv_sec < b.used.tv_sec;
    if (a.used.tv_nsec != b.used.tv_nsec)
      return a.used.tv_nsec < b.used.tv_nsec;
    return a.path < b.path;
  });
  for (const Entry& e : entries) {
    if (total <= options_.max_bytes) break;
    if (e.path == keep) continue;
    if (unlink(e.path.c_str()) == 0) {
      total -= e.size;
      LS_LOG(INFO) << "blob cache: evicted " << e.path << " (" << e.size
                   << " bytes)";
    }
  }
}

}  // namespace lockstep::worker

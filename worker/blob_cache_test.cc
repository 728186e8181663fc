#include "worker/blob_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "common/blob_digest.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep::worker {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

class BlobCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(std::getenv("TEST_TMPDIR")) + "/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  // A fetcher serving `served_` and counting its calls.
  BlobCache::Fetcher Fetcher() {
    return [this](const std::string& digest) -> absl::StatusOr<std::string> {
      ++fetches_[digest];
      auto it = served_.find(digest);
      if (it == served_.end()) return absl::NotFoundError("no such blob");
      return it->second;
    };
  }

  std::string Serve(const std::string& bytes) {
    const std::string d = BlobDigest(bytes);
    served_[d] = bytes;
    return d;
  }

  std::string dir_;
  std::map<std::string, std::string> served_;
  std::map<std::string, int> fetches_;
};

TEST_F(BlobCacheTest, ASecondGetReadsTheCachedFile) {
  auto cache = BlobCache::Open({dir_, 1 << 20});
  ASSERT_THAT(cache, IsOk());
  const std::string d = Serve("parameters one");
  bool fetched = false;
  auto path = (*cache)->Get(d, Fetcher(), &fetched);
  ASSERT_THAT(path, IsOk());
  EXPECT_TRUE(fetched);
  EXPECT_EQ(*path, BlobCachePath(dir_, d));
  EXPECT_THAT(ReadVerifiedBlob(*path, d), IsOk());
  ASSERT_THAT((*cache)->Get(d, Fetcher(), &fetched), IsOk());
  EXPECT_FALSE(fetched);
  EXPECT_EQ(fetches_[d], 1);
  // A new cache over the same folder (a restarted worker) keeps it.
  auto again = BlobCache::Open({dir_, 1 << 20});
  ASSERT_THAT(again, IsOk());
  ASSERT_THAT((*again)->Get(d, Fetcher(), &fetched), IsOk());
  EXPECT_FALSE(fetched);
}

TEST_F(BlobCacheTest, WrongBytesAreRefusedAndADamagedFileFetchedAgain) {
  auto cache = BlobCache::Open({dir_, 1 << 20});
  ASSERT_THAT(cache, IsOk());
  const std::string d = BlobDigest("the real bytes");
  served_[d] = "other bytes";
  EXPECT_THAT((*cache)->Get(d, Fetcher(), nullptr),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(d)));
  struct stat st;
  EXPECT_NE(stat(BlobCachePath(dir_, d).c_str(), &st), 0) << "kept";

  served_[d] = "the real bytes";
  ASSERT_THAT((*cache)->Get(d, Fetcher(), nullptr), IsOk());
  std::ofstream(BlobCachePath(dir_, d), std::ios::trunc) << "damaged";
  bool fetched = false;
  auto path = (*cache)->Get(d, Fetcher(), &fetched);
  ASSERT_THAT(path, IsOk());
  EXPECT_TRUE(fetched);
  EXPECT_THAT(ReadVerifiedBlob(*path, d), IsOk());
}

TEST_F(BlobCacheTest, TheLeastRecentlyUsedBlobIsEvicted) {
  // Room for two blobs of 100 bytes.
  auto cache = BlobCache::Open({dir_, 250});
  ASSERT_THAT(cache, IsOk());
  const std::string a = Serve(std::string(100, 'a'));
  const std::string b = Serve(std::string(100, 'b'));
  const std::string c = Serve(std::string(100, 'c'));
  ASSERT_THAT((*cache)->Get(a, Fetcher(), nullptr), IsOk());
  ASSERT_THAT((*cache)->Get(b, Fetcher(), nullptr), IsOk());
  // Use a again (its modification time moves past b's), then add c.
  usleep(20000);
  ASSERT_THAT((*cache)->Get(a, Fetcher(), nullptr), IsOk());
  usleep(20000);
  ASSERT_THAT((*cache)->Get(c, Fetcher(), nullptr), IsOk());
  struct stat st;
  EXPECT_EQ(stat(BlobCachePath(dir_, a).c_str(), &st), 0);
  EXPECT_NE(stat(BlobCachePath(dir_, b).c_str(), &st), 0) << "b kept";
  EXPECT_EQ(stat(BlobCachePath(dir_, c).c_str(), &st), 0);
  EXPECT_EQ(fetches_[a], 1);
}

}  // namespace
}  // namespace lockstep::worker

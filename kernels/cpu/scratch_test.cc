#include "kernels/cpu/scratch.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep::kernels {
namespace {

TEST(ScratchFloats, ReusesAThreadsBuffers) {
  std::thread t([] {
    const int64_t before = ScratchAllocationsForTesting();
    float* first = nullptr;
    {
      ScratchFloats a(1000);
      first = a.get();
      EXPECT_EQ(reinterpret_cast<uintptr_t>(a.get()) % 64, 0u);
      a.get()[999] = 1.0f;  // writable to the end
    }
    EXPECT_EQ(ScratchAllocationsForTesting(), before + 1);
    EXPECT_EQ(ScratchCachedBytesForTesting(), 4032u);  // 1000 floats, lines
    {
      // Smaller or equal requests take the cached buffer.
      ScratchFloats b(900);
      EXPECT_EQ(b.get(), first);
      EXPECT_EQ(ScratchCachedBytesForTesting(), 0u);
      // A second buffer at the same time is a new one.
      ScratchFloats c(900);
      EXPECT_NE(c.get(), first);
    }
    EXPECT_EQ(ScratchAllocationsForTesting(), before + 2);
    {
      // A larger request than anything cached allocates.
      ScratchFloats d(5000);
      EXPECT_EQ(ScratchAllocationsForTesting(), before + 3);
    }
    // The smallest fitting buffer is chosen.
    {
      ScratchFloats e(950);
      ScratchFloats f(4000);
      EXPECT_EQ(ScratchAllocationsForTesting(), before + 3);
    }
  });
  t.join();
}

TEST(ScratchFloats, CachesAtMostTheCountAndBytes) {
  std::thread t([] {
    {
      std::vector<std::unique_ptr<ScratchFloats>> many;
      for (int i = 0; i < kScratchCachedBuffers + 4; ++i) {
        many.push_back(std::make_unique<ScratchFloats>(16 * (i + 1)));
      }
    }
    // The largest kScratchCachedBuffers stay: (5 + ... + 12) * 16 floats.
    size_t want = 0;
    for (int i = 4; i < kScratchCachedBuffers + 4; ++i) {
      want += 16 * (i + 1) * sizeof(float);
    }
    EXPECT_EQ(ScratchCachedBytesForTesting(), want);
    {
      // Over the byte cap: the largest goes, the small ones stay. (The
      // ninth buffer puts the count over too: the smallest goes first.)
      ScratchFloats huge(kScratchCachedBytes / sizeof(float));
    }
    EXPECT_EQ(ScratchCachedBytesForTesting(), want - 16 * 5 * sizeof(float));
  });
  t.join();
}

TEST(ScratchFloats, PoisonFillsEveryBuffer) {
  SetScratchPoisonForTesting(true);
  std::thread t([] {
    {
      ScratchFloats a(100);
      std::memset(a.get(), 0, 100 * sizeof(float));
    }
    ScratchFloats b(100);  // the same buffer, poisoned again
    for (int i = 0; i < 100; ++i) {
      uint32_t bits;
      std::memcpy(&bits, b.get() + i, sizeof(bits));
      ASSERT_EQ(bits, 0x7fc0deadu) << i;
    }
  });
  t.join();
  SetScratchPoisonForTesting(false);
}

}  // namespace
}  // namespace lockstep::kernels

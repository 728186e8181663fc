#include "kernels/random/synthetic.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/canonical/float_bits.h"

namespace lockstep::canonical {
namespace {

struct Batch {
  std::vector<float> x;
  std::vector<int32_t> labels;
};

Batch Make(uint64_t seed, int64_t step, int64_t batch, int64_t features,
           int32_t classes) {
  Batch b;
  b.x.assign(batch * features, -7.0f);
  b.labels.assign(batch, -1);
  const absl::Status s = SyntheticBatch(seed, step, batch, features, classes,
                                        b.x.data(), b.labels.data());
  EXPECT_TRUE(s.ok()) << s;
  return b;
}

// Bit-exact comparison of x[off_a ..] and x[off_b ..] plus labels; the first
// difference is reported in hex.
void ExpectSameSamples(const Batch& a, int64_t first_a, const Batch& b,
                       int64_t first_b, int64_t count, int64_t features) {
  for (int64_t s = 0; s < count; ++s) {
    for (int64_t f = 0; f < features; ++f) {
      const uint32_t va = LsFloatToBits(a.x[(first_a + s) * features + f]);
      const uint32_t vb = LsFloatToBits(b.x[(first_b + s) * features + f]);
      ASSERT_EQ(va, vb) << "first difference at sample " << s << " feature "
                        << f << std::hex << ": 0x" << va << " vs 0x" << vb;
    }
    ASSERT_EQ(a.labels[first_a + s], b.labels[first_b + s]) << "sample " << s;
  }
}

TEST(SyntheticTest, Reproducible) {
  const Batch a = Make(123, 4, 256, 16, 10);
  const Batch b = Make(123, 4, 256, 16, 10);
  ExpectSameSamples(a, 0, b, 0, 256, 16);
}

TEST(SyntheticTest, SampleStreamIndependentOfBatching) {
  // Step 1 of batch 64 is samples 64..127; step 0 of batch 192 holds them.
  const Batch big = Make(5, 0, 192, 12, 7);
  const Batch s1 = Make(5, 1, 64, 12, 7);
  const Batch s2 = Make(5, 2, 64, 12, 7);
  ExpectSameSamples(big, 64, s1, 0, 64, 12);
  ExpectSameSamples(big, 128, s2, 0, 64, 12);
}

// The spec written out independently: label from (bits * C) >> 32,
// prototype and noise from BitsToUniform, x = P + n (exact).
float SpecUniform(uint32_t bits) {
  return -1.0f + static_cast<float>(bits >> 8) * 0x1.0p-23f;
}

TEST(SyntheticTest, InputsArePrototypePlusNoise) {
  constexpr int64_t kF = 5;
  constexpr int32_t kC = 4;
  const Batch b = Make(77, 3, 8, kF, kC);
  for (int64_t s = 0; s < 8; ++s) {
    const uint64_t sample = 3 * 8 + s;
    const int32_t label = static_cast<int32_t>(
        (uint64_t{PhiloxBits(77, kStreamSyntheticLabels, sample)} * kC) >> 32);
    ASSERT_EQ(b.labels[s], label) << s;
    for (int64_t f = 0; f < kF; ++f) {
      const float p =
          SpecUniform(PhiloxBits(77, kStreamSyntheticTeacher, label * kF + f));
      const float n =
          SpecUniform(PhiloxBits(77, kStreamSyntheticInputs, sample * kF + f));
      const float expected = p + n;  // Exact: multiples of 2^-23.
      ASSERT_EQ(LsFloatToBits(b.x[s * kF + f]), LsFloatToBits(expected))
          << s << " " << f;
      ASSERT_EQ(LsFloatToBits(SyntheticInput(p, 77, sample, kF, f)),
                LsFloatToBits(expected));
    }
  }
}

TEST(SyntheticTest, TeacherWeightsAreThePrototypes) {
  constexpr int64_t kF = 300;
  constexpr int32_t kC = 5;
  std::vector<float> w(kC * kF);
  ASSERT_TRUE(SyntheticTeacherWeights(9, kF, kC, w.data()).ok());
  for (int32_t c = 0; c < kC; ++c) {
    for (int64_t f = 0; f < kF; ++f) {
      ASSERT_EQ(LsFloatToBits(w[c * kF + f]),
                LsFloatToBits(SpecUniform(
                    PhiloxBits(9, kStreamSyntheticTeacher, c * kF + f))));
      ASSERT_EQ(LsFloatToBits(w[c * kF + f]),
                LsFloatToBits(SyntheticPrototype(9, kF, c, f)));
    }
  }
}

TEST(SyntheticTest, SeedsAndStepsDiffer) {
  const Batch a = Make(1, 0, 64, 16, 10);
  const Batch other_seed = Make(2, 0, 64, 16, 10);
  const Batch other_step = Make(1, 1, 64, 16, 10);
  int same_seed = 0, same_step = 0;
  for (size_t i = 0; i < a.x.size(); ++i) {
    same_seed += a.x[i] == other_seed.x[i];
    same_step += a.x[i] == other_step.x[i];
  }
  EXPECT_LT(same_seed, 3);
  EXPECT_LT(same_step, 3);
  int same_label_seed = 0, same_label_step = 0;
  for (int64_t s = 0; s < 64; ++s) {
    same_label_seed += a.labels[s] == other_seed.labels[s];
    same_label_step += a.labels[s] == other_step.labels[s];
  }
  EXPECT_LT(same_label_seed, 20);  // About 64 / 10 by chance.
  EXPECT_LT(same_label_step, 20);
  // The prototypes depend on the seed.
  std::vector<float> w1(10 * 16), w2(10 * 16);
  ASSERT_TRUE(SyntheticTeacherWeights(1, 16, 10, w1.data()).ok());
  ASSERT_TRUE(SyntheticTeacherWeights(2, 16, 10, w2.data()).ok());
  int same_weight = 0;
  for (size_t i = 0; i < w1.size(); ++i) same_weight += w1[i] == w2[i];
  EXPECT_LT(same_weight, 3);
}

TEST(SyntheticTest, ValuesInRangeAndEveryClassAppears) {
  for (uint64_t seed : {1ull, 2ull, 3ull, 0xDEADBEEFull}) {
    const int32_t kClasses = 10;
    const Batch b = Make(seed, 0, 4096, 16, kClasses);
    for (float v : b.x) {
      ASSERT_GE(v, -2.0f);
      ASSERT_LT(v, 2.0f);
      ASSERT_EQ(v * 0x1.0p23f, std::floor(v * 0x1.0p23f));  // k * 2^-23.
    }
    std::vector<int> count(kClasses, 0);
    for (int32_t l : b.labels) {
      ASSERT_GE(l, 0);
      ASSERT_LT(l, kClasses);
      ++count[l];
    }
    for (int c = 0; c < kClasses; ++c) {
      // Uniform labels: about 4096 / 10 = 410 each (sd ~19).
      EXPECT_GT(count[c], 300) << "seed " << seed << " class " << c;
      EXPECT_LT(count[c], 520) << "seed " << seed << " class " << c;
    }
  }
}

TEST(SyntheticTest, LabelsCoverOddClassCounts) {
  for (int32_t classes : {1, 2, 3, 7, 1000}) {
    int32_t lo = classes, hi = -1;
    for (uint64_t s = 0; s < 20000; ++s) {
      const int32_t l = SyntheticLabel(5, s, classes);
      ASSERT_GE(l, 0);
      ASSERT_LT(l, classes);
      lo = l < lo ? l : lo;
      hi = l > hi ? l : hi;
    }
    EXPECT_EQ(lo, 0) << classes;
    EXPECT_EQ(hi, classes - 1) << classes;
  }
}

// A multiclass perceptron trained on 8192 samples classifies the next 2048
// well: the task is learnable.
TEST(SyntheticTest, LinearModelLearnsTheTask) {
  constexpr int64_t kF = 16;
  constexpr int32_t kC = 10;
  const Batch train = Make(2024, 0, 8192, kF, kC);
  const Batch test = Make(2024, 4, 2048, kF, kC);  // Samples 8192 .. 10239.
  std::vector<double> w(kC * kF, 0.0);
  auto predict = [&](const float* x) {
    int best = 0;
    double best_v = -HUGE_VAL;
    for (int c = 0; c < kC; ++c) {
      double v = 0.0;
      for (int f = 0; f < kF; ++f) v += w[c * kF + f] * x[f];
      if (v > best_v) {
        best_v = v;
        best = c;
      }
    }
    return best;
  };
  for (int epoch = 0; epoch < 20; ++epoch) {
    for (int64_t s = 0; s < 8192; ++s) {
      const float* x = &train.x[s * kF];
      const int p = predict(x);
      const int y = train.labels[s];
      if (p != y) {
        for (int f = 0; f < kF; ++f) {
          w[y * kF + f] += x[f];
          w[p * kF + f] -= x[f];
        }
      }
    }
  }
  int correct = 0;
  for (int64_t s = 0; s < 2048; ++s) {
    correct += predict(&test.x[s * kF]) == test.labels[s];
  }
  std::printf("perceptron held-out accuracy: %.4f\n", correct / 2048.0);
  EXPECT_GT(correct, 2048 * 8 / 10) << "held-out accuracy " << correct / 2048.0;
}

TEST(SyntheticTest, InvalidArguments) {
  std::vector<float> x(16, 3.0f);
  std::vector<int32_t> l(4, 9);
  EXPECT_EQ(SyntheticBatch(1, -1, 4, 4, 3, x.data(), l.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SyntheticBatch(1, 0, -4, 4, 3, x.data(), l.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SyntheticBatch(1, 0, 4, 0, 3, x.data(), l.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SyntheticBatch(1, 0, 4, 4, 0, x.data(), l.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SyntheticBatch(1, 0, 4, 4, 3, nullptr, l.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SyntheticBatch(1, 0, 4, 4, 3, x.data(), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      SyntheticBatch(1, int64_t{1} << 60, 4, 4, 3, x.data(), l.data()).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SyntheticTeacherWeights(1, 4, 3, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  for (float v : x) EXPECT_EQ(v, 3.0f);
  for (int32_t v : l) EXPECT_EQ(v, 9);
  EXPECT_TRUE(SyntheticBatch(1, 0, 0, 4, 3, nullptr, nullptr).ok());
}

}  // namespace
}  // namespace lockstep::canonical

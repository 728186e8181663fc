#include "worker/data/dataset.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/digest.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/canonical/reduce.h"
#include "kernels/cpu/isa.h"
#include "kernels/random/philox.h"
#include "kernels/random/synthetic.h"
#include "kernels/tensor.h"
#include "lockstep/v1/job.pb.h"
#include "worker/data/idx.h"
#include "worker/data/npy.h"
#include "worker/data/test_util.h"

namespace lockstep::worker {
namespace {

using ::lockstep::kernels::DType;
using ::lockstep::kernels::Tensor;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::lockstep::worker::testing::ReadRaw;
using ::lockstep::worker::testing::TestDir;
using ::lockstep::worker::testing::WriteRaw;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Not;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<uint32_t> FloatBits(const Tensor& t) {
  std::vector<uint32_t> out;
  for (float f : t.span<float>()) out.push_back(Bits(f));
  return out;
}

std::vector<int32_t> Ints(const Tensor& t) {
  return std::vector<int32_t>(t.span<int32_t>().begin(),
                              t.span<int32_t>().end());
}

// The bytes of x followed by the bytes of labels.
std::string BatchBytes(const Tensor& x, const Tensor& labels) {
  return std::string(static_cast<const char*>(x.raw_data()), x.bytes()) +
         std::string(static_cast<const char*>(labels.raw_data()),
                     labels.bytes());
}

std::string Le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

lockstep::v1::Dataset Synthetic(int64_t examples, uint64_t teacher_seed = 0) {
  lockstep::v1::Dataset spec;
  spec.mutable_synthetic()->set_examples(examples);
  spec.mutable_synthetic()->set_teacher_seed(teacher_seed);
  return spec;
}

lockstep::v1::Dataset Files(lockstep::v1::FileDataset::Format format,
                            const std::string& inputs,
                            const std::string& labels) {
  lockstep::v1::Dataset spec;
  spec.mutable_file()->set_format(format);
  spec.mutable_file()->set_inputs_path(inputs);
  spec.mutable_file()->set_labels_path(labels);
  return spec;
}

// Options whose data root is TEST_TMPDIR, which holds every test's files.
DatasetOptions Rooted() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  absl::StatusOr<std::string> root =
      CanonicalDataRoot(tmp != nullptr ? tmp : "/tmp", "TEST_TMPDIR");
  EXPECT_THAT(root, IsOk());
  DatasetOptions options;
  options.data_root = root.ok() ? *root : "";
  return options;
}

struct Batch {
  Tensor x;
  Tensor labels;
};

Batch GetBatch(Dataset& d, int64_t step, int64_t batch) {
  Batch b;
  absl::Status s = d.Batch(step, batch, &b.x, &b.labels);
  EXPECT_THAT(s, IsOk());
  return b;
}

// ---------------------------------------------------------------------------
// Synthetic.

TEST(SyntheticDatasetTest, SameSeedAndStepGiveIdenticalBits) {
  absl::StatusOr<std::unique_ptr<Dataset>> a =
      OpenDataset(Synthetic(0), 42, {1, 8, 8}, 10);
  absl::StatusOr<std::unique_ptr<Dataset>> b =
      OpenDataset(Synthetic(0), 42, {1, 8, 8}, 10);
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_THAT((*a)->example_shape(), ElementsAre(1, 8, 8));
  EXPECT_EQ((*a)->num_classes(), 10);
  const Batch b1 = GetBatch(**a, 3, 16);
  const Batch b2 = GetBatch(**b, 3, 16);
  const Batch b3 = GetBatch(**a, 3, 16);  // Again, same object.
  EXPECT_EQ(b1.x.dtype(), DType::kFloat32);
  EXPECT_THAT(b1.x.shape(), ElementsAre(16, 1, 8, 8));
  EXPECT_EQ(b1.labels.dtype(), DType::kInt32);
  EXPECT_THAT(b1.labels.shape(), ElementsAre(16));
  EXPECT_EQ(BatchBytes(b1.x, b1.labels), BatchBytes(b2.x, b2.labels));
  EXPECT_EQ(BatchBytes(b1.x, b1.labels), BatchBytes(b3.x, b3.labels));
  EXPECT_FALSE(b1.x.SharesStorageWith(b3.x));  // Fresh tensors every call.
}

// The batches are the spec's (canonical::SyntheticBatch, one Philox block
// per four features) bit for bit on every ISA path this CPU has (the
// noise's bits come from PhiloxBitsLanes): rows of 5, 64 and 1,173
// features (runs of 1,024 bits, then a tail; rows that start inside a
// Philox block).
TEST(SyntheticDatasetTest, BatchesAreTheSpecBitsOnEveryIsa) {
  const std::vector<std::vector<int64_t>> shapes = {{5}, {64}, {3, 23, 17}};
  for (kernels::CpuIsa isa : kernels::SupportedCpuIsas()) {
    kernels::SetCpuIsaForTesting(isa);
    for (const std::vector<int64_t>& shape : shapes) {
      int64_t features = 1;
      for (int64_t d : shape) features *= d;
      absl::StatusOr<std::unique_ptr<Dataset>> d =
          OpenDataset(Synthetic(0), 11, shape, 7);
      ASSERT_THAT(d, IsOk());
      for (int64_t step : {0, 5}) {
        const Batch got = GetBatch(**d, step, 6);
        std::vector<float> want_x(static_cast<size_t>(6 * features));
        std::vector<int32_t> want_labels(6);
        ASSERT_THAT(
            canonical::SyntheticBatch(11, step, 6, features, 7, want_x.data(),
                                      want_labels.data()),
            IsOk());
        std::vector<uint32_t> want_bits(want_x.size());
        std::memcpy(want_bits.data(), want_x.data(),
                    want_x.size() * sizeof(float));
        EXPECT_EQ(FloatBits(got.x), want_bits)
            << "isa " << kernels::CpuIsaName(isa) << ", " << features
            << " features, step " << step;
        const int32_t* labels = got.labels.data<int32_t>();
        EXPECT_EQ(std::vector<int32_t>(labels, labels + 6), want_labels);
      }
    }
  }
  kernels::SetCpuIsaForTesting(std::nullopt);
}

TEST(SyntheticDatasetTest, StepAndSeedChangeTheData) {
  absl::StatusOr<std::unique_ptr<Dataset>> a =
      OpenDataset(Synthetic(0), 42, {64}, 10);
  absl::StatusOr<std::unique_ptr<Dataset>> other_seed =
      OpenDataset(Synthetic(0), 43, {64}, 10);
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(other_seed, IsOk());
  const Batch s0 = GetBatch(**a, 0, 8);
  const Batch s1 = GetBatch(**a, 1, 8);
  const Batch t0 = GetBatch(**other_seed, 0, 8);
  EXPECT_NE(FloatBits(s0.x), FloatBits(s1.x));
  EXPECT_NE(FloatBits(s0.x), FloatBits(t0.x));
}

TEST(SyntheticDatasetTest, EndlessStreamIndexesExamplesByStepTimesBatch) {
  absl::StatusOr<std::unique_ptr<Dataset>> d =
      OpenDataset(Synthetic(0), 7, {5}, 3);
  ASSERT_THAT(d, IsOk());
  const Batch big = GetBatch(**d, 0, 8);
  const Batch half = GetBatch(**d, 1, 4);
  const std::vector<uint32_t> all = FloatBits(big.x);
  EXPECT_EQ(FloatBits(half.x),
            std::vector<uint32_t>(all.begin() + 20, all.end()));
  const std::vector<int32_t> big_labels = Ints(big.labels);
  EXPECT_EQ(Ints(half.labels),
            std::vector<int32_t>(big_labels.begin() + 4, big_labels.end()));
  // Row i of step s is example s * batch + i of kernels/random/synthetic.h.
  EXPECT_EQ(big_labels[6], canonical::SyntheticLabel(7, 6, 3));
  for (int j = 0; j < 5; ++j) {
    const float p = canonical::SyntheticPrototype(7, 5, big_labels[6], j);
    EXPECT_EQ(all[30 + j], Bits(canonical::SyntheticInput(p, 7, 6, 5, j)));
  }
}

// The synthetic source is kernels/random/synthetic.h: with the default
// teacher seed (= the job seed) an endless stream's batch is bit for bit
// canonical::SyntheticBatch(seed, step, batch, F, C).
TEST(SyntheticDatasetTest, EndlessStreamIsTheCanonicalSyntheticBatch) {
  constexpr int64_t kF = 300;  // Over one canonical chunk (256).
  constexpr int32_t kC = 7;
  absl::StatusOr<std::unique_ptr<Dataset>> d =
      OpenDataset(Synthetic(0), 99, {3, 10, 10}, kC);
  ASSERT_THAT(d, IsOk());
  for (int64_t step : {int64_t{0}, int64_t{5}, int64_t{123456}}) {
    const Batch b = GetBatch(**d, step, 16);
    std::vector<float> x(16 * kF);
    std::vector<int32_t> labels(16);
    ASSERT_THAT(canonical::SyntheticBatch(99, step, 16, kF, kC, x.data(),
                                          labels.data()),
                IsOk());
    const std::vector<uint32_t> got = FloatBits(b.x);
    for (int64_t i = 0; i < 16 * kF; ++i) {
      ASSERT_EQ(got[i], Bits(x[i]))
          << "step " << step << " first difference at " << i << std::hex
          << ": 0x" << got[i] << " vs 0x" << Bits(x[i]);
    }
    EXPECT_EQ(Ints(b.labels), labels) << "step " << step;
    // The streams are the written ones: label (bits * C) >> 32; prototype
    // and noise -1 + (bits >> 8) * 2^-23; x = prototype + noise.
    const uint64_t e = static_cast<uint64_t>(step) * 16 + 3;
    const int32_t label =
        static_cast<int32_t>((uint64_t{canonical::PhiloxBits(
                                  99, canonical::kStreamSyntheticLabels, e)} *
                              kC) >>
                             32);
    ASSERT_EQ(Ints(b.labels)[3], label) << "step " << step;
    for (int64_t j = 0; j < kF; ++j) {
      const uint32_t noise_bits = canonical::PhiloxBits(
          99, canonical::kStreamSyntheticInputs, e * kF + j);
      const uint32_t proto_bits = canonical::PhiloxBits(
          99, canonical::kStreamSyntheticTeacher, label * kF + j);
      const float noise =
          -1.0f + static_cast<float>(noise_bits >> 8) * 0x1.0p-23f;
      const float proto =
          -1.0f + static_cast<float>(proto_bits >> 8) * 0x1.0p-23f;
      ASSERT_EQ(got[3 * kF + j], Bits(proto + noise))
          << "step " << step << " j " << j;
    }
  }
}

// A separate teacher seed only changes the teacher: the prototypes of
// canonical::SyntheticTeacherWeights(teacher_seed), under the job seed's
// labels and noise.
TEST(SyntheticDatasetTest, TeacherSeedPicksTheCanonicalTeacher) {
  constexpr int64_t kF = 16;
  constexpr int32_t kC = 5;
  absl::StatusOr<std::unique_ptr<Dataset>> d =
      OpenDataset(Synthetic(10, /*teacher_seed=*/5), 11, {kF}, kC);
  ASSERT_THAT(d, IsOk());
  std::vector<float> w(kC * kF);
  ASSERT_THAT(canonical::SyntheticTeacherWeights(5, kF, kC, w.data()), IsOk());
  const Batch b = GetBatch(**d, 3, 4);  // Examples 2, 3, 4, 5 of the pool.
  const std::vector<uint32_t> got = FloatBits(b.x);
  const std::vector<int32_t> labels = Ints(b.labels);
  for (int64_t i = 0; i < 4; ++i) {
    const int32_t label = canonical::SyntheticLabel(11, 2 + i, kC);
    EXPECT_EQ(labels[i], label) << i;
    for (int64_t j = 0; j < kF; ++j) {
      const float x =
          canonical::SyntheticInput(w[label * kF + j], 11, 2 + i, kF, j);
      ASSERT_EQ(got[i * kF + j], Bits(x)) << i << " " << j;
    }
  }
}

TEST(SyntheticDatasetTest, FixedPoolWrapsAround) {
  absl::StatusOr<std::unique_ptr<Dataset>> pool =
      OpenDataset(Synthetic(5), 7, {4}, 3);
  absl::StatusOr<std::unique_ptr<Dataset>> stream =
      OpenDataset(Synthetic(0), 7, {4}, 3);
  ASSERT_THAT(pool, IsOk());
  ASSERT_THAT(stream, IsOk());
  const std::vector<uint32_t> first5 = FloatBits(GetBatch(**stream, 0, 5).x);
  // Step 1, batch 3: examples 3, 4, 0. Step 4, batch 3: 12 mod 5 = 2, 3, 4.
  std::vector<uint32_t> expect;
  for (int e : {3, 4, 0}) {
    expect.insert(expect.end(), first5.begin() + 4 * e,
                  first5.begin() + 4 * e + 4);
  }
  EXPECT_EQ(FloatBits(GetBatch(**pool, 1, 3).x), expect);
  expect.clear();
  for (int e : {2, 3, 4}) {
    expect.insert(expect.end(), first5.begin() + 4 * e,
                  first5.begin() + 4 * e + 4);
  }
  EXPECT_EQ(FloatBits(GetBatch(**pool, 4, 3).x), expect);
  // A batch larger than the pool repeats it.
  const Batch b = GetBatch(**pool, 0, 11);
  const std::vector<int32_t> l = Ints(b.labels);
  for (int i = 5; i < 11; ++i) EXPECT_EQ(l[i], l[i - 5]);
  // Huge steps do not overflow: (10^18 * 3) mod 5 = 0.
  EXPECT_EQ(FloatBits(GetBatch(**pool, 1000000000000000000, 3).x),
            FloatBits(GetBatch(**pool, 0, 3).x));
}

TEST(SyntheticDatasetTest, ValuesInRangeInputsNearTheirPrototypeAllClasses) {
  absl::StatusOr<std::unique_ptr<Dataset>> d =
      OpenDataset(Synthetic(0), 2024, {1, 8, 8}, 10);
  ASSERT_THAT(d, IsOk());
  const Batch b = GetBatch(**d, 5, 4096);
  for (float v : b.x.span<float>()) {
    ASSERT_GE(v, -2.0f);
    ASSERT_LT(v, 2.0f);
  }
  // The teacher: the class prototypes P[c] of kernels/random/synthetic.h;
  // every input lies within the noise amplitude 1 of its label's
  // prototype, and the nearest prototype is (almost always) the label's.
  std::vector<float> w(10 * 64);
  ASSERT_THAT(canonical::SyntheticTeacherWeights(2024, 64, 10, w.data()),
              IsOk());
  std::vector<int> count(10, 0);
  const float* x = b.x.data<float>();
  const std::vector<int32_t> labels = Ints(b.labels);
  int nearest_is_label = 0;
  for (int i = 0; i < 4096; ++i) {
    ASSERT_GE(labels[i], 0);
    ASSERT_LT(labels[i], 10);
    ++count[labels[i]];
    int32_t best = 0;
    double best_d = HUGE_VAL;
    for (int32_t c = 0; c < 10; ++c) {
      double dist = 0.0;
      for (int j = 0; j < 64; ++j) {
        const double diff = x[64 * i + j] - w[64 * c + j];
        dist += diff * diff;
        if (c == labels[i]) {
          ASSERT_LE(std::fabs(diff), 1.0) << i << " " << j;
        }
      }
      if (dist < best_d) {
        best = c;
        best_d = dist;
      }
    }
    nearest_is_label += best == labels[i];
  }
  EXPECT_GT(nearest_is_label, 4096 * 99 / 100);
  for (int c = 0; c < 10; ++c) {
    // Uniform labels: about 4096 / 10 = 410 each (sd ~19).
    EXPECT_GT(count[c], 300) << "class " << c;
  }
}

// A multiclass perceptron trained on a pool of 8192 examples classifies the
// 2048 examples after it well: the teacher is learnable through the dataset
// (with its own teacher seed).
TEST(SyntheticDatasetTest, LinearModelLearnsTheTeacher) {
  constexpr int64_t kF = 16;
  constexpr int32_t kC = 10;
  absl::StatusOr<std::unique_ptr<Dataset>> d =
      OpenDataset(Synthetic(0, /*teacher_seed=*/77), 2024, {kF}, kC);
  ASSERT_THAT(d, IsOk());
  const Batch train = GetBatch(**d, 0, 8192);
  const Batch test = GetBatch(**d, 4, 2048);  // Examples 8192 .. 10239.
  const float* tx = train.x.data<float>();
  const std::vector<int32_t> ty = Ints(train.labels);
  std::vector<double> w(kC * kF, 0.0);
  const auto predict = [&](const float* x) {
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
    for (int64_t i = 0; i < 8192; ++i) {
      const float* x = tx + i * kF;
      const int p = predict(x);
      const int y = ty[i];
      if (p != y) {
        for (int f = 0; f < kF; ++f) {
          w[y * kF + f] += x[f];
          w[p * kF + f] -= x[f];
        }
      }
    }
  }
  int correct = 0;
  const std::vector<int32_t> test_labels = Ints(test.labels);
  for (int64_t i = 0; i < 2048; ++i) {
    correct += predict(test.x.data<float>() + i * kF) == test_labels[i];
  }
  std::printf("perceptron held-out accuracy: %.4f\n", correct / 2048.0);
  EXPECT_GT(correct, 2048 * 8 / 10) << "held-out accuracy " << correct / 2048.0;
}

TEST(SyntheticDatasetTest, TeacherSeedZeroMeansTheJobSeed) {
  absl::StatusOr<std::unique_ptr<Dataset>> implicit =
      OpenDataset(Synthetic(0, 0), 42, {16}, 4);
  absl::StatusOr<std::unique_ptr<Dataset>> explicit_seed =
      OpenDataset(Synthetic(0, 42), 42, {16}, 4);
  absl::StatusOr<std::unique_ptr<Dataset>> other =
      OpenDataset(Synthetic(0, 43), 42, {16}, 4);
  ASSERT_THAT(implicit, IsOk());
  ASSERT_THAT(explicit_seed, IsOk());
  ASSERT_THAT(other, IsOk());
  EXPECT_EQ((*implicit)->digest(), (*explicit_seed)->digest());
  EXPECT_NE((*implicit)->digest(), (*other)->digest());
  const Batch a = GetBatch(**implicit, 0, 256);
  const Batch b = GetBatch(**explicit_seed, 0, 256);
  const Batch c = GetBatch(**other, 0, 256);
  EXPECT_EQ(BatchBytes(a.x, a.labels), BatchBytes(b.x, b.labels));
  EXPECT_EQ(Ints(a.labels), Ints(c.labels));  // Labels use the job seed.
  EXPECT_NE(FloatBits(a.x), FloatBits(c.x));  // The prototypes differ.
}

TEST(SyntheticDatasetTest, NoSourceMeansSyntheticDefaults) {
  absl::StatusOr<std::unique_ptr<Dataset>> unset =
      OpenDataset(lockstep::v1::Dataset(), 42, {1, 8, 8}, 10);
  absl::StatusOr<std::unique_ptr<Dataset>> defaults =
      OpenDataset(Synthetic(0), 42, {1, 8, 8}, 10);
  ASSERT_THAT(unset, IsOk());
  ASSERT_THAT(defaults, IsOk());
  EXPECT_EQ((*unset)->digest(), (*defaults)->digest());
}

// Golden values of generator version 3. They may change only together with
// kSyntheticGeneratorVersion (or the canonical-arithmetic version), documented
// in README.md.
TEST(SyntheticDatasetTest, DigestAndDataArePinned) {
  EXPECT_EQ(kSyntheticGeneratorVersion, 3);
  absl::StatusOr<std::unique_ptr<Dataset>> d =
      OpenDataset(Synthetic(0), 42, {1, 8, 8}, 10);
  ASSERT_THAT(d, IsOk());
  EXPECT_EQ((*d)->digest(), "16fdab0c39c15719967371bff98375a2");
  EXPECT_TRUE(IsDigest128Hex((*d)->digest()));
  // The digest is that of the canonical description in README.md.
  EXPECT_EQ((*d)->digest(), Digest128Hex("lockstep-synthetic-dataset\n"
                                         "generator=3\n"
                                         "canonical_arithmetic=1\n"
                                         "seed=42\n"
                                         "teacher_seed=42\n"
                                         "example_shape=[1, 8, 8]\n"
                                         "classes=10\n"
                                         "examples=0\n"));
  const Batch b = GetBatch(**d, 3, 4);
  EXPECT_EQ(Digest128Hex(BatchBytes(b.x, b.labels)),
            "afbdf0b319be35e021f26e4b9c7ca8f4");
  EXPECT_THAT(Ints(b.labels), ElementsAre(0, 3, 8, 6));
}

TEST(SyntheticDatasetTest, DigestCoversEveryField) {
  const auto digest = [](const lockstep::v1::Dataset& spec, uint64_t seed,
                         std::vector<int64_t> shape, int32_t classes) {
    absl::StatusOr<std::unique_ptr<Dataset>> d =
        OpenDataset(spec, seed, shape, classes);
    EXPECT_THAT(d, IsOk());
    return d.ok() ? (*d)->digest() : std::string();
  };
  std::set<std::string> digests = {
      digest(Synthetic(0), 42, {1, 8, 8}, 10),
      digest(Synthetic(0), 43, {1, 8, 8}, 10),
      digest(Synthetic(0, 7), 42, {1, 8, 8}, 10),
      digest(Synthetic(0), 42, {64}, 10),
      digest(Synthetic(0), 42, {8, 8}, 10),
      digest(Synthetic(0), 42, {1, 8, 8}, 11),
      digest(Synthetic(100), 42, {1, 8, 8}, 10),
      digest(Synthetic(101), 42, {1, 8, 8}, 10),
  };
  EXPECT_EQ(digests.size(), 8u);
}

TEST(SyntheticDatasetTest, RejectsBadSpecsAndArguments) {
  EXPECT_THAT(OpenDataset(Synthetic(-1), 1, {4}, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dataset.synthetic.examples must be >= 0 (0 = "
                                 "endless), got -1")));
  DatasetOptions small;
  small.max_teacher_elements = 100;
  EXPECT_THAT(OpenDataset(Synthetic(0), 1, {3, 32, 32}, 10, small),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("10 * 3072 weights, over the limit of 100")));
  small.max_teacher_elements = 10 * 1000 - 1;
  EXPECT_THAT(OpenDataset(Synthetic(0), 1, {1000}, 10, small),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("10 * 1000 weights, over the limit of 9999")));
  small.max_teacher_elements = 10 * 1000;
  EXPECT_THAT(OpenDataset(Synthetic(0), 1, {1000}, 10, small), IsOk());
  EXPECT_THAT(OpenDataset(Synthetic(0), 1, {}, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.input_shape is empty")));
  EXPECT_THAT(OpenDataset(Synthetic(0), 1, {3, 0}, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.input_shape [3, 0]: dimension 1 must "
                                 "be >= 1")));
  EXPECT_THAT(OpenDataset(Synthetic(0), 1, {4}, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.num_classes must be >= 1, got 0")));

  absl::StatusOr<std::unique_ptr<Dataset>> d =
      OpenDataset(Synthetic(0), 1, {4}, 2);
  ASSERT_THAT(d, IsOk());
  Tensor x, labels;
  EXPECT_THAT((*d)->Batch(-1, 4, &x, &labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("step must be >= 0, got -1")));
  EXPECT_THAT((*d)->Batch(0, 0, &x, &labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch size must be >= 1, got 0")));
  EXPECT_THAT((*d)->Batch(int64_t{1} << 62, 4, &x, &labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("past the end of the synthetic stream")));
  EXPECT_THAT((*d)->Batch(0, int64_t{1} << 40, &x, &labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dataset batch: ")));
  EXPECT_EQ(x.numel(), 0);  // Untouched on error.
}

// ---------------------------------------------------------------------------
// IDX files.

class IdxDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDir();
    images_ = dir_ + "/train-images-idx3-ubyte";
    labels_ = dir_ + "/train-labels-idx1-ubyte";
    // 5 images of 3 x 4 pixels; pixel value 50 * image + 3 * pixel.
    pixels_.resize(5 * 12);
    for (int i = 0; i < 5; ++i) {
      for (int p = 0; p < 12; ++p) {
        pixels_[i * 12 + p] = static_cast<uint8_t>(50 * i + 3 * p);
      }
    }
    WriteU8Idx(images_, {5, 3, 4}, pixels_);
    WriteU8Idx(labels_, {5}, {3, 1, 4, 1, 5});
  }

  static void WriteU8Idx(const std::string& path, std::vector<int64_t> shape,
                         const std::vector<uint8_t>& values) {
    absl::StatusOr<Tensor> t = Tensor::FromValues<uint8_t>(
        std::move(shape), absl::MakeConstSpan(values));
    ASSERT_THAT(t, IsOk());
    ASSERT_THAT(WriteIdx(path, *t), IsOk());
  }

  absl::StatusOr<std::unique_ptr<Dataset>> Open(
      std::vector<int64_t> shape = {1, 3, 4}, int32_t classes = 10,
      DatasetOptions options = Rooted()) {
    return OpenDataset(Files(lockstep::v1::FileDataset::IDX, images_, labels_),
                       /*job_seed=*/1, shape, classes, options);
  }

  // Image e's pixels as floats v / 255.0f.
  std::vector<uint32_t> Expected(std::vector<int> examples) const {
    std::vector<uint32_t> out;
    for (int e : examples) {
      for (int p = 0; p < 12; ++p) {
        out.push_back(Bits(static_cast<float>(pixels_[e * 12 + p]) / 255.0f));
      }
    }
    return out;
  }

  std::string dir_, images_, labels_;
  std::vector<uint8_t> pixels_;
};

TEST_F(IdxDatasetTest, BatchesInFileOrderWrappingAround) {
  absl::StatusOr<std::unique_ptr<Dataset>> d = Open();
  ASSERT_THAT(d, IsOk());
  EXPECT_THAT((*d)->example_shape(), ElementsAre(1, 3, 4));
  const Batch b0 = GetBatch(**d, 0, 3);
  EXPECT_THAT(b0.x.shape(), ElementsAre(3, 1, 3, 4));
  EXPECT_EQ(FloatBits(b0.x), Expected({0, 1, 2}));
  EXPECT_THAT(Ints(b0.labels), ElementsAre(3, 1, 4));
  const Batch b1 = GetBatch(**d, 1, 3);
  EXPECT_EQ(FloatBits(b1.x), Expected({3, 4, 0}));
  EXPECT_THAT(Ints(b1.labels), ElementsAre(1, 5, 3));
  const Batch b7 = GetBatch(**d, 7, 2);  // 14 mod 5 = 4.
  EXPECT_EQ(FloatBits(b7.x), Expected({4, 0}));
  const Batch big = GetBatch(**d, 0, 12);
  EXPECT_THAT(Ints(big.labels),
              ElementsAre(3, 1, 4, 1, 5, 3, 1, 4, 1, 5, 3, 1));
}

TEST_F(IdxDatasetTest, FlatAndTwoDimensionalModelShapesSeeTheSameBits) {
  absl::StatusOr<std::unique_ptr<Dataset>> chw = Open({1, 3, 4});
  absl::StatusOr<std::unique_ptr<Dataset>> hw = Open({3, 4});
  absl::StatusOr<std::unique_ptr<Dataset>> flat = Open({12});
  ASSERT_THAT(chw, IsOk());
  ASSERT_THAT(hw, IsOk());
  ASSERT_THAT(flat, IsOk());
  const Batch a = GetBatch(**chw, 2, 4);
  const Batch b = GetBatch(**hw, 2, 4);
  const Batch c = GetBatch(**flat, 2, 4);
  EXPECT_THAT(c.x.shape(), ElementsAre(4, 12));
  EXPECT_EQ(BatchBytes(a.x, a.labels), BatchBytes(b.x, b.labels));
  EXPECT_EQ(BatchBytes(a.x, a.labels), BatchBytes(c.x, c.labels));
  EXPECT_EQ((*chw)->digest(), (*flat)->digest());
}

TEST_F(IdxDatasetTest, EveryByteValueConvertsByOneDivision) {
  std::vector<uint8_t> all(256);
  for (int v = 0; v < 256; ++v) all[v] = static_cast<uint8_t>(v);
  WriteU8Idx(images_, {1, 16, 16}, all);
  WriteU8Idx(labels_, {1}, {0});
  absl::StatusOr<std::unique_ptr<Dataset>> d = Open({1, 16, 16}, 2);
  ASSERT_THAT(d, IsOk());
  const Batch b = GetBatch(**d, 0, 1);
  const float* x = b.x.data<float>();
  for (int v = 0; v < 256; ++v) {
    volatile float num = static_cast<float>(v);
    volatile float den = 255.0f;
    EXPECT_EQ(Bits(x[v]), Bits(num / den)) << v;
  }
  EXPECT_EQ(x[0], 0.0f);
  EXPECT_EQ(x[255], 1.0f);
  EXPECT_EQ(Bits(x[1]), 0x3b808081u);  // 1/255 rounded to nearest.
}

TEST_F(IdxDatasetTest, DigestIsXxh3OfBothFilesAndTheirLengths) {
  absl::StatusOr<std::unique_ptr<Dataset>> d = Open();
  ASSERT_THAT(d, IsOk());
  const std::string images = ReadRaw(images_);
  const std::string labels = ReadRaw(labels_);
  EXPECT_EQ((*d)->digest(),
            Digest128Hex(absl::StrCat("lockstep-file-dataset/v1\nformat=IDX\n",
                                      images, Le64(images.size()), labels,
                                      Le64(labels.size()))));
}

TEST_F(IdxDatasetTest, OneChangedByteChangesTheDigest) {
  absl::StatusOr<std::unique_ptr<Dataset>> d = Open();
  ASSERT_THAT(d, IsOk());
  const std::string original = (*d)->digest();

  std::vector<uint8_t> pixels = pixels_;
  pixels[37] ^= 1;
  WriteU8Idx(images_, {5, 3, 4}, pixels);
  absl::StatusOr<std::unique_ptr<Dataset>> changed_image = Open();
  ASSERT_THAT(changed_image, IsOk());
  EXPECT_NE((*changed_image)->digest(), original);

  WriteU8Idx(images_, {5, 3, 4}, pixels_);
  WriteU8Idx(labels_, {5}, {3, 1, 4, 1, 6});
  absl::StatusOr<std::unique_ptr<Dataset>> changed_label = Open();
  ASSERT_THAT(changed_label, IsOk());
  EXPECT_NE((*changed_label)->digest(), original);

  WriteU8Idx(labels_, {5}, {3, 1, 4, 1, 5});
  absl::StatusOr<std::unique_ptr<Dataset>> restored = Open();
  ASSERT_THAT(restored, IsOk());
  EXPECT_EQ((*restored)->digest(), original);
}

TEST_F(IdxDatasetTest, ErrorsNameTheFieldTheFileAndTheLimit) {
  const std::string in_field =
      absl::StrCat("dataset.file.inputs_path \"", images_, "\"");
  const std::string lb_field =
      absl::StrCat("dataset.file.labels_path \"", labels_, "\"");

  EXPECT_THAT(Open({1, 16, 16}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat(
                           in_field,
                           ": example shape [1, 3, 4] does not match "
                           "model.input_shape [1, 16, 16]"))));
  EXPECT_THAT(Open({1, 4, 3}), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("does not match")));

  // Label outside [0, num_classes): index 4 holds 5.
  EXPECT_THAT(
      Open({1, 3, 4}, 5),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(absl::StrCat(lb_field,
                                      ": label at index 4 is 5, outside [0, 5) "
                                      "(model.num_classes = 5)"))));
  EXPECT_THAT(Open({1, 3, 4}, 6), IsOk());

  // File size limit.
  DatasetOptions small = Rooted();
  small.max_file_bytes = 75;  // Images are 16 + 60 = 76 bytes.
  EXPECT_THAT(Open({1, 3, 4}, 10, small),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat(in_field,
                                              ": file is 76 bytes, over the "
                                              "limit of 75 bytes"))));

  // Label count differs from image count.
  WriteU8Idx(labels_, {4}, {0, 1, 2, 3});
  EXPECT_THAT(Open(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat(lb_field, ": holds 4 labels but ",
                                              in_field, " holds 5 examples"))));

  // Swapped files: bad magic.
  EXPECT_THAT(
      OpenDataset(Files(lockstep::v1::FileDataset::IDX, labels_, images_), 1,
                  {1, 3, 4}, 10, Rooted()),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(absl::StrCat(
                   "dataset.file.inputs_path \"", labels_,
                   "\": bad magic: expected 0x00000803 (uint8 images "
                   "[n, rows, cols]), got 0x00000801"))));

  // Truncated images.
  WriteU8Idx(labels_, {5}, {3, 1, 4, 1, 5});
  WriteRaw(images_, ReadRaw(images_).substr(0, 70));
  EXPECT_THAT(Open(), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr(absl::StrCat(
                                   in_field,
                                   ": truncated file: expected 76 bytes "
                                   "(header 16 + uint8 data [5, 3, 4] 60), got "
                                   "70"))));

  // Missing files.
  EXPECT_THAT(
      OpenDataset(
          Files(lockstep::v1::FileDataset::IDX, dir_ + "/absent", labels_), 1,
          {1, 3, 4}, 10, Rooted()),
      StatusIs(absl::StatusCode::kNotFound,
               HasSubstr(absl::StrCat("dataset.file.inputs_path \"", dir_,
                                      "/absent\": no such file"))));
  WriteU8Idx(images_, {5, 3, 4}, pixels_);
  EXPECT_THAT(
      OpenDataset(
          Files(lockstep::v1::FileDataset::IDX, images_, dir_ + "/absent"), 1,
          {1, 3, 4}, 10, Rooted()),
      StatusIs(absl::StatusCode::kNotFound,
               HasSubstr(absl::StrCat("dataset.file.labels_path \"", dir_,
                                      "/absent\": no such file"))));

  // Empty image file (n = 0).
  WriteU8Idx(images_, {0, 3, 4}, {});
  EXPECT_THAT(
      Open(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(absl::StrCat(in_field, ": holds no examples"))));
}

// An empty image file may declare rows and cols whose product overflows
// int64; it is refused by its example shape, with no overflow on the way.
TEST_F(IdxDatasetTest, HugeRowsAndColsOfAnEmptyFileAreRefused) {
  std::string header;
  for (const uint32_t word : {uint32_t{0x00000803}, uint32_t{0},
                              uint32_t{0xffffffff}, uint32_t{0xffffffff}}) {
    for (int shift = 24; shift >= 0; shift -= 8) {
      header.push_back(static_cast<char>((word >> shift) & 0xff));
    }
  }
  WriteRaw(images_, header);
  EXPECT_THAT(Open({4}), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("example shape [1, 4294967295, "
                                            "4294967295] does not match "
                                            "model.input_shape [4]")));
  EXPECT_THAT(Open({1}), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("does not match")));
}

TEST(FileDatasetSpecTest, RejectsIncompleteSpecs) {
  EXPECT_THAT(
      OpenDataset(
          Files(lockstep::v1::FileDataset::FORMAT_UNSPECIFIED, "a", "b"), 1,
          {4}, 2),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("dataset.file.format must be IDX, NPY or CIFAR10, got "
                         "FORMAT_UNSPECIFIED")));
  EXPECT_THAT(
      OpenDataset(Files(lockstep::v1::FileDataset::NPY, "", "b"), 1, {4}, 2),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("dataset.file.inputs_path is empty")));
  EXPECT_THAT(
      OpenDataset(Files(lockstep::v1::FileDataset::NPY, "a", ""), 1, {4}, 2),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("dataset.file.labels_path is empty")));
}

// ---------------------------------------------------------------------------
// NPY files.

class NpyDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDir();
    inputs_ = dir_ + "/x.npy";
    labels_ = dir_ + "/y.npy";
    values_.resize(4 * 2 * 3);
    for (size_t i = 0; i < values_.size(); ++i) {
      values_[i] = 0.37f * static_cast<float>(i) - 3.0f;
    }
    values_[5] = -0.0f;
    uint32_t nan = 0x7fc12345u;
    std::memcpy(&values_[6], &nan, 4);
    absl::StatusOr<Tensor> x =
        Tensor::FromValues<float>({4, 2, 3}, absl::MakeConstSpan(values_));
    ASSERT_THAT(x, IsOk());
    ASSERT_THAT(WriteNpy(inputs_, *x), IsOk());
    WriteI32Labels({2, 0, 1, 2});
  }

  void WriteI32Labels(const std::vector<int32_t>& v) {
    absl::StatusOr<Tensor> y = Tensor::FromValues<int32_t>(
        {static_cast<int64_t>(v.size())}, absl::MakeConstSpan(v));
    ASSERT_THAT(y, IsOk());
    ASSERT_THAT(WriteNpy(labels_, *y), IsOk());
  }

  absl::StatusOr<std::unique_ptr<Dataset>> Open(
      std::vector<int64_t> shape = {2, 3}, int32_t classes = 3) {
    return OpenDataset(Files(lockstep::v1::FileDataset::NPY, inputs_, labels_),
                       1, shape, classes, Rooted());
  }

  std::string dir_, inputs_, labels_;
  std::vector<float> values_;
};

TEST_F(NpyDatasetTest, FloatInputsKeepTheirBits) {
  absl::StatusOr<std::unique_ptr<Dataset>> d = Open();
  ASSERT_THAT(d, IsOk());
  const Batch b = GetBatch(**d, 1, 3);  // Examples 3, 0, 1.
  EXPECT_THAT(b.x.shape(), ElementsAre(3, 2, 3));
  std::vector<uint32_t> expect;
  for (int e : {3, 0, 1}) {
    for (int j = 0; j < 6; ++j) expect.push_back(Bits(values_[e * 6 + j]));
  }
  EXPECT_EQ(FloatBits(b.x), expect);
  EXPECT_THAT(Ints(b.labels), ElementsAre(2, 2, 0));
}

TEST_F(NpyDatasetTest, Int64AndUInt8LabelsGiveTheSameBatches) {
  absl::StatusOr<std::unique_ptr<Dataset>> i32 = Open();
  ASSERT_THAT(i32, IsOk());
  const Batch ref = GetBatch(**i32, 0, 4);

  std::string i64 = NpyHeaderV1(NpyDType::kInt64, {4});
  for (int64_t v : {2, 0, 1, 2}) i64 += Le64(static_cast<uint64_t>(v));
  WriteRaw(labels_, i64);
  absl::StatusOr<std::unique_ptr<Dataset>> d64 = Open();
  ASSERT_THAT(d64, IsOk());
  const Batch b64 = GetBatch(**d64, 0, 4);
  EXPECT_EQ(BatchBytes(ref.x, ref.labels), BatchBytes(b64.x, b64.labels));

  const std::vector<uint8_t> u8 = {2, 0, 1, 2};
  absl::StatusOr<Tensor> y =
      Tensor::FromValues<uint8_t>({4}, absl::MakeConstSpan(u8));
  ASSERT_THAT(y, IsOk());
  ASSERT_THAT(WriteNpy(labels_, *y), IsOk());
  absl::StatusOr<std::unique_ptr<Dataset>> d8 = Open();
  ASSERT_THAT(d8, IsOk());
  const Batch b8 = GetBatch(**d8, 0, 4);
  EXPECT_EQ(BatchBytes(ref.x, ref.labels), BatchBytes(b8.x, b8.labels));

  // Same data, other encoding: other file bytes, so another digest.
  EXPECT_NE((*i32)->digest(), (*d8)->digest());
  EXPECT_NE((*i32)->digest(), (*d64)->digest());
}

TEST_F(NpyDatasetTest, UInt8InputsAreScaledLikeIdx) {
  std::vector<uint8_t> px = {0, 1, 2, 127, 254, 255};
  absl::StatusOr<Tensor> x =
      Tensor::FromValues<uint8_t>({1, 6}, absl::MakeConstSpan(px));
  ASSERT_THAT(x, IsOk());
  ASSERT_THAT(WriteNpy(inputs_, *x), IsOk());
  WriteI32Labels({1});
  absl::StatusOr<std::unique_ptr<Dataset>> d = Open({6}, 2);
  ASSERT_THAT(d, IsOk());
  const Batch b = GetBatch(**d, 0, 1);
  std::vector<uint32_t> expect;
  for (uint8_t v : px) expect.push_back(Bits(static_cast<float>(v) / 255.0f));
  EXPECT_EQ(FloatBits(b.x), expect);
}

TEST_F(NpyDatasetTest, DigestIsXxh3OfBothFilesAndSensitiveToOneByte) {
  absl::StatusOr<std::unique_ptr<Dataset>> d = Open();
  ASSERT_THAT(d, IsOk());
  const std::string x = ReadRaw(inputs_);
  const std::string y = ReadRaw(labels_);
  EXPECT_EQ((*d)->digest(),
            Digest128Hex(absl::StrCat("lockstep-file-dataset/v1\nformat=NPY\n",
                                      x, Le64(x.size()), y, Le64(y.size()))));
  std::string x2 = x;
  x2[x2.size() - 1] ^= 0x01;  // Lowest mantissa bit of the last float.
  WriteRaw(inputs_, x2);
  absl::StatusOr<std::unique_ptr<Dataset>> changed = Open();
  ASSERT_THAT(changed, IsOk());
  EXPECT_NE((*changed)->digest(), (*d)->digest());
}

TEST_F(NpyDatasetTest, ErrorsNameTheFieldTheFileAndTheLimit) {
  const std::string in_field =
      absl::StrCat("dataset.file.inputs_path \"", inputs_, "\"");
  const std::string lb_field =
      absl::StrCat("dataset.file.labels_path \"", labels_, "\"");
  EXPECT_THAT(
      Open({6}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(absl::StrCat(in_field,
                                      ": example shape [2, 3] does not match "
                                      "model.input_shape [6]"))));

  WriteI32Labels({2, 0, -1, 2});
  EXPECT_THAT(Open(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat(lb_field,
                                              ": label at index 2 is -1, "
                                              "outside [0, 3)"))));
  std::string i64 = NpyHeaderV1(NpyDType::kInt64, {4});
  for (int64_t v : {int64_t{2}, int64_t{1} << 40, int64_t{1}, int64_t{2}}) {
    i64 += Le64(static_cast<uint64_t>(v));
  }
  WriteRaw(labels_, i64);
  EXPECT_THAT(Open(), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("label at index 1 is 1099511627776, "
                                         "outside [0, 3)")));

  WriteI32Labels({0, 1, 2});
  EXPECT_THAT(Open(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat(lb_field, ": holds 3 labels but ",
                                              in_field, " holds 4 examples"))));

  absl::StatusOr<Tensor> y2 = Tensor::Zeros(DType::kInt32, {4, 1});
  ASSERT_THAT(y2, IsOk());
  ASSERT_THAT(WriteNpy(labels_, *y2), IsOk());
  EXPECT_THAT(
      Open(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(absl::StrCat(
                   lb_field, ": labels must have shape [n], got [4, 1]"))));

  absl::StatusOr<Tensor> yf = Tensor::Zeros(DType::kFloat32, {4});
  ASSERT_THAT(yf, IsOk());
  ASSERT_THAT(WriteNpy(labels_, *yf), IsOk());
  EXPECT_THAT(
      Open(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(absl::StrCat(lb_field,
                                      ": labels must be '<i4', '<i8' or "
                                      "'|u1', got '<f4'"))));

  WriteI32Labels({2, 0, 1, 2});
  absl::StatusOr<Tensor> xi = Tensor::Zeros(DType::kInt32, {4, 2, 3});
  ASSERT_THAT(xi, IsOk());
  ASSERT_THAT(WriteNpy(inputs_, *xi), IsOk());
  EXPECT_THAT(Open(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat(in_field,
                                              ": inputs must be '<f4' (or "
                                              "'|u1'), got '<i4'"))));

  // Fortran order.
  std::string fortran = NpyHeaderV1(NpyDType::kFloat32, {4, 2, 3});
  const size_t pos = fortran.find("False");
  fortran.replace(pos, 5, "True ");
  WriteRaw(inputs_, fortran + std::string(96, '\0'));
  EXPECT_THAT(
      Open(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(absl::StrCat(in_field,
                                      ": fortran_order is True; only C-order "
                                      "arrays are supported"))));

  // Truncated data.
  absl::StatusOr<Tensor> x = Tensor::Zeros(DType::kFloat32, {4, 2, 3});
  ASSERT_THAT(x, IsOk());
  ASSERT_THAT(WriteNpy(inputs_, *x), IsOk());
  const std::string full = ReadRaw(inputs_);
  WriteRaw(inputs_, full.substr(0, full.size() - 1));
  EXPECT_THAT(
      Open(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(absl::StrCat(in_field, ": truncated file: expected ",
                                      full.size(), " bytes"))));
  EXPECT_THAT(Open(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat(", got ", full.size() - 1))));
}

// ---------------------------------------------------------------------------
// The data root.

// Looks like a password file; no error may quote any of it.
constexpr char kSecret[] = "root:*:SECRET-7f3a9c:19000:0:99999:7:::\n";

class DataRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDir();
    root_ = dir_ + "/root";
    ASSERT_EQ(::mkdir(root_.c_str(), 0755), 0);
    absl::StatusOr<std::string> canonical =
        CanonicalDataRoot(root_, "--data_root");
    ASSERT_THAT(canonical, IsOk());
    options_.data_root = *canonical;
    absl::StatusOr<Tensor> x = Tensor::Zeros(DType::kFloat32, {4, 2});
    ASSERT_THAT(x, IsOk());
    ASSERT_THAT(WriteNpy(root_ + "/x.npy", *x), IsOk());
    absl::StatusOr<Tensor> y = Tensor::Zeros(DType::kInt32, {4});
    ASSERT_THAT(y, IsOk());
    ASSERT_THAT(WriteNpy(root_ + "/y.npy", *y), IsOk());
    secret_ = dir_ + "/shadow";
    WriteRaw(secret_, kSecret);
  }

  absl::Status Open(const std::string& inputs, const std::string& labels = "") {
    return OpenDataset(Files(lockstep::v1::FileDataset::NPY, inputs,
                             labels.empty() ? root_ + "/y.npy" : labels),
                       1, {2}, 3, options_)
        .status();
  }

  // The error of opening `inputs`, checked to quote no byte of kSecret.
  absl::Status Refused(const std::string& inputs) {
    absl::Status s = Open(inputs);
    EXPECT_FALSE(s.ok()) << inputs;
    EXPECT_THAT(std::string(s.message()),
                AllOf(Not(HasSubstr("SECRET")), Not(HasSubstr("root:")),
                      Not(HasSubstr("726f6f74"))));
    return s;
  }

  std::string dir_, root_, secret_;
  DatasetOptions options_;
};

TEST_F(DataRootTest, ReadsFilesUnderTheRoot) {
  EXPECT_THAT(Open(root_ + "/x.npy"), IsOk());
  EXPECT_THAT(Open("x.npy", "y.npy"), IsOk());  // Relative to the root.
  ASSERT_EQ(::mkdir((root_ + "/sub").c_str(), 0755), 0);
  ASSERT_EQ(::symlink("../x.npy", (root_ + "/sub/link.npy").c_str()), 0);
  EXPECT_THAT(Open(root_ + "/sub/link.npy"), IsOk());  // A link inside.
}

TEST_F(DataRootTest, NoRootRefusesFileDatasets) {
  options_.data_root.clear();
  EXPECT_THAT(Open(root_ + "/x.npy"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("dataset.file.inputs_path"),
                             HasSubstr("--data_root"))));
  // Synthetic data needs no root.
  EXPECT_THAT(OpenDataset(Synthetic(0), 1, {2}, 3, options_), IsOk());
}

TEST_F(DataRootTest, RefusesPathsOutsideTheRoot) {
  EXPECT_THAT(Refused(secret_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(absl::StrCat(
                                 "dataset.file.inputs_path \"", secret_, "\"")),
                             HasSubstr("outside the worker's --data_root"))));
  EXPECT_THAT(Refused("/etc/shadow"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("outside the worker's --data_root")));
  // A sibling directory whose name extends the root's is outside.
  ASSERT_EQ(::mkdir((root_ + "2").c_str(), 0755), 0);
  WriteRaw(root_ + "2/x.npy", kSecret);
  EXPECT_THAT(Refused(root_ + "2/x.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("outside the worker's --data_root")));
  EXPECT_THAT(
      Open(root_ + "/x.npy", secret_),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("dataset.file.labels_path \"" + secret_ + "\"")));
}

TEST_F(DataRootTest, RefusesDotDot) {
  EXPECT_THAT(Refused(root_ + "/../shadow"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("must not contain a \"..\" component")));
  // Even when the result would stay inside.
  EXPECT_THAT(
      Refused("sub/../x.npy"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"..\"")));
}

TEST_F(DataRootTest, RefusesSymlinkEscapes) {
  ASSERT_EQ(::symlink(secret_.c_str(), (root_ + "/escape.npy").c_str()), 0);
  EXPECT_THAT(Refused(root_ + "/escape.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("outside the worker's --data_root")));
  ASSERT_EQ(::symlink(dir_.c_str(), (root_ + "/up").c_str()), 0);
  EXPECT_THAT(Refused(root_ + "/up/shadow"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("outside the worker's --data_root")));
  // A dangling link out of the root is refused as outside, not "no such
  // file".
  ASSERT_EQ(::symlink("/nonexistent/x", (root_ + "/dangling").c_str()), 0);
  EXPECT_THAT(Refused(root_ + "/dangling"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("outside the worker's --data_root")));
}

TEST_F(DataRootTest, RefusesFifosDirectoriesAndHugeFiles) {
  // A FIFO with no writer: refused at once, never read (a read would block).
  ASSERT_EQ(::mkfifo((root_ + "/fifo").c_str(), 0644), 0);
  EXPECT_THAT(Refused(root_ + "/fifo"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not a regular file")));
  ASSERT_EQ(::mkdir((root_ + "/dir").c_str(), 0755), 0);
  EXPECT_THAT(Refused(root_ + "/dir"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not a regular file")));
  // A sparse file over the limit: refused by its size, not read.
  options_.max_file_bytes = 1 << 20;
  const std::string huge = root_ + "/huge.npy";
  WriteRaw(huge, kSecret);
  ASSERT_EQ(::truncate(huge.c_str(), (1 << 20) + 1), 0);
  EXPECT_THAT(Refused(huge),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("file is 1048577 bytes, over the limit of "
                                 "1048576 bytes")));
}

TEST_F(DataRootTest, FormatErrorsDoNotQuoteTheFile) {
  // Inside the root, the wrong format: the errors name what was expected.
  WriteRaw(root_ + "/secret.npy", kSecret);
  EXPECT_THAT(Refused(root_ + "/secret.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("bad magic: expected \"\\x93NUMPY\"")));
  EXPECT_THAT(
      OpenDataset(Files(lockstep::v1::FileDataset::IDX, root_ + "/secret.npy",
                        root_ + "/y.npy"),
                  1, {1, 2, 2}, 3, options_),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("bad magic: expected 0x00000803"),
                     Not(HasSubstr("726f6f74")), Not(HasSubstr("root:*")))));
  // A well-formed NPY prefix whose header dictionary holds the secret.
  const std::string dict = "{'root:*:SECRET-7f3a9c': 1, }";
  std::string header = "\x93NUMPY\x01";
  header.push_back('\0');
  header.push_back(static_cast<char>(dict.size()));
  header.push_back('\0');
  WriteRaw(root_ + "/dict.npy", header + dict);
  EXPECT_THAT(Refused(root_ + "/dict.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("malformed NPY header")));
  const std::string descr =
      "{'descr': 'root:*:SECRET-7f3a9c', 'fortran_order': False, "
      "'shape': (4, 2), }";
  header.resize(8);
  header.push_back(static_cast<char>(descr.size()));
  header.push_back('\0');
  WriteRaw(root_ + "/descr.npy", header + descr);
  EXPECT_THAT(Refused(root_ + "/descr.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unsupported dtype")));
}

}  // namespace
}  // namespace lockstep::worker

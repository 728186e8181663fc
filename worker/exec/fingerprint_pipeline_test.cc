#include "worker/exec/fingerprint_pipeline.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/tensor.h"

namespace lockstep::worker {
namespace {

namespace v1 = ::lockstep::v1;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

kernels::Tensor Floats(std::vector<float> v) {
  return *kernels::Tensor::FromValues<float>({static_cast<int64_t>(v.size())},
                                             v);
}

// A stand-in hash: the index and the tensor's element sum, and a log of
// the order of the calls.
struct Recorder {
  std::mutex mu;
  std::vector<int32_t> calls;
  int32_t fail_index = -1;

  FingerprintPipeline::HashFn Fn() {
    return [this](const kernels::Tensor& t, int32_t index,
                  v1::TensorFingerprint* out) {
      {
        std::lock_guard<std::mutex> lock(mu);
        calls.push_back(index);
      }
      if (index == fail_index) {
        return absl::DataLossError(absl::StrCat("tensor ", index));
      }
      double sum = 0;
      for (int64_t i = 0; i < t.numel(); ++i) sum += t.data<float>()[i];
      out->set_index(index);
      out->mutable_stats()->set_sum(sum);
      return absl::OkStatus();
    };
  }
  std::vector<int32_t> Calls() {
    std::lock_guard<std::mutex> lock(mu);
    return calls;
  }
};

TEST(FingerprintPipelineTest, HashesEverySubmissionInOrder) {
  Recorder rec;
  FingerprintPipeline p(rec.Fn());
  std::vector<v1::TensorFingerprint> out(4);
  p.Reset(out.size());
  for (int i = 0; i < 4; ++i) {
    p.Submit(Floats({1.0f * i, 2.0f}), i, &out[i]);
  }
  ASSERT_THAT(p.Drain(), IsOk());
  EXPECT_FALSE(p.Busy());
  EXPECT_THAT(rec.Calls(), ElementsAre(0, 1, 2, 3));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(out[i].index(), i);
    EXPECT_EQ(out[i].stats().sum(), i + 2.0);
  }
}

// Held, the thread hashes exactly what a wait asks for: the last queued
// tensor overlapping the range and everything queued before it.
TEST(FingerprintPipelineTest, WaitForHashesThroughTheLastOverlappingTensor) {
  Recorder rec;
  FingerprintPipeline p(rec.Fn(), /*hold=*/true);
  kernels::Tensor a = Floats({1, 2, 3, 4});
  kernels::Tensor b = Floats({5, 6, 7, 8});
  kernels::Tensor c = Floats({9});
  kernels::Tensor b_view = *b.Reshape({2, 2});  // same storage as b
  std::vector<v1::TensorFingerprint> out(4);
  p.Reset(out.size());
  p.Submit(a, 0, &out[0]);
  p.Submit(b, 1, &out[1]);
  p.Submit(c, 2, &out[2]);
  EXPECT_TRUE(p.Busy());
  kernels::Tensor other = Floats({0, 0});
  p.WaitFor(other.raw_data(), other.bytes());  // overlaps nothing queued
  EXPECT_TRUE(rec.Calls().empty());
  // The last float of b: b and a (queued before it) are hashed, c is not.
  p.WaitFor(static_cast<const char*>(b_view.raw_data()) + 12, 4);
  EXPECT_THAT(rec.Calls(), ElementsAre(0, 1));
  EXPECT_EQ(out[1].stats().sum(), 26.0);
  p.WaitFor(b.raw_data(), b.bytes());  // already hashed: returns at once
  EXPECT_THAT(rec.Calls(), ElementsAre(0, 1));
  // A write to c now would reach its hash; Drain hashes it.
  c.data<float>()[0] = 10;
  ASSERT_THAT(p.Drain(), IsOk());
  EXPECT_THAT(rec.Calls(), ElementsAre(0, 1, 2));
  EXPECT_EQ(out[2].stats().sum(), 10.0);
}

TEST(FingerprintPipelineTest, DrainReportsTheFirstErrorOnce) {
  Recorder rec;
  rec.fail_index = 1;
  FingerprintPipeline p(rec.Fn());
  std::vector<v1::TensorFingerprint> out(3);
  p.Reset(out.size());
  for (int i = 0; i < 3; ++i) p.Submit(Floats({1}), i, &out[i]);
  EXPECT_THAT(p.Drain(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("tensor 1")));
  EXPECT_EQ(out[2].index(), 2);  // the others are still hashed
  // The next step starts clean.
  p.Reset(1);
  p.Submit(Floats({1}), 0, &out[0]);
  EXPECT_THAT(p.Drain(), IsOk());
}

// Many short steps with waits in between, the thread free-running: every
// fingerprint lands in its own slot, and tensors rewritten after a wait are
// hashed with their values from before.
TEST(FingerprintPipelineTest, ManyStepsWithWaits) {
  Recorder rec;
  FingerprintPipeline p(rec.Fn());
  constexpr int kPerStep = 16;
  std::vector<kernels::Tensor> buffers;
  for (int i = 0; i < kPerStep; ++i) buffers.push_back(Floats({0, 0, 0}));
  std::vector<v1::TensorFingerprint> out(kPerStep);
  for (int step = 0; step < 300; ++step) {
    p.Reset(kPerStep);
    for (int i = 0; i < kPerStep; ++i) {
      kernels::Tensor& t = buffers[i];
      p.WaitFor(t.raw_data(), t.bytes());
      for (int k = 0; k < 3; ++k) t.data<float>()[k] = step + i;
      p.Submit(t, i, &out[i]);
      if (i % 5 == 4) {  // rewrite an earlier tensor, as clipping does
        kernels::Tensor& back = buffers[i - 3];
        p.WaitFor(back.raw_data(), back.bytes());
        back.data<float>()[0] = -1e9f;
      }
    }
    ASSERT_THAT(p.Drain(), IsOk());
    for (int i = 0; i < kPerStep; ++i) {
      ASSERT_EQ(out[i].stats().sum(), 3.0 * (step + i)) << step << " " << i;
    }
  }
  EXPECT_EQ(rec.Calls().size(), 300u * kPerStep);
}

// The thread polls kPipelinePollMicros unless LOCKSTEP_CPU_SPIN_MICROS or
// the caller says otherwise; with no poll at all and with one shorter than
// the gaps between tensors, every tensor is still hashed (the thread
// naps and looks again, or Drain wakes it).
TEST(FingerprintPipelineTest, PollsAsConfigured) {
  Recorder rec;
  unsetenv("LOCKSTEP_CPU_SPIN_MICROS");
  EXPECT_EQ(FingerprintPipeline(rec.Fn()).spin_micros(), kPipelinePollMicros);
  setenv("LOCKSTEP_CPU_SPIN_MICROS", "50", 1);
  EXPECT_EQ(FingerprintPipeline(rec.Fn()).spin_micros(), 50);
  setenv("LOCKSTEP_CPU_SPIN_MICROS", "-3", 1);
  EXPECT_EQ(FingerprintPipeline(rec.Fn()).spin_micros(), kPipelinePollMicros);
  unsetenv("LOCKSTEP_CPU_SPIN_MICROS");
  EXPECT_EQ(FingerprintPipeline(rec.Fn(), false, 7).spin_micros(), 7);
  for (const int64_t spin : {int64_t{0}, int64_t{300}}) {
    Recorder r;
    FingerprintPipeline p(r.Fn(), /*hold=*/false, spin);
    std::vector<v1::TensorFingerprint> out(6);
    p.Reset(out.size());
    for (int i = 0; i < 6; ++i) {
      // Gaps of 0, 200 and 1000 us: inside and past the poll.
      std::this_thread::sleep_for(std::chrono::microseconds(i % 3 == 0 ? 0
                                                            : i % 3 == 1
                                                                ? 200
                                                                : 1000));
      p.Submit(Floats({static_cast<float>(i), 1}), i, &out[i]);
    }
    ASSERT_THAT(p.Drain(), IsOk());
    for (int i = 0; i < 6; ++i) {
      EXPECT_EQ(out[i].stats().sum(), i + 1.0) << spin << " " << i;
    }
    EXPECT_THAT(r.Calls(), ElementsAre(0, 1, 2, 3, 4, 5)) << spin;
  }
}

// Submit never wakes the thread: inside a step it naps and looks again, so
// a tensor submitted while it sleeps is hashed without any Drain or
// WaitFor (bounded wait); after Drain it sleeps until the next Reset, which
// wakes it.
TEST(FingerprintPipelineTest, HashesWhatArrivesWhileItNaps) {
  Recorder rec;
  FingerprintPipeline p(rec.Fn(), /*hold=*/false, /*spin_micros=*/0);
  std::vector<v1::TensorFingerprint> out(3);
  for (int step = 0; step < 3; ++step) {
    p.Reset(1);
    // Long enough for the thread to have gone to sleep.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    p.Submit(Floats({static_cast<float>(step)}), step, &out[step]);
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (p.Busy() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    EXPECT_FALSE(p.Busy()) << step;
    ASSERT_THAT(p.Drain(), IsOk());
    EXPECT_EQ(out[step].stats().sum(), step);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  EXPECT_THAT(rec.Calls(), ElementsAre(0, 1, 2));
}

TEST(FingerprintPipelineTest, DestroyedWithTensorsQueued) {
  Recorder rec;
  std::vector<v1::TensorFingerprint> out(2);
  {
    FingerprintPipeline p(rec.Fn(), /*hold=*/true);
    p.Reset(out.size());
    p.Submit(Floats({1}), 0, &out[0]);
    p.Submit(Floats({2}), 1, &out[1]);
  }  // returns: the held tensors are abandoned
  EXPECT_TRUE(rec.Calls().empty());
}

// The chooser's schedule: a background warm-up, then the probe (runs of
// kRunSteps steps inline and in the background in turns), then the faster
// way for kChosenSteps steps, then the next probe.
TEST(BackgroundChooserTest, ProbesThenUsesTheFasterWay) {
  constexpr int kProbe = BackgroundChooser::kProbeSteps;
  constexpr int kRun = BackgroundChooser::kRunSteps;
  for (const bool inline_faster : {true, false}) {
    SCOPED_TRACE(inline_faster ? "inline faster" : "background faster");
    BackgroundChooser c;
    EXPECT_TRUE(c.Background());  // warm-up
    c.Record(100.0);              // not compared
    for (int p = 0; p < kProbe; ++p) {
      const bool bg = c.Background();
      EXPECT_EQ(bg, p / kRun % 2 == 1) << "probe step " << p;
      c.Record(bg == inline_faster ? 2.0 : 1.0);
    }
    for (int i = 0; i < BackgroundChooser::kChosenSteps; ++i) {
      ASSERT_EQ(c.Background(), !inline_faster) << "step " << i;
      c.Record(i % 2 == 0 ? 0.1 : 10.0);  // not compared
    }
    // The next probe, which may change the choice.
    for (int p = 0; p < kProbe; ++p) {
      const bool bg = c.Background();
      EXPECT_EQ(bg, p / kRun % 2 == 1) << "second probe step " << p;
      c.Record(bg == inline_faster ? 1.0 : 2.0);
    }
    EXPECT_EQ(c.Background(), inline_faster);
    EXPECT_EQ(c.steps(), 1 + 2 * kProbe + BackgroundChooser::kChosenSteps);
  }
}

// Only each run's last step is timed, so the step after a switch does not
// decide; each way's fastest timed step over the two rounds counts; a tie
// goes to the background.
TEST(BackgroundChooserTest, FastestLastStepOfEachRunDecides) {
  static_assert(BackgroundChooser::kRunSteps == 2 &&
                BackgroundChooser::kProbeRounds == 2 &&
                BackgroundChooser::kProbeSteps == 8);
  // warm-up; in, in*, bg, bg*, in, in*, bg, bg* (* timed)
  const auto choose = [](std::initializer_list<double> times) {
    BackgroundChooser c;
    for (double t : times) c.Record(t);
    return c.Background();
  };
  // The background's switches slow.
  EXPECT_TRUE(choose({1, 1, 1.0, 9, 0.9, 1, 1.0, 9, 0.9}));
  // A tie.
  EXPECT_TRUE(choose({1, 1, 1.0, 1, 1.0, 1, 1.0, 1, 1.0}));
  // Inline's switches slow.
  EXPECT_FALSE(choose({1, 9, 0.8, 1, 0.9, 9, 0.8, 1, 0.9}));
  EXPECT_FALSE(choose({9, 1, 1.0, 0.1, 1.1, 1, 1.0, 0.1, 1.1}));
  // One slow timed step, either way and in either round, does not decide.
  EXPECT_TRUE(choose({1, 1, 1.0, 1, 1.3, 1, 1.0, 1, 0.9}));
  EXPECT_TRUE(choose({1, 1, 1.0, 1, 0.9, 1, 1.0, 1, 1.3}));
  EXPECT_FALSE(choose({1, 1, 0.9, 1, 1.0, 1, 1.3, 1, 1.0}));
  EXPECT_FALSE(choose({1, 1, 1.3, 1, 1.0, 1, 0.9, 1, 1.0}));
  // Each way's fastest, not its last or first.
  EXPECT_FALSE(choose({1, 1, 0.8, 1, 0.9, 1, 1.0, 1, 0.85}));
  EXPECT_TRUE(choose({1, 1, 0.9, 1, 1.0, 1, 0.95, 1, 0.85}));
}

// A later probe starts afresh: the first probe's fast steps do not carry
// over into the next one's comparison.
TEST(BackgroundChooserTest, EachProbeComparesItsOwnSteps) {
  constexpr int kProbe = BackgroundChooser::kProbeSteps;
  constexpr int kRun = BackgroundChooser::kRunSteps;
  BackgroundChooser c;
  c.Record(1.0);  // warm-up
  for (int p = 0; p < kProbe; ++p) {
    c.Record(c.Background() ? 0.1 : 1.0);  // background far faster
  }
  ASSERT_TRUE(c.Background());
  for (int i = 0; i < BackgroundChooser::kChosenSteps; ++i) c.Record(0.1);
  for (int p = 0; p < kProbe; ++p) {
    ASSERT_EQ(c.Background(), p / kRun % 2 == 1) << "probe step " << p;
    c.Record(c.Background() ? 2.0 : 1.0);  // now inline is faster
  }
  EXPECT_FALSE(c.Background());
}

}  // namespace
}  // namespace lockstep::worker

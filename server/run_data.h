// A run's stored fingerprints as the analysis reads them: one step at a
// time, so comparing runs needs memory for one step of each run whatever
// the job's length. Shared by the store (which implements StepReader over
// SQLite) and server/analysis (which only consumes it); no SQLite here.
#ifndef LOCKSTEP_SERVER_RUN_DATA_H_
#define LOCKSTEP_SERVER_RUN_DATA_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "lockstep/v1/fingerprint.pb.h"
#include "lockstep/v1/job.pb.h"

namespace lockstep::server {

// The stored fingerprints of one completed step of one run attempt.
struct StepRecord {
  int32_t step = 0;
  // Fingerprints in manifest order (index i = manifest entry i).
  std::vector<lockstep::v1::TensorFingerprint> fingerprints;
  std::string step_digest;
};

// Reads a run attempt's completed steps in increasing step order.
// Not thread-safe; one reader per consumer.
class StepReader {
 public:
  virtual ~StepReader() = default;
  // The next step, or nullopt after the last one.
  virtual absl::StatusOr<std::optional<StepRecord>> Next() = 0;
};

// A StepReader over steps held in memory (tests, tools). `steps` must be
// ordered by step and outlive the reader.
class VectorStepReader final : public StepReader {
 public:
  explicit VectorStepReader(const std::vector<StepRecord>* steps)
      : steps_(steps) {}
  absl::StatusOr<std::optional<StepRecord>> Next() override {
    if (next_ >= steps_->size()) return std::optional<StepRecord>();
    return std::optional<StepRecord>((*steps_)[next_++]);
  }

 private:
  const std::vector<StepRecord>* steps_;
  size_t next_ = 0;
};

// A run with its steps in memory (tests and small tools).
struct RunData {
  lockstep::v1::Run run;
  std::vector<StepRecord> steps;  // ordered by step
};

// A run with a reader over its stored steps: what the verdict streams
// over. `steps` is null for runs that did not succeed.
struct RunSteps {
  lockstep::v1::Run run;
  std::unique_ptr<StepReader> steps;
};

// RunSteps over in-memory RunData (which must outlive the result).
inline std::vector<RunSteps> StreamRuns(const std::vector<RunData>& runs) {
  std::vector<RunSteps> out;
  out.reserve(runs.size());
  for (const RunData& r : runs) {
    RunSteps s;
    s.run = r.run;
    if (r.run.state() == lockstep::v1::RUN_SUCCEEDED) {
      s.steps = std::make_unique<VectorStepReader>(&r.steps);
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_RUN_DATA_H_

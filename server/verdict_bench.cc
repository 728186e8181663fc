// Peak memory of a job's verdict against the job's size.
//
// For each size, in a fresh child process: a real store (an SQLite file in
// --dir), one job of --runs runs x S steps x --entries fingerprints
// inserted and ingested through the store's public API (InsertJob, then
// IngestBatch: one batch per step, committed as a worker's are), then
// JudgeJob over Store::OpenRunSteps readers. The peak resident set is
// measured around the verdict alone (VmHWM reset through
// /proc/self/clear_refs just before it). For contrast, the same verdict
// over every step loaded into memory first (Store::LoadRunSteps): what a
// verdict that does not stream costs.
//
//   bazel run //server:verdict_bench -- --dir=/dev/shm
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "kernels/hash/fingerprint.h"
#include "server/analysis.h"
#include "server/run_data.h"
#include "server/store/store.h"

ABSL_FLAG(int, runs, 4, "runs per job");
ABSL_FLAG(int, entries, 32, "manifest entries (tensors) per step");
ABSL_FLAG(std::string, steps, "1000,10000,100000",
          "captured steps per job, one job per value");
ABSL_FLAG(std::string, dir, "",
          "directory for the database files; default $TMPDIR or /tmp");
ABSL_FLAG(bool, contrast, true,
          "also measure the verdict over steps loaded into memory");

namespace lockstep::server {
namespace {

namespace v1 = ::lockstep::v1;
using ::lockstep::store::IngestResult;
using ::lockstep::store::Store;
using ::lockstep::store::StoreOptions;

int64_t StatusKb(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  const std::string prefix = absl::StrCat(field, ":");
  while (std::getline(status, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits += c;
    }
    int64_t kb = 0;
    if (absl::SimpleAtoi(digits, &kb)) return kb;
  }
  return -1;
}

// Resets VmHWM to the current RSS (Linux >= 4.0). false if not supported.
bool ResetPeakRss() {
  std::ofstream clear("/proc/self/clear_refs");
  if (!clear) return false;
  clear << "5";
  clear.flush();
  return static_cast<bool>(clear);
}

struct Size {
  int runs;
  int steps;
  int entries;
  int64_t fingerprints() const { return int64_t{runs} * steps * entries; }
};

struct Measurement {
  double ingest_s = 0;
  double verdict_s = 0;
  int64_t rss_before_kb = 0;
  int64_t verdict_peak_kb = 0;  // VmHWM growth over the verdict
  int64_t verdict_hwm_kb = 0;   // VmHWM at the end of the verdict
  int64_t loaded_peak_kb = -1;  // the same, with every step loaded first
  std::string verdict;
};

v1::TensorFingerprint MakeFingerprint(int run, int step, int index,
                                      bool diverged) {
  v1::TensorFingerprint fp;
  fp.set_index(index);
  fp.set_hash_hi(0x9e3779b97f4a7c15ull * (step + 1) + index);
  fp.set_hash_lo(diverged ? 0xdeadbeefull + run : 0x51ull);
  v1::TensorStats* s = fp.mutable_stats();
  s->set_sum(0.25 * index + step);
  s->set_l2(1.0 + index);
  s->set_max_abs(static_cast<float>(index));
  return fp;
}

absl::StatusOr<Measurement> Measure(const std::string& dir, const Size& size,
                                    bool contrast) {
  Measurement m;
  const std::string path =
      absl::StrFormat("%s/verdict_bench_%d_%d.db", dir, getpid(), size.steps);
  unlink(path.c_str());
  StoreOptions options;
  options.path = path;
  LS_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(options));

  const std::string job_id = absl::StrCat("bench-", size.steps);
  v1::TensorManifest manifest;
  manifest.set_steps(size.steps);
  manifest.set_manifest_digest(std::string(32, '0'));
  for (int i = 0; i < size.entries; ++i) {
    v1::ManifestEntry* e = manifest.add_entries();
    e->set_index(i);
    e->set_phase(v1::PHASE_FORWARD);
    e->set_layer(absl::StrCat("layer", i / 4));
    e->set_op("dense.forward");
    e->set_role(v1::ACTIVATION);
    e->add_shape(256);
  }
  v1::Job job;
  job.set_job_id(job_id);
  job.set_state(v1::JOB_RUNNING);
  job.set_model_digest(std::string(32, 'a'));
  job.set_config_digest(std::string(32, 'b'));
  job.mutable_spec()->mutable_model()->set_name("bench");
  job.mutable_spec()->mutable_config()->set_determinism(v1::CANONICAL);
  for (int r = 0; r < size.runs; ++r) {
    v1::Run* run = job.add_runs();
    run->set_run_id(absl::StrCat(job_id, "-r", r));
    run->set_job_id(job_id);
    run->set_index(r);
    run->set_attempt(1);
    run->set_state(v1::RUN_RUNNING);
    run->set_worker_id(absl::StrCat("w", r));
    run->set_device_id(absl::StrCat("dev", r));
    run->set_hardware_class_digest(std::string(32, 'c'));
    run->set_steps_total(size.steps);
  }
  LS_RETURN_IF_ERROR(store->InsertJob(job, manifest, ""));

  // Ingest: one batch per step per run, as a worker streams them. The
  // last run diverges at the last step, so the verdict walks every tensor
  // there.
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < size.runs; ++r) {
    v1::Run* run = job.mutable_runs(r);
    std::vector<hash::Fingerprint> parts = {hash::Fingerprint{0, 0}};
    std::vector<hash::Fingerprint> fps;
    for (int s = 0; s < size.steps; ++s) {
      const bool diverged = r == size.runs - 1 && s == size.steps - 1;
      v1::FingerprintBatch batch;
      batch.set_run_id(run->run_id());
      batch.set_attempt(1);
      batch.set_sequence(s);
      batch.set_step(s);
      fps.clear();
      for (int i = 0; i < size.entries; ++i) {
        *batch.add_fingerprints() = MakeFingerprint(r, s, i, diverged);
        fps.push_back(hash::Fingerprint{batch.fingerprints(i).hash_hi(),
                                        batch.fingerprints(i).hash_lo()});
      }
      const hash::Fingerprint step_digest = hash::CombineDigests(fps);
      parts.push_back(step_digest);
      batch.set_step_complete(true);
      batch.set_step_digest(step_digest.ToHex());
      LS_ASSIGN_OR_RETURN(IngestResult ingested,
                          store->IngestBatch(batch, size.entries));
      (void)ingested;
    }
    run->set_state(v1::RUN_SUCCEEDED);
    run->set_run_digest(hash::CombineDigests(parts).ToHex());
    LS_RETURN_IF_ERROR(store->UpdateRun(*run));
  }
  job.set_state(v1::JOB_SUCCEEDED);
  const auto t1 = std::chrono::steady_clock::now();
  m.ingest_s = std::chrono::duration<double>(t1 - t0).count();

  // The verdict, streaming from the store.
  {
    std::vector<RunSteps> runs;
    for (const v1::Run& run : job.runs()) {
      RunSteps rs;
      rs.run = run;
      rs.steps = store->OpenRunSteps(run.run_id(), run.attempt());
      runs.push_back(std::move(rs));
    }
    m.rss_before_kb = StatusKb("VmRSS");
    if (!ResetPeakRss()) {
      return absl::UnavailableError(
          "cannot reset the peak RSS (/proc/self/clear_refs)");
    }
    const int64_t base = StatusKb("VmHWM");
    const auto v0 = std::chrono::steady_clock::now();
    LS_ASSIGN_OR_RETURN(JobVerdict verdict,
                        JudgeJob(job, manifest, std::move(runs), {}, 1, 0));
    const auto v1t = std::chrono::steady_clock::now();
    m.verdict_hwm_kb = StatusKb("VmHWM");
    m.verdict_peak_kb = m.verdict_hwm_kb - base;
    m.verdict_s = std::chrono::duration<double>(v1t - v0).count();
    m.verdict = v1::Verdict_Name(verdict.report.verdict());
  }
  // Contrast: every step of every run in memory first.
  if (contrast) {
    ResetPeakRss();
    const int64_t base = StatusKb("VmHWM");
    std::vector<RunData> loaded;
    for (const v1::Run& run : job.runs()) {
      RunData d;
      d.run = run;
      LS_ASSIGN_OR_RETURN(d.steps,
                          store->LoadRunSteps(run.run_id(), run.attempt()));
      loaded.push_back(std::move(d));
    }
    LS_ASSIGN_OR_RETURN(JobVerdict verdict,
                        JudgeJob(job, manifest, StreamRuns(loaded), {}, 1, 0));
    (void)verdict;
    m.loaded_peak_kb = StatusKb("VmHWM") - base;
  }
  store.reset();
  unlink(path.c_str());
  unlink((path + "-wal").c_str());
  unlink((path + "-shm").c_str());
  return m;
}

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::string dir = absl::GetFlag(FLAGS_dir);
  if (dir.empty()) {
    const char* tmp = getenv("TMPDIR");
    dir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }
  std::vector<Size> sizes;
  for (absl::string_view s :
       absl::StrSplit(absl::GetFlag(FLAGS_steps), ',', absl::SkipEmpty())) {
    int steps = 0;
    if (!absl::SimpleAtoi(s, &steps) || steps < 1) {
      std::fprintf(stderr, "--steps: \"%s\" is not a positive count\n",
                   std::string(s).c_str());
      return 2;
    }
    sizes.push_back(
        Size{absl::GetFlag(FLAGS_runs), steps, absl::GetFlag(FLAGS_entries)});
  }
  std::printf(
      "verdict peak RSS against job size (%d runs x steps x %d tensors; "
      "store in %s)\n\n",
      absl::GetFlag(FLAGS_runs), absl::GetFlag(FLAGS_entries), dir.c_str());
  std::printf("%8s %14s %10s %10s %17s %12s %12s %14s %16s\n", "steps",
              "fingerprints", "ingest s", "verdict s", "verdict", "RSS before",
              "peak RSS", "peak growth", "all-loaded growth");
  // Each size in a fresh child process, so that memory one size freed
  // cannot hide the next one's peak.
  for (const Size& size : sizes) {
    std::fflush(stdout);
    const pid_t child = fork();
    if (child < 0) {
      std::perror("fork");
      return 1;
    }
    if (child == 0) {
      absl::StatusOr<Measurement> m =
          Measure(dir, size, absl::GetFlag(FLAGS_contrast));
      if (!m.ok()) {
        std::fprintf(stderr, "steps=%d: %s\n", size.steps,
                     m.status().ToString().c_str());
        std::fflush(stderr);
        _exit(1);
      }
      const std::string loaded =
          m->loaded_peak_kb < 0 ? "-" : absl::StrCat(m->loaded_peak_kb, " kB");
      std::printf(
          "%8d %14lld %10.2f %10.3f %17s %9lld kB %9lld kB %11lld kB "
          "%16s\n",
          size.steps, static_cast<long long>(size.fingerprints()), m->ingest_s,
          m->verdict_s, m->verdict.c_str(),
          static_cast<long long>(m->rss_before_kb),
          static_cast<long long>(m->verdict_hwm_kb),
          static_cast<long long>(m->verdict_peak_kb), loaded.c_str());
      std::fflush(stdout);
      _exit(0);
    }
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
      return 1;
    }
  }
  std::printf(
      "\nRSS before: after ingest, before the verdict; peak RSS: VmHWM at "
      "the end of the streamed verdict (reset just before it); peak growth: "
      "the verdict's own; all-loaded growth: the same verdict with every "
      "step loaded into memory first.\n");
  return 0;
}
}  // namespace
}  // namespace lockstep::server

int main(int argc, char** argv) { return lockstep::server::Main(argc, argv); }

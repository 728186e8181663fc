#include "tests/load/load_harness.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/device_identity.h"
#include "grpcpp/grpcpp.h"
#include "kernels/hash/fingerprint.h"
#include "lockstep/v1/lockstep_service.grpc.pb.h"
#include "lockstep/v1/worker_gateway.grpc.pb.h"
#include "tests/testing/cluster.h"
#include "worker/hardware_probe.h"

namespace lockstep::load {
namespace {

using ::lockstep::v1::CoordinatorMessage;
using ::lockstep::v1::FingerprintBatch;
using ::lockstep::v1::RunAssignment;
using ::lockstep::v1::WorkerMessage;

// Run id of heartbeat probes (a valid run id no run has).
constexpr char kProbeRunId[] = "heartbeat-probe";

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// Nearest-rank percentile of `v` (sorted in place); 0 when empty.
double Percentile(std::vector<double>* v, double p) {
  if (v->empty()) return 0;
  std::sort(v->begin(), v->end());
  size_t rank = static_cast<size_t>(p / 100.0 * v->size() + 0.999999);
  rank = std::clamp<size_t>(rank, 1, v->size());
  return (*v)[rank - 1];
}

// The synthesized fingerprints of one manifest: one complete batch per
// captured step (run id, attempt and sequence left to fill), and the run
// digest of a run that sends them all.
struct Workload {
  std::vector<FingerprintBatch> steps;
  std::string run_digest;
  int entries = 0;
};

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

absl::StatusOr<std::shared_ptr<const Workload>> BuildWorkload(
    const v1::TensorManifest& manifest) {
  auto w = std::make_shared<Workload>();
  w->entries = manifest.entries_size();
  std::vector<int> captured(manifest.captured_steps().begin(),
                            manifest.captured_steps().end());
  if (captured.empty()) {
    for (int s = 0; s < manifest.steps(); ++s) captured.push_back(s);
  }
  absl::StatusOr<hash::Fingerprint> manifest_fp =
      hash::Fingerprint::FromHex(manifest.manifest_digest());
  if (!manifest_fp.ok()) return manifest_fp.status();
  std::vector<hash::Fingerprint> parts = {*manifest_fp};
  for (int step : captured) {
    FingerprintBatch b;
    b.set_step(step);
    std::vector<hash::Fingerprint> fps;
    for (int i = 0; i < w->entries; ++i) {
      const uint64_t seed = (static_cast<uint64_t>(step) << 32) | i;
      hash::Fingerprint fp{Mix(seed), Mix(seed ^ 0x5bd1e995)};
      fps.push_back(fp);
      v1::TensorFingerprint* f = b.add_fingerprints();
      f->set_index(manifest.entries(i).index());
      f->set_hash_hi(fp.hi);
      f->set_hash_lo(fp.lo);
      f->mutable_stats()->set_sum(static_cast<double>(fp.lo % 1000) / 7.0);
      f->mutable_stats()->set_l2(1.0 + static_cast<double>(fp.hi % 1000));
      f->mutable_stats()->set_max_abs(static_cast<float>(fp.hi % 97) / 9.0f);
    }
    const hash::Fingerprint digest = hash::CombineDigests(fps);
    b.set_step_complete(true);
    b.set_step_digest(digest.ToHex());
    parts.push_back(digest);
    w->steps.push_back(std::move(b));
  }
  w->run_digest = hash::CombineDigests(parts).ToHex();
  return w;
}

// Counters and latency samples of every simulated worker.
class Stats {
 public:
  void Heartbeat(double ms) {
    absl::MutexLock lock(&mu_);
    (busy_ ? busy_heartbeat_ : heartbeat_).push_back(ms);
  }
  void BatchAck(double ms, int fingerprints) {
    absl::MutexLock lock(&mu_);
    batch_ack_.push_back(ms);
    fingerprints_acked_ += fingerprints;
  }
  void Refused(const std::string& message) {
    absl::MutexLock lock(&mu_);
    ++refused_;
    if (first_refusal_.empty()) first_refusal_ = message;
  }
  void StreamLost(const std::string& message) {
    lost++;
    absl::MutexLock lock(&mu_);
    ++streams_lost_;
    if (first_stream_error_.empty()) first_stream_error_ = message;
  }
  void SetBusy(bool busy) {
    absl::MutexLock lock(&mu_);
    busy_ = busy;
  }
  void ResetHeartbeats() {
    absl::MutexLock lock(&mu_);
    heartbeat_.clear();
    busy_heartbeat_.clear();
  }

  absl::Mutex mu_;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<double> heartbeat_ ABSL_GUARDED_BY(mu_);
  std::vector<double> busy_heartbeat_ ABSL_GUARDED_BY(mu_);
  std::vector<double> batch_ack_ ABSL_GUARDED_BY(mu_);
  int64_t fingerprints_acked_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  std::string first_refusal_ ABSL_GUARDED_BY(mu_);
  int streams_lost_ ABSL_GUARDED_BY(mu_) = 0;
  std::string first_stream_error_ ABSL_GUARDED_BY(mu_);

  std::atomic<int> lost{0};
  std::atomic<int> welcomed{0};
  std::atomic<int64_t> heartbeats{0};
  std::atomic<int64_t> probes{0};
  std::atomic<int64_t> probes_answered{0};
  std::atomic<int> assigned{0};
  std::atomic<int> recorded{0};
  std::atomic<int64_t> batches_sent{0};
  std::atomic<int64_t> batches_acked{0};
  std::atomic<int64_t> cancels{0};
  std::atomic<int64_t> first_batch_ns{0};  // absl::ToUnixNanos
};

// Manifests seen so far, by digest: every run of an audit shares one.
class WorkloadCache {
 public:
  std::shared_ptr<const Workload> Get(const v1::TensorManifest& manifest) {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(manifest.manifest_digest());
    if (it != cache_.end()) return it->second;
    absl::StatusOr<std::shared_ptr<const Workload>> w = BuildWorkload(manifest);
    if (!w.ok()) return nullptr;
    cache_[manifest.manifest_digest()] = *w;
    return *w;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<const Workload>> cache_
      ABSL_GUARDED_BY(mu_);
};

// One simulated worker: one WorkerGateway stream, driven by gRPC's
// callbacks (reads) and the harness's driver thread (Tick).
class SimWorker final
    : public grpc::ClientBidiReactor<WorkerMessage, CoordinatorMessage> {
 public:
  SimWorker(v1::WorkerGateway::Stub* stub, WorkerMessage hello, Stats* stats,
            WorkloadCache* workloads, const LoadOptions& options)
      : stub_(stub),
        stats_(stats),
        workloads_(workloads),
        options_(options),
        hello_(std::move(hello)) {}

  void Start() {
    stub_->async()->Connect(&context_, this);
    StartRead(&in_);
    Send(hello_);
    StartCall();
  }

  // Sends whatever is due at `now`.
  void Tick(absl::Time now) {
    std::vector<WorkerMessage> out;
    {
      absl::MutexLock lock(&mu_);
      if (!welcomed_ || done_) return;
      if (now >= next_heartbeat_) {
        next_heartbeat_ += interval_;
        if (next_heartbeat_ < now) next_heartbeat_ = now + interval_;
        WorkerMessage hb;
        hb.mutable_heartbeat()->set_sent_unix_ms(absl::ToUnixMillis(now));
        if (run_.has_value()) {
          v1::RunProgress* p = hb.mutable_heartbeat()->add_runs();
          p->set_run_id(run_->run_id);
          p->set_attempt(run_->attempt);
          p->set_steps_done(run_->steps_acked);
          p->set_last_loss(1.0f / (1 + run_->steps_acked));
        }
        out.push_back(std::move(hb));
        stats_->heartbeats++;
        if (options_.heartbeat_probe) {
          WorkerMessage probe;
          probe.mutable_batch()->set_run_id(kProbeRunId);
          probe.mutable_batch()->set_sequence(-1);
          out.push_back(std::move(probe));
          probe_sent_.push_back(now);
          stats_->probes++;
        }
      }
      if (run_.has_value() && run_->workload != nullptr) {
        RunState& r = *run_;
        const int steps = static_cast<int>(r.workload->steps.size());
        while (r.next_step < steps &&
               static_cast<int>(r.unacked.size()) < options_.window &&
               now >= r.next_step_at) {
          WorkerMessage m;
          FingerprintBatch* b = m.mutable_batch();
          *b = r.workload->steps[r.next_step];
          b->set_run_id(r.run_id);
          b->set_attempt(r.attempt);
          const int64_t sequence = r.next_sequence++;
          b->set_sequence(sequence);
          r.unacked[sequence] = now;
          ++r.next_step;
          r.next_step_at = now + options_.step_time;
          out.push_back(std::move(m));
          if (stats_->batches_sent.fetch_add(1) == 0) {
            stats_->first_batch_ns = absl::ToUnixNanos(now);
          }
        }
        if (r.next_step == steps && r.unacked.empty() && !r.finished_sent) {
          WorkerMessage m;
          v1::RunFinished* f = m.mutable_finished();
          f->set_run_id(r.run_id);
          f->set_attempt(r.attempt);
          f->set_success(true);
          f->set_run_digest(r.workload->run_digest);
          f->set_batches(r.next_sequence);
          r.finished_sent = true;
          out.push_back(std::move(m));
        }
      }
    }
    for (WorkerMessage& m : out) Send(std::move(m));
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    Handle(in_);
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    const WorkerMessage* next = nullptr;
    {
      absl::MutexLock lock(&mu_);
      out_.pop_front();
      if (!ok || out_.empty()) {
        writing_ = false;
        if (!ok) out_.clear();
      } else {
        next = &out_.front();
      }
    }
    if (next != nullptr) StartWrite(next);
  }

  void OnDone(const grpc::Status& status) override {
    bool expected;
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
      expected = closing_;
    }
    if (!expected) {
      stats_->StreamLost(absl::StrCat(hello_.hello().name(), ": ",
                                      status.error_code(), " ",
                                      status.error_message()));
    }
    finished_.Notify();
  }

  // Heartbeat probes answered, and still waiting.
  std::pair<int64_t, int64_t> Probes() {
    absl::MutexLock lock(&mu_);
    return {probes_answered_, static_cast<int64_t>(probe_sent_.size())};
  }

  void Close() {
    {
      absl::MutexLock lock(&mu_);
      closing_ = true;
    }
    context_.TryCancel();
  }
  bool WaitDone(absl::Duration limit) {
    return finished_.WaitForNotificationWithTimeout(limit);
  }

 private:
  struct RunState {
    std::string run_id;
    int attempt = 0;
    std::shared_ptr<const Workload> workload;
    int next_step = 0;
    int steps_acked = 0;
    int64_t next_sequence = 0;
    std::map<int64_t, absl::Time> unacked;
    absl::Time next_step_at = absl::InfinitePast();
    bool finished_sent = false;
  };

  void Handle(const CoordinatorMessage& msg) {
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&mu_);
    switch (msg.kind_case()) {
      case CoordinatorMessage::kWelcome:
        welcomed_ = true;
        interval_ = absl::Milliseconds(
            std::max<int64_t>(10, msg.welcome().heartbeat_interval_ms()));
        // Like the daemon: one heartbeat at once, then every interval.
        next_heartbeat_ = now;
        stats_->welcomed++;
        break;
      case CoordinatorMessage::kAssignment: {
        const RunAssignment& a = msg.assignment();
        RunState r;
        r.run_id = a.run_id();
        r.attempt = a.attempt();
        r.next_sequence = a.next_sequence();
        r.workload = workloads_->Get(a.manifest());
        if (r.workload == nullptr) {
          stats_->Refused(absl::StrCat("assignment ", a.run_id(),
                                       ": manifest digest is not a digest"));
        }
        run_ = std::move(r);
        stats_->assigned++;
        break;
      }
      case CoordinatorMessage::kAck: {
        const v1::BatchAck& ack = msg.ack();
        if (!run_.has_value() || ack.run_id() != run_->run_id ||
            ack.attempt() != run_->attempt) {
          break;
        }
        if (ack.result_recorded()) {
          run_.reset();
          stats_->recorded++;
          break;
        }
        auto it = run_->unacked.find(ack.sequence());
        if (it == run_->unacked.end()) break;
        stats_->BatchAck(Ms(now - it->second), run_->workload->entries);
        stats_->batches_acked++;
        run_->unacked.erase(it);
        ++run_->steps_acked;
        break;
      }
      case CoordinatorMessage::kRejected:
        if (msg.rejected().run_id() == kProbeRunId) {
          if (!probe_sent_.empty()) {
            stats_->Heartbeat(Ms(now - probe_sent_.front()));
            probe_sent_.pop_front();
            ++probes_answered_;
            stats_->probes_answered++;
          }
        } else {
          stats_->Refused(absl::StrCat(msg.rejected().run_id(), ": ",
                                       msg.rejected().message()));
        }
        break;
      case CoordinatorMessage::kCancel:
        stats_->cancels++;
        if (run_.has_value() && run_->run_id == msg.cancel().run_id()) {
          run_.reset();
        }
        break;
      case CoordinatorMessage::KIND_NOT_SET:
        break;
    }
  }

  void Send(WorkerMessage msg) {
    const WorkerMessage* first = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (done_) return;
      out_.push_back(std::move(msg));
      if (!writing_) {
        writing_ = true;
        first = &out_.front();
      }
    }
    // std::deque keeps references to its elements across push_back and
    // pop_front of others.
    if (first != nullptr) StartWrite(first);
  }

  v1::WorkerGateway::Stub* const stub_;
  Stats* const stats_;
  WorkloadCache* const workloads_;
  const LoadOptions& options_;
  const WorkerMessage hello_;
  grpc::ClientContext context_;
  CoordinatorMessage in_;  // only the read chain touches it
  absl::Notification finished_;

  absl::Mutex mu_;
  std::deque<WorkerMessage> out_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool welcomed_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration interval_ ABSL_GUARDED_BY(mu_) = absl::Seconds(2);
  absl::Time next_heartbeat_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  std::deque<absl::Time> probe_sent_ ABSL_GUARDED_BY(mu_);
  int64_t probes_answered_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<RunState> run_ ABSL_GUARDED_BY(mu_);
};

// The hello of simulated worker `i`: the real daemon's hello with this
// machine's probed profile, each worker a host and device of its own.
WorkerMessage MakeHello(const v1::HardwareProfile& probed, int i) {
  WorkerMessage m;
  v1::Hello* h = m.mutable_hello();
  h->set_name(absl::StrCat("load-worker-", i));
  h->set_slots(1);
  h->set_version("lockstep-worker/0.1.0");
  (*h->mutable_labels())["pool"] = "load";
  v1::HardwareProfile* p = h->mutable_profile();
  *p = probed;
  p->set_hostname(absl::StrCat("load-host-", i));
  *p->mutable_device() =
      worker::MakeDeviceIdentity(*p, absl::StrCat("load-machine-", i));
  return m;
}

}  // namespace

absl::StatusOr<ProcessSample> SampleProcess(int pid) {
  ProcessSample s;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) {
    return absl::NotFoundError(absl::StrCat("no /proc/", pid, "/stat"));
  }
  // Fields after the command name (which may hold spaces) start at ") ".
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return absl::DataLossError("bad stat");
  std::vector<std::string> fields =
      absl::StrSplit(line.substr(close + 2), ' ', absl::SkipEmpty());
  // fields[0] is field 3 (state); utime and stime are fields 14 and 15.
  int64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return absl::DataLossError("bad stat fields");
  }
  s.cpu_seconds = static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  while (std::getline(status, line)) {
    int64_t* target = nullptr;
    if (line.rfind("VmRSS:", 0) == 0) target = &s.rss_kb;
    if (line.rfind("VmHWM:", 0) == 0) target = &s.hwm_kb;
    if (target == nullptr) continue;
    std::istringstream in(line.substr(6));
    in >> *target;
  }
  return s;
}

absl::StatusOr<LoadResult> RunLoad(const LoadOptions& options) {
  if (options.workers < 1 || options.streams_per_channel < 1 ||
      options.window < 1) {
    return absl::InvalidArgumentError(
        "workers, streams_per_channel and window must be >= 1");
  }
  LoadResult result;
  result.workers = options.workers;

  absl::StatusOr<v1::HardwareProfile> probed =
      worker::NewSystemProbe()->Probe();
  if (!probed.ok()) return probed.status();

  testing::Cluster cluster(options.dir);
  std::vector<std::string> flags = {"--zoo_dir=" +
                                    testing::RunfilePath("examples")};
  flags.insert(flags.end(), options.coordinator_flags.begin(),
               options.coordinator_flags.end());
  if (cluster.StartCoordinator(0, flags) == 0) {
    return absl::UnavailableError(absl::StrCat(
        "the coordinator did not start; its log:\n",
        testing::ReadFileOrEmpty(options.dir + "/coordinator.log")));
  }
  const int pid = cluster.coordinator()->pid();

  Stats stats;
  WorkloadCache workloads;
  const int channels = (options.workers + options.streams_per_channel - 1) /
                       options.streams_per_channel;
  std::vector<std::unique_ptr<v1::WorkerGateway::Stub>> stubs;
  for (int c = 0; c < channels; ++c) {
    grpc::ChannelArguments args;
    // A distinct argument keeps channels from sharing one connection.
    args.SetInt("lockstep.load_channel", c);
    args.SetMaxReceiveMessageSize(64 << 20);
    stubs.push_back(v1::WorkerGateway::NewStub(grpc::CreateCustomChannel(
        cluster.address(), grpc::InsecureChannelCredentials(), args)));
  }
  std::vector<std::unique_ptr<SimWorker>> workers;
  for (int i = 0; i < options.workers; ++i) {
    workers.push_back(std::make_unique<SimWorker>(
        stubs[i / options.streams_per_channel].get(), MakeHello(*probed, i),
        &stats, &workloads, options));
  }

  // The driver: every 5 ms, sends what each worker has due.
  std::atomic<bool> stop{false};
  std::thread driver([&] {
    while (!stop.load()) {
      const absl::Time now = absl::Now();
      for (auto& w : workers) w->Tick(now);
      absl::SleepFor(absl::Milliseconds(5));
    }
  });

  const absl::Time connect_start = absl::Now();
  for (auto& w : workers) w->Start();
  testing::PollUntil(options.connect_timeout, [&] {
    return stats.welcomed.load() >= options.workers || stats.lost.load() > 0;
  });
  result.connected = stats.welcomed.load();
  result.connect_seconds = absl::ToDoubleSeconds(absl::Now() - connect_start);

  auto finish = [&]() -> LoadResult {
    stop = true;
    driver.join();
    for (auto& w : workers) {
      const auto [answered, waiting] = w->Probes();
      if (answered > 0) ++result.workers_heartbeat_answered;
      result.probes_unanswered_at_end += waiting;
    }
    for (auto& w : workers) w->Close();
    for (auto& w : workers) w->WaitDone(absl::Seconds(30));
    absl::StatusOr<ProcessSample> end = SampleProcess(pid);
    if (end.ok()) result.end = *end;
    cluster.coordinator()->Signal(SIGTERM);
    cluster.coordinator()->Wait(absl::Seconds(15));
    absl::MutexLock lock(&stats.mu_);
    result.streams_lost = stats.streams_lost_;
    result.first_stream_error = stats.first_stream_error_;
    result.batches_refused = stats.refused_;
    result.first_refusal = stats.first_refusal_;
    return result;
  };
  if (result.connected < options.workers) return finish();

  // The idle fleet: heartbeats only. One interval first, so every worker
  // is in its steady rhythm.
  absl::SleepFor(absl::Seconds(2));
  stats.ResetHeartbeats();
  const int64_t hb0 = stats.heartbeats.load();
  const int64_t probes0 = stats.probes.load();
  const int64_t answered0 = stats.probes_answered.load();
  absl::StatusOr<ProcessSample> cpu0 = SampleProcess(pid);
  const absl::Time window_start = absl::Now();
  absl::SleepFor(options.heartbeat_window);
  absl::StatusOr<ProcessSample> cpu1 = SampleProcess(pid);
  const double window_s = absl::ToDoubleSeconds(absl::Now() - window_start);
  result.heartbeats = stats.heartbeats.load() - hb0;
  result.heartbeats_per_second = result.heartbeats / window_s;
  result.heartbeat_probes = stats.probes.load() - probes0;
  result.heartbeat_probes_answered = stats.probes_answered.load() - answered0;
  if (cpu0.ok() && cpu1.ok()) {
    result.idle_cpu_percent =
        100.0 * (cpu1->cpu_seconds - cpu0->cpu_seconds) / window_s;
    result.idle_rss_kb = cpu1->rss_kb;
  }
  {
    absl::MutexLock lock(&stats.mu_);
    result.heartbeat_p50_ms = Percentile(&stats.heartbeat_, 50);
    result.heartbeat_p99_ms = Percentile(&stats.heartbeat_, 99);
    stats.busy_ = true;
  }

  if (!options.workload.empty()) {
    // The audit, as `lockstep audit start WORKLOAD --all` asks for it.
    auto stub = cluster.Stub();
    v1::StartAuditRequest req;
    req.mutable_spec()->set_workload(options.workload);
    req.mutable_spec()->set_all_workers(true);
    absl::StatusOr<ProcessSample> busy0 = SampleProcess(pid);
    const absl::Time audit_start = absl::Now();
    v1::Audit audit;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(60));
    grpc::Status s = stub->StartAudit(&ctx, req, &audit);
    result.audit_start_seconds =
        absl::ToDoubleSeconds(absl::Now() - audit_start);
    if (!s.ok()) {
      result.audit_error = s.error_message();
    } else {
      result.audit_id = audit.audit_id();
      testing::PollUntil(options.audit_timeout, [&] {
        return stats.assigned.load() >= options.workers;
      });
      result.audit_assigned_seconds =
          absl::ToDoubleSeconds(absl::Now() - audit_start);
      testing::PollUntil(options.audit_timeout, [&] {
        return stats.recorded.load() >= stats.assigned.load();
      });
      const absl::Time ingest_end = absl::Now();
      absl::StatusOr<ProcessSample> busy1 = SampleProcess(pid);
      const absl::Time first_batch =
          absl::FromUnixNanos(stats.first_batch_ns.load());
      if (stats.first_batch_ns.load() > 0) {
        result.ingest_seconds = absl::ToDoubleSeconds(ingest_end - first_batch);
      }
      if (busy0.ok() && busy1.ok()) {
        result.ingest_cpu_percent =
            100.0 * (busy1->cpu_seconds - busy0->cpu_seconds) /
            absl::ToDoubleSeconds(ingest_end - audit_start);
      }
      // The audit is evaluated once its job's verdict is stored.
      testing::PollUntil(options.audit_timeout, [&] {
        grpc::ClientContext get_ctx;
        get_ctx.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::seconds(10));
        v1::GetAuditRequest get;
        get.set_audit_id(audit.audit_id());
        v1::Audit now;
        if (!stub->GetAudit(&get_ctx, get, &now).ok()) return false;
        audit = now;
        return now.state() != v1::AUDIT_RUNNING;
      });
      result.audit_total_seconds =
          absl::ToDoubleSeconds(absl::Now() - audit_start);
      result.audit_state = v1::AuditState_Name(audit.state());
      result.audit_workers = audit.workers_size();
      for (const auto& w : audit.workers()) {
        if (w.health() == v1::HEALTHY) ++result.audit_healthy;
      }
    }
    result.runs_assigned = stats.assigned.load();
    result.runs_recorded = stats.recorded.load();
    result.batches_sent = stats.batches_sent.load();
    result.batches_acked = stats.batches_acked.load();
    result.cancels = stats.cancels.load();
    absl::MutexLock lock(&stats.mu_);
    result.fingerprints_acked = stats.fingerprints_acked_;
    result.batch_ack_p50_ms = Percentile(&stats.batch_ack_, 50);
    result.batch_ack_p99_ms = Percentile(&stats.batch_ack_, 99);
    result.busy_heartbeat_p50_ms = Percentile(&stats.busy_heartbeat_, 50);
    result.busy_heartbeat_p99_ms = Percentile(&stats.busy_heartbeat_, 99);
    if (result.ingest_seconds > 0) {
      result.fingerprints_per_second =
          result.fingerprints_acked / result.ingest_seconds;
    }
    if (result.batches_acked > 0) {
      result.fingerprints_per_batch =
          static_cast<int>(result.fingerprints_acked / result.batches_acked);
    }
  }
  return finish();
}

}  // namespace lockstep::load

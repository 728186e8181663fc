// End-to-end ingest throughput: a real coordinator (gRPC on loopback, SQLite
// file in WAL mode) and 8 simulated workers streaming fingerprint batches,
// one batch per training step, each acknowledged only once committed. Prints
// fingerprints per second beside the raw SQLite insert rate (small rows,
// 10,000 per transaction) measured in the same run, for synchronous=FULL
// (the default) and NORMAL, and fingerprints per second of coordinator CPU
// time ("per coordinator core"): the process's CPU time during the ingest
// less the CPU time of the simulated workers' own threads. The workers'
// share of gRPC's internal threads is counted to the coordinator, so that
// figure errs low. Meanwhile a client lists the jobs every 2 ms
// (--list_every_ms), as a dashboard would: the round trips of those
// ListJobs calls (median, 99th percentile, largest; the number of calls)
// are what a store read waited for during the ingest (the client's CPU
// time, like the workers', is not counted to the coordinator).
//
//   bazel run -c opt //server:ingest_bench -- [--steps=200] [--layers=40]
//       [--list_every_ms=2]
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/digest.h"
#include "common/logging.h"
#include "grpcpp/grpcpp.h"
#include "lockstep/v1/lockstep_service.grpc.pb.h"
#include "lockstep/v1/worker_gateway.grpc.pb.h"
#include "server/coordinator.h"
#include "server/store/sqlite.h"

ABSL_FLAG(int, workers, 8, "simulated workers (one run each)");
ABSL_FLAG(int, steps, 200, "training steps per run (one batch each)");
ABSL_FLAG(int, layers, 40, "dense layers of the model (manifest size)");
ABSL_FLAG(int, list_every_ms, 2,
          "a client lists the jobs every this many ms during the ingest (0: "
          "no such client)");

namespace {

using namespace ::lockstep::v1;  // NOLINT

double CpuSeconds(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) +
         1e-9 * static_cast<double>(ts.tv_nsec);
}

// Adds the calling thread's CPU time since construction to *total on
// destruction.
class ThreadCpu {
 public:
  explicit ThreadCpu(std::atomic<int64_t>* total_ns)
      : total_ns_(total_ns), start_(CpuSeconds(CLOCK_THREAD_CPUTIME_ID)) {}
  ~ThreadCpu() {
    *total_ns_ += static_cast<int64_t>(
        (CpuSeconds(CLOCK_THREAD_CPUTIME_ID) - start_) * 1e9);
  }

 private:
  std::atomic<int64_t>* total_ns_;
  double start_;
};

std::string TempPath(const std::string& name) {
  const char* tmp = std::getenv("TMPDIR");
  return absl::StrCat(tmp ? tmp : "/tmp", "/lockstep-bench-", getpid(), "-",
                      name);
}

void RemoveDb(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::remove((path + suffix).c_str());
  }
}

// Rows per second for 10k-row transactions of small rows.
double RawSqliteRate(const std::string& synchronous) {
  const std::string path = TempPath("raw.db");
  RemoveDb(path);
  auto db = lockstep::store::Database::Open(path, true).value();
  (void)db->Exec("PRAGMA journal_mode = WAL");
  (void)db->Exec("PRAGMA synchronous = " + synchronous);
  (void)db->Exec(
      "CREATE TABLE t (run TEXT, step INTEGER, idx INTEGER, hi INTEGER, lo "
      "INTEGER, PRIMARY KEY (run, step, idx)) WITHOUT ROWID");
  auto stmt = db->Prepare("INSERT INTO t VALUES (?, ?, ?, ?, ?)").value();
  constexpr int kRows = 400000, kPerTx = 10000;
  const absl::Time start = absl::Now();
  for (int i = 0; i < kRows; i += kPerTx) {
    (void)db->Exec("BEGIN");
    for (int j = i; j < i + kPerTx; ++j) {
      (void)stmt->BindText(1, "run-0");
      (void)stmt->BindInt64(2, j / 1000);
      (void)stmt->BindInt64(3, j % 1000);
      (void)stmt->BindInt64(4, j * 7919);
      (void)stmt->BindInt64(5, j);
      (void)stmt->Run();
    }
    (void)db->Exec("COMMIT");
  }
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  stmt.reset();
  db.reset();
  RemoveDb(path);
  return kRows / secs;
}

Model DeepMlp(int layers) {
  Model m;
  m.set_name("bench-mlp");
  m.add_input_shape(16);
  m.set_num_classes(4);
  for (int i = 0; i < layers; ++i) {
    Layer* l = m.add_layers();
    l->set_name(absl::StrCat("fc", i));
    l->set_op(DENSE);
    l->mutable_dense()->set_units(i + 1 == layers ? 4 : 16);
    l->mutable_dense()->set_use_bias(true);
    if (i + 1 < layers) {
      Layer* r = m.add_layers();
      r->set_name(absl::StrCat("relu", i));
      r->set_op(RELU);
    }
  }
  Layer* loss = m.add_layers();
  loss->set_name("loss");
  loss->set_op(SOFTMAX_XENT);
  return m;
}

struct Result {
  double fingerprints_per_s = 0;
  double per_coordinator_core = 0;  // fingerprints per coordinator CPU second
  int64_t fingerprints = 0;
  int entries = 0;
  // ListJobs round trips (ms) of a dashboard-like poller during the ingest.
  double list_jobs_p50_ms = 0;
  double list_jobs_p99_ms = 0;
  double list_jobs_max_ms = 0;
  int list_jobs_calls = 0;
};

// The q-quantile (0..1) of sorted `v` (nearest rank); 0 if empty.
double Quantile(const std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const size_t i = static_cast<size_t>(q * static_cast<double>(v.size() - 1));
  return v[i];
}

Result RunIngest(const std::string& synchronous) {
  const std::string db = TempPath("ingest.db");
  RemoveDb(db);
  lockstep::server::CoordinatorOptions o;
  o.listen_address = "127.0.0.1:0";
  o.store.path = db;
  o.store.synchronous = synchronous;
  o.jobs.scheduler.lease_ms = 600000;
  auto coordinator = lockstep::server::Coordinator::Start(o).value();
  const std::string address = absl::StrCat("127.0.0.1:", coordinator->port());
  const int workers = absl::GetFlag(FLAGS_workers);
  const int steps = absl::GetFlag(FLAGS_steps);

  // Simulated workers: connect, wait for an assignment, stream batches.
  std::atomic<int64_t> acked{0};
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::atomic<int> entries_seen{0};
  std::atomic<int64_t> worker_cpu_ns{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      auto channel =
          grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
      auto stub = WorkerGateway::NewStub(channel);
      grpc::ClientContext ctx;
      auto stream = stub->Connect(&ctx);
      WorkerMessage hello;
      hello.mutable_hello()->set_name(absl::StrCat("bench-", w));
      hello.mutable_hello()->set_slots(1);
      auto* p = hello.mutable_hello()->mutable_profile();
      p->set_hardware_class("lockstep-class/v1|bench");
      p->set_hardware_class_digest(
          lockstep::Digest128Hex("lockstep-class/v1|bench"));
      stream->Write(hello);
      CoordinatorMessage msg;
      RunAssignment assignment;
      ++ready;
      while (stream->Read(&msg)) {
        if (msg.has_assignment()) {
          assignment = msg.assignment();
          break;
        }
      }
      while (!go.load())
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ThreadCpu reader_cpu(&worker_cpu_ns);
      const int entries = assignment.manifest().entries_size();
      entries_seen = entries;
      std::thread writer([&] {
        ThreadCpu writer_cpu(&worker_cpu_ns);
        for (int s = 0; s < steps; ++s) {
          WorkerMessage m;
          FingerprintBatch* b = m.mutable_batch();
          b->set_run_id(assignment.run_id());
          b->set_attempt(assignment.attempt());
          b->set_sequence(s);
          b->set_step(s);
          for (int i = 0; i < entries; ++i) {
            TensorFingerprint* f = b->add_fingerprints();
            f->set_index(i);
            f->set_hash_hi(uint64_t(s) * 1000003 + i);
            f->set_hash_lo(uint64_t(w) + 1);
            f->mutable_stats()->set_sum(0.5 * i);
            f->mutable_stats()->set_l2(1.0 + i);
          }
          b->set_step_complete(true);
          b->set_step_digest("0123456789abcdef0123456789abcdef");
          if (!stream->Write(m)) return;
        }
      });
      int got = 0;
      while (got < steps && stream->Read(&msg)) {
        if (msg.has_ack()) {
          ++got;
          acked += entries;
        } else if (msg.has_rejected()) {
          std::fprintf(stderr, "rejected: %s\n",
                       msg.rejected().message().c_str());
          break;
        }
      }
      writer.join();
      ctx.TryCancel();
      stream->Finish();
    });
  }
  while (ready.load() < workers) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // One job, one run per simulated worker.
  auto stub = Lockstep::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  SubmitJobRequest req;
  *req.mutable_spec()->mutable_model() = DeepMlp(absl::GetFlag(FLAGS_layers));
  JobConfig* c = req.mutable_spec()->mutable_config();
  c->set_seed(1);
  c->set_batch_size(8);
  c->set_steps(steps);
  c->mutable_optimizer()->set_kind(ADAM);
  c->mutable_optimizer()->set_learning_rate(0.001f);
  req.mutable_spec()->mutable_placement()->set_runs(workers);
  req.mutable_spec()->mutable_placement()->set_scope(SAME_CLASS);
  {
    grpc::ClientContext ctx;
    Job job;
    grpc::Status s = stub->SubmitJob(&ctx, req, &job);
    if (!s.ok()) {
      std::fprintf(stderr, "submit: %s\n", s.error_message().c_str());
      std::exit(1);
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // A dashboard polling the job list every 2 ms while the batches go in:
  // ListJobs reads the store (GetJob of a running job answers from the
  // scheduler's memory), so it measures what a store read waits for.
  std::atomic<bool> ingest_done{false};
  std::vector<double> list_jobs_ms;
  std::thread poller([&] {
    const int every_ms = absl::GetFlag(FLAGS_list_every_ms);
    if (every_ms <= 0) return;
    while (!go.load())
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    ThreadCpu poller_cpu(&worker_cpu_ns);
    // At least one call, however short the ingest.
    while (true) {
      ListJobsRequest list;
      grpc::ClientContext ctx;
      ListJobsResponse got;
      const auto t0 = std::chrono::steady_clock::now();
      grpc::Status s = stub->ListJobs(&ctx, list, &got);
      const double ms = std::chrono::duration<double, std::milli>(
                            std::chrono::steady_clock::now() - t0)
                            .count();
      if (!s.ok()) {
        std::fprintf(stderr, "ListJobs: %s\n", s.error_message().c_str());
        return;
      }
      list_jobs_ms.push_back(ms);
      if (ingest_done.load()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(every_ms));
    }
  });
  const absl::Time start = absl::Now();
  const double cpu_start = CpuSeconds(CLOCK_PROCESS_CPUTIME_ID);
  go = true;
  for (auto& t : threads) t.join();
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  ingest_done = true;
  poller.join();
  std::sort(list_jobs_ms.begin(), list_jobs_ms.end());
  const double coordinator_cpu = CpuSeconds(CLOCK_PROCESS_CPUTIME_ID) -
                                 cpu_start - 1e-9 * worker_cpu_ns.load();
  coordinator->Shutdown();
  RemoveDb(db);
  Result r;
  r.fingerprints = acked.load();
  r.fingerprints_per_s = acked.load() / secs;
  r.per_coordinator_core =
      coordinator_cpu > 0 ? acked.load() / coordinator_cpu : 0.0;
  r.entries = entries_seen.load();
  r.list_jobs_calls = static_cast<int>(list_jobs_ms.size());
  r.list_jobs_p50_ms = Quantile(list_jobs_ms, 0.5);
  r.list_jobs_p99_ms = Quantile(list_jobs_ms, 0.99);
  r.list_jobs_max_ms = list_jobs_ms.empty() ? 0 : list_jobs_ms.back();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  lockstep::SetMinLogSeverity(lockstep::LogSeverity::kWarning);
  std::printf(
      "ingest benchmark: %d simulated workers, %d steps each, one "
      "batch per step, acknowledged after commit\n",
      absl::GetFlag(FLAGS_workers), absl::GetFlag(FLAGS_steps));
  std::printf("%-10s %14s %10s %22s %18s %8s %24s %32s\n", "synchronous",
              "fingerprints", "per batch", "ingest fingerprints/s",
              "raw SQLite rows/s", "ratio", "per coordinator core/s",
              "ListJobs ms p50/p99/max (calls)");
  for (const std::string sync : {"FULL", "NORMAL"}) {
    const double raw = RawSqliteRate(sync);
    const Result r = RunIngest(sync);
    std::printf("%-10s %14lld %10d %22.0f %18.0f %8.2f %24.0f %32s\n",
                sync.c_str(), static_cast<long long>(r.fingerprints), r.entries,
                r.fingerprints_per_s, raw, r.fingerprints_per_s / raw,
                r.per_coordinator_core,
                r.list_jobs_calls == 0
                    ? "-"
                    : absl::StrFormat("%.2f/%.2f/%.2f (%d)", r.list_jobs_p50_ms,
                                      r.list_jobs_p99_ms, r.list_jobs_max_ms,
                                      r.list_jobs_calls)
                          .c_str());
  }
  std::printf(
      "ListJobs: a client listing the jobs every %d ms during the ingest "
      "(round trip over loopback, including waiting for the store)\n",
      absl::GetFlag(FLAGS_list_every_ms));
  return 0;
}

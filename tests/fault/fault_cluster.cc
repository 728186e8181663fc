#include "tests/fault/fault_cluster.h"

#include <signal.h>
#include <sqlite3.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/json_util.h"
#include "tests/testing/subprocess.h"

namespace lockstep::fault {

using ::lockstep::testing::PollUntil;
using ::lockstep::testing::ReadFileOrEmpty;

uint64_t SuiteSeed(uint64_t fallback) {
  uint64_t seed = fallback;
  const char* env = std::getenv("LOCKSTEP_FAULT_SEED");
  if (env != nullptr && !absl::SimpleAtoi(env, &seed)) seed = fallback;
  std::printf(
      "fault suite seed: %llu (repeat with "
      "--test_env=LOCKSTEP_FAULT_SEED=%llu)\n",
      static_cast<unsigned long long>(seed),
      static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  return seed;
}

absl::StatusOr<std::vector<StoredStep>> ReadStoredSteps(
    const std::string& db, const std::string& run_id, int64_t* partials) {
  sqlite3* h = nullptr;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READWRITE, nullptr) !=
      SQLITE_OK) {
    std::string msg = h ? sqlite3_errmsg(h) : "open failed";
    sqlite3_close(h);
    return absl::InternalError(absl::StrCat(db, ": ", msg));
  }
  // Read only: never checkpoint a live coordinator's WAL from here.
  sqlite3_db_config(h, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  sqlite3_busy_timeout(h, 5000);
  sqlite3_exec(h, "PRAGMA query_only = 1", nullptr, nullptr, nullptr);
  std::vector<StoredStep> out;
  absl::Status status;
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(h,
                     "SELECT attempt, step, fingerprints, step_digest FROM "
                     "run_steps WHERE run_id = ? ORDER BY attempt, step",
                     -1, &st, nullptr);
  sqlite3_bind_text(st, 1, run_id.c_str(), -1, SQLITE_TRANSIENT);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    StoredStep s;
    s.attempt = sqlite3_column_int64(st, 0);
    s.step = sqlite3_column_int64(st, 1);
    s.fingerprints.assign(static_cast<const char*>(sqlite3_column_blob(st, 2)),
                          sqlite3_column_bytes(st, 2));
    s.step_digest.assign(
        reinterpret_cast<const char*>(sqlite3_column_text(st, 3)),
        sqlite3_column_bytes(st, 3));
    out.push_back(std::move(s));
  }
  if (rc != SQLITE_DONE) {
    status = absl::InternalError(
        absl::StrCat("read run_steps: ", sqlite3_errmsg(h)));
  }
  sqlite3_finalize(st);
  sqlite3_prepare_v2(h, "SELECT count(*) FROM partial_batches WHERE run_id = ?",
                     -1, &st, nullptr);
  sqlite3_bind_text(st, 1, run_id.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st) == SQLITE_ROW) *partials = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(h);
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<std::map<std::string, v1::Run>> ReadRunRecords(
    const std::string& db, const std::string& job_id) {
  sqlite3* h = nullptr;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READWRITE, nullptr) !=
      SQLITE_OK) {
    sqlite3_close(h);
    return absl::InternalError(absl::StrCat(db, ": cannot open"));
  }
  sqlite3_db_config(h, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  sqlite3_busy_timeout(h, 5000);
  std::map<std::string, v1::Run> out;
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(h, "SELECT run_id, record FROM runs WHERE job_id = ?", -1,
                     &st, nullptr);
  sqlite3_bind_text(st, 1, job_id.c_str(), -1, SQLITE_TRANSIENT);
  while (sqlite3_step(st) == SQLITE_ROW) {
    v1::Run run;
    run.ParseFromArray(sqlite3_column_blob(st, 1), sqlite3_column_bytes(st, 1));
    out[reinterpret_cast<const char*>(sqlite3_column_text(st, 0))] = run;
  }
  sqlite3_finalize(st);
  sqlite3_close(h);
  return out;
}

FaultCluster::FaultCluster(std::string dir,
                           std::vector<std::string> coordinator_flags)
    : dir_(std::move(dir)), flags_(std::move(coordinator_flags)) {
  std::system(("mkdir -p " + dir_).c_str());
  cluster_ = std::make_unique<testing::Cluster>(dir_);
  flags_.push_back("--zoo_dir=" + cluster_->Runfile("examples"));
  // Fast commits: durability across process crashes is what is tested.
  flags_.push_back("--synchronous=NORMAL");
  mlp_model_ = cluster_->Runfile("examples/mlp/model.json");
  // The zoo's mlp config at 40 steps (every tensor of every step captured).
  mlp_config_ = dir_ + "/mlp40.json";
  std::ofstream(mlp_config_)
      << "{\"seed\": 1, \"batch_size\": 32, \"steps\": 40, "
         "\"optimizer\": {\"kind\": \"SGD\", \"learning_rate\": 0.1}, "
         "\"dtype\": \"FLOAT32\", \"determinism\": \"CANONICAL\", "
         "\"backend\": \"ANY\", \"capture\": {\"kind\": \"EVERY_STEP\"}}";
}

bool FaultCluster::StartCoordinator(const std::vector<std::string>& extra) {
  std::vector<std::string> flags = flags_;
  flags.insert(flags.end(), extra.begin(), extra.end());
  const int bound = cluster_->StartCoordinator(port_, flags);
  if (bound <= 0) return false;
  port_ = bound;
  return true;
}

void FaultCluster::KillCoordinator() {
  cluster_->coordinator()->Signal(SIGKILL);
  cluster_->coordinator()->Wait(absl::Seconds(10));
}

void FaultCluster::StartWorker(const std::string& name, const std::string& pool,
                               bool drill, int slots,
                               const std::string& coordinator) {
  WorkerSpec spec;
  spec.drill = drill;
  // No start-up selftest: it costs seconds per start and is tested
  // elsewhere.
  // Every run pauses 1 s before step 20 (a drill), so that "mid-stream"
  // lasts long enough to be hit whatever the machine's speed.
  spec.flags = {"--labels=pool=" + pool, absl::StrCat("--slots=", slots),
                "--selftest=false", "--allow_drills",
                "--inject_stall=step=20,seconds=1"};
  if (!coordinator.empty())
    spec.flags.push_back("--coordinator=" + coordinator);
  if (drill) {
    spec.flags.push_back(
        "--inject_fault=step=1,layer=fc2,role=ACTIVATION,bit=22");
  }
  specs_[name] = spec;
  names_.push_back(name);
  cluster_->StartWorker(name, spec.flags);
}

void FaultCluster::RestartWorker(const std::string& name) {
  cluster_->StartWorker(name, specs_[name].flags);
}

bool FaultCluster::WaitConnected(absl::Duration limit) {
  return PollUntil(limit, [&] {
    const v1::ListWorkersResponse workers = cluster_->Workers(false);
    int connected = 0;
    for (const auto& w : workers.workers()) {
      if (specs_.count(w.name()) && w.state() == v1::WORKER_CONNECTED) {
        id_to_name_[w.worker_id()] = w.name();
        ++connected;
      }
    }
    return connected == static_cast<int>(specs_.size());
  });
}

bool FaultCluster::IsDrillWorkerId(const std::string& worker_id) {
  if (id_to_name_.count(worker_id) == 0) {
    const v1::ListWorkersResponse workers = cluster_->Workers(true);
    for (const auto& w : workers.workers()) {
      id_to_name_[w.worker_id()] = w.name();
    }
  }
  auto it = id_to_name_.find(worker_id);
  return it != id_to_name_.end() && specs_[it->second].drill;
}

std::string FaultCluster::Submit(JobKind kind) {
  std::vector<std::string> args = {"submit", mlp_model_, mlp_config_,
                                   "--scope=same_class", "--json"};
  if (kind == JobKind::kCanonical) {
    args.push_back("--runs=2");
    args.push_back("--worker_labels=pool=a");
  } else {
    args.push_back("--runs=2");
    args.push_back("--worker_labels=pool=b");
  }
  auto r = cluster_->Cli(args, absl::Seconds(30));
  if (!r.ok() || r->exit_code != 0) {
    std::printf("submit failed: %s %s\n",
                r.ok() ? r->out.c_str() : r.status().ToString().c_str(),
                r.ok() ? r->err.c_str() : "");
    return "";
  }
  v1::Job job;
  if (!google::protobuf::util::JsonStringToMessage(r->out, &job).ok()) {
    return "";
  }
  return job.job_id();
}

absl::StatusOr<v1::Job> FaultCluster::WaitFinished(const std::string& job_id,
                                                   absl::Duration limit) {
  absl::StatusOr<v1::Job> last = absl::DeadlineExceededError("never read");
  PollUntil(limit, [&] {
    absl::StatusOr<v1::Job> j = cluster_->GetJob(job_id);
    if (!j.ok()) return false;  // the coordinator may be restarting
    last = j;
    return j->state() == v1::JOB_SUCCEEDED || j->state() == v1::JOB_FAILED ||
           j->state() == v1::JOB_CANCELLED;
  });
  if (last.ok() && last->state() != v1::JOB_SUCCEEDED &&
      last->state() != v1::JOB_FAILED && last->state() != v1::JOB_CANCELLED) {
    return absl::DeadlineExceededError(
        absl::StrCat("job ", job_id, " did not finish within ",
                     absl::FormatDuration(limit), ": ", last->DebugString()));
  }
  return last;
}

absl::StatusOr<v1::Report> FaultCluster::GetReport(const std::string& job_id) {
  auto stub = cluster_->Stub();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::GetReportRequest req;
  req.set_job_id(job_id);
  v1::Report report;
  grpc::Status s = stub->GetReport(&ctx, req, &report);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        s.error_message());
  }
  return report;
}

std::string FaultCluster::RecordReference() {
  const std::string canonical = Submit(JobKind::kCanonical);
  const std::string split = Submit(JobKind::kSplit);
  if (canonical.empty() || split.empty()) return "reference: submit failed";
  reference_jobs_ = {canonical, split};
  for (const std::string& id : {canonical, split}) {
    absl::StatusOr<v1::Job> job = WaitFinished(id, absl::Seconds(120));
    if (!job.ok()) return "reference: " + job.status().ToString();
    if (job->state() != v1::JOB_SUCCEEDED) {
      return "reference: job failed: " + job->DebugString();
    }
    for (const v1::Run& run : job->runs()) {
      const bool drill = IsDrillWorkerId(run.worker_id());
      int64_t partials = 0;
      auto steps = ReadStoredSteps(cluster_->db(), run.run_id(), &partials);
      if (!steps.ok()) return steps.status().ToString();
      if (steps->empty()) return "reference: no stored steps";
      if (reference_.count(drill) == 0) {
        reference_[drill] = *steps;
        reference_digest_[drill] = run.run_digest();
      } else if (reference_[drill] != *steps ||
                 reference_digest_[drill] != run.run_digest()) {
        return absl::StrCat("reference: two runs of the same kind differ (",
                            run.run_id(), ")");
      }
    }
  }
  if (reference_.size() != 2) {
    return "reference: the split job did not run on both pool=b workers";
  }
  if (reference_digest_[true] == reference_digest_[false]) {
    return "reference: the drill worker's runs equal the healthy ones";
  }
  const std::string problems = CheckJob(*WaitFinished(split, absl::Seconds(1)));
  return problems.empty() ? "" : "reference: " + problems;
}

std::string FaultCluster::CheckJob(const v1::Job& job) {
  std::vector<std::string> problems;
  if (job.state() != v1::JOB_SUCCEEDED) {
    problems.push_back(absl::StrCat("job ", job.job_id(), " ended ",
                                    v1::JobState_Name(job.state()), ": ",
                                    job.failure_reason()));
  }
  std::set<bool> kinds;
  for (const v1::Run& run : job.runs()) {
    if (run.state() != v1::RUN_SUCCEEDED) {
      problems.push_back(absl::StrCat("run ", run.run_id(), " ended ",
                                      v1::RunState_Name(run.state()), ": ",
                                      run.failure_reason()));
      continue;
    }
    const bool drill = IsDrillWorkerId(run.worker_id());
    kinds.insert(drill);
    if (run.run_digest() != reference_digest_[drill]) {
      problems.push_back(absl::StrCat("run ", run.run_id(), ": digest ",
                                      run.run_digest(), ", reference ",
                                      reference_digest_[drill]));
    }
    int64_t partials = 0;
    auto steps = ReadStoredSteps(cluster_->db(), run.run_id(), &partials);
    if (!steps.ok()) {
      problems.push_back(steps.status().ToString());
      continue;
    }
    const std::vector<StoredStep>& want = reference_[drill];
    if (steps->size() != want.size()) {
      problems.push_back(absl::StrCat("run ", run.run_id(), ": ", steps->size(),
                                      " stored steps, ", want.size(),
                                      " expected"));
    }
    for (size_t i = 0; i < steps->size() && i < want.size(); ++i) {
      const StoredStep& s = (*steps)[i];
      if (s.attempt != run.attempt()) {
        problems.push_back(absl::StrCat(
            "run ", run.run_id(), ": step ", s.step, " of attempt ", s.attempt,
            " kept beside attempt ", run.attempt()));
        break;
      }
      if (!(s == want[i])) {
        problems.push_back(absl::StrCat("run ", run.run_id(), ": stored step ",
                                        s.step, " differs from the reference",
                                        " step ", want[i].step));
        break;
      }
    }
    if (partials != 0) {
      problems.push_back(absl::StrCat("run ", run.run_id(), ": ", partials,
                                      " partial batches left"));
    }
  }
  if (job.state() == v1::JOB_SUCCEEDED) {
    absl::StatusOr<v1::Report> report = GetReport(job.job_id());
    if (!report.ok()) {
      problems.push_back("report: " + report.status().ToString());
    } else if (kinds.size() == 2) {
      const v1::Divergence& d = report->divergence();
      if (report->verdict() != v1::NONDETERMINISTIC || d.step() != 1 ||
          d.tensor().layer() != "fc2" || d.tensor().role() != v1::ACTIVATION ||
          d.tensor().phase() != v1::PHASE_FORWARD) {
        problems.push_back(absl::StrCat(
            "job ", job.job_id(),
            ": expected NONDETERMINISTIC at step 1, fc2 forward ACTIVATION; "
            "got ",
            v1::Verdict_Name(report->verdict()), " ", d.ShortDebugString()));
      }
    } else if (report->verdict() != v1::REPRODUCIBLE) {
      problems.push_back(absl::StrCat(
          "job ", job.job_id(), ": expected REPRODUCIBLE, got ",
          v1::Verdict_Name(report->verdict()), " ", report->summary()));
    }
  }
  return absl::StrJoin(problems, "\n");
}

int FaultCluster::WaitProgress(const std::vector<std::string>& job_ids,
                               int steps, int results, absl::Duration limit) {
  int best = 0;
  PollUntil(limit, [&] {
    int done = 0;
    for (const std::string& id : job_ids) {
      absl::StatusOr<v1::Job> job = cluster_->GetJob(id);
      if (!job.ok()) return false;
      for (const v1::Run& run : job->runs()) {
        best = std::max(best, run.steps_done());
        if (run.state() == v1::RUN_SUCCEEDED) ++done;
      }
    }
    return results > 0 ? done >= results : best >= steps;
  });
  return best;
}

std::map<std::pair<std::string, int>, int> FaultCluster::Executions() {
  std::map<std::pair<std::string, int>, int> out;
  static const std::regex kStart("run (\\S+) attempt (\\d+): starting");
  for (const auto& [name, spec] : specs_) {
    const std::string log = ReadFileOrEmpty(dir_ + "/" + name + ".log");
    for (std::sregex_iterator it(log.begin(), log.end(), kStart), end;
         it != end; ++it) {
      ++out[{(*it)[1].str(), std::stoi((*it)[2].str())}];
    }
  }
  return out;
}

}  // namespace lockstep::fault

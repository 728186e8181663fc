#include "tests/testing/cluster.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace lockstep::testing {

bool PollUntil(absl::Duration limit, const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + limit;
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return done();
}

Cluster::Cluster(std::string dir) : dir_(std::move(dir)) {
  db_ = dir_ + "/lockstep.db";
}

Cluster::~Cluster() {
  // Workers first (SIGKILL via Subprocess's destructor), then the
  // coordinator.
  workers_.clear();
  coordinator_.reset();
}

std::string Cluster::Runfile(const std::string& path) const {
  return RunfilePath(path);
}

int Cluster::StartCoordinator(int port, const std::vector<std::string>& flags) {
  const std::string port_file = dir_ + "/port";
  std::remove(port_file.c_str());
  std::vector<std::string> argv = {RunfilePath("server/lockstep-coordinator"),
                                   absl::StrCat("--listen=127.0.0.1:", port),
                                   "--db=" + db_, "--port_file=" + port_file};
  // Plaintext on loopback must be asked for; a TLS cluster sets its
  // certificate instead.
  if (std::none_of(flags.begin(), flags.end(), [](const std::string& f) {
        return absl::StartsWith(f, "--tls_cert=");
      })) {
    argv.push_back("--allow_plaintext");
  }
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto p = Subprocess::Start(argv, dir_ + "/coordinator.log");
  if (!p.ok()) return 0;
  coordinator_ = std::make_unique<Subprocess>(std::move(*p));
  int bound = 0;
  PollUntil(absl::Seconds(30), [&] {
    const std::string text = ReadFileOrEmpty(port_file);
    return absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &bound) &&
           bound > 0;
  });
  if (bound > 0) address_ = absl::StrCat("127.0.0.1:", bound);
  return bound;
}

Subprocess* Cluster::StartWorker(const std::string& name,
                                 const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {RunfilePath("worker/lockstep-worker"),
                                   "daemon",
                                   "--coordinator=" + address_,
                                   "--name=" + name,
                                   "--initial_backoff_ms=100",
                                   "--max_backoff_ms=500"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto p = Subprocess::Start(argv, dir_ + "/" + name + ".log");
  if (!p.ok()) return nullptr;
  auto& slot = workers_[name];
  slot = std::make_unique<Subprocess>(std::move(*p));
  return slot.get();
}

absl::StatusOr<CommandResult> Cluster::Cli(const std::vector<std::string>& args,
                                           absl::Duration timeout) {
  std::vector<std::string> argv = {RunfilePath("client/lockstep"),
                                   "--coordinator=" + address_};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, timeout);
}

std::unique_ptr<v1::Lockstep::Stub> Cluster::Stub() {
  return v1::Lockstep::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
}

v1::ListWorkersResponse Cluster::Workers(bool include_gone) {
  auto stub = Stub();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::ListWorkersRequest req;
  req.set_include_gone(include_gone);
  v1::ListWorkersResponse resp;
  if (!stub->ListWorkers(&ctx, req, &resp).ok()) return {};
  return resp;
}

bool Cluster::IsConnected(const std::string& name) {
  const v1::ListWorkersResponse workers = Workers(false);
  for (const auto& w : workers.workers()) {
    if (w.name() == name && w.state() == v1::WORKER_CONNECTED) return true;
  }
  return false;
}

absl::StatusOr<v1::Job> Cluster::GetJob(const std::string& job_id) {
  auto stub = Stub();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  v1::Job job;
  grpc::Status s = stub->GetJob(&ctx, req, &job);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        s.error_message());
  }
  return job;
}

std::string Cluster::Logs() {
  std::string out = absl::StrCat("----- coordinator.log -----\n",
                                 ReadFileOrEmpty(dir_ + "/coordinator.log"));
  for (const auto& [name, p] : workers_) {
    absl::StrAppend(&out, "----- ", name, ".log -----\n",
                    ReadFileOrEmpty(dir_ + "/" + name + ".log"));
  }
  return out;
}

}  // namespace lockstep::testing

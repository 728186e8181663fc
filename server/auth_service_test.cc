// Every RPC of both services, called with no credentials, a bad token, a
// revoked token and each role: only the roles allowed get through, the rest
// get UNAUTHENTICATED (no or bad token) or PERMISSION_DENIED (wrong role),
// and a refused call changes nothing in the store.
#include <sqlite3.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/blob_digest.h"
#include "common/digest.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "lockstep/v1/lockstep_service.grpc.pb.h"
#include "lockstep/v1/worker_gateway.grpc.pb.h"
#include "server/auth.h"
#include "server/coordinator.h"
#include "server/store/sqlite.h"

namespace lockstep::server {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::IsOkAndHolds;
using ::testing::HasSubstr;
using namespace ::lockstep::v1;  // NOLINT

constexpr char kWorkerName[] = "table-worker";

JobSpec TinySpec() {
  JobSpec spec;
  Model* m = spec.mutable_model();
  m->set_name("tiny");
  m->add_input_shape(4);
  m->set_num_classes(2);
  Layer* l = m->add_layers();
  l->set_name("fc");
  l->set_op(DENSE);
  l->mutable_dense()->set_units(2);
  l = m->add_layers();
  l->set_name("loss");
  l->set_op(SOFTMAX_XENT);
  JobConfig* c = spec.mutable_config();
  c->set_seed(1);
  c->set_batch_size(2);
  c->set_steps(1);
  c->mutable_optimizer()->set_kind(SGD);
  c->mutable_optimizer()->set_learning_rate(0.1f);
  spec.mutable_placement()->set_runs(2);
  // No worker carries this label: jobs stay queued, so nothing is written
  // behind the test's back while it compares the store.
  (*spec.mutable_placement()->mutable_worker_labels())["pool"] = "nobody";
  return spec;
}

Hello MakeHello(const std::string& name) {
  Hello h;
  h.set_name(name);
  h.set_slots(1);
  h.mutable_profile()->set_hardware_class("lockstep-class/v1|cpu=test");
  h.mutable_profile()->set_hardware_class_digest(
      Digest128Hex("lockstep-class/v1|cpu=test"));
  return h;
}

// Every row of every table of the database at `path`, as text (read
// through a second connection).
std::string DumpStore(const std::string& path) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr),
            SQLITE_OK);
  std::vector<std::string> tables;
  std::string out;
  auto each_row = [db](const std::string& sql,
                       const std::function<void(sqlite3_stmt*)>& row) {
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK)
        << sql;
    while (sqlite3_step(st) == SQLITE_ROW) row(st);
    sqlite3_finalize(st);
  };
  each_row("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name",
           [&](sqlite3_stmt* st) {
             tables.emplace_back(
                 reinterpret_cast<const char*>(sqlite3_column_text(st, 0)));
           });
  for (const std::string& t : tables) {
    absl::StrAppend(&out, "[", t, "]\n");
    each_row(absl::StrCat("SELECT * FROM \"", t, "\" ORDER BY 1"),
             [&](sqlite3_stmt* st) {
               for (int i = 0; i < sqlite3_column_count(st); ++i) {
                 const void* blob = sqlite3_column_blob(st, i);
                 const int n = sqlite3_column_bytes(st, i);
                 absl::StrAppend(
                     &out, i == 0 ? "" : "|",
                     blob == nullptr
                         ? std::string("NULL")
                         : std::string(static_cast<const char*>(blob), n));
               }
               out += "\n";
             });
  }
  sqlite3_close(db);
  return out;
}

enum class Who {
  kNone,
  kUnknown,
  kRevoked,
  kViewer,
  kSubmitter,
  kAdmin,
  kWorker
};

const char* WhoName(Who w) {
  switch (w) {
    case Who::kNone:
      return "no token";
    case Who::kUnknown:
      return "unknown token";
    case Who::kRevoked:
      return "revoked token";
    case Who::kViewer:
      return "viewer";
    case Who::kSubmitter:
      return "submitter";
    case Who::kAdmin:
      return "admin";
    case Who::kWorker:
      return kWorkerName;  // a worker token names its worker
  }
  return "?";
}

class AuthTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_path_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/auth_table.db");
    std::remove(db_path_.c_str());
    CoordinatorOptions o;
    o.listen_address = "127.0.0.1:0";
    o.store.path = db_path_;
    o.store.synchronous = "NORMAL";
    o.heartbeat_interval_ms = 1000;
    o.heartbeat_timeout_ms = 60000;
    o.auth.require_tokens = true;
    o.zoo_dir = "no-zoo-here";
    auto c = Coordinator::Start(o);
    ASSERT_THAT(c, IsOk());
    coordinator_ = std::move(*c);
    auto channel =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", coordinator_->port()),
                            grpc::InsecureChannelCredentials());
    stub_ = Lockstep::NewStub(channel);
    gateway_ = WorkerGateway::NewStub(channel);

    store::Store* s = coordinator_->store();
    auto add = [&](Who who, const std::string& role) {
      absl::StatusOr<std::string> token = NewToken();
      ASSERT_THAT(token, IsOk());
      store::TokenRecord t;
      t.name = WhoName(who);
      t.role = role;
      t.token_sha256 = TokenSha256Hex(*token);
      t.created_unix_ms = 1;
      store::AdminLogEntry log;
      log.action = "token_create";
      ASSERT_THAT(s->InsertToken(t, log), IsOk());
      tokens_[who] = *token;
    };
    add(Who::kViewer, "viewer");
    add(Who::kSubmitter, "submitter");
    add(Who::kAdmin, "admin");
    add(Who::kWorker, "worker");
    {
      // The worker SetWorkerState acts on, with a token of its own.
      absl::StatusOr<std::string> token = NewToken();
      ASSERT_THAT(token, IsOk());
      store::TokenRecord t;
      t.name = "known-worker";
      t.role = "worker";
      t.token_sha256 = TokenSha256Hex(*token);
      t.created_unix_ms = 1;
      ASSERT_THAT(s->InsertToken(t, store::AdminLogEntry()), IsOk());
      known_worker_token_ = *token;
    }
    add(Who::kRevoked, "admin");
    ASSERT_THAT(
        s->RevokeToken(WhoName(Who::kRevoked), 2, store::AdminLogEntry()),
        IsOk());
    tokens_[Who::kNone] = "";
    tokens_[Who::kUnknown] =
        "lst_0000000000000000000000000000000000000000000000000000000000000000";
  }

  // A context carrying `who`'s token, with a deadline.
  std::unique_ptr<grpc::ClientContext> Context(Who who) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(10));
    if (!tokens_[who].empty()) {
      ctx->AddMetadata("authorization", "Bearer " + tokens_[who]);
    }
    return ctx;
  }

  // A job queued by the admin (no worker runs it).
  Job QueuedJob() {
    auto ctx = Context(Who::kAdmin);
    SubmitJobRequest req;
    *req.mutable_spec() = TinySpec();
    Job job;
    grpc::Status s = stub_->SubmitJob(ctx.get(), req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }

  std::string db_path_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<Lockstep::Stub> stub_;
  std::unique_ptr<WorkerGateway::Stub> gateway_;
  std::map<Who, std::string> tokens_;
  std::string known_worker_token_;  // a worker token named "known-worker"
};

struct Rpc {
  std::string name;
  Role needed;
  // What an allowed caller gets (OK, or the code of the call's own
  // outcome when it needs data the test does not make, such as a report).
  grpc::StatusCode allowed;
  std::function<grpc::Status(Who)> call;
};

TEST_F(AuthTableTest, EveryRpcChecksItsRole) {
  const Job queued = QueuedJob();
  const std::string job = queued.job_id();
  ASSERT_EQ(queued.runs_size(), 2);
  // Jobs for the callers allowed to cancel (submitter, admin), made before
  // the calls so that only the calls themselves are compared.
  std::vector<std::string> to_cancel = {QueuedJob().job_id(),
                                        QueuedJob().job_id()};
  // A known worker for SetWorkerState: connected once, with the worker
  // token, then gone.
  {
    auto ctx = Context(Who::kNone);
    ctx->AddMetadata("authorization", "Bearer " + known_worker_token_);
    auto stream = gateway_->Connect(ctx.get());
    WorkerMessage hello;
    *hello.mutable_hello() = MakeHello("known-worker");
    ASSERT_TRUE(stream->Write(hello));
    CoordinatorMessage msg;
    ASSERT_TRUE(stream->Read(&msg));
    ASSERT_TRUE(msg.has_welcome());
    stream->WritesDone();
    ctx->TryCancel();
    stream->Finish();
  }
  const std::string known_worker = WorkerIdForName("known-worker");
  // Its disconnection is stored before the comparisons start.
  for (int i = 0; i < 500; ++i) {
    absl::StatusOr<std::vector<Worker>> live =
        coordinator_->registry()->List(false);
    if (live.ok() && live->empty()) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_THAT(coordinator_->registry()->List(false),
              IsOkAndHolds(::testing::IsEmpty()));

  using C = grpc::StatusCode;
  std::vector<Rpc> rpcs = {
      {"ListWorkers", Role::kViewer, C::OK,
       [&](Who w) {
         auto ctx = Context(w);
         ListWorkersResponse r;
         return stub_->ListWorkers(ctx.get(), ListWorkersRequest(), &r);
       }},
      {"SetWorkerState", Role::kAdmin, C::OK,
       [&](Who w) {
         auto ctx = Context(w);
         SetWorkerStateRequest req;
         req.set_worker_id(known_worker);
         req.set_admin_state(QUARANTINED);
         req.set_reason("table test");
         Worker r;
         return stub_->SetWorkerState(ctx.get(), req, &r);
       }},
      {"SubmitJob", Role::kSubmitter, C::OK,
       [&](Who w) {
         auto ctx = Context(w);
         SubmitJobRequest req;
         *req.mutable_spec() = TinySpec();
         Job r;
         grpc::Status s = stub_->SubmitJob(ctx.get(), req, &r);
         // The job records who submitted it.
         if (s.ok()) {
           EXPECT_EQ(r.submitted_by(), WhoName(w));
         }
         return s;
       }},
      {"GetJob", Role::kViewer, C::OK,
       [&](Who w) {
         auto ctx = Context(w);
         GetJobRequest req;
         req.set_job_id(job);
         Job r;
         return stub_->GetJob(ctx.get(), req, &r);
       }},
      {"WatchJob", Role::kViewer, C::OK,
       [&](Who w) {
         auto ctx = Context(w);
         WatchJobRequest req;
         req.set_job_id(job);
         auto reader = stub_->WatchJob(ctx.get(), req);
         JobEvent e;
         if (reader->Read(&e)) {
           ctx->TryCancel();
           reader->Finish();
           return grpc::Status::OK;  // the first event: the snapshot
         }
         return reader->Finish();
       }},
      {"ListJobs", Role::kViewer, C::OK,
       [&](Who w) {
         auto ctx = Context(w);
         ListJobsResponse r;
         return stub_->ListJobs(ctx.get(), ListJobsRequest(), &r);
       }},
      {"CancelJob", Role::kSubmitter, C::OK,
       [&](Who w) {
         // Refused callers aim at the queued job; each allowed one cancels
         // a job of its own.
         std::string target = job;
         if (w == Who::kSubmitter || w == Who::kAdmin) {
           target = to_cancel.back();
           to_cancel.pop_back();
         }
         auto ctx = Context(w);
         CancelJobRequest req;
         req.set_job_id(target);
         Job r;
         return stub_->CancelJob(ctx.get(), req, &r);
       }},
      {"GetReport", Role::kViewer, C::FAILED_PRECONDITION,
       [&](Who w) {
         auto ctx = Context(w);
         GetReportRequest req;
         req.set_job_id(job);  // still queued: no report yet
         Report r;
         return stub_->GetReport(ctx.get(), req, &r);
       }},
      {"CompareRuns", Role::kViewer, C::FAILED_PRECONDITION,
       [&](Who w) {
         auto ctx = Context(w);
         CompareRunsRequest req;
         req.set_run_a(queued.runs(0).run_id());
         req.set_run_b(queued.runs(1).run_id());
         CompareRunsResponse r;
         return stub_->CompareRuns(ctx.get(), req, &r);
       }},
      {"GetCertificate", Role::kViewer, C::NOT_FOUND,
       [&](Who w) {
         auto ctx = Context(w);
         GetCertificateRequest req;
         req.set_certificate_id("cert-none");
         Certificate r;
         return stub_->GetCertificate(ctx.get(), req, &r);
       }},
      {"ListCertificates", Role::kViewer, C::OK,
       [&](Who w) {
         auto ctx = Context(w);
         ListCertificatesResponse r;
         return stub_->ListCertificates(ctx.get(), ListCertificatesRequest(),
                                        &r);
       }},
      {"StartAudit", Role::kAdmin, C::NOT_FOUND,
       [&](Who w) {
         auto ctx = Context(w);
         StartAuditRequest req;
         req.mutable_spec()->set_workload("mlp");  // no zoo in this test
         req.mutable_spec()->set_all_workers(true);
         Audit r;
         return stub_->StartAudit(ctx.get(), req, &r);
       }},
      {"GetAudit", Role::kViewer, C::NOT_FOUND,
       [&](Who w) {
         auto ctx = Context(w);
         GetAuditRequest req;
         req.set_audit_id("audit-none");
         Audit r;
         return stub_->GetAudit(ctx.get(), req, &r);
       }},
      {"ListAudits", Role::kViewer, C::OK,
       [&](Who w) {
         auto ctx = Context(w);
         ListAuditsResponse r;
         return stub_->ListAudits(ctx.get(), ListAuditsRequest(), &r);
       }},
      {"UploadBlob", Role::kSubmitter, C::OK,
       [&](Who w) {
         // Each caller its own bytes, so that each allowed upload stores.
         const std::string bytes = absl::StrCat("blob of ", WhoName(w));
         auto ctx = Context(w);
         BlobInfo r;
         auto writer = stub_->UploadBlob(ctx.get(), &r);
         UploadBlobRequest req;
         req.mutable_header()->set_digest(BlobDigest(bytes));
         req.mutable_header()->set_size(bytes.size());
         writer->Write(req);
         req.set_chunk(bytes);
         writer->Write(req);
         writer->WritesDone();
         grpc::Status s = writer->Finish();
         if (s.ok()) {
           EXPECT_EQ(r.uploaded_by(), WhoName(w));
           EXPECT_EQ(r.digest(), BlobDigest(bytes));
         }
         return s;
       }},
      {"StatBlob", Role::kViewer, C::OK,
       [&](Who w) {
         auto ctx = Context(w);
         StatBlobRequest req;
         req.set_digest(BlobDigest("no such blob"));
         StatBlobResponse r;
         grpc::Status s = stub_->StatBlob(ctx.get(), req, &r);
         EXPECT_FALSE(r.exists());
         return s;
       }},
      {"CollectBlobs", Role::kAdmin, C::OK,
       [&](Who w) {
         auto ctx = Context(w);
         CollectBlobsResponse r;
         return stub_->CollectBlobs(ctx.get(), CollectBlobsRequest(), &r);
       }},
      {"WorkerGateway.FetchBlob", Role::kWorker, C::NOT_FOUND,
       [&](Who w) {
         auto ctx = Context(w);
         FetchBlobRequest req;
         req.set_worker_name(kWorkerName);
         req.set_digest(BlobDigest("no such blob"));
         auto reader = gateway_->FetchBlob(ctx.get(), req);
         BlobChunk chunk;
         while (reader->Read(&chunk)) {
         }
         return reader->Finish();
       }},
      {"WorkerGateway.Connect", Role::kWorker, C::OK,
       [&](Who w) {
         auto ctx = Context(w);
         auto stream = gateway_->Connect(ctx.get());
         WorkerMessage hello;
         *hello.mutable_hello() = MakeHello(kWorkerName);
         stream->Write(hello);
         CoordinatorMessage msg;
         if (stream->Read(&msg) && msg.has_welcome()) {
           stream->WritesDone();
           ctx->TryCancel();
           stream->Finish();
           return grpc::Status::OK;
         }
         return stream->Finish();
       }},
  };
  // Both services, every method: a method added later fails here until
  // the table covers it.
  std::set<std::string> names;
  for (const Rpc& rpc : rpcs) names.insert(rpc.name);
  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  for (const char* service :
       {"lockstep.v1.Lockstep", "lockstep.v1.WorkerGateway"}) {
    const google::protobuf::ServiceDescriptor* d =
        pool->FindServiceByName(service);
    ASSERT_NE(d, nullptr);
    for (int i = 0; i < d->method_count(); ++i) {
      const std::string name =
          d->name() == "Lockstep"
              ? d->method(i)->name()
              : absl::StrCat(d->name(), ".", d->method(i)->name());
      EXPECT_EQ(names.count(name), 1u) << name << " is not in the table";
    }
  }

  for (const Rpc& rpc : rpcs) {
    for (Who who : {Who::kNone, Who::kUnknown, Who::kRevoked, Who::kViewer,
                    Who::kSubmitter, Who::kAdmin, Who::kWorker}) {
      SCOPED_TRACE(absl::StrCat(rpc.name, " as ", WhoName(who)));
      Role held = Role::kViewer;
      bool authenticated = true;
      switch (who) {
        case Who::kViewer:
          held = Role::kViewer;
          break;
        case Who::kSubmitter:
          held = Role::kSubmitter;
          break;
        case Who::kAdmin:
          held = Role::kAdmin;
          break;
        case Who::kWorker:
          held = Role::kWorker;
          break;
        default:
          authenticated = false;
      }
      const bool allowed = authenticated && RoleAllows(held, rpc.needed);
      if (allowed) {
        grpc::Status s = rpc.call(who);
        EXPECT_EQ(s.error_code(), rpc.allowed) << s.error_message();
        // A cancelled job's verdict is stored on the verdict thread: let it
        // land before the next refused call's comparison.
        coordinator_->jobs()->WaitForVerdicts();
        continue;
      }
      const std::string before = DumpStore(db_path_);
      grpc::Status s = rpc.call(who);
      EXPECT_EQ(s.error_code(),
                authenticated ? C::PERMISSION_DENIED : C::UNAUTHENTICATED)
          << s.error_message();
      if (who == Who::kRevoked) {
        EXPECT_THAT(s.error_message(), HasSubstr("was revoked"));
      }
      if (authenticated) {
        EXPECT_THAT(s.error_message(), HasSubstr(RoleName(rpc.needed)));
      }
      EXPECT_TRUE(DumpStore(db_path_) == before)
          << "a refused call changed the store";
    }
  }
}

// A worker token is that worker's identity: a hello under another name is
// refused, and nothing of it is stored.
TEST_F(AuthTableTest, AWorkerTokenNamesOneWorker) {
  const std::string before = DumpStore(db_path_);
  {
    auto ctx = Context(Who::kWorker);
    auto stream = gateway_->Connect(ctx.get());
    WorkerMessage hello;
    *hello.mutable_hello() = MakeHello("impostor");
    stream->Write(hello);
    stream->WritesDone();
    CoordinatorMessage msg;
    while (stream->Read(&msg)) {
    }
    grpc::Status st = stream->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_THAT(st.error_message(),
                HasSubstr("hello.name: \"impostor\" is not this worker "
                          "token's name \"table-worker\""));
  }
  EXPECT_TRUE(DumpStore(db_path_) == before)
      << "a refused hello changed the store";
  // Under its own name the same token connects.
  auto ctx = Context(Who::kWorker);
  auto stream = gateway_->Connect(ctx.get());
  WorkerMessage hello;
  *hello.mutable_hello() = MakeHello(kWorkerName);
  ASSERT_TRUE(stream->Write(hello));
  CoordinatorMessage msg;
  ASSERT_TRUE(stream->Read(&msg));
  EXPECT_TRUE(msg.has_welcome());
  stream->WritesDone();
  while (stream->Read(&msg)) {
  }
  stream->Finish();
}

TEST_F(AuthTableTest, AdminActionsAreLoggedAndTheLogIsAppendOnly) {
  {
    auto ctx = Context(Who::kAdmin);
    StartAuditRequest req;
    req.mutable_spec()->set_workload("mlp");
    req.mutable_spec()->set_all_workers(true);
    Audit r;
    stub_->StartAudit(ctx.get(), req, &r);
  }
  absl::StatusOr<std::vector<store::AdminLogEntry>> log =
      coordinator_->store()->ListAdminLog(10);
  ASSERT_THAT(log, IsOk());
  ASSERT_FALSE(log->empty());
  EXPECT_EQ((*log)[0].principal, "admin");
  EXPECT_EQ((*log)[0].action, "start_audit");
  EXPECT_EQ((*log)[0].target, "mlp");
  EXPECT_THAT((*log)[0].outcome, HasSubstr("NOT_FOUND"));

  // Neither an update nor a delete gets through the triggers.
  auto db = store::Database::Open(db_path_, false);
  ASSERT_THAT(db, IsOk());
  EXPECT_THAT((*db)->Exec("UPDATE admin_log SET principal = 'x'").message(),
              HasSubstr("append-only"));
  EXPECT_THAT((*db)->Exec("DELETE FROM admin_log").message(),
              HasSubstr("append-only"));
}

// Quotas are per principal, released when a job ends and recounted after a
// restart.
TEST(QuotaServiceTest, UnfinishedJobsPerTokenAreBounded) {
  const std::string db = absl::StrCat(std::getenv("TEST_TMPDIR"), "/quota.db");
  std::remove(db.c_str());
  CoordinatorOptions o;
  o.listen_address = "127.0.0.1:0";
  o.store.path = db;
  o.store.synchronous = "NORMAL";
  o.auth.require_tokens = true;
  o.jobs.quotas.max_jobs = 1;
  std::map<std::string, std::string> tokens;
  auto submit = [&](Coordinator* c, const std::string& who) {
    auto stub = Lockstep::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", c->port()),
                            grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + tokens[who]);
    SubmitJobRequest req;
    *req.mutable_spec() = TinySpec();
    Job job;
    grpc::Status s = stub->SubmitJob(&ctx, req, &job);
    return std::make_pair(s, job.job_id());
  };
  {
    auto c = Coordinator::Start(o);
    ASSERT_THAT(c, IsOk());
    for (const char* who : {"ci", "dev"}) {
      absl::StatusOr<std::string> token = NewToken();
      ASSERT_THAT(token, IsOk());
      store::TokenRecord t;
      t.name = who;
      t.role = "submitter";
      t.token_sha256 = TokenSha256Hex(*token);
      ASSERT_THAT((*c)->store()->InsertToken(t, store::AdminLogEntry()),
                  IsOk());
      tokens[who] = *token;
    }
    auto [first, job] = submit(c->get(), "ci");
    ASSERT_TRUE(first.ok()) << first.error_message();
    grpc::Status second = submit(c->get(), "ci").first;
    EXPECT_EQ(second.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(second.error_message(),
                HasSubstr("quota_jobs: \"ci\" holds 1 in unfinished jobs"));
    EXPECT_TRUE(submit(c->get(), "dev").first.ok());  // a share of its own
    // Cancelling frees the share once the job's verdict is stored.
    ASSERT_THAT((*c)->jobs()->Cancel(job, "test").status(), IsOk());
    bool freed = false;
    for (int i = 0; i < 200 && !freed; ++i) {
      freed = submit(c->get(), "ci").first.ok();
      if (!freed) absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_TRUE(freed);
  }
  // After a restart the unfinished job counts again.
  auto c = Coordinator::Start(o);
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(submit(c->get(), "ci").first.error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST(AuthTest, RolesTokensAndHashes) {
  EXPECT_TRUE(RoleAllows(Role::kAdmin, Role::kViewer));
  EXPECT_TRUE(RoleAllows(Role::kSubmitter, Role::kSubmitter));
  EXPECT_FALSE(RoleAllows(Role::kViewer, Role::kSubmitter));
  EXPECT_FALSE(RoleAllows(Role::kAdmin, Role::kWorker));
  EXPECT_FALSE(RoleAllows(Role::kWorker, Role::kViewer));
  EXPECT_THAT(ParseRole("root").status().message(),
              HasSubstr("role: \"root\" is not a role"));
  absl::StatusOr<std::string> a = NewToken();
  absl::StatusOr<std::string> b = NewToken();
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(a->size(), 4u + 64u);
  // SHA-256 of "abc" (FIPS 180-2 example).
  EXPECT_EQ(TokenSha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace lockstep::server

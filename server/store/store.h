// The coordinator's durable state in one SQLite file.
//
// Open() checks that the file is a Lockstep database (PRAGMA application_id),
// applies the ordered migrations that the file lacks, each in its own
// transaction, and refuses a file whose schema version is newer than this
// build knows. The database runs in WAL mode with synchronous=FULL by
// default, so every call that returned OK is durable (survives a crash of
// the coordinator process and of the machine).
//
// Thread-safe: every public method takes the store's mutex. Fingerprint
// batches are written by one committer thread (SubmitIngest, IngestBatch),
// started with the first batch and stopped by StopIngest or the destructor.
#ifndef LOCKSTEP_SERVER_STORE_STORE_H_
#define LOCKSTEP_SERVER_STORE_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lockstep/v1/audit.pb.h"
#include "lockstep/v1/fingerprint.pb.h"
#include "lockstep/v1/job.pb.h"
#include "lockstep/v1/report.pb.h"
#include "lockstep/v1/worker.pb.h"
#include "server/run_data.h"
#include "server/store/sqlite.h"

namespace lockstep::store {

// 'LKSP' — identifies Lockstep databases (PRAGMA application_id).
inline constexpr int32_t kApplicationId = 0x4c4b5350;

// The schema version this build writes. Migrations 1..kSchemaVersion are
// listed in store.cc, in order.
inline constexpr int kSchemaVersion = 7;

struct StoreOptions {
  // Database file; ":memory:" for tests. Default: ./lockstep.db.
  std::string path = "lockstep.db";
  // Create the file if it does not exist. Default: true.
  bool create = true;
  // SQLite busy timeout when another process holds the lock. Default 5 s.
  int busy_timeout_ms = 5000;
  // PRAGMA synchronous: "FULL" (default; durable across power loss) or
  // "NORMAL" (durable across process crashes only; faster commits).
  std::string synchronous = "FULL";
  // Apply migrations only up to this version (0 = kSchemaVersion). For
  // tests and tools that need an older schema; the coordinator uses 0.
  int migrate_to_version = 0;
  // Largest size the database file may grow to, bytes (0: no limit but the
  // disk's). Applied as PRAGMA max_page_count, rounded down to whole pages
  // (never below the file's current size). A write that would pass it fails
  // with RESOURCE_EXHAUSTED naming the limit, and from then on the store is
  // full (`full()`): InsertJob refuses new jobs, every other write is still
  // tried, reads go on. Reopen with a larger limit to leave that state.
  int64_t max_bytes = 0;
  // WAL size, in pages, from which a commit copies the WAL into the database
  // file (a PASSIVE checkpoint, as SQLite's wal_autocheckpoint: what no
  // read still needs). Reads on their own connection can keep it from ever
  // finishing, and SQLite starts the WAL over only when a write finds every
  // frame copied, so a commit that leaves 4 times as many waits for the
  // reads under way and copies everything (RESTART); the next write starts
  // the WAL over. The WAL stays under about 4 * checkpoint_pages pages
  // (16 MB at the default). Default 1000, SQLite's own; at least 1.
  int checkpoint_pages = 1000;
  // Run PRAGMA quick_check on an existing file before using it; a corrupt
  // file is refused with DATA_LOSS naming it, unmodified. Default: true.
  bool check_on_open = true;
  // Bytes of fingerprint batches (their encoded size) queued for the
  // ingest committer or being committed, from which SubmitIngest reports
  // the queue full (back-pressure). Default 64 MiB.
  int64_t max_ingest_queue_bytes = int64_t{64} << 20;
};

// The message every refusal of a corrupt or unreadable database file ends
// with: what to run next.
std::string CorruptDatabaseAdvice(const std::string& path);

// Compares the tables, indexes and their SQL in `db` with those that
// migrations 1..`version` create (a pristine copy built in memory).
// FAILED_PRECONDITION naming the first missing, unexpected or different
// object.
absl::Status VerifySchema(Database* db, int version);

using StepRecord = ::lockstep::server::StepRecord;
using StepReader = ::lockstep::server::StepReader;

// Outcome of IngestBatch.
struct IngestResult {
  // The batch's sequence was already stored: nothing changed (idempotent).
  bool duplicate = false;
  // The batch completed its step (now in run_steps).
  bool step_completed = false;
};

// Receives a submitted batch's outcome (SubmitIngest): OK only once the
// transaction holding the batch has committed.
using IngestDone = std::function<void(absl::StatusOr<IngestResult>)>;

// Filters and paging of ListJobs (newest first).
struct JobQuery {
  int page_size = 50;
  // Only jobs created before this (exclusive); 0 = no bound. With
  // `before_job_id`, ties on created_ms are broken by job id.
  int64_t before_created_ms = 0;
  std::string before_job_id;
  lockstep::v1::JobState state = lockstep::v1::JOB_STATE_UNSPECIFIED;
  std::string model_digest;   // Empty: any model.
  std::string config_digest;  // Empty: any config.
};

// A worker event in the per-worker health history.
struct WorkerEvent {
  int64_t event_id = 0;
  std::string worker_id;
  int64_t at_unix_ms = 0;
  std::string kind;    // "connected", "disconnected", "admin_state", ...
  std::string detail;  // Human-readable.
};

// A bearer token as stored: its SHA-256, never the token itself.
struct TokenRecord {
  std::string name;          // Unique, also after revocation.
  std::string role;          // "viewer", "submitter", "admin" or "worker".
  std::string token_sha256;  // Lowercase hex.
  int64_t created_unix_ms = 0;
  int64_t revoked_unix_ms = 0;  // 0 while the token is valid.
};

// One row of the append-only admin log.
struct AdminLogEntry {
  int64_t entry_id = 0;  // Assigned by the store.
  int64_t at_unix_ms = 0;
  std::string principal;  // Who: a token name, "cert:<CN>" or "local:<user>".
  std::string action;   // "set_worker_state", "start_audit", "token_create"...
  std::string target;   // What it acted on: a worker, workload or token.
  std::string detail;   // Human-readable arguments.
  std::string outcome;  // "ok" or the error code and message.
};

// One stored blob (schema version 7).
struct BlobRecord {
  std::string digest;  // "sha256:" + 64 lowercase hex
  int64_t size = 0;
  int64_t created_unix_ms = 0;
  std::string uploaded_by;
  // Last submission or end of a job that references it.
  int64_t last_referenced_unix_ms = 0;
  // Unfinished jobs (queued or running) that reference it.
  int64_t referencing_jobs = 0;
};

class Store {
 public:
  static absl::StatusOr<std::unique_ptr<Store>> Open(
      const StoreOptions& options);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // The schema version of the open file.
  int schema_version() const;
  const std::string& path() const { return options_.path; }

  // PRAGMA integrity_check; OK when the file is sound, DATA_LOSS otherwise.
  absl::Status CheckIntegrity();

  // True once a write failed because the database reached its size limit
  // (StoreOptions::max_bytes) or the disk is full; stays set until the
  // store is reopened.
  bool full() const { return full_.load(std::memory_order_relaxed); }

  // Inserts or updates a worker: identity, labels and profile from
  // `worker`, first seen kept from the first insert, last seen updated.
  // Admin state is not touched (see SetWorkerAdminState).
  absl::Status UpsertWorker(const lockstep::v1::Worker& worker,
                            int64_t now_unix_ms);
  // The stored worker (state fields other than admin state are unset), or
  // nullopt.
  absl::StatusOr<std::optional<lockstep::v1::Worker>> GetWorker(
      const std::string& worker_id);
  // Every stored worker, ordered by name.
  absl::StatusOr<std::vector<lockstep::v1::Worker>> ListWorkers();
  // NOT_FOUND for an unknown worker.
  absl::Status SetWorkerAdminState(const std::string& worker_id,
                                   lockstep::v1::WorkerAdminState state,
                                   const std::string& reason,
                                   int64_t now_unix_ms);

  // --- Jobs and runs -------------------------------------------------------

  // Inserts a job (its runs included) and its manifest in one transaction.
  // ALREADY_EXISTS when `idempotency_key` (non-empty) is taken.
  // RESOURCE_EXHAUSTED, before trying, when the store is full().
  absl::Status InsertJob(const lockstep::v1::Job& job,
                         const lockstep::v1::TensorManifest& manifest,
                         const std::string& idempotency_key);
  // The job id stored under an idempotency key, or nullopt.
  absl::StatusOr<std::optional<std::string>> FindJobByIdempotencyKey(
      const std::string& key);
  // The job with its runs (ordered by index), or nullopt.
  absl::StatusOr<std::optional<lockstep::v1::Job>> GetJob(
      const std::string& job_id);
  absl::StatusOr<lockstep::v1::TensorManifest> GetManifest(
      const std::string& job_id);
  absl::StatusOr<std::vector<lockstep::v1::Job>> ListJobs(const JobQuery& q);
  // Ids of jobs that are queued or running (for recovery at start-up).
  absl::StatusOr<std::vector<std::string>> ListUnfinishedJobIds();
  // Updates the job's state fields (not its spec or runs).
  absl::Status UpdateJob(const lockstep::v1::Job& job);
  // Updates a run's record and state. The attempt must not change (use
  // RestartRun for a new attempt).
  absl::Status UpdateRun(const lockstep::v1::Run& run);
  // Starts a fresh attempt of `run` (its attempt already incremented by the
  // caller): stores the record, resets the expected sequence to 0 and
  // deletes every fingerprint of earlier attempts, in one transaction.
  absl::Status RestartRun(const lockstep::v1::Run& run);

  // Queues one fingerprint batch for the ingest committer, a single thread
  // that takes every batch queued so far, writes them in ONE transaction,
  // each in its own savepoint and in submission order (so every batch gets
  // the result it would get alone, and a refused one leaves no trace and
  // fails nothing else), commits once (one WAL sync under
  // synchronous=FULL), and only then runs each batch's `done`, in
  // submission order, on the committer thread. `done` must not block on
  // the store's ingest (no IngestBatch, no StopIngest); it may submit.
  // Returns true while the queue has room; false once the batches queued or
  // being committed hold max_ingest_queue_bytes or more: the batch is queued
  // all the same, and the caller should submit no more until some of its
  // batches are done (back-pressure). After StopIngest, `done` runs at once
  // with UNAVAILABLE.
  // `entries` is the manifest's entry count per step. Checks, in order:
  // the run exists (NOT_FOUND), the attempt is the run's current one
  // (ABORTED), the run accepts batches (FAILED_PRECONDITION), the sequence
  // (older: duplicate, OK; a gap: OUT_OF_RANGE naming the expected one),
  // then the fingerprints: consecutive indices continuing the step's
  // earlier batches, never past `entries`; a completed step must have all
  // `entries` (INVALID_ARGUMENT naming the field and the limit).
  bool SubmitIngest(lockstep::v1::FingerprintBatch batch, int entries,
                    IngestDone done);
  // SubmitIngest, waiting for the result: stores one batch durably
  // (committed before it returns). Batches from several threads share
  // commits.
  absl::StatusOr<IngestResult> IngestBatch(
      const lockstep::v1::FingerprintBatch& batch, int entries);
  // Completed steps of a run attempt, ordered by step. Holds every step in
  // memory: for tests and small runs; the verdict streams with
  // OpenRunSteps.
  absl::StatusOr<std::vector<StepRecord>> LoadRunSteps(
      const std::string& run_id, int32_t attempt);
  // A reader over the completed steps of a run attempt, one step per
  // Next() (each a short read under the store's lock; nothing is held in
  // between, so ingest and other readers go on). The store must outlive
  // the reader.
  std::unique_ptr<StepReader> OpenRunSteps(const std::string& run_id,
                                           int32_t attempt);
  // --- Verdicts --------------------------------------------------------------

  // Records a finished job's final state, its report and its certificates
  // in one transaction. A job whose report is already stored keeps that
  // report (the first verdict stands); certificates already stored are
  // kept as they are.
  absl::Status FinishJob(const lockstep::v1::Job& job,
                         const lockstep::v1::Report& report,
                         const std::vector<lockstep::v1::Certificate>& certs);
  // The stored report of a finished job, or nullopt (unfinished, or its
  // verdict is not stored yet).
  absl::StatusOr<std::optional<lockstep::v1::Report>> GetJobReport(
      const std::string& job_id);
  // Ids of finished jobs without a stored report, oldest first (for
  // recovery at start-up).
  absl::StatusOr<std::vector<std::string>> ListJobsAwaitingVerdict();

  // Stops the ingest committer: every batch already queued is committed (or
  // refused) and its `done` run; later batches are refused at once with
  // UNAVAILABLE. Returns once the committer has ended. The destructor calls
  // it; call it earlier while the objects the `done` callbacks use live.
  void StopIngest();
  // Holds the committer before its next group (true) or lets it go on;
  // for tests of grouping and back-pressure. StopIngest lets it go on.
  void PauseIngestForTesting(bool paused);
  // Tests only: runs `fn` while the writer is held, as during an ingest
  // group's commit (the store's mutex taken and a write transaction open on
  // its connection), then rolls that transaction back.
  void HoldWriterForTesting(const std::function<void()>& fn);
  // Bytes of the batches queued for the committer or being committed.
  int64_t IngestQueueBytes();

  // Makes every later write fail (PRAGMA query_only) or work again; for
  // tests of the paths where the database refuses a write.
  absl::Status SetReadOnlyForTesting(bool read_only);

  // Next sequence number the run's current attempt expects.
  absl::StatusOr<int64_t> NextSequence(const std::string& run_id);

  // --- Golden lookups --------------------------------------------------------

  // Indexes a finished job's labels with its stored verdict for
  // FindGoldenJob. FinishJob indexes each job's first stored verdict in its
  // own transaction (IndexJobVerdictLocked), so no verdict is stored
  // unindexed; this is for a verdict stored by other means. Replaces the
  // job's earlier rows (idempotent). Uses job.spec().labels(),
  // model_digest, config_digest and created_unix_ms; a job without labels
  // has no rows.
  absl::Status IndexJobVerdict(const lockstep::v1::Job& job,
                               lockstep::v1::Verdict verdict);
  // The newest job (by created time, then id) whose stored verdict is
  // REPRODUCIBLE and that carries the label `key`=`value` and has exactly
  // these model and config digests, other than `exclude_job_id`; nullopt
  // when none does. One index seek, whatever the number of jobs.
  absl::StatusOr<std::optional<std::string>> FindGoldenJob(
      const std::string& key, const std::string& value,
      const std::string& model_digest, const std::string& config_digest,
      const std::string& exclude_job_id);

  // --- Certificates ---------------------------------------------------------

  // Idempotent: a certificate id already stored is OK and changes nothing.
  absl::Status InsertCertificate(const lockstep::v1::Certificate& c);
  absl::StatusOr<std::optional<lockstep::v1::Certificate>> GetCertificate(
      const std::string& certificate_id);
  // Newest first; empty filters match everything.
  absl::StatusOr<std::vector<lockstep::v1::Certificate>> ListCertificates(
      const std::string& model_digest, const std::string& hardware_class_digest,
      lockstep::v1::Level level, int limit);

  // --- Audits ---------------------------------------------------------------

  // Inserts or replaces an audit record.
  absl::Status PutAudit(const lockstep::v1::Audit& audit);
  absl::StatusOr<std::optional<lockstep::v1::Audit>> GetAudit(
      const std::string& audit_id);
  // Newest first.
  absl::StatusOr<std::vector<lockstep::v1::Audit>> ListAudits(int limit);
  absl::StatusOr<std::vector<lockstep::v1::Audit>> ListRunningAudits();

  // --- Tokens and the admin log (store_security.cc) -------------------------

  // Stores a new token and its admin-log entry in one transaction.
  // ALREADY_EXISTS naming the name when it is taken (revoked tokens keep
  // theirs).
  absl::Status InsertToken(const TokenRecord& token, const AdminLogEntry& log);
  // The token whose SHA-256 is `sha256_hex` (revoked or not), or nullopt.
  absl::StatusOr<std::optional<TokenRecord>> FindTokenByHash(
      const std::string& sha256_hex);
  // Every token, valid and revoked, ordered by name.
  absl::StatusOr<std::vector<TokenRecord>> ListTokens();
  // Marks the token revoked at `now_unix_ms` and logs it, in one
  // transaction. NOT_FOUND for an unknown name; FAILED_PRECONDITION when it
  // is already revoked.
  absl::Status RevokeToken(const std::string& name, int64_t now_unix_ms,
                           const AdminLogEntry& log);
  // Appends one entry; the table refuses updates and deletes (triggers).
  absl::Status AppendAdminLog(const AdminLogEntry& entry);
  // Newest first, at most `limit`.
  absl::StatusOr<std::vector<AdminLogEntry>> ListAdminLog(int limit);

  // Blobs (store_blobs.cc). The bytes live in files (server/blob_store.h);
  // these rows say which blobs exist, who uploaded them and which jobs
  // reference them.
  //
  // Adds `blob` unless its digest is present (then nothing changes and the
  // result is false).
  absl::StatusOr<bool> InsertBlob(const BlobRecord& blob);
  absl::StatusOr<std::optional<BlobRecord>> GetBlob(const std::string& digest);
  // Bytes of the blobs `uploaded_by` uploaded, and of all blobs.
  absl::StatusOr<int64_t> BlobBytesOf(const std::string& uploaded_by);
  absl::StatusOr<int64_t> TotalBlobBytes();
  // Deletes, in one transaction, the rows of the blobs that no unfinished
  // job references and that were last referenced (or created) before
  // `cutoff_unix_ms`; returns them. A job submitted at the same time either
  // finds its blob and references it first, or finds it gone.
  absl::StatusOr<std::vector<BlobRecord>> DeleteUnreferencedBlobs(
      int64_t cutoff_unix_ms);
  absl::StatusOr<std::vector<BlobRecord>> ListBlobs();

  absl::Status AppendWorkerEvent(const std::string& worker_id,
                                 int64_t at_unix_ms, const std::string& kind,
                                 const std::string& detail);
  // Newest first, at most `limit`.
  absl::StatusOr<std::vector<WorkerEvent>> ListWorkerEvents(
      const std::string& worker_id, int limit);

 private:
  Store(StoreOptions options, std::unique_ptr<Database> db, int version);
  // A write refused because the database is full (SQLITE_FULL, mapped to
  // RESOURCE_EXHAUSTED) becomes RESOURCE_EXHAUSTED naming the file and the
  // limit, and marks the store full (logged once); other statuses pass.
  absl::Status NameFull(absl::Status s);
  absl::Status InsertJobUnchecked(const lockstep::v1::Job& job,
                                  const lockstep::v1::TensorManifest& manifest,
                                  const std::string& idempotency_key);
  absl::Status UpdateRunUnchecked(const lockstep::v1::Run& run);
  absl::Status RestartRunUnchecked(const lockstep::v1::Run& run);
  absl::Status FinishJobUnchecked(
      const lockstep::v1::Job& job, const lockstep::v1::Report& report,
      const std::vector<lockstep::v1::Certificate>& certs);
  absl::Status PrepareStatements() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct Reader;
  // After each commit on db_: checkpoints the WAL (store.cc).
  static int CheckpointAfterCommit(void* self, sqlite3* db, const char* name,
                                   int frames);
  // The reader connection of a file at the current schema.
  static absl::StatusOr<std::unique_ptr<Reader>> OpenReader(
      const StoreOptions& options);
  struct PendingIngest;
  // The committer thread: stores what is queued, group by group.
  void CommitLoop() ABSL_LOCKS_EXCLUDED(ingest_mu_, mu_);
  bool CommitterReady() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(ingest_mu_) {
    return ingest_stopping_ || (!ingest_paused_ && !ingest_queue_.empty());
  }
  // Stores `group` in one transaction.
  void IngestGroup(const std::vector<std::unique_ptr<PendingIngest>>& group)
      ABSL_LOCKS_EXCLUDED(mu_);
  // IngestBatch's checks and writes inside an open transaction.
  absl::StatusOr<IngestResult> IngestBatchLocked(
      const lockstep::v1::FingerprintBatch& batch, int entries)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  class RunStepCursor;
  // The first completed step of the attempt after `after_step`, or nullopt.
  absl::StatusOr<std::optional<StepRecord>> ReadStepAfter(
      const std::string& run_id, int32_t attempt, int32_t after_step);
  absl::Status UpdateJobLocked(const lockstep::v1::Job& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status IndexJobVerdictLocked(const lockstep::v1::Job& job,
                                     lockstep::v1::Verdict verdict)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status InsertCertificateLocked(const lockstep::v1::Certificate& c)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The audits of the rows of `st` (a statement of the caller's scope).
  static absl::StatusOr<std::vector<lockstep::v1::Audit>> ReadAudits(
      Statement* st);
  class ReadScope;
  // Runs `fn` on the connection of a read that stands alone (ReadScope),
  // for reads whose statements are prepared per call (store_security.cc);
  // fn's statements must end before it returns.
  absl::Status ReadWith(const std::function<absl::Status(Database*)>& fn);
  absl::StatusOr<std::optional<lockstep::v1::Job>> GetJobIn(
      const ReadScope& read, const std::string& job_id);
  // InsertJob: a job whose model names a parameters blob references it
  // (FAILED_PRECONDITION naming the digest when the store lacks it).
  absl::Status ReferenceBlobLocked(const lockstep::v1::Job& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FinishJob: the job's blob was last referenced when it finished.
  absl::Status TouchJobBlobsLocked(const lockstep::v1::Job& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AppendAdminLogLocked(const AdminLogEntry& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AppendWorkerEventLocked(const std::string& worker_id,
                                       int64_t at_unix_ms,
                                       const std::string& kind,
                                       const std::string& detail)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const StoreOptions options_;
  mutable absl::Mutex mu_;
  std::unique_ptr<Database> db_ ABSL_GUARDED_BY(mu_);
  const int version_;
  std::atomic<bool> full_{false};
  // Prepared statements, indexed by the Slot enum in store.cc.
  std::vector<std::unique_ptr<Statement>> stmts_ ABSL_GUARDED_BY(mu_);
  // The connection that reads (GetJob, ListJobs, reports, certificates,
  // audits, workers, a run's steps) use, with a mutex and statements of its
  // own: in WAL mode a reader sees the last commit and never waits for the
  // writer, so these calls do not queue behind an ingest group's commit
  // and fsync. Null for ":memory:" and for a store at an older schema: then
  // reads take mu_ and db_ as writes do (ReadScope). Declared after db_:
  // closed first.
  std::unique_ptr<Reader> reader_;

  // The ingest committer's queue. Never held with mu_ taken first (the
  // committer takes mu_ after releasing ingest_mu_).
  absl::Mutex ingest_mu_;
  std::vector<std::unique_ptr<PendingIngest>> ingest_queue_
      ABSL_GUARDED_BY(ingest_mu_);
  // Bytes queued or being committed.
  int64_t ingest_bytes_ ABSL_GUARDED_BY(ingest_mu_) = 0;
  bool ingest_paused_ ABSL_GUARDED_BY(ingest_mu_) = false;
  bool ingest_stopping_ ABSL_GUARDED_BY(ingest_mu_) = false;
  std::thread committer_ ABSL_GUARDED_BY(ingest_mu_);
};

}  // namespace lockstep::store

#endif  // LOCKSTEP_SERVER_STORE_STORE_H_

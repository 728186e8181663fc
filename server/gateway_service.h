// lockstep.v1.WorkerGateway: one bidirectional stream per worker session.
//
// Every message is checked before anything else sees it (message_checks.h):
// one carrying a field this coordinator does not know is refused with
// INVALID_ARGUMENT naming the field; a batch or run result over its limits
// (or with unknown fields) is answered with `rejected` and the stream stays
// open; a bad hello, heartbeat or progress ends the stream with
// INVALID_ARGUMENT naming the field and the limit.
#ifndef LOCKSTEP_SERVER_GATEWAY_SERVICE_H_
#define LOCKSTEP_SERVER_GATEWAY_SERVICE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_limits.h"
#include "lockstep/v1/worker_gateway.grpc.pb.h"
#include "server/auth.h"
#include "server/blob_store.h"
#include "server/job_manager.h"
#include "server/worker_registry.h"

namespace lockstep::server {

struct GatewayOptions {
  // Interval the coordinator asks workers to heartbeat at. Default 2 s.
  int64_t heartbeat_interval_ms = 2000;
  // Reported to workers; enforced by the registry's sweep. Default 10 s.
  int64_t heartbeat_timeout_ms = 10000;
  // Worker messages larger than this are refused by gRPC
  // (RESOURCE_EXHAUSTED naming both sizes). Default 16 MiB: a batch at
  // kMaxFingerprintsPerBatch is about 4 MiB.
  int max_message_bytes = kDefaultMaxMessageBytes;
  // Threads that handle the messages that wait on the store (hellos, run
  // results; batches until they are queued for the store's committer,
  // which answers them after its commit), so gRPC's callback threads never
  // block on the store and heartbeats of other streams are read meanwhile.
  // Each stream still handles its messages one at a time, in order, and
  // its batches are answered in order. Default 16.
  int store_threads = 16;
};

// A fixed pool of threads running queued tasks in order of arrival.
class TaskPool {
 public:
  explicit TaskPool(int threads);
  ~TaskPool();  // runs what is queued, then joins
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;
  void Run(std::function<void()> task);
  // Runs what is queued, then joins the threads; later tasks run inline.
  // Idempotent.
  void Stop();

 private:
  void Loop();
  bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !tasks_.empty();
  }
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

class WorkerGatewayService final
    : public lockstep::v1::WorkerGateway::CallbackService {
 public:
  // `registry`, `jobs` and `auth` must outlive the service. A stream is
  // authorised by `auth` before its first message is read
  // (Authorizer::AuthorizeWorker); a worker known by its certificate must
  // say hello with one of the certificate's identities as its name.
  WorkerGatewayService(WorkerRegistry* registry, JobManager* jobs,
                       BlobStore* blobs, const Authorizer* auth,
                       GatewayOptions options)
      : registry_(registry),
        jobs_(jobs),
        blobs_(blobs),
        auth_(auth),
        options_(options),
        store_pool_(std::make_unique<TaskPool>(options.store_threads)) {}

  grpc::ServerBidiReactor<lockstep::v1::WorkerMessage,
                          lockstep::v1::CoordinatorMessage>*
  Connect(grpc::CallbackServerContext* context) override;

  // gateway_service_blobs.cc: a worker fetches the parameters of a job it
  // runs.
  grpc::ServerWriteReactor<lockstep::v1::BlobChunk>* FetchBlob(
      grpc::CallbackServerContext* context,
      const lockstep::v1::FetchBlobRequest* request) override;

  // Waits for messages being handled; call once the server has stopped.
  void Drain() { store_pool_->Stop(); }

 private:
  WorkerRegistry* const registry_;
  JobManager* const jobs_;
  BlobStore* const blobs_;
  const Authorizer* const auth_;
  const GatewayOptions options_;
  const std::unique_ptr<TaskPool> store_pool_;
};

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_GATEWAY_SERVICE_H_

// The `lockstep` commands. Each returns the process exit code:
//   0  success (check: reproducible, and unchanged against the golden run)
//   1  check: runs are nondeterministic
//   2  check: runs agree with each other but differ from the golden run
//   3  could not run: the coordinator was unreachable, a call failed, the
//      job failed or was cancelled (the status code and message are printed)
//   64 usage error
#ifndef LOCKSTEP_CLIENT_COMMANDS_H_
#define LOCKSTEP_CLIENT_COMMANDS_H_

#include <cstdio>
#include <string>
#include <vector>

#include "client/client.h"

namespace lockstep::client {

inline constexpr int kExitOk = 0;
inline constexpr int kExitNondeterministic = 1;
inline constexpr int kExitNumericsChanged = 2;
inline constexpr int kExitCouldNotRun = 3;
inline constexpr int kExitUsage = 64;

struct CommandOptions {
  bool json = false;
  // submit / check.
  int runs = 0;               // 0: the coordinator's default (2)
  std::string scope;          // same_worker | same_class | across_classes
  std::string labels;         // k=v,... job labels
  std::string worker_labels;  // k=v,... placement
  std::string idempotency_key;
  std::string zoo_dir = "examples";
  std::string mode;             // override config.determinism
  bool watch = false;           // submit: watch until done
  int64_t wait_timeout_ms = 0;  // check / watch: 0 = no limit
  // check.
  // 32-hex run digest, or a key=value job label: the reference is then the
  // newest REPRODUCIBLE job carrying the label with the checked job's model
  // and config digests (Client::FindGoldenJob).
  std::string golden;
  std::string junit;  // write JUnit XML here
  // workers / cancel.
  bool all = false;
  std::string reason;
  // certificates.
  std::string model_digest;
  // audit start.
  std::string workers;  // comma-separated worker names or ids
  bool quarantine = false;
  bool wait = true;
  // submit / check: the ParameterSet file of a model that sets
  // parameters_digest; empty: the model path with .json replaced by
  // .params.
  std::string params;
};

class Commands {
 public:
  Commands(Client* client, CommandOptions options, FILE* out, FILE* err)
      : client_(client), options_(std::move(options)), out_(out), err_(err) {}

  int Workers(const std::vector<std::string>& args);
  int Submit(const std::vector<std::string>& args);
  int Watch(const std::vector<std::string>& args);
  int Jobs(const std::vector<std::string>& args);
  int Cancel(const std::vector<std::string>& args);
  int Report(const std::vector<std::string>& args);
  int Diff(const std::vector<std::string>& args);
  int Certificates(const std::vector<std::string>& args);
  int Check(const std::vector<std::string>& args);
  // audit start WORKLOAD | start MODEL CONFIG | show AUDIT | list
  int Audit(const std::vector<std::string>& args);
  // blobs upload FILE | stat DIGEST | gc
  int Blobs(const std::vector<std::string>& args);

 private:
  // MODEL CONFIG, or ZOO_NAME (examples/<name>/{model,config}.json). A
  // MODEL ending in .onnx is imported in memory (onnx_cli.h). A
  // model that sets parameters_digest has its ParameterSet file checked
  // and uploaded unless the coordinator has it (UploadParameters).
  absl::StatusOr<lockstep::v1::SubmitJobRequest> BuildRequest(
      const std::vector<std::string>& args);
  // The model and config of MODEL CONFIG (a .json or .onnx model), with the
  // model's initial parameters uploaded when it has them: BuildRequest's
  // and `audit start MODEL CONFIG`'s common part.
  absl::Status LoadModelAndConfig(const std::string& model_path,
                                  const std::string& config_path,
                                  lockstep::v1::Model* model,
                                  lockstep::v1::JobConfig* config);
  absl::StatusOr<lockstep::v1::Job> WatchUntilDone(const std::string& job_id);
  // Checks that `blob` parses as a ParameterSet and hashes to `digest`, and
  // uploads it if the coordinator lacks it, with progress on err_ for large
  // blobs.
  absl::Status UploadParameters(const std::string& digest,
                                const std::string& blob);
  int Fail(const absl::Status& s);
  int Usage(const std::string& why);

  Client* const client_;
  const CommandOptions options_;
  FILE* const out_;
  FILE* const err_;
};

// Human-readable renderings (also used by tests).
std::string FormatReport(const lockstep::v1::Report& report);
std::string FormatDivergence(const lockstep::v1::Divergence& d);
std::string FormatJobLine(const lockstep::v1::Job& job);
std::string FormatAudit(const lockstep::v1::Audit& audit);
std::string ProgressBar(int done, int total, int width);
// JUnit XML for a check: one suite, cases "reproducible" and "golden".
std::string CheckJUnit(const std::string& job_id, int exit_code,
                       const std::string& reproducible_failure,
                       const std::string& golden_failure, double seconds);
std::string XmlEscape(const std::string& s);

}  // namespace lockstep::client

#endif  // LOCKSTEP_CLIENT_COMMANDS_H_

#include "client/commands.h"

#include <algorithm>
#include <fstream>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/onnx_cli.h"
#include "common/blob_digest.h"
#include "common/digest.h"
#include "common/json.h"
#include "lockstep/v1/parameters.pb.h"
#include "model/spec_io.h"

namespace lockstep::client {

using ::lockstep::v1::Job;
using ::lockstep::v1::JobEvent;
using ::lockstep::v1::Report;

namespace {

// Uploads at least this large report their progress.
constexpr int64_t kProgressBytes = int64_t{8} << 20;

// The bytes of the file at `path`; NOT_FOUND naming `flag` and the path.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path,
                                          const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  }
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat(flag, ": error reading ", path));
  }
  return bytes;
}

absl::Status ParseLabels(const std::string& text, const char* flag,
                         google::protobuf::Map<std::string, std::string>* out) {
  if (text.empty()) return absl::OkStatus();
  for (absl::string_view kv : absl::StrSplit(text, ',')) {
    std::pair<std::string, std::string> p =
        absl::StrSplit(kv, absl::MaxSplits('=', 1));
    if (p.first.empty() || kv.find('=') == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": \"", kv, "\" is not key=value"));
    }
    (*out)[p.first] = p.second;
  }
  return absl::OkStatus();
}

const char* RunStateWord(v1::RunState s) {
  switch (s) {
    case v1::RUN_QUEUED:
      return "queued";
    case v1::RUN_ASSIGNED:
      return "assigned";
    case v1::RUN_RUNNING:
      return "running";
    case v1::RUN_SUCCEEDED:
      return "done";
    case v1::RUN_FAILED:
      return "failed";
    case v1::RUN_CANCELLED:
      return "cancelled";
    default:
      return "?";
  }
}

}  // namespace

std::string XmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') {
          out += ' ';
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string ProgressBar(int done, int total, int width) {
  if (total <= 0) return std::string(width, '-');
  const int filled = std::min(width, done * width / total);
  return std::string(filled, '#') + std::string(width - filled, '-');
}

std::string FormatDivergence(const v1::Divergence& d) {
  std::string s = absl::StrFormat(
      "first divergence: step %d, layer \"%s\", %s %s (op %s, shape [%s])\n",
      d.step(), d.tensor().layer(), v1::Phase_Name(d.tensor().phase()),
      v1::TensorRole_Name(d.tensor().role()), d.tensor().op(),
      absl::StrJoin(d.tensor().shape(), ", "));
  absl::StrAppendFormat(&s, "  runs:       %s vs %s\n", d.run_a(), d.run_b());
  absl::StrAppendFormat(
      &s, "  magnitude:  sum %.3g, L2 %.3g, max|x| %.3g (relative)\n",
      d.magnitude().sum_rel(), d.magnitude().l2_rel(),
      d.magnitude().max_abs_rel());
  absl::StrAppendFormat(&s, "  stats:      sum %.9g vs %.9g, L2 %.9g vs %.9g\n",
                        d.stats_a().sum(), d.stats_b().sum(), d.stats_a().l2(),
                        d.stats_b().l2());
  absl::StrAppendFormat(&s, "  downstream: %d of %d later tensors differ too\n",
                        d.downstream_differing(), d.tensors_compared());
  if (!d.cause().id().empty()) {
    absl::StrAppendFormat(&s, "  cause:      %s: %s\n", d.cause().id(),
                          d.cause().text());
  }
  return s;
}

std::string FormatReport(const Report& r) {
  std::string s =
      absl::StrFormat("job %s: %s", r.job_id(), v1::Verdict_Name(r.verdict()));
  if (r.level() != v1::LEVEL_UNSPECIFIED) {
    absl::StrAppend(&s, " at ", v1::Level_Name(r.level()));
  }
  absl::StrAppend(&s, "\n", r.summary(), "\n");
  std::vector<std::pair<std::string, std::string>> digests(
      r.run_digests().begin(), r.run_digests().end());
  std::sort(digests.begin(), digests.end());
  for (const auto& [run, digest] : digests) {
    absl::StrAppendFormat(&s, "  %s  %s\n", run, digest);
  }
  if (r.has_divergence()) absl::StrAppend(&s, FormatDivergence(r.divergence()));
  for (const std::string& c : r.certificate_ids()) {
    absl::StrAppend(&s, "certificate ", c, "\n");
  }
  return s;
}

std::string FormatJobLine(const Job& job) {
  int done = 0;
  for (const auto& r : job.runs()) {
    if (r.state() == v1::RUN_SUCCEEDED) ++done;
  }
  return absl::StrFormat(
      "%s  %-14s %-16s runs %d/%d  %s", job.job_id(),
      v1::JobState_Name(job.state()), job.spec().model().name(), done,
      job.runs_size(),
      v1::DeterminismMode_Name(job.spec().config().determinism()));
}

std::string CheckJUnit(const std::string& job_id, int exit_code,
                       const std::string& reproducible_failure,
                       const std::string& golden_failure, double seconds) {
  const int failures =
      (reproducible_failure.empty() ? 0 : 1) + (golden_failure.empty() ? 0 : 1);
  std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  absl::StrAppendFormat(
      &s,
      "<testsuites tests=\"2\" failures=\"%d\" errors=\"%d\" time=\"%.3f\">\n"
      "  <testsuite name=\"lockstep\" tests=\"2\" failures=\"%d\" "
      "errors=\"%d\" time=\"%.3f\">\n",
      exit_code == kExitCouldNotRun ? 0 : failures,
      exit_code == kExitCouldNotRun ? 1 : 0, seconds,
      exit_code == kExitCouldNotRun ? 0 : failures,
      exit_code == kExitCouldNotRun ? 1 : 0, seconds);
  auto add_case = [&](const char* name, const std::string& failure) {
    absl::StrAppendFormat(&s,
                          "    <testcase classname=\"lockstep.%s\" "
                          "name=\"%s\" time=\"%.3f\">",
                          XmlEscape(job_id), name, seconds);
    if (exit_code == kExitCouldNotRun && std::string(name) == "reproducible") {
      absl::StrAppendFormat(&s,
                            "\n      <error message=\"could not run\">%s"
                            "</error>\n    ",
                            XmlEscape(failure));
    } else if (!failure.empty() && exit_code != kExitCouldNotRun) {
      absl::StrAppendFormat(
          &s, "\n      <failure message=\"%s\">%s</failure>\n    ",
          XmlEscape(failure.substr(0, failure.find('\n'))), XmlEscape(failure));
    } else if (exit_code == kExitCouldNotRun) {
      absl::StrAppend(&s, "<skipped/>");
    }
    absl::StrAppend(&s, "</testcase>\n");
  };
  add_case("reproducible", reproducible_failure);
  add_case("golden", golden_failure);
  absl::StrAppend(&s, "  </testsuite>\n</testsuites>\n");
  return s;
}

std::string FormatAudit(const v1::Audit& a) {
  std::string s = absl::StrFormat("audit %s  %s  workload %s  job %s\n%s\n",
                                  a.audit_id(), v1::AuditState_Name(a.state()),
                                  a.spec().workload().empty()
                                      ? "(model) " + a.spec().model_name()
                                      : a.spec().workload(),
                                  a.job_id(), a.summary());
  for (const auto& c : a.classes()) {
    absl::StrAppendFormat(
        &s, "class %s: %d/%d agree on %s%s\n",
        c.hardware_class_digest().substr(0, 12), c.agreeing(), c.workers(),
        c.majority_digest().empty() ? "(no majority)" : c.majority_digest(),
        c.agrees_with_other_classes() || c.majority_digest().empty()
            ? ""
            : "  DISAGREES WITH OTHER CLASSES");
  }
  for (const auto& w : a.workers()) {
    const std::string who =
        w.worker_name().empty()
            ? w.worker_id()
            : absl::StrCat(w.worker_name(), " (", w.worker_id(), ")");
    absl::StrAppendFormat(&s, "  %-32s %-9s %s%s\n", who,
                          v1::WorkerHealth_Name(w.health()), w.run_digest(),
                          w.quarantined() ? "  quarantined" : "");
    if (w.has_divergence()) {
      absl::StrAppend(&s, "    ",
                      absl::StrReplaceAll(FormatDivergence(w.divergence()),
                                          {{"\n  ", "\n      "}}));
    }
  }
  return s;
}

int Commands::Fail(const absl::Status& s) {
  std::fprintf(err_, "lockstep: %s: %s\n",
               absl::StatusCodeToString(s.code()).c_str(),
               std::string(s.message()).c_str());
  return kExitCouldNotRun;
}

int Commands::Usage(const std::string& why) {
  std::fprintf(err_, "lockstep: %s (see lockstep --help)\n", why.c_str());
  return kExitUsage;
}

absl::StatusOr<v1::SubmitJobRequest> Commands::BuildRequest(
    const std::vector<std::string>& args) {
  std::string model_path, config_path;
  if (args.size() == 1) {
    model_path = absl::StrCat(options_.zoo_dir, "/", args[0], "/model.json");
    config_path = absl::StrCat(options_.zoo_dir, "/", args[0], "/config.json");
  } else if (args.size() == 2) {
    model_path = args[0];
    config_path = args[1];
  } else {
    return absl::InvalidArgumentError(
        "expected MODEL CONFIG (files) or a zoo name");
  }
  v1::SubmitJobRequest req;
  absl::Status loaded = LoadModelAndConfig(
      model_path, config_path, req.mutable_spec()->mutable_model(),
      req.mutable_spec()->mutable_config());
  if (!loaded.ok()) return loaded;
  if (!options_.mode.empty()) {
    v1::DeterminismMode mode;
    if (!v1::DeterminismMode_Parse(absl::AsciiStrToUpper(options_.mode),
                                   &mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--mode: \"", options_.mode,
                       "\" is not canonical, deterministic or default"));
    }
    req.mutable_spec()->mutable_config()->set_determinism(mode);
  }
  v1::Placement* p = req.mutable_spec()->mutable_placement();
  p->set_runs(options_.runs);
  if (!options_.scope.empty()) {
    v1::PlacementScope scope;
    if (!v1::PlacementScope_Parse(absl::AsciiStrToUpper(options_.scope),
                                  &scope)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--scope: \"", options_.scope,
                       "\" is not same_worker, same_class or across_classes"));
    }
    p->set_scope(scope);
  }
  absl::Status s = ParseLabels(options_.worker_labels, "--worker_labels",
                               p->mutable_worker_labels());
  if (!s.ok()) return s;
  s = ParseLabels(options_.labels, "--labels",
                  req.mutable_spec()->mutable_labels());
  if (!s.ok()) return s;
  req.set_idempotency_key(options_.idempotency_key);
  return req;
}

absl::Status Commands::LoadModelAndConfig(const std::string& model_path,
                                          const std::string& config_path,
                                          v1::Model* model,
                                          v1::JobConfig* config) {
  std::string parameter_blob;  // the ParameterSet bytes, when the model has
                               // initial parameter values
  if (IsOnnxPath(model_path)) {
    absl::StatusOr<ImportedModel> imported = ImportOnnxFile(model_path);
    if (!imported.ok()) return imported.status();
    *model = std::move(imported->model);
    parameter_blob = std::move(imported->parameters_bytes);
  } else {
    absl::StatusOr<v1::Model> read = model::ReadModelFile(model_path);
    if (!read.ok()) return read.status();
    *model = *std::move(read);
    if (!model->parameters_digest().empty()) {
      absl::StatusOr<std::string> blob = ReadParameterBlob(
          options_.params.empty() ? ParamsPathFor(model_path) : options_.params,
          model->parameters_digest());
      if (!blob.ok()) return blob.status();
      parameter_blob = *std::move(blob);
    }
  }
  if (!model->parameters_digest().empty()) {
    absl::Status uploaded =
        UploadParameters(model->parameters_digest(), parameter_blob);
    if (!uploaded.ok()) return uploaded;
  }
  absl::StatusOr<v1::JobConfig> read_config =
      model::ReadJobConfigFile(config_path);
  if (!read_config.ok()) return read_config.status();
  *config = *std::move(read_config);
  return absl::OkStatus();
}

// The one place where a model's initial parameter values (a ParameterSet,
// content-addressed by `digest`; read from the .params file and checked
// against the digest, or imported from an .onnx file) go to the coordinator
// before the job that names them is submitted: uploaded unless the
// coordinator has them, with progress on stderr for large files.
absl::Status Commands::UploadParameters(const std::string& digest,
                                        const std::string& blob) {
  if (const std::string got = BlobDigest(blob); got != digest) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameters: the ParameterSet hashes to ", got,
                     "; the model's parameters_digest is ", digest));
  }
  v1::ParameterSet set;
  if (!set.ParseFromString(blob)) {
    return absl::InvalidArgumentError(
        "parameters: the file is not a lockstep.v1.ParameterSet");
  }
  const int64_t size = static_cast<int64_t>(blob.size());
  int last_tenth = 0;
  auto progress = [&](int64_t sent, int64_t total) {
    if (total < kProgressBytes) return;
    const int tenth = static_cast<int>(sent * 10 / total);
    if (tenth == last_tenth) return;
    last_tenth = tenth;
    std::fprintf(err_, "uploading parameters: %lld/%lld MiB\n",
                 static_cast<long long>(sent >> 20),
                 static_cast<long long>(total >> 20));
  };
  bool uploaded = false;
  absl::StatusOr<std::string> stored =
      client_->EnsureBlob(blob, progress, &uploaded);
  if (!stored.ok()) return stored.status();
  // On stderr, also with --json (stdout stays one JSON document).
  std::fprintf(err_, "parameters %s (%lld bytes): %s\n", digest.c_str(),
               static_cast<long long>(size),
               uploaded ? "uploaded" : "already on the coordinator");
  return absl::OkStatus();
}

int Commands::Blobs(const std::vector<std::string>& args) {
  if (args.size() == 2 && args[0] == "upload") {
    absl::StatusOr<std::string> bytes = ReadWholeFile(args[1], "FILE");
    if (!bytes.ok()) return Fail(bytes.status());
    bool uploaded = false;
    absl::StatusOr<std::string> digest =
        client_->EnsureBlob(*bytes, nullptr, &uploaded);
    if (!digest.ok()) return Fail(digest.status());
    std::fprintf(out_, "%s %s\n", digest->c_str(),
                 uploaded ? "uploaded" : "already stored");
    return kExitOk;
  }
  if (args.size() == 2 && args[0] == "stat") {
    auto r = client_->StatBlob(args[1]);
    if (!r.ok()) return Fail(r.status());
    if (options_.json) {
      std::fputs(FormatJson(*r).c_str(), out_);
    } else if (!r->exists()) {
      std::fprintf(out_, "%s: not stored\n", args[1].c_str());
    } else {
      std::fprintf(
          out_, "%s: %lld bytes, uploaded by %s, %d unfinished jobs\n",
          r->blob().digest().c_str(), static_cast<long long>(r->blob().size()),
          r->blob().uploaded_by().empty() ? "anonymous"
                                          : r->blob().uploaded_by().c_str(),
          r->blob().referencing_jobs());
    }
    return r->exists() ? kExitOk : kExitCouldNotRun;
  }
  if (args.size() == 1 && args[0] == "gc") {
    auto r = client_->CollectBlobs();
    if (!r.ok()) return Fail(r.status());
    if (options_.json) {
      std::fputs(FormatJson(*r).c_str(), out_);
      return kExitOk;
    }
    for (const std::string& d : r->deleted_digests()) {
      std::fprintf(out_, "deleted %s\n", d.c_str());
    }
    std::fprintf(out_, "%d blobs, %lld bytes deleted\n",
                 r->deleted_digests_size(),
                 static_cast<long long>(r->deleted_bytes()));
    return kExitOk;
  }
  return Usage("expected blobs upload FILE | blobs stat DIGEST | blobs gc");
}

absl::StatusOr<Job> Commands::WatchUntilDone(const std::string& job_id) {
  const absl::Time start = absl::Now();
  std::map<std::string, std::pair<int, absl::Time>> first_progress;
  const bool tty = !options_.json && isatty(fileno(out_));
  int lines_drawn = 0;
  auto draw = [&](const JobEvent& e) {
    if (options_.json) return;
    if (!tty) {
      // A log, not an animation: one line per event.
      std::fprintf(out_, "  %s\n", e.message().c_str());
      std::fflush(out_);
      return;
    }
    const Job& job = e.job();
    if (tty && lines_drawn > 0) std::fprintf(out_, "\x1b[%dA", lines_drawn);
    lines_drawn = 0;
    for (const auto& r : job.runs()) {
      auto& first = first_progress[r.run_id()];
      if (r.steps_done() > 0 && first.first == 0) {
        first = {r.steps_done(), absl::Now()};
      }
      double rate = 0;
      const double secs = absl::ToDoubleSeconds(absl::Now() - first.second);
      if (first.first > 0 && secs > 0.05) {
        rate = (r.steps_done() - first.first) / secs;
      }
      std::fprintf(
          out_, "\x1b[2Krun %d [%s] %d/%d steps  %5.1f steps/s  %-9s %s\n",
          r.index(), ProgressBar(r.steps_done(), r.steps_total(), 30).c_str(),
          r.steps_done(), r.steps_total(), rate, RunStateWord(r.state()),
          r.worker_id().empty() ? "" : r.worker_id().c_str());
      ++lines_drawn;
    }
    std::fflush(out_);
  };
  absl::StatusOr<Job> job =
      client_->Watch(job_id, options_.wait_timeout_ms, draw);
  if (!job.ok()) return job.status();
  if (!options_.json && !tty) {
    for (const auto& r : job->runs()) {
      std::fprintf(out_, "run %d %s: %d/%d steps on %s, attempt %d%s%s\n",
                   r.index(), RunStateWord(r.state()), r.steps_done(),
                   r.steps_total(), r.worker_id().c_str(), r.attempt(),
                   r.run_digest().empty() ? "" : ", digest ",
                   r.run_digest().c_str());
    }
  }
  if (!options_.json) {
    std::fprintf(out_, "job %s %s in %.1f s\n", job_id.c_str(),
                 v1::JobState_Name(job->state()).c_str(),
                 absl::ToDoubleSeconds(absl::Now() - start));
  }
  return job;
}

int Commands::Workers(const std::vector<std::string>& args) {
  if (args.empty()) {
    auto r = client_->ListWorkers(options_.all);
    if (!r.ok()) return Fail(r.status());
    std::fputs(
        (options_.json ? FormatJson(*r) : FormatWorkersTable(*r)).c_str(),
        out_);
    return kExitOk;
  }
  if (args.size() != 2) return Usage("workers: expected ACTION WORKER");
  v1::WorkerAdminState state;
  if (args[0] == "drain") {
    state = v1::DRAINING;
  } else if (args[0] == "quarantine") {
    state = v1::QUARANTINED;
  } else if (args[0] == "activate") {
    state = v1::ACTIVE;
  } else {
    return Usage("workers: unknown action \"" + args[0] + "\"");
  }
  auto w = client_->SetWorkerState(args[1], state, options_.reason);
  if (!w.ok()) return Fail(w.status());
  if (options_.json) {
    std::fputs(FormatJson(*w).c_str(), out_);
  } else {
    std::fprintf(out_, "%s (%s) is now %s\n", w->name().c_str(),
                 w->worker_id().c_str(),
                 v1::WorkerAdminState_Name(w->admin_state()).c_str());
  }
  return kExitOk;
}

int Commands::Submit(const std::vector<std::string>& args) {
  auto req = BuildRequest(args);
  if (!req.ok()) {
    return req.status().code() == absl::StatusCode::kInvalidArgument &&
                   args.size() != 1 && args.size() != 2
               ? Usage(std::string(req.status().message()))
               : Fail(req.status());
  }
  auto job = client_->Submit(*req);
  if (!job.ok()) return Fail(job.status());
  if (options_.json && !options_.watch) {
    std::fputs(FormatJson(*job).c_str(), out_);
    return kExitOk;
  }
  if (!options_.json) {
    std::fprintf(
        out_, "submitted %s: %s, %d runs, %s\n", job->job_id().c_str(),
        job->spec().model().name().c_str(), job->runs_size(),
        v1::DeterminismMode_Name(job->spec().config().determinism()).c_str());
  }
  if (!options_.watch) return kExitOk;
  return Watch({job->job_id()});
}

int Commands::Watch(const std::vector<std::string>& args) {
  if (args.size() != 1) return Usage("watch: expected JOB");
  auto job = WatchUntilDone(args[0]);
  if (!job.ok()) return Fail(job.status());
  if (job->state() != v1::JOB_SUCCEEDED) {
    std::fprintf(out_, "%s%s\n",
                 job->failure_reason().empty() ? "" : "reason: ",
                 job->failure_reason().c_str());
    return kExitCouldNotRun;
  }
  return Report({args[0]});
}

int Commands::Jobs(const std::vector<std::string>& args) {
  if (!args.empty()) return Usage("jobs: takes no arguments");
  v1::ListJobsRequest req;
  auto r = client_->ListJobs(req);
  if (!r.ok()) return Fail(r.status());
  if (options_.json) {
    std::fputs(FormatJson(*r).c_str(), out_);
    return kExitOk;
  }
  if (r->jobs().empty()) std::fputs("no jobs\n", out_);
  for (const Job& j : r->jobs()) {
    std::fprintf(out_, "%s\n", FormatJobLine(j).c_str());
  }
  return kExitOk;
}

int Commands::Cancel(const std::vector<std::string>& args) {
  if (args.size() != 1) return Usage("cancel: expected JOB");
  auto job = client_->Cancel(args[0], options_.reason);
  if (!job.ok()) return Fail(job.status());
  std::fprintf(out_, "%s is %s\n", job->job_id().c_str(),
               v1::JobState_Name(job->state()).c_str());
  return kExitOk;
}

int Commands::Report(const std::vector<std::string>& args) {
  if (args.size() != 1) return Usage("report: expected JOB");
  auto r = client_->GetReport(args[0]);
  if (!r.ok()) return Fail(r.status());
  std::fputs((options_.json ? FormatJson(*r) : FormatReport(*r)).c_str(), out_);
  return kExitOk;
}

int Commands::Diff(const std::vector<std::string>& args) {
  if (args.size() != 2) return Usage("diff: expected RUN_A RUN_B");
  auto r = client_->CompareRuns(args[0], args[1]);
  if (!r.ok()) return Fail(r.status());
  if (options_.json) {
    std::fputs(FormatJson(*r).c_str(), out_);
  } else if (!r->incomparable_reason().empty()) {
    std::fprintf(out_, "not comparable: %s\n",
                 r->incomparable_reason().c_str());
  } else if (r->identical()) {
    std::fprintf(out_, "identical: %s\n", r->run_a_digest().c_str());
  } else {
    std::fprintf(out_, "runs differ (%s vs %s)\n%s", r->run_a_digest().c_str(),
                 r->run_b_digest().c_str(),
                 FormatDivergence(r->divergence()).c_str());
  }
  if (!r->incomparable_reason().empty()) return kExitCouldNotRun;
  return r->identical() ? kExitOk : kExitNondeterministic;
}

int Commands::Certificates(const std::vector<std::string>& args) {
  if (!args.empty()) return Usage("certificates: takes no arguments");
  v1::ListCertificatesRequest req;
  req.set_model_digest(options_.model_digest);
  auto r = client_->ListCertificates(req);
  if (!r.ok()) return Fail(r.status());
  if (options_.json) {
    std::fputs(FormatJson(*r).c_str(), out_);
    return kExitOk;
  }
  if (r->certificates().empty()) std::fputs("no certificates\n", out_);
  for (const auto& c : r->certificates()) {
    std::fprintf(
        out_, "%s  %-12s %-14s model %s  class %s  golden %s  job %s\n",
        c.certificate_id().c_str(), v1::Level_Name(c.level()).c_str(),
        c.model_name().c_str(), c.model_digest().substr(0, 12).c_str(),
        c.hardware_class_digest().empty()
            ? absl::StrCat(c.hardware_classes_size(), " classes").c_str()
            : c.hardware_class_digest().substr(0, 12).c_str(),
        c.golden_run_digest().substr(0, 12).c_str(),
        c.evidence_job_ids_size() > 0 ? c.evidence_job_ids(0).c_str() : "");
  }
  return kExitOk;
}

int Commands::Check(const std::vector<std::string>& args) {
  const absl::Time start = absl::Now();
  std::string job_id = "unsubmitted";
  std::string reproducible_failure, golden_failure;
  int code = kExitOk;
  auto finish = [&](int exit_code) {
    const double secs = absl::ToDoubleSeconds(absl::Now() - start);
    if (!options_.junit.empty()) {
      std::ofstream f(options_.junit);
      f << CheckJUnit(job_id, exit_code, reproducible_failure, golden_failure,
                      secs);
      if (!f) {
        std::fprintf(err_, "lockstep: cannot write --junit file %s\n",
                     options_.junit.c_str());
      }
    }
    if (options_.json) {
      std::fprintf(out_,
                   "{\"job_id\": %s, \"exit_code\": %d, \"outcome\": "
                   "\"%s\", \"reproducible_failure\": %s, "
                   "\"golden_failure\": %s}\n",
                   JsonQuote(job_id).c_str(), exit_code,
                   exit_code == kExitOk                 ? "reproducible"
                   : exit_code == kExitNondeterministic ? "nondeterministic"
                   : exit_code == kExitNumericsChanged  ? "numerics_changed"
                                                        : "could_not_run",
                   JsonQuote(reproducible_failure).c_str(),
                   JsonQuote(golden_failure).c_str());
    }
    return exit_code;
  };
  auto could_not_run = [&](const absl::Status& s) {
    reproducible_failure =
        absl::StrCat(absl::StatusCodeToString(s.code()), ": ", s.message());
    std::fprintf(err_, "lockstep: %s\n", reproducible_failure.c_str());
    return finish(kExitCouldNotRun);
  };
  auto req = BuildRequest(args);
  if (!req.ok()) return could_not_run(req.status());
  // The golden reference: a run digest, or a key=value label naming the
  // newest REPRODUCIBLE job of the same model and config (found once the
  // job is submitted and its digests are known).
  std::string golden_digest, golden_run;
  std::pair<std::string, std::string> golden_label;
  if (!options_.golden.empty()) {
    if (IsDigest128Hex(options_.golden)) {
      golden_digest = options_.golden;
    } else if (options_.golden.find('=') != std::string::npos &&
               options_.golden.front() != '=') {
      golden_label = absl::StrSplit(options_.golden, absl::MaxSplits('=', 1));
    } else {
      return could_not_run(absl::InvalidArgumentError(
          "--golden: expected a 32-hex-digit run digest or key=value label"));
    }
  }
  auto job = client_->Submit(*req);
  if (!job.ok()) return could_not_run(job.status());
  job_id = job->job_id();
  if (!options_.json) {
    std::fprintf(out_, "check: submitted %s (%d runs)\n", job_id.c_str(),
                 job->runs_size());
  }
  if (!golden_label.first.empty()) {
    auto golden = client_->FindGoldenJob(
        golden_label.first, golden_label.second, job->model_digest(),
        job->config_digest(), job_id);
    if (!golden.ok()) return could_not_run(golden.status());
    for (const auto& r : golden->runs()) {
      if (r.state() == v1::RUN_SUCCEEDED) {
        golden_digest = r.run_digest();
        golden_run = r.run_id();
        break;
      }
    }
    if (golden_digest.empty()) {
      return could_not_run(absl::NotFoundError(absl::StrCat(
          "--golden: job ", golden->job_id(), " has no succeeded run")));
    }
    if (!options_.json) {
      std::fprintf(out_, "check: golden job %s (run %s)\n",
                   golden->job_id().c_str(), golden_run.c_str());
    }
  }
  auto done = WatchUntilDone(job_id);
  if (!done.ok()) return could_not_run(done.status());
  if (done->state() != v1::JOB_SUCCEEDED) {
    return could_not_run(absl::AbortedError(
        absl::StrCat("job ", job_id, " ", v1::JobState_Name(done->state()),
                     ": ", done->failure_reason())));
  }
  auto report = client_->GetReport(job_id);
  if (!report.ok()) return could_not_run(report.status());
  if (!options_.json) std::fputs(FormatReport(*report).c_str(), out_);
  if (report->verdict() == v1::NONDETERMINISTIC) {
    reproducible_failure = absl::StrCat(
        "nondeterministic at layer \"", report->divergence().tensor().layer(),
        "\" (", report->divergence().tensor().op(), ", step ",
        report->divergence().step(), ")\n", report->summary());
    code = kExitNondeterministic;
  } else if (report->verdict() != v1::REPRODUCIBLE) {
    return could_not_run(absl::FailedPreconditionError(report->summary()));
  } else if (!golden_digest.empty()) {
    std::string ref_run, ref_digest;
    for (const auto& r : done->runs()) {
      if (r.state() == v1::RUN_SUCCEEDED) {
        ref_run = r.run_id();
        ref_digest = r.run_digest();
        break;
      }
    }
    if (ref_digest != golden_digest) {
      code = kExitNumericsChanged;
      golden_failure = absl::StrCat("numerics changed: run digest ", ref_digest,
                                    " differs from the golden ", golden_digest);
      if (!golden_run.empty()) {
        auto cmp = client_->CompareRuns(golden_run, ref_run);
        if (cmp.ok() && cmp->has_divergence()) {
          absl::StrAppend(&golden_failure, "\nnumerics changed at layer \"",
                          cmp->divergence().tensor().layer(), "\" (",
                          cmp->divergence().tensor().op(), ", step ",
                          cmp->divergence().step(), ")\n",
                          FormatDivergence(cmp->divergence()));
        } else if (cmp.ok() && !cmp->incomparable_reason().empty()) {
          absl::StrAppend(&golden_failure, "\n", cmp->incomparable_reason());
        }
      }
    }
  }
  if (!options_.json) {
    if (code == kExitOk) {
      std::fprintf(out_, "check: PASS (reproducible%s)\n",
                   golden_digest.empty() ? "" : ", matches the golden run");
    } else {
      const std::string& why =
          code == kExitNondeterministic ? reproducible_failure : golden_failure;
      std::fprintf(out_, "check: FAIL: %s\n",
                   why.substr(0, why.find('\n')).c_str());
    }
  }
  return finish(code);
}

int Commands::Audit(const std::vector<std::string>& args) {
  if (args.empty()) return Usage("audit: expected start, show or list");
  const std::string& action = args[0];
  auto print = [&](const v1::Audit& a) {
    std::fputs((options_.json ? FormatJson(a) : FormatAudit(a)).c_str(), out_);
  };
  if (action == "list") {
    auto r = client_->ListAudits();
    if (!r.ok()) return Fail(r.status());
    if (options_.json) {
      std::fputs(FormatJson(*r).c_str(), out_);
      return kExitOk;
    }
    if (r->audits().empty()) std::fputs("no audits\n", out_);
    for (const auto& a : r->audits()) {
      std::fprintf(out_, "%s  %-14s %-12s %s\n", a.audit_id().c_str(),
                   v1::AuditState_Name(a.state()).c_str(),
                   a.spec().workload().c_str(), a.summary().c_str());
    }
    return kExitOk;
  }
  if (action == "show") {
    if (args.size() != 2) return Usage("audit show: expected AUDIT");
    auto a = client_->GetAudit(args[1]);
    if (!a.ok()) return Fail(a.status());
    print(*a);
    return kExitOk;
  }
  if (action != "start")
    return Usage("audit: unknown action \"" + action + "\"");
  if (args.size() != 2 && args.size() != 3) {
    return Usage("audit start: expected WORKLOAD, or MODEL CONFIG");
  }
  v1::StartAuditRequest req;
  if (args.size() == 3) {
    // The team's own model (.json or .onnx), its parameters uploaded first.
    absl::Status loaded = LoadModelAndConfig(
        args[1], args[2], req.mutable_spec()->mutable_model(),
        req.mutable_spec()->mutable_config());
    if (!loaded.ok()) return Fail(loaded);
  } else if (IsOnnxPath(args[1])) {
    return Usage(
        "audit start: an ONNX model needs its config: audit start MODEL.onnx "
        "CONFIG");
  } else {
    req.mutable_spec()->set_workload(args[1]);
  }
  req.mutable_spec()->set_quarantine_outliers(options_.quarantine);
  absl::Status labels =
      ParseLabels(options_.worker_labels, "--worker_labels",
                  req.mutable_spec()->mutable_worker_labels());
  if (!labels.ok()) return Usage(std::string(labels.message()));
  if (!options_.workers.empty()) {
    // Names or ids; names are resolved through ListWorkers.
    auto all = client_->ListWorkers(false);
    if (!all.ok()) return Fail(all.status());
    for (absl::string_view w : absl::StrSplit(options_.workers, ',')) {
      std::string id(w);
      for (const auto& known : all->workers()) {
        if (known.name() == w) id = known.worker_id();
      }
      req.mutable_spec()->add_worker_ids(id);
    }
  } else if (options_.worker_labels.empty()) {
    req.mutable_spec()->set_all_workers(true);
  }
  auto audit = client_->StartAudit(req);
  if (!audit.ok()) return Fail(audit.status());
  if (!options_.wait) {
    print(*audit);
    return kExitOk;
  }
  if (!options_.json) {
    std::fprintf(out_, "audit %s started (job %s)\n", audit->audit_id().c_str(),
                 audit->job_id().c_str());
  }
  auto job = WatchUntilDone(audit->job_id());
  if (!job.ok()) return Fail(job.status());
  // The audit is evaluated right after its job ends.
  absl::StatusOr<v1::Audit> done = client_->GetAudit(audit->audit_id());
  for (int i = 0; i < 100 && done.ok() && done->state() == v1::AUDIT_RUNNING;
       ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    done = client_->GetAudit(audit->audit_id());
  }
  if (!done.ok()) return Fail(done.status());
  print(*done);
  return kExitOk;
}

}  // namespace lockstep::client

#include "server/http/http_server.h"

#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/json.h"
#include "google/protobuf/util/json_util.h"
#include "httplib.h"
#include "server/http/assets.h"
#include "server/http/query_params.h"
#include "server/metrics.h"

namespace lockstep::server {
namespace {

using namespace ::lockstep::v1;  // NOLINT: request/response types

constexpr int kMaxPageSize = 500;
// Steps one divergence map or loss curve covers at most.
constexpr int kDefaultMaxSteps = 200;
constexpr int kMaxSteps = 1000;
// Runs whose loss curves one answer carries at most.
constexpr int kMaxLossRuns = 16;
constexpr int kDefaultHistory = 50;
constexpr int kMaxHistory = 200;
// Unfinished jobs the job and run gauges look at, at most.
constexpr int kMaxGaugeJobs = 5000;
// Newest audits the audit gauges look at.
constexpr int kGaugeAudits = 500;

// A JSON string literal (quotes included).
std::string JsonString(absl::string_view s) { return JsonQuote(s); }

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.9g", v);
}

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kUnimplemented:
      return 501;
    default:
      return 500;
  }
}

void SendJson(httplib::Response& res, int status, std::string body) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(std::move(body), "application/json; charset=utf-8");
}

void SendError(httplib::Response& res, const absl::Status& s) {
  SendJson(res, HttpStatusOf(s.code()),
           absl::StrCat(
               "{\"code\":", JsonString(absl::StatusCodeToString(s.code())),
               ",\"message\":", JsonString(std::string(s.message())), "}\n"));
}

template <typename M>
void SendProto(httplib::Response& res, const absl::StatusOr<M>& m) {
  if (!m.ok()) return SendError(res, m.status());
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  std::string out;
  auto s = google::protobuf::util::MessageToJsonString(*m, &out, options);
  if (!s.ok()) {
    return SendError(res, absl::InternalError(absl::StrCat(
                              "cannot render JSON: ", s.ToString())));
  }
  out += "\n";
  SendJson(res, 200, std::move(out));
}

using Params = QueryParams;

#define HTTP_RETURN_IF_ERROR(res, expr)      \
  do {                                       \
    const absl::Status _s = (expr);          \
    if (!_s.ok()) return SendError(res, _s); \
  } while (0)

#define HTTP_ASSIGN_OR_RETURN(res, lhs, expr)                   \
  auto lhs##_or = (expr);                                       \
  if (!lhs##_or.ok()) return SendError(res, lhs##_or.status()); \
  auto lhs = std::move(*lhs##_or)

const char* PhaseName(Phase p) {
  switch (p) {
    case PHASE_INPUT:
      return "input";
    case PHASE_FORWARD:
      return "forward";
    case PHASE_BACKWARD:
      return "backward";
    case PHASE_OPTIMIZER:
      return "optimizer";
    default:
      return "unspecified";
  }
}

bool SameHash(const TensorFingerprint& a, const TensorFingerprint& b) {
  return a.hash_hi() == b.hash_hi() && a.hash_lo() == b.hash_lo();
}

const Run* FindRun(const Job& job, const std::string& run_id) {
  for (const Run& r : job.runs()) {
    if (r.run_id() == run_id) return &r;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const HttpServerOptions& options, store::Store* store,
    WorkerRegistry* registry, JobManager* jobs, AuditManager* audits,
    const Authorizer* auth, Clock clock) {
  const size_t colon = options.listen_address.rfind(':');
  int port = -1;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(options.listen_address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("http_listen: \"", options.listen_address,
                     "\" is not host:port (port 0..65535)"));
  }
  if (options.threads < 1 || options.threads > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("http threads: ", options.threads, " is outside 1..64"));
  }
  std::string host = options.listen_address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  auto s = std::unique_ptr<HttpServer>(new HttpServer());
  s->store_ = store;
  s->registry_ = registry;
  s->jobs_ = jobs;
  s->audits_ = audits;
  s->auth_ = auth;
  s->clock_ = std::move(clock);
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("tls_cert, tls_key: set both or neither");
  }
  if (options.tls_cert_file.empty()) {
    s->server_ = std::make_unique<httplib::Server>();
  } else {
    auto ssl = std::make_unique<httplib::SSLServer>(
        options.tls_cert_file.c_str(), options.tls_key_file.c_str());
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tls_cert, tls_key: the HTTP listener cannot use ",
                       options.tls_cert_file, " and ", options.tls_key_file));
    }
    s->server_ = std::move(ssl);
  }
  const int threads = options.threads;
  s->server_->new_task_queue = [threads] {
    return new httplib::ThreadPool(threads);
  };
  s->server_->set_read_timeout(options.io_timeout_s, 0);
  s->server_->set_write_timeout(options.io_timeout_s, 0);
  s->server_->set_keep_alive_max_count(100);
  s->server_->set_keep_alive_timeout(options.keep_alive_s);
  s->server_->set_payload_max_length(64 * 1024);
  // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which lets
  // a second process bind the same port and take half its connections.
  s->server_->set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  s->Routes();
  if (port == 0) {
    s->port_ = s->server_->bind_to_any_port(host);
  } else if (s->server_->bind_to_port(host, port)) {
    s->port_ = port;
  }
  if (s->port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("http_listen: cannot listen on ", options.listen_address,
                     " (address in use, or not a valid host:port)"));
  }
  s->thread_ =
      std::thread([raw = s.get()] { raw->server_->listen_after_bind(); });
  return s;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string HttpServer::RenderMetrics() {
  std::string out = GlobalMetrics().Render();

  // Unfinished jobs and their runs, by state.
  std::map<std::vector<std::string>, double> jobs_by_state, runs_by_state;
  for (int i = 1; i < JobState_descriptor()->value_count(); ++i) {
    jobs_by_state[{JobState_descriptor()->value(i)->name()}] = 0;
  }
  for (int i = 1; i < RunState_descriptor()->value_count(); ++i) {
    runs_by_state[{RunState_descriptor()->value(i)->name()}] = 0;
  }
  absl::StatusOr<std::vector<std::string>> unfinished =
      store_->ListUnfinishedJobIds();
  if (unfinished.ok()) {
    int seen = 0;
    for (const std::string& id : *unfinished) {
      if (++seen > kMaxGaugeJobs) break;
      absl::StatusOr<Job> job = jobs_->GetJob(id);
      if (!job.ok()) continue;
      jobs_by_state[{JobState_Name(job->state())}] += 1;
      for (const Run& r : job->runs()) {
        runs_by_state[{RunState_Name(r.state())}] += 1;
      }
    }
  }
  RenderGauge("lockstep_unfinished_jobs",
              "Jobs not finished yet (queued or running), by state.", {"state"},
              jobs_by_state, &out);
  RenderGauge("lockstep_unfinished_job_runs",
              "Runs of unfinished jobs, by run state.", {"state"},
              runs_by_state, &out);
  RenderGauge("lockstep_jobs_in_memory",
              "Jobs the scheduler holds in memory (unfinished and recently "
              "finished).",
              {}, {{{}, static_cast<double>(jobs_->JobsInMemory())}}, &out);

  // Workers.
  std::map<std::vector<std::string>, double> workers, selftest;
  absl::StatusOr<std::vector<Worker>> list = registry_->List(true);
  if (list.ok()) {
    for (const Worker& w : *list) {
      const WorkerAdminState admin =
          w.admin_state() == WORKER_ADMIN_STATE_UNSPECIFIED ? ACTIVE
                                                            : w.admin_state();
      workers[{WorkerState_Name(w.state()), WorkerAdminState_Name(admin),
               w.profile().hardware_class_digest()}] += 1;
      const char* result =
          !w.profile().has_selftest()
              ? "none"
              : (w.profile().selftest().passed() ? "passed" : "failed");
      selftest[{result}] += 1;
    }
  }
  RenderGauge("lockstep_workers",
              "Known workers by connection state, admin state and hardware "
              "class digest.",
              {"state", "admin_state", "hardware_class_digest"}, workers, &out);
  RenderGauge("lockstep_workers_selftest",
              "Known workers by the result of their start-up selftest.",
              {"result"}, selftest, &out);

  // Audits.
  std::map<std::vector<std::string>, double> audits, results;
  std::map<std::vector<std::string>, double> outliers = {{{}, 0}};
  for (int i = 1; i < AuditState_descriptor()->value_count(); ++i) {
    audits[{AuditState_descriptor()->value(i)->name()}] = 0;
  }
  for (int i = 1; i < WorkerHealth_descriptor()->value_count(); ++i) {
    results[{WorkerHealth_descriptor()->value(i)->name()}] = 0;
  }
  absl::StatusOr<std::vector<Audit>> recent = store_->ListAudits(kGaugeAudits);
  if (recent.ok()) {
    std::set<std::string> judged;     // workers whose newest result is counted
    for (const Audit& a : *recent) {  // newest first
      audits[{AuditState_Name(a.state())}] += 1;
      for (const AuditWorkerResult& r : a.workers()) {
        results[{WorkerHealth_Name(r.health())}] += 1;
        if (a.state() == AUDIT_DONE && judged.insert(r.worker_id()).second &&
            r.health() == OUTLIER) {
          outliers[{}] += 1;
        }
      }
    }
  }
  RenderGauge(
      "lockstep_audits",
      absl::StrCat("Audits by state, among the newest ", kGaugeAudits, "."),
      {"state"}, audits, &out);
  RenderGauge("lockstep_audit_worker_results",
              absl::StrCat("Per-worker audit results by health, among the "
                           "newest ",
                           kGaugeAudits, " audits."),
              {"health"}, results, &out);
  RenderGauge("lockstep_audit_outlier_workers",
              "Workers whose newest finished audit named them an outlier.", {},
              outliers, &out);

  // The store's files.
  std::map<std::vector<std::string>, double> bytes;
  for (const char* suffix : {"", "-wal"}) {
    struct stat st;
    const std::string path = store_->path() + suffix;
    bytes[{suffix[0] == 0 ? "db" : "wal"}] =
        ::stat(path.c_str(), &st) == 0 ? static_cast<double>(st.st_size) : 0;
  }
  RenderGauge("lockstep_store_bytes",
              "Size of the SQLite store's files (database and write-ahead "
              "log), which hold every fingerprint.",
              {"file"}, bytes, &out);
  return out;
}

void HttpServer::Routes() {
  httplib::Server& s = *server_;
  // Every handler counts its route and status.
  // /api/v1/ routes need a token of a viewer or above when tokens are on
  // (the admin log: admin); health, metrics and the static files are open.
  auto get =
      [&s, auth = auth_](
          const std::string& pattern, const std::string& route,
          std::function<void(const httplib::Request&, httplib::Response&)>
              handler) {
        const bool open = !absl::StartsWith(route, "/api/");
        const Role needed =
            route == "/api/v1/admin_log" ? Role::kAdmin : Role::kViewer;
        s.Get(pattern, [route, handler, open, needed, auth](
                           const httplib::Request& req,
                           httplib::Response& res) {
          absl::StatusOr<Principal> who =
              open || auth == nullptr
                  ? absl::StatusOr<Principal>(Principal())
                  : auth->AuthorizeHeader(req.get_header_value("Authorization"),
                                          needed);
          if (who.ok()) {
            handler(req, res);
          } else {
            if (who.status().code() == absl::StatusCode::kUnauthenticated) {
              res.set_header("WWW-Authenticate", "Bearer");
            }
            SendError(res, who.status());
          }
          GlobalMetrics().http_requests.Add({route, absl::StrCat(res.status)});
        });
      };

  get("/healthz", "/healthz",
      [](const httplib::Request&, httplib::Response& res) {
        res.set_content("ok\n", "text/plain; charset=utf-8");
      });
  get("/readyz", "/readyz",
      [this](const httplib::Request&, httplib::Response& res) {
        absl::Status s = store_->ListAudits(1).status();
        if (s.ok()) s = registry_->List(false).status();
        if (!s.ok()) {
          res.status = 503;
          res.set_content(absl::StrCat("not ready: ", s.ToString(), "\n"),
                          "text/plain; charset=utf-8");
          return;
        }
        res.set_content("ready\n", "text/plain; charset=utf-8");
      });
  get("/metrics", "/metrics",
      [this](const httplib::Request&, httplib::Response& res) {
        res.set_content(RenderMetrics(), "text/plain; version=0.0.4");
      });

  get("/api/v1/jobs", "/api/v1/jobs",
      [this](const httplib::Request& req, httplib::Response& res) {
        Params p(req, {"page_size", "page_token", "state", "model_digest",
                       "config_digest", "verdict", "label", "exclude_job_id"});
        HTTP_RETURN_IF_ERROR(res, p.CheckKnown());
        ListJobsRequest r;
        HTTP_ASSIGN_OR_RETURN(res, page_size,
                              p.Int("page_size", 0, kMaxPageSize, 0));
        HTTP_ASSIGN_OR_RETURN(res, state,
                              p.Enum<JobState>("state", JobState_descriptor()));
        HTTP_ASSIGN_OR_RETURN(res, verdict,
                              p.Enum<Verdict>("verdict", Verdict_descriptor()));
        r.set_page_size(page_size);
        r.set_page_token(p.Str("page_token"));
        r.set_state(state);
        r.set_verdict(verdict);
        r.set_model_digest(p.Str("model_digest"));
        r.set_config_digest(p.Str("config_digest"));
        r.set_exclude_job_id(p.Str("exclude_job_id"));
        for (const std::string& label : p.All("label")) {
          HTTP_ASSIGN_OR_RETURN(res, kv, ParseLabelFilter(label));
          (*r.mutable_labels())[kv.first] = kv.second;
        }
        SendProto(res, jobs_->ListJobs(r));
      });
  get(R"(/api/v1/jobs/([^/]+))", "/api/v1/jobs/{id}",
      [this](const httplib::Request& req, httplib::Response& res) {
        HTTP_RETURN_IF_ERROR(res, Params(req, {}).CheckKnown());
        SendProto(res, jobs_->GetJob(req.matches[1]));
      });
  get(R"(/api/v1/jobs/([^/]+)/report)", "/api/v1/jobs/{id}/report",
      [this](const httplib::Request& req, httplib::Response& res) {
        HTTP_RETURN_IF_ERROR(res, Params(req, {}).CheckKnown());
        SendProto(res, jobs_->GetReport(req.matches[1]));
      });
  get(R"(/api/v1/jobs/([^/]+)/divergence_map)",
      "/api/v1/jobs/{id}/divergence_map",
      [this](const httplib::Request& req, httplib::Response& res) {
        Params p(req, {"run_a", "run_b", "max_steps"});
        HTTP_RETURN_IF_ERROR(res, p.CheckKnown());
        HTTP_ASSIGN_OR_RETURN(
            res, max_steps, p.Int("max_steps", 1, kMaxSteps, kDefaultMaxSteps));
        HTTP_ASSIGN_OR_RETURN(res, job, jobs_->GetJob(req.matches[1]));
        std::string run_a = p.Str("run_a"), run_b = p.Str("run_b");
        if (run_a.empty() || run_b.empty()) {
          // The report's first divergence, else the first two runs that
          // succeeded.
          absl::StatusOr<Report> report = jobs_->GetReport(job.job_id());
          if (report.ok() && report->has_divergence()) {
            if (run_a.empty()) run_a = report->divergence().run_a();
            if (run_b.empty()) run_b = report->divergence().run_b();
          }
          for (const Run& r : job.runs()) {
            if (r.state() != RUN_SUCCEEDED) continue;
            if (run_a.empty()) {
              run_a = r.run_id();
            } else if (run_b.empty() && r.run_id() != run_a) {
              run_b = r.run_id();
            }
          }
        }
        for (const auto& [name, id] :
             {std::pair<std::string, std::string>{"run_a", run_a},
              {"run_b", run_b}}) {
          const Run* r = FindRun(job, id);
          if (r == nullptr || r->state() != RUN_SUCCEEDED) {
            return SendError(
                res, absl::FailedPreconditionError(absl::StrCat(
                         name, ": \"", Utf8Prefix(id, 64),
                         "\" is not a succeeded run of job ", job.job_id(),
                         id.empty() ? " (it has fewer than two)" : "")));
          }
        }
        HTTP_ASSIGN_OR_RETURN(res, manifest, store_->GetManifest(job.job_id()));
        // Rows: (layer, phase) in execution order of their first tensor.
        std::vector<int> row_of(manifest.entries_size());
        std::vector<std::pair<std::string, Phase>> rows;
        std::vector<int> tensors;
        std::map<std::pair<std::string, int>, int> row_index;
        for (int i = 0; i < manifest.entries_size(); ++i) {
          const ManifestEntry& e = manifest.entries(i);
          const std::string layer = e.layer().empty() ? "(batch)" : e.layer();
          auto [it, added] = row_index.emplace(
              std::make_pair(layer, static_cast<int>(e.phase())),
              static_cast<int>(rows.size()));
          if (added) {
            rows.emplace_back(layer, e.phase());
            tensors.push_back(0);
          }
          row_of[i] = it->second;
          ++tensors[it->second];
        }
        std::unique_ptr<StepReader> a =
            store_->OpenRunSteps(run_a, FindRun(job, run_a)->attempt());
        std::unique_ptr<StepReader> b =
            store_->OpenRunSteps(run_b, FindRun(job, run_b)->attempt());
        std::string steps_json, diff_json;
        int steps = 0;
        int64_t differing_total = 0;
        bool truncated = false;
        std::optional<std::pair<int, int>> first;  // step, entry index
        HTTP_ASSIGN_OR_RETURN(res, sa, a->Next());
        HTTP_ASSIGN_OR_RETURN(res, sb, b->Next());
        while (sa.has_value() && sb.has_value()) {
          if (sa->step < sb->step) {
            HTTP_ASSIGN_OR_RETURN(res, next, a->Next());
            sa = std::move(next);
            continue;
          }
          if (sb->step < sa->step) {
            HTTP_ASSIGN_OR_RETURN(res, next, b->Next());
            sb = std::move(next);
            continue;
          }
          if (steps == max_steps) {
            truncated = true;
            break;
          }
          std::vector<int> diff(rows.size(), 0);
          const size_t n = std::min({sa->fingerprints.size(),
                                     sb->fingerprints.size(), row_of.size()});
          for (size_t i = 0; i < n; ++i) {
            if (SameHash(sa->fingerprints[i], sb->fingerprints[i])) continue;
            ++diff[row_of[i]];
            ++differing_total;
            if (!first.has_value()) {
              first = std::make_pair(sa->step, static_cast<int>(i));
            }
          }
          absl::StrAppend(&steps_json, steps == 0 ? "" : ",", sa->step);
          absl::StrAppend(&diff_json, steps == 0 ? "[" : ",[",
                          absl::StrJoin(diff, ","), "]");
          ++steps;
          HTTP_ASSIGN_OR_RETURN(res, na, a->Next());
          HTTP_ASSIGN_OR_RETURN(res, nb, b->Next());
          sa = std::move(na);
          sb = std::move(nb);
        }
        std::string rows_json;
        for (size_t i = 0; i < rows.size(); ++i) {
          absl::StrAppend(&rows_json, i == 0 ? "" : ",",
                          "{\"layer\":", JsonString(rows[i].first),
                          ",\"phase\":\"", PhaseName(rows[i].second),
                          "\",\"tensors\":", tensors[i], "}");
        }
        std::string first_json = "null";
        if (first.has_value()) {
          const ManifestEntry& e = manifest.entries(first->second);
          first_json = absl::StrCat(
              "{\"step\":", first->first, ",\"index\":", e.index(),
              ",\"row\":", row_of[first->second],
              ",\"layer\":", JsonString(e.layer()), ",\"phase\":\"",
              PhaseName(e.phase()), "\",\"op\":", JsonString(e.op()),
              ",\"role\":", JsonString(TensorRole_Name(e.role())), "}");
        }
        SendJson(res, 200,
                 absl::StrCat(
                     "{\"jobId\":", JsonString(job.job_id()),
                     ",\"runA\":", JsonString(run_a),
                     ",\"runB\":", JsonString(run_b), ",\"rows\":[", rows_json,
                     "],\"steps\":[", steps_json, "],\"differing\":[",
                     diff_json, "],\"differingTotal\":", differing_total,
                     ",\"first\":", first_json,
                     ",\"truncated\":", truncated ? "true" : "false", "}\n"));
      });
  get(R"(/api/v1/jobs/([^/]+)/loss)", "/api/v1/jobs/{id}/loss",
      [this](const httplib::Request& req, httplib::Response& res) {
        Params p(req, {"max_steps"});
        HTTP_RETURN_IF_ERROR(res, p.CheckKnown());
        HTTP_ASSIGN_OR_RETURN(
            res, max_steps, p.Int("max_steps", 1, kMaxSteps, kDefaultMaxSteps));
        HTTP_ASSIGN_OR_RETURN(res, job, jobs_->GetJob(req.matches[1]));
        HTTP_ASSIGN_OR_RETURN(res, manifest, store_->GetManifest(job.job_id()));
        int loss_index = -1;
        for (int i = 0; i < manifest.entries_size(); ++i) {
          if (manifest.entries(i).role() == LOSS) {
            loss_index = i;
            break;
          }
        }
        std::string runs_json;
        bool truncated = false;
        int runs = 0;
        for (const Run& r : job.runs()) {
          if (loss_index < 0) break;
          if (r.state() != RUN_SUCCEEDED && r.state() != RUN_RUNNING) continue;
          if (runs == kMaxLossRuns) {
            truncated = true;
            break;
          }
          std::unique_ptr<StepReader> reader =
              store_->OpenRunSteps(r.run_id(), r.attempt());
          std::string steps_json, loss_json;
          int n = 0;
          while (true) {
            HTTP_ASSIGN_OR_RETURN(res, step, reader->Next());
            if (!step.has_value()) break;
            if (n == max_steps) {
              truncated = true;
              break;
            }
            if (static_cast<size_t>(loss_index) >= step->fingerprints.size()) {
              continue;
            }
            absl::StrAppend(&steps_json, n == 0 ? "" : ",", step->step);
            absl::StrAppend(
                &loss_json, n == 0 ? "" : ",",
                JsonNumber(step->fingerprints[loss_index].stats().sum()));
            ++n;
          }
          absl::StrAppend(&runs_json, runs == 0 ? "" : ",",
                          "{\"runId\":", JsonString(r.run_id()),
                          ",\"index\":", r.index(), ",\"steps\":[", steps_json,
                          "],\"loss\":[", loss_json, "]}");
          ++runs;
        }
        SendJson(res, 200,
                 absl::StrCat("{\"jobId\":", JsonString(job.job_id()),
                              ",\"runs\":[", runs_json, "],\"truncated\":",
                              truncated ? "true" : "false", "}\n"));
      });
  get("/api/v1/compare", "/api/v1/compare",
      [this](const httplib::Request& req, httplib::Response& res) {
        Params p(req, {"run_a", "run_b"});
        HTTP_RETURN_IF_ERROR(res, p.CheckKnown());
        SendProto(res, jobs_->CompareRuns(p.Str("run_a"), p.Str("run_b")));
      });
  get("/api/v1/certificates", "/api/v1/certificates",
      [this](const httplib::Request& req, httplib::Response& res) {
        Params p(req, {"model_digest", "hardware_class_digest", "level",
                       "page_size", "page_token"});
        HTTP_RETURN_IF_ERROR(res, p.CheckKnown());
        HTTP_ASSIGN_OR_RETURN(res, page_size,
                              p.Int("page_size", 0, kMaxPageSize, 0));
        HTTP_ASSIGN_OR_RETURN(res, level,
                              p.Enum<Level>("level", Level_descriptor()));
        ListCertificatesRequest r;
        r.set_model_digest(p.Str("model_digest"));
        r.set_hardware_class_digest(p.Str("hardware_class_digest"));
        r.set_level(level);
        r.set_page_size(page_size);
        r.set_page_token(p.Str("page_token"));
        SendProto(res, jobs_->ListCertificates(r));
      });
  get(R"(/api/v1/certificates/([^/]+))", "/api/v1/certificates/{id}",
      [this](const httplib::Request& req, httplib::Response& res) {
        HTTP_RETURN_IF_ERROR(res, Params(req, {}).CheckKnown());
        SendProto(res, jobs_->GetCertificate(req.matches[1]));
      });
  get("/api/v1/workers", "/api/v1/workers",
      [this](const httplib::Request& req, httplib::Response& res) {
        Params p(req, {"include_gone"});
        HTTP_RETURN_IF_ERROR(res, p.CheckKnown());
        HTTP_ASSIGN_OR_RETURN(res, include_gone, p.Bool("include_gone"));
        // As LockstepService::ListWorkers answers it.
        absl::StatusOr<std::vector<Worker>> workers =
            registry_->List(include_gone);
        if (!workers.ok()) return SendError(res, workers.status());
        ListWorkersResponse out;
        for (Worker& w : *workers) *out.add_workers() = std::move(w);
        out.set_server_unix_ms(clock_());
        SendProto(res, absl::StatusOr<ListWorkersResponse>(std::move(out)));
      });
  get(R"(/api/v1/workers/([^/]+)/history)", "/api/v1/workers/{id}/history",
      [this](const httplib::Request& req, httplib::Response& res) {
        Params p(req, {"limit"});
        HTTP_RETURN_IF_ERROR(res, p.CheckKnown());
        HTTP_ASSIGN_OR_RETURN(res, limit,
                              p.Int("limit", 1, kMaxHistory, kDefaultHistory));
        HTTP_ASSIGN_OR_RETURN(res, events,
                              store_->ListWorkerEvents(req.matches[1], limit));
        std::string out = "{\"events\":[";
        for (size_t i = 0; i < events.size(); ++i) {
          absl::StrAppend(&out, i == 0 ? "" : ",",
                          "{\"atUnixMs\":", events[i].at_unix_ms,
                          ",\"kind\":", JsonString(events[i].kind),
                          ",\"detail\":", JsonString(events[i].detail), "}");
        }
        SendJson(res, 200, out + "]}\n");
      });
  get("/api/v1/audits", "/api/v1/audits",
      [this](const httplib::Request& req, httplib::Response& res) {
        Params p(req, {"page_size", "page_token"});
        HTTP_RETURN_IF_ERROR(res, p.CheckKnown());
        HTTP_ASSIGN_OR_RETURN(res, page_size,
                              p.Int("page_size", 0, kMaxPageSize, 0));
        ListAuditsRequest r;
        r.set_page_size(page_size);
        r.set_page_token(p.Str("page_token"));
        SendProto(res, audits_->List(r));
      });
  get(R"(/api/v1/audits/([^/]+))", "/api/v1/audits/{id}",
      [this](const httplib::Request& req, httplib::Response& res) {
        HTTP_RETURN_IF_ERROR(res, Params(req, {}).CheckKnown());
        SendProto(res, audits_->Get(req.matches[1]));
      });
  get("/api/v1/admin_log", "/api/v1/admin_log",
      [this](const httplib::Request& req, httplib::Response& res) {
        Params p(req, {"limit"});
        HTTP_RETURN_IF_ERROR(res, p.CheckKnown());
        HTTP_ASSIGN_OR_RETURN(res, limit, p.Int("limit", 1, kMaxPageSize, 50));
        absl::StatusOr<std::vector<store::AdminLogEntry>> log =
            store_->ListAdminLog(limit);
        HTTP_RETURN_IF_ERROR(res, log.status());
        std::string out = "{\"entries\":[";
        for (size_t i = 0; i < log->size(); ++i) {
          const store::AdminLogEntry& e = (*log)[i];
          absl::StrAppend(&out, i == 0 ? "" : ",", "{\"entry_id\":", e.entry_id,
                          ",\"at_unix_ms\":", e.at_unix_ms,
                          ",\"principal\":", JsonString(e.principal),
                          ",\"action\":", JsonString(e.action),
                          ",\"target\":", JsonString(e.target),
                          ",\"detail\":", JsonString(e.detail),
                          ",\"outcome\":", JsonString(e.outcome), "}");
        }
        SendJson(res, 200, out + "]}\n");
      });
  get(R"(/api/v1/.*)", "/api/v1/unknown",
      [](const httplib::Request& req, httplib::Response& res) {
        SendError(res, absl::NotFoundError(absl::StrCat(
                           "no API resource at ", Utf8Prefix(req.path, 128))));
      });

  // The dashboard.
  get(R"(/|/index\.html|/app\.js|/style\.css)", "/assets",
      [](const httplib::Request& req, httplib::Response& res) {
        const Asset* a = FindAsset(req.path == "/" ? "/index.html" : req.path);
        if (a == nullptr) {
          res.status = 404;
          return;
        }
        res.set_header("Cache-Control", "no-cache");
        res.set_content(reinterpret_cast<const char*>(a->data), a->size,
                        a->content_type);
      });
}

}  // namespace lockstep::server

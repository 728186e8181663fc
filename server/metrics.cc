#include "server/metrics.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace lockstep::server {
namespace {

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    return absl::StrFormat("%.0f", v);
  }
  return absl::StrFormat("%.17g", v);
}

std::string Labels(const std::vector<std::string>& names,
                   const std::vector<std::string>& values,
                   const std::string& extra = "") {
  std::string out;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    if (!out.empty()) out += ",";
    absl::StrAppend(&out, names[i], "=\"", EscapeLabelValue(values[i]), "\"");
  }
  if (!extra.empty()) {
    if (!out.empty()) out += ",";
    out += extra;
  }
  return out.empty() ? "" : absl::StrCat("{", out, "}");
}

void Header(const std::string& name, const std::string& help,
            const std::string& type, std::string* out) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type,
                  "\n");
}

// Latency bounds in seconds: 100 us .. 10 s.
std::vector<double> LatencyBounds() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
}

}  // namespace

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

CounterFamily::CounterFamily(std::string name, std::string help,
                             std::vector<std::string> label_names)
    : name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)) {}

void CounterFamily::Add(const std::vector<std::string>& label_values,
                        double delta) {
  absl::MutexLock lock(&mu_);
  values_[label_values] += delta;
}

double CounterFamily::Value(
    const std::vector<std::string>& label_values) const {
  absl::MutexLock lock(&mu_);
  auto it = values_.find(label_values);
  return it == values_.end() ? 0 : it->second;
}

void CounterFamily::Render(std::string* out) const {
  Header(name_, help_, "counter", out);
  absl::MutexLock lock(&mu_);
  if (values_.empty() && label_names_.empty()) {
    absl::StrAppend(out, name_, " 0\n");
  }
  for (const auto& [labels, v] : values_) {
    absl::StrAppend(out, name_, Labels(label_names_, labels), " ",
                    FormatValue(v), "\n");
  }
}

HistogramFamily::HistogramFamily(std::string name, std::string help,
                                 std::vector<std::string> label_names,
                                 std::vector<double> bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)),
      bounds_(std::move(bounds)) {}

void HistogramFamily::Observe(const std::vector<std::string>& label_values,
                              double value) {
  absl::MutexLock lock(&mu_);
  Series& s = series_[label_values];
  if (s.buckets.empty()) s.buckets.assign(bounds_.size(), 0);
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (value <= bounds_[i]) {
      ++s.buckets[i];
      break;
    }
  }
  ++s.count;
  s.sum += value;
}

uint64_t HistogramFamily::Count(
    const std::vector<std::string>& label_values) const {
  absl::MutexLock lock(&mu_);
  auto it = series_.find(label_values);
  return it == series_.end() ? 0 : it->second.count;
}

void HistogramFamily::Render(std::string* out) const {
  Header(name_, help_, "histogram", out);
  absl::MutexLock lock(&mu_);
  for (const auto& [labels, s] : series_) {
    uint64_t cumulative = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
      cumulative += s.buckets[i];
      absl::StrAppend(
          out, name_, "_bucket",
          Labels(label_names_, labels,
                 absl::StrCat("le=\"", FormatValue(bounds_[i]), "\"")),
          " ", cumulative, "\n");
    }
    absl::StrAppend(out, name_, "_bucket",
                    Labels(label_names_, labels, "le=\"+Inf\""), " ", s.count,
                    "\n");
    absl::StrAppend(out, name_, "_sum", Labels(label_names_, labels), " ",
                    FormatValue(s.sum), "\n");
    absl::StrAppend(out, name_, "_count", Labels(label_names_, labels), " ",
                    s.count, "\n");
  }
}

Metrics::Metrics()
    : fingerprints_ingested("lockstep_fingerprints_ingested_total",
                            "Tensor fingerprints in acknowledged batches.", {}),
      fingerprint_bytes(
          "lockstep_fingerprint_bytes_ingested_total",
          "Serialized bytes of the fingerprints in acknowledged batches.", {}),
      batches("lockstep_fingerprint_batches_total",
              "Fingerprint batches received, by result (acknowledged, "
              "refused).",
              {"result"}),
      ingest_latency("lockstep_ingest_latency_seconds",
                     "Time to validate and durably store one fingerprint "
                     "batch.",
                     {}, LatencyBounds()),
      commit_latency("lockstep_commit_latency_seconds",
                     "Time to verify and commit one run's result.", {},
                     LatencyBounds()),
      rpcs("lockstep_rpcs_total",
           "gRPC calls handled, by full method name and status code.",
           {"method", "code"}),
      rpc_latency("lockstep_rpc_latency_seconds",
                  "Latency of unary gRPC calls, by full method name.",
                  {"method"}, LatencyBounds()),
      jobs_finished("lockstep_jobs_finished_total",
                    "Jobs whose final state and verdict were stored, by "
                    "state.",
                    {"state"}),
      verdicts("lockstep_verdicts_total", "Verdicts stored, by verdict.",
               {"verdict"}),
      divergences("lockstep_divergences_total",
                  "Stored verdicts with a first divergence, by cause id "
                  "(\"unknown\" when no cause was inferred).",
                  {"cause"}),
      http_requests("lockstep_http_requests_total",
                    "HTTP requests served, by route and status.",
                    {"route", "status"}) {}

std::string Metrics::Render() const {
  std::string out;
  fingerprints_ingested.Render(&out);
  fingerprint_bytes.Render(&out);
  batches.Render(&out);
  ingest_latency.Render(&out);
  commit_latency.Render(&out);
  rpcs.Render(&out);
  rpc_latency.Render(&out);
  jobs_finished.Render(&out);
  verdicts.Render(&out);
  divergences.Render(&out);
  http_requests.Render(&out);
  return out;
}

Metrics& GlobalMetrics() {
  static Metrics* const metrics = new Metrics();
  return *metrics;
}

void RenderGauge(const std::string& name, const std::string& help,
                 const std::vector<std::string>& label_names,
                 const std::map<std::vector<std::string>, double>& values,
                 std::string* out) {
  Header(name, help, "gauge", out);
  for (const auto& [labels, v] : values) {
    absl::StrAppend(out, name, Labels(label_names, labels), " ", FormatValue(v),
                    "\n");
  }
}

}  // namespace lockstep::server

// Process-wide counters and histograms of the coordinator, rendered in the
// Prometheus text exposition format (version 0.0.4) by /metrics.
//
// Families are declared once (below) with fixed label names; each label
// value set is a series. Values that describe current state (jobs and
// workers by state, the store's size) are not kept here: the HTTP layer
// reads them at scrape time and renders them with RenderGauge.
//
// Thread-safe.
#ifndef LOCKSTEP_SERVER_METRICS_H_
#define LOCKSTEP_SERVER_METRICS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace lockstep::server {

// A counter family: monotonically increasing values per label set.
class CounterFamily {
 public:
  CounterFamily(std::string name, std::string help,
                std::vector<std::string> label_names);
  // `label_values` must have one value per label name.
  void Add(const std::vector<std::string>& label_values, double delta = 1);
  double Value(const std::vector<std::string>& label_values) const;
  void Render(std::string* out) const;

 private:
  const std::string name_, help_;
  const std::vector<std::string> label_names_;
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, double> values_ ABSL_GUARDED_BY(mu_);
};

// A histogram family with fixed upper bounds (seconds, for latencies).
class HistogramFamily {
 public:
  HistogramFamily(std::string name, std::string help,
                  std::vector<std::string> label_names,
                  std::vector<double> bounds);
  void Observe(const std::vector<std::string>& label_values, double value);
  // Observations so far of one series.
  uint64_t Count(const std::vector<std::string>& label_values) const;
  void Render(std::string* out) const;

 private:
  struct Series {
    std::vector<uint64_t> buckets;  // per bound, not cumulative
    uint64_t count = 0;
    double sum = 0;
  };
  const std::string name_, help_;
  const std::vector<std::string> label_names_;
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, Series> series_ ABSL_GUARDED_BY(mu_);
};

// The coordinator's metrics.
struct Metrics {
  Metrics();
  CounterFamily fingerprints_ingested;  // lockstep_fingerprints_ingested_total
  CounterFamily fingerprint_bytes;      // ..._fingerprint_bytes_ingested_total
  CounterFamily batches;                // lockstep_batches_total{result}
  HistogramFamily ingest_latency;       // lockstep_ingest_latency_seconds
  HistogramFamily commit_latency;       // lockstep_commit_latency_seconds
  CounterFamily rpcs;                   // lockstep_rpcs_total{method,code}
  HistogramFamily rpc_latency;          // ..._rpc_latency_seconds{method}
  CounterFamily jobs_finished;          // lockstep_jobs_finished_total{state}
  CounterFamily verdicts;               // lockstep_verdicts_total{verdict}
  CounterFamily divergences;            // lockstep_divergences_total{cause}
  CounterFamily http_requests;          // lockstep_http_requests_total{..}

  // Every family, in the exposition format.
  std::string Render() const;
};

// The process's metrics (never destroyed).
Metrics& GlobalMetrics();

// One gauge family at scrape time: `# HELP`, `# TYPE gauge` and one sample
// per entry of `values` (label values in `label_names` order).
void RenderGauge(const std::string& name, const std::string& help,
                 const std::vector<std::string>& label_names,
                 const std::map<std::vector<std::string>, double>& values,
                 std::string* out);

// A label value escaped for the exposition format (\\, \" and \n).
std::string EscapeLabelValue(const std::string& value);

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_METRICS_H_

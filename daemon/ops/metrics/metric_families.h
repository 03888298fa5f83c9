// Families: builds the metric families of one scrape by name (prometheus-cpp's types), for
// the collectors that /metrics serves (ops/metrics_server.h).
#pragma once

#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>
#include <prometheus/metric_type.h>

#include <map>
#include <string>
#include <vector>

namespace skytrain::daemon {

// Families by name, in the order they were first used.
class Families {
 public:
  // One sample of family `name` (created with `type` and `help` on its first sample).
  void add(const std::string& name, prometheus::MetricType type, const std::string& help,
           std::vector<prometheus::ClientMetric::Label> labels, double value);
  std::vector<prometheus::MetricFamily> take() { return std::move(families_); }

 private:
  std::vector<prometheus::MetricFamily> families_;
  std::map<std::string, size_t> index_;
};

}  // namespace skytrain::daemon

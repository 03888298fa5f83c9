#include "daemon/ops/metrics/metric_families.h"

namespace skytrain::daemon {

void Families::add(const std::string& name, prometheus::MetricType type, const std::string& help,
                   std::vector<prometheus::ClientMetric::Label> labels, double value) {
  auto [it, fresh] = index_.try_emplace(name, families_.size());
  if (fresh) families_.push_back({name, help, type, {}});
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  families_[it->second].metric.push_back(std::move(metric));
}

}  // namespace skytrain::daemon

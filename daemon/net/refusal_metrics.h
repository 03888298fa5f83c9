// RefusalCollector: the daemon's refusals by reason (SecurityCounters) as the
// skytrain_refused_total family of /metrics (ops/metrics_server.h).
#pragma once

#include <prometheus/collectable.h>

#include <vector>

namespace skytrain::daemon {

struct SecurityCounters;

class RefusalCollector : public prometheus::Collectable {
 public:
  // The counters must outlive the collector.
  explicit RefusalCollector(const SecurityCounters& counters) : counters_(counters) {}

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const SecurityCounters& counters_;
};

}  // namespace skytrain::daemon

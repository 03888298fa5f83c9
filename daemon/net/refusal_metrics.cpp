#include "daemon/net/refusal_metrics.h"

#include <cstdint>
#include <utility>

#include "daemon/net/access.h"
#include "daemon/ops/metrics/metric_families.h"

namespace skytrain::daemon {

std::vector<prometheus::MetricFamily> RefusalCollector::Collect() const {
  Families f;
  const std::pair<const char*, uint64_t> refusals[] = {
      {"key_not_authorized", counters_.handshakesRefused.load()},
      {"request_not_allowed", counters_.requestsRefused.load()},
      {"report_from_wrong_daemon", counters_.reportsRefused.load()},
      {"frame_refused", counters_.framesRefused.load()}};
  for (const auto& [reason, count] : refusals) {
    f.add("skytrain_refused_total", prometheus::MetricType::Counter,
          "Handshakes, requests, stage reports and data frames refused, by reason.", {{"reason", reason}},
          static_cast<double>(count));
  }
  return f.take();
}

}  // namespace skytrain::daemon

// JobCollector: the jobs this daemon coordinates as /metrics families (ops/metrics_server.h),
// read from the job table at each scrape.
//
// Per daemon: skytrain_jobs, jobs by state. Per job (labels job_id, and name from the spec —
// not "job", which Prometheus gives its scrape job): step, train and validation loss,
// tokens/s, step time measured and predicted, bubble, restarts, checkpoint age; per job and
// stage: bytes sent on the wire and raw per direction, compute time; per job and link:
// bandwidth and round trip as the planner measured them.
#pragma once

#include <prometheus/collectable.h>

#include <vector>

namespace skytrain::daemon {

class JobTable;

class JobCollector : public prometheus::Collectable {
 public:
  // The table must outlive the collector. A job that ended more than retentionS ago has no
  // series any more (it still counts in skytrain_jobs): a long-lived daemon does not export
  // every job it ever ran. 0: kept forever.
  explicit JobCollector(const JobTable& jobs, double retentionS = 0) : jobs_(jobs), retentionS_(retentionS) {}

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const JobTable& jobs_;
  double retentionS_;
};

}  // namespace skytrain::daemon

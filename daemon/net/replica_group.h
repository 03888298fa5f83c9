// ReplicaGroup: the copies of one replicated stage (job_spec.h: stages[i].replicas) as a c10d
// process group, which averages their weight gradients at each step's end — Gloo on the CPU,
// NCCL on a GPU, never a home-made all-reduce.
//
// Rendezvous. c10d's stores have no authentication, and LibTorch 1.13's TCPStore listens on
// every interface, so the copies meet in a store kept by the job's coordinator instead
// (ControlStore, replica_group.cpp): its requests ride the CURVE-authenticated control
// connection every stage already has to its coordinator, and the coordinator answers only
// the daemons that host a copy of that stage in the current attempt. Gloo's own connections
// (plain TCP, no authentication) bind to the daemon's private_address (config.h).
#pragma once

#include <ATen/core/Tensor.h>
#include <zmq.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "daemon/protocol/control.h"

namespace skytrain::daemon {

struct ReplicaGroupOptions {
  std::string coordinator;             // its control endpoint: where the store is kept
  protocol::ClientSecurity security;   // this daemon's keys and the coordinator's key
  std::string job;
  int stage = 0;
  int replica = 0;   // this copy (job_spec.h): who the store requests say they come from
  int rank = 0;      // its place among the pipelines that train: its rank in the group
  int size = 1;      // the group's size: how many pipelines train
  int attempt = 0;   // the store's generation: an earlier attempt's keys are gone
  std::string privateAddress;  // where Gloo binds (config.h)
  std::string device = "cpu";  // "cpu": Gloo; "cuda[:N]": NCCL
  double timeoutS = 120;       // rendezvous and each collective
  // Polled while waiting for the copies, at the rendezvous and in each collective (a copy
  // that hangs must not hold a healing job's other copies for the timeout).
  std::function<bool()> aborted = [] { return false; };
};

class ReplicaGroup {
 public:
  // Meets the other copies; throws skytrain::PeerError when they do not come within the
  // timeout, skytrain::Error when the device's backend is not built in.
  ReplicaGroup(zmq::context_t& context, const ReplicaGroupOptions& options);
  ~ReplicaGroup();

  // Sums the tensors over the copies in place and divides by their number: one flat bucket
  // per dtype, so a step costs one collective.
  void average(const std::vector<at::Tensor>& tensors);
  // Copies rank `root`'s values of the tensors to every copy, in place: one flat bucket per
  // dtype (ZeRO-1: each copy's updated shard, to the others).
  void broadcast(const std::vector<at::Tensor>& tensors, int root);
  // Sums int64 counts over the copies, in place (which copies hold a stage's state).
  void sum(at::Tensor& counts);
  // Rank `root`'s bytes to every copy: the size first, refused by a receiver above
  // maxBytes before it allocates, then the bytes (a healing job's state, to a copy that
  // rejoins).
  void broadcastBytes(std::string& bytes, int root, size_t maxBytes);
  // The backend's name ("gloo", "nccl").
  std::string backend() const;
  int size() const { return size_; }
  int rank() const { return rank_; }

 private:
  // Flattens the tensors into one bucket per dtype, runs `collective` on it, copies back.
  void collect(const std::vector<at::Tensor>& tensors, const std::string& what,
               const std::function<void(std::vector<at::Tensor>&)>& collective);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  int size_ = 1;
  int rank_ = 0;
};

}  // namespace skytrain::daemon

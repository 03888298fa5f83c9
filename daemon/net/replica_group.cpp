#include "daemon/net/replica_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>  // c10d::Backend too, from LibTorch 2.0
#ifdef SKYTRAIN_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef SKYTRAIN_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#include <torch/version.h>

#include <map>
#include <mutex>
#include <thread>

#include "daemon/ops/timing.h"
#include "daemon/protocol/base64.h"
#include "daemon/protocol/messages.h"
#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

constexpr std::chrono::milliseconds kStoreRequestTimeout{10000};

// LibTorch 2.0 made Gloo and NCCL c10d::Backends, which a c10d::ProcessGroup dispatches to;
// in 1.13 they are ProcessGroups themselves. Both have the allreduce and broadcast used here.
#if TORCH_VERSION_MAJOR >= 2
using Collectives = c10d::Backend;
#else
using Collectives = c10d::ProcessGroup;
#endif

// A c10d::Store whose keys live at the job's coordinator (its RendezvousStore),
// reached over this stage's authenticated control connection. wait() polls check().
class ControlStore : public c10d::Store {
 public:
  ControlStore(zmq::context_t& context, const ReplicaGroupOptions& o, std::chrono::milliseconds timeout)
      : c10d::Store(timeout), context_(context), options_(o), client_(context, o.coordinator, o.security) {
    ref_.job = o.job;
    ref_.stage = o.stage;
    ref_.replica = o.replica;
    ref_.attempt = o.attempt;
    aborted_ = o.aborted;
  }

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    auto m = request("set", {key});
    m.value.assign(value.begin(), value.end());
    send(m);
  }
  std::vector<uint8_t> get(const std::string& key) override {
    wait({key}, timeout_);
    const auto reply = send(request("get", {key}));
    const std::string bytes = protocol::base64Decode(reply.at("value").get<std::string>(), protocol::kMaxStoreValueBytes);
    return {bytes.begin(), bytes.end()};
  }
  int64_t add(const std::string& key, int64_t value) override {
    auto m = request("add", {key});
    m.delta = value;
    return send(m).at("value").get<int64_t>();
  }
  bool deleteKey(const std::string& key) override { return send(request("delete", {key})).at("deleted").get<bool>(); }
  bool check(const std::vector<std::string>& keys) override { return send(request("check", keys)).at("present").get<bool>(); }
  int64_t getNumKeys() override { return send(request("count", {})).at("count").get<int64_t>(); }
  // LibTorch 2.x's Store::clone() (pure virtual there, absent in 1.13, hence no `override`):
  // a store for another thread that reaches the same keys, through its own connection.
  c10::intrusive_ptr<c10d::Store> clone() {
    return c10::make_intrusive<ControlStore>(context_, options_, timeout_);
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    const auto deadline = Clock::now() + timeout;
    auto pause = std::chrono::milliseconds(5);
    while (!check(keys)) {
      if (aborted_()) throw PeerError("replica rendezvous: the stage was aborted");
      if (timeout != kNoTimeout && Clock::now() > deadline) {
        throw PeerError("replica rendezvous: the other copies did not arrive within " +
                        std::to_string(timeout.count() / 1000) + " s (waiting for " + keys.front() + ")");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(200));
    }
  }

 private:
  protocol::StoreRequest request(const std::string& op, std::vector<std::string> keys) const {
    protocol::StoreRequest m = ref_;
    m.op = op;
    m.keys = std::move(keys);
    return m;
  }
  protocol::Json send(const protocol::StoreRequest& m) {
    std::lock_guard<std::mutex> lock(mutex_);
    return client_.request(protocol::toJson(m), kStoreRequestTimeout);
  }

  zmq::context_t& context_;
  ReplicaGroupOptions options_;  // what clone() connects with
  std::function<bool()> aborted_;
  std::mutex mutex_;  // c10d may call from its own threads; one request at a time
  protocol::ControlClient client_;
  protocol::StoreRequest ref_;
};

}  // namespace

struct ReplicaGroup::Impl {
  c10::intrusive_ptr<Collectives> group;
  std::string backend;
  std::function<bool()> aborted;
  c10::Device device = c10::Device(c10::kCPU);
  // Waits for a collective, polling the abort check.
  template <typename Work>
  void wait(const Work& work) {
    auto pause = std::chrono::microseconds(20);
    while (!work->isCompleted()) {
      if (aborted()) throw PeerError("the stage was aborted");
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
    work->wait();
  }
  // One flat bucket a dtype and device, kept from step to step (a stage's gradients keep
  // their sizes): the all-reduce allocates nothing after the first step.
  std::map<std::pair<c10::ScalarType, std::string>, at::Tensor> buckets;  // by dtype and "device/collective"
};

ReplicaGroup::ReplicaGroup(zmq::context_t& context, const ReplicaGroupOptions& o)
    : impl_(std::make_unique<Impl>()), size_(o.size), rank_(o.rank) {
  impl_->aborted = o.aborted;
  impl_->device = c10::Device(o.device);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeoutS * 1000));
  auto store = c10::make_intrusive<ControlStore>(context, o, timeout);
  const bool cuda = o.device.rfind("cuda", 0) == 0;
  try {
    if (cuda) {
#ifdef SKYTRAIN_NCCL
      auto options = c10d::ProcessGroupNCCL::Options::create();
      options->timeout = timeout;
      impl_->group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, o.rank, o.size, options);
      impl_->backend = "nccl";
#else
      throw Error("stage " + std::to_string(o.stage) + " on " + o.device +
                  ": this LibTorch has no NCCL (c10d's GPU backend); build against a CUDA LibTorch");
#endif
    } else {
#ifdef SKYTRAIN_GLOO
      auto options = c10d::ProcessGroupGloo::Options::create();
      options->timeout = timeout;
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(o.privateAddress));
      impl_->group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, o.rank, o.size, options);
      impl_->backend = "gloo";
#else
      throw Error("stage " + std::to_string(o.stage) + " on " + o.device +
                  ": this LibTorch was built without Gloo's headers (c10d's CPU backend; a pip wheel ships none)");
#endif
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // c10::Error from Gloo: a refused bind, a lost peer
    throw PeerError("stage " + std::to_string(o.stage) + " replica " + std::to_string(o.replica) +
                    ": c10d rendezvous failed: " + std::string(e.what()).substr(0, 400));
  }
}

ReplicaGroup::~ReplicaGroup() = default;

std::string ReplicaGroup::backend() const { return impl_->backend; }

void ReplicaGroup::average(const std::vector<at::Tensor>& tensors) {
  collect(tensors, "gradient all-reduce", [&](std::vector<at::Tensor>& flat) {
    impl_->wait(impl_->group->allreduce(flat));
    flat[0].div_(size_);
  });
}

void ReplicaGroup::broadcast(const std::vector<at::Tensor>& tensors, int root) {
  collect(tensors, "ZeRO-1 broadcast from copy " + std::to_string(root), [&](std::vector<at::Tensor>& flat) {
    c10d::BroadcastOptions options;
    options.rootRank = root;
    impl_->wait(impl_->group->broadcast(flat, options));
  });
}

void ReplicaGroup::sum(at::Tensor& counts) {
  std::vector<at::Tensor> flat{counts};
  try {
    impl_->wait(impl_->group->allreduce(flat));
  } catch (const std::exception& e) {
    throw PeerError("a count among the stage's replicas failed: " + std::string(e.what()).substr(0, 400));
  }
}

void ReplicaGroup::broadcastBytes(std::string& bytes, int root, size_t maxBytes) {
  const std::string what = "the state from copy " + std::to_string(root);
  try {
    c10d::BroadcastOptions options;
    options.rootRank = root;
    const auto on = at::TensorOptions().device(impl_->device);
    std::vector<at::Tensor> size{at::full({1}, static_cast<int64_t>(bytes.size()), on.dtype(at::kLong))};
    impl_->wait(impl_->group->broadcast(size, options));
    const int64_t n = size[0].item<int64_t>();  // the root's word: bounded before anything is allocated
    if (n < 0 || static_cast<uint64_t>(n) > maxBytes) {
      throw PeerError(what + " is " + std::to_string(n) + " bytes, over the " + std::to_string(maxBytes) + " this copy takes");
    }
    std::vector<at::Tensor> data{rank_ == root ? at::from_blob(bytes.data(), {n}, at::kByte).to(on.dtype(at::kByte), false, /*copy=*/true)
                                               : at::empty({n}, on.dtype(at::kByte))};
    impl_->wait(impl_->group->broadcast(data, options));
    if (rank_ != root) {
      const at::Tensor host = data[0].cpu();
      bytes.assign(reinterpret_cast<const char*>(host.data_ptr<uint8_t>()), static_cast<size_t>(n));
    }
  } catch (const PeerError&) {
    throw;
  } catch (const std::exception& e) {
    throw PeerError(what + " failed: " + std::string(e.what()).substr(0, 400));
  }
}

void ReplicaGroup::collect(const std::vector<at::Tensor>& tensors, const std::string& what,
                           const std::function<void(std::vector<at::Tensor>&)>& collective) {
  if (tensors.empty()) return;
  std::map<c10::ScalarType, std::vector<at::Tensor>> byType;
  for (const auto& t : tensors) byType[t.scalar_type()].push_back(t);
  for (auto& entry : byType) {
    std::vector<at::Tensor>& group = entry.second;
    std::vector<at::Tensor> parts;
    int64_t total = 0;
    for (const auto& t : group) parts.push_back(t.reshape({-1})), total += t.numel();
    // One bucket per collective, dtype and device: each keeps its size from step to step.
    at::Tensor& bucket = impl_->buckets[{entry.first, group[0].device().str() + "/" + what}];
    if (!bucket.defined() || bucket.numel() != total) bucket = torch::empty({total}, group[0].options());
    at::cat_out(bucket, parts, 0);
    std::vector<at::Tensor> flat{bucket};
    try {
      collective(flat);
    } catch (const std::exception& e) {
      throw PeerError(what + " among the stage's replicas failed: " + std::string(e.what()).substr(0, 400));
    }
    int64_t at = 0;
    for (auto& t : group) {
      const int64_t n = t.numel();
      t.copy_(flat[0].narrow(0, at, n).view(t.sizes()));
      at += n;
    }
  }
}

}  // namespace skytrain::daemon

// Control messages as types: one struct per request, one parse function that checks every
// field and names the bad one. Handlers see these structs, never raw JSON; the fuzzers call
// parseRequest. On the wire each is a JSON object with "type" (below) and an optional "id".
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace skytrain::protocol {

struct Ping {};
struct Submit {
  std::string spec;  // the job spec text (parsed by parseJobSpec)
  bool dryRun = false;
};
struct Status {
  std::string job;
  int64_t since = 0;  // first step row to return
};
struct List {};
struct Cancel {
  std::string job;
};
// Restarts a failed or cancelled job from its last complete checkpoint.
struct Resume {
  std::string job;
};

// Requests from a job's coordinator to a stage daemon name the job and the stage.
struct StageRef {
  std::string job;
  int stage = 0;
  int replica = 0;  // which data-parallel copy of the stage (job_spec.h)
};
// The plan a stage runs under (m, schedule, warm-ups); also what a checkpoint restores.
struct PlanMessage {
  int microBatches = 1;
  std::string schedule;
  std::vector<int> warmups;
  // Per link, the codecs the planner chose for a spec's "auto" directions ("" or absent:
  // the spec's own).
  std::vector<std::string> forwardCodecs, backwardCodecs;
};

struct StagePrepare : StageRef {
  std::string spec;
  std::string coordinator;  // its control endpoint, which receives the stage's reports
  std::string owner;        // the public key of the job's owner, who may export its weights ("" when insecure)
  std::string proof;        // that the sender made the job (job_identity.h); "" for a job made before proofs
  int attempt = 0;          // bumped at each restart; frames of older attempts are dropped
  int64_t resumeStep = -1;  // restore the checkpoint taken after this step (-1: from scratch)
  // A TorchScript stage after the first whose spec gives no input_shape: one sample's shape
  // of what the previous stage outputs, which that stage's daemon reported when prepared
  // (its reply's "output_shape"). Empty otherwise.
  std::vector<int64_t> inputShape;
  // `skytrain plan`: the stage is profiled, never trained, and leaves nothing on disk (no
  // claim, no job folder). Only for a job id the sender proves it made, new to this daemon.
  bool dryRun = false;
  // Healing a replicated job (docs/operations.md, "Failures"): where the stage's state after resumeStep
  // comes from. "" : the checkpoint on disk; "memory": what this daemon's copy of the stage
  // kept when its last attempt stopped, which must be of that step; "peer": a healthy copy
  // of the stage sends it over c10d once the copies meet (a copy that rejoins).
  std::string resumeFrom;
  // The pipelines (replica indices, ascending) that train in this attempt; empty: all of
  // them. The batch is split over these alone.
  std::vector<int> pipelines;
};
struct StageStart : StageRef {
  std::string previous, next;        // neighbours' data endpoints ("" at the ends)
  std::string previousKey, nextKey;  // their daemons' public keys ("" when insecure)
  // A replicated stage: the attempt whose rendezvous store (kept by the coordinator, reached
  // over the authenticated control connection) its copies meet in; -1 for a single copy.
  int groupAttempt = -1;
  // A fan-in's consumer: its producers' data endpoints and keys, in stage order.
  struct Producer {
    std::string endpoint, key;
  };
  std::vector<Producer> producers;
};
constexpr size_t kMaxProducers = 64;
struct StageAbort : StageRef {};
// Healing a replicated job: the coordinator's word that every stage finished `step`'s
// gradients, so each may apply its update. A stage waits for it before its optimizer step.
struct StageCommit : StageRef {
  int64_t step = 0;
};
struct StagePlan : StageRef, PlanMessage {};
// Liveness: answered by the control thread, also while the stage computes.
struct StageHeartbeat : StageRef {
  // The newest checkpoint every stage has confirmed (a step index; -1: none): the one a
  // restart would resume from, which the stage must keep whatever it prunes.
  int64_t complete = -1;
};
struct StageProfile : StageRef {
  int64_t atStep = -1;  // -1: cancel a pending profile
};

// A user reads a hosted stage's weights, as a safetensors file of its parameters with
// global names, in chunks: the final weights (step -1) or a checkpoint's. Answered with
// {"size", "offset", "data": base64 of at most kExportChunkBytes}. Only the job's owner
// (as its coordinator named it) or an admin may.
struct ExportRead : StageRef {
  int64_t step = -1;
  int64_t offset = 0;
};
constexpr size_t kExportChunkBytes = 1 << 20;
constexpr size_t kMaxReportCuts = 1024;  // cuts a step report may name in code_share, and in sender_loss

// Ready: a healing job's stage has its step's gradients averaged and waits for the commit.
enum class ReportKind { Step, Eval, Profile, Checkpoint, Done, Failed, Ready };
std::string toString(ReportKind kind);

// One-way, stage daemon -> coordinator; never answered.
struct StageReport : StageRef {
  int attempt = 0;  // reports of an earlier attempt are ignored
  ReportKind kind = ReportKind::Step;
  int64_t step = 0;
  std::optional<double> loss;  // step (last stage) and eval
  std::optional<double> accuracy;  // eval of a classifier
  std::optional<double> bleu;      // eval of a translation: corpus BLEU, 0..100
  double stepSeconds = 0, computeSeconds = 0;
  double bytesSent = 0, bytesRaw = 0;
  double bytesBackward = 0, rawBackward = 0;  // the part of each sent towards the previous stage
  double checkpointSeconds = 0;  // step: what taking a checkpoint's snapshot cost the stage
  double lr = 0;                 // step: the learning rate it used
  bool skipped = false;          // step: not applied (a non-finite gradient, on_nonfinite "skip")
  int lead = -1;                 // step, fan-in producers: how many steps ahead of the consumer it ran
  int microBatches = 0;
  std::map<int, double> codeShares;  // step: a learned code's share at each cut the stage decodes, by layer ("code_share")
  std::map<int, double> senderLosses;  // step: the own loss of each cut the stage sends from, by layer ("sender_loss")
  nlohmann::json profile;  // profile: checked by the planner's reader (daemon/coordinator/planning.h)
  std::string error;       // failed
};
class ObjectReader;
// The report's own fields, after its job and stage (stage_report.cpp): read with every value
// bounded, throwing SpecError naming the field (an unknown kind, a value out of range, an eval
// without a loss, a code share of a layer not written plainly); and written back for its kind.
void readReportFields(ObjectReader& r, StageReport& m);
nlohmann::json reportFields(const StageReport& m);

// c10d's rendezvous store for a replicated stage's copies (daemon/net/replica_group.h), kept by
// the job's coordinator: only the daemons hosting a copy of that stage in the current
// attempt may use it. Keys and values are bounded; values travel as base64.
struct StoreRequest : StageRef {
  int attempt = 0;
  std::string op;                 // "set", "get", "add", "check", "delete", "count"
  std::vector<std::string> keys;  // one key, or several for "check"
  std::string value;              // "set": the bytes
  int64_t delta = 0;              // "add"
};
constexpr size_t kMaxStoreKeyBytes = 512;
constexpr size_t kMaxStoreValueBytes = 64 << 10;
constexpr size_t kMaxStoreKeys = 4096;  // per stage and attempt

using Request = std::variant<Ping, Submit, Status, List, Cancel, Resume, StagePrepare, StageStart, StageAbort,
                             StagePlan, StageProfile, StageHeartbeat, StageReport, ExportRead, StoreRequest,
                             StageCommit>;

struct Envelope {
  std::optional<uint64_t> id;  // echoed in the reply
  Request request;
};

// A stage daemon's answer to stage.prepare. Fields this version does not know are ignored
// (a newer daemon's).
struct StagePrepareReply {
  std::string dataEndpoint;          // where its neighbours send frames
  std::string memory;                // what admission estimated, said again should the stage be killed for memory
  std::vector<int64_t> outputShape;  // one sample of what it sends on, when the next stage's input_shape is inferred
};
constexpr size_t kMaxMemoryTextLength = 4096;
// Checks every field (the endpoint's scheme and length, the text's length, the shape's
// bounds). Throws skytrain::WireError naming the field.
StagePrepareReply parsePrepareReply(const nlohmann::json& reply);
nlohmann::json toJson(const StagePrepareReply& reply);  // with "ok": true

constexpr size_t kMaxEndpointLength = 256;
constexpr size_t kMaxErrorLength = 4096;

// Checks every field of a parsed control message. Throws skytrain::WireError naming the
// request type, the field's JSON path and the problem.
Envelope parseRequest(const nlohmann::json& message);
// The bytes of a message as they arrive (size and depth capped first).
Envelope parseRequest(const void* data, size_t size);

// The message with its "type" (and no "id").
nlohmann::json toJson(const Request& request);
std::string typeName(const Request& request);

}  // namespace skytrain::protocol

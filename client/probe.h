// `skytrain probe`: measures the link to a daemon through its data port, authenticated, as
// the planner measures a link between stages — round trip of a tiny frame, bandwidth from
// the extra round-trip time of a large frame over a middle one (a burst allowance cancels
// out), and per-message overhead from a burst of tiny frames — so a user can see a link
// before placing stages on it.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <string>

#include "daemon/protocol/control.h"

namespace skytrain::client {

struct ProbeOptions {
  size_t bigBytes = 1 << 20;  // the middle frame's payload; the large one is three times it
  int roundTrips = 8;         // per frame size; the fastest counts
  int burst = 64;             // tiny frames sent back to back for the overhead
  std::chrono::milliseconds timeout{10000};  // per reply
};

// {"data_endpoint", "bandwidth_bytes_per_s", "delay_s", "overhead_s", "rtt_small_s",
//  "rtt_big_s", "probe_bytes", "small_bytes", "round_trips", "burst"} — the first four
// named as in the planner's link cost. Throws skytrain::PeerError when a reply does not come.
nlohmann::json probeDataEndpoint(zmq::context_t& context, const std::string& dataEndpoint,
                                 const protocol::ClientSecurity& security, const ProbeOptions& options);

// The table printed by `skytrain probe`.
std::string formatProbe(const nlohmann::json& result);

}  // namespace skytrain::client

// The cost of encryption on a link: goodput and CPU seconds per GB of a DEALER -> ROUTER
// stream of 1 MiB messages (the size of activation frames), CURVE and plaintext measured
// alternately in one run so that both see the same machine and link.
//
//   curve_bench sink HOST PORT KEYDIR      ROUTERs on PORT (plaintext) and PORT+1 (CURVE)
//   curve_bench source HOST PORT KEYDIR [MB] [ROUNDS]
//                                          prints a Markdown row per mode and the ratio
//
// KEYDIR holds the key pairs (made by the sink when absent). Each round sends MB megabytes
// then a zero-length message; the sink answers with the CPU seconds it spent since the
// round began, so CPU is counted at both ends (encrypting and decrypting).
#include <sys/resource.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "daemon/protocol/control.h"
#include "daemon/protocol/keys.h"

namespace {

using namespace skytrain;

double cpuSeconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

protocol::KeyPair keyFor(const std::string& dir, const std::string& name) {
  const std::string path = dir + "/" + name + ".key";
  if (!std::filesystem::exists(path)) protocol::writeKeyPair(protocol::generateKeyPair(name), dir);
  return protocol::loadKeyPair(path);
}

void serve(zmq::socket_t& socket) {
  double roundStart = cpuSeconds();
  bool inRound = false;
  while (true) {
    std::vector<zmq::message_t> parts;
    if (!zmq::recv_multipart(socket, std::back_inserter(parts))) continue;
    if (parts.size() != 2) continue;
    if (!inRound) roundStart = cpuSeconds(), inRound = true;
    if (parts[1].size() == 0) {  // end of a round
      const std::string cpu = std::to_string(cpuSeconds() - roundStart);
      socket.send(parts[0], zmq::send_flags::sndmore);
      socket.send(zmq::buffer(cpu));
      inRound = false;
    }
  }
}

int sink(const std::string& host, int port, const std::string& keyDir) {
  zmq::context_t context(2);
  const auto server = keyFor(keyDir, "sink");
  keyFor(keyDir, "source");
  // Only the bench's own source key may connect (no ZAP handler: this is a bench, not a daemon).
  zmq::socket_t plain(context, zmq::socket_type::router), curve(context, zmq::socket_type::router);
  curve.set(zmq::sockopt::curve_server, true);
  curve.set(zmq::sockopt::curve_secretkey, server.secretKey);
  for (auto* s : {&plain, &curve}) s->set(zmq::sockopt::rcvhwm, 0);
  plain.bind("tcp://" + host + ":" + std::to_string(port));
  curve.bind("tcp://" + host + ":" + std::to_string(port + 1));
  std::printf("sink: plaintext on %d, CURVE on %d\n", port, port + 1);
  std::fflush(stdout);
  std::thread plainThread([&] { serve(plain); });
  serve(curve);
  plainThread.join();
  return 0;
}

struct Round {
  double seconds, sourceCpu, sinkCpu;
};

Round runRound(zmq::socket_t& socket, size_t messages, const std::string& payload) {
  const double cpu0 = cpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < messages; ++i) socket.send(zmq::buffer(payload));
  socket.send(zmq::message_t());
  zmq::message_t reply;
  (void)socket.recv(reply);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {seconds, cpuSeconds() - cpu0, std::stod(reply.to_string())};
}

int source(const std::string& host, int port, const std::string& keyDir, int megabytes, int rounds) {
  zmq::context_t context(2);
  const auto self = keyFor(keyDir, "source"), server = keyFor(keyDir, "sink");
  zmq::socket_t plain(context, zmq::socket_type::dealer), curve(context, zmq::socket_type::dealer);
  protocol::applyClientSecurity(curve, {self, server.publicKey});
  for (auto* s : {&plain, &curve}) s->set(zmq::sockopt::sndhwm, 0);
  plain.connect("tcp://" + host + ":" + std::to_string(port));
  curve.connect("tcp://" + host + ":" + std::to_string(port + 1));
  const std::string payload(1 << 20, 'x');
  const size_t messages = static_cast<size_t>(megabytes);
  runRound(plain, 4, payload);  // warm-up: connections and handshakes
  runRound(curve, 4, payload);
  std::vector<Round> results[2];
  for (int r = 0; r < rounds; ++r) {
    results[0].push_back(runRound(plain, messages, payload));
    results[1].push_back(runRound(curve, messages, payload));
  }
  const double gigabytes = messages * double(1 << 20) / 1e9;
  std::printf("| mode | goodput (Mbit/s, median of %d) | CPU s/GB sender | CPU s/GB receiver |\n|---|---|---|---|\n", rounds);
  double goodput[2];
  for (int mode = 0; mode < 2; ++mode) {
    auto& rs = results[mode];
    std::sort(rs.begin(), rs.end(), [](const Round& a, const Round& b) { return a.seconds < b.seconds; });
    const Round& median = rs[rs.size() / 2];
    goodput[mode] = gigabytes * 8e3 / median.seconds;
    std::printf("| %s | %.0f | %.2f | %.2f |\n", mode ? "CURVE" : "plaintext", goodput[mode], median.sourceCpu / gigabytes,
                median.sinkCpu / gigabytes);
  }
  std::printf("\nCURVE / plaintext goodput: %.2f\n", goodput[1] / goodput[0]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: curve_bench sink|source HOST PORT KEYDIR [MB] [ROUNDS]\n");
    return 2;
  }
  const std::string mode = argv[1], host = argv[2], keyDir = argv[4];
  const int port = std::stoi(argv[3]);
  try {
    if (mode == "sink") return sink(host, port, keyDir);
    return source(host, port, keyDir, argc > 5 ? std::stoi(argv[5]) : 256, argc > 6 ? std::stoi(argv[6]) : 5);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "curve_bench: %s\n", e.what());
    return 1;
  }
}

// The TCP connections between the processes of a tensor-parallel group, set up right after
// the id rendezvous (runtime/tp/tp_rendezvous.h, docs/tensor-parallel.md "Separate processes").
//
// Rank 0 listens on the rendezvous port + 1; every rank r > 0 opens two connections to it:
//   control: rank 0 sends step plans (runtime/tp/tp_wire.h) and a final stop, the rank answers
//            each plan with a reply; read only by rank 0's proxy for that rank;
//   data:    the CPU collectives (runtime/tp/tcp_comm.h); read only by the rank's backend.
// Each connection starts with a hello: "STRATAPL" (8 bytes), u32 rank, u32 size, u32 channel
// (0 control, 1 data). Every message after it is framed: u32 type (TpMsg), u64 length,
// `length` bytes.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/tp/tp_rendezvous.h"

namespace strata {

enum class TpMsg : std::uint32_t {
  kPlan = 1,   // rank 0 -> r, control: an encoded StepPlan
  kReply = 2,  // r -> rank 0, control: an encoded WireReply
  kStop = 3,   // rank 0 -> r, control: the group is shutting down (empty)
  kReady = 4,  // r -> rank 0, control: the rank's backend is built (or failed to build)
  kData = 5,   // data: fp32 values of a collective
  kAbort = 6,  // data: the sender's communicator failed; body = the reason.
               // control (rank 0 -> r, empty): rank 0's group failed during the step
};

struct TpMessage {
  TpMsg type{};
  std::vector<std::uint8_t> body;
};

// One framed connection. send() may be called from any thread (sends are serialized);
// recv() from one thread at a time. Reads and writes use the socket directly (poll/recv/send),
// so a write from another thread never races a read.
class TpLink {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Recv { kOk, kClosed, kTimeout, kStopped };

  TpLink(int fd, std::string peer);  // takes the connected socket
  ~TpLink();
  TpLink(const TpLink&) = delete;
  TpLink& operator=(const TpLink&) = delete;

  // Throws InternalError naming the peer when the connection is gone (or a send stalls
  // for more than the send timeout: a peer that stopped reading).
  void send(TpMsg type, const void* data, std::size_t n);
  void send(TpMsg type, const std::vector<std::uint8_t>& body) {
    send(type, body.data(), body.size());
  }
  // Waits for one whole message until `deadline`, or until `stop()` (polled every 20 ms
  // while no byte is waiting) returns true. A wait interrupted inside a message leaves the
  // stream unusable: later calls return kClosed.
  Recv recv(TpMessage& out, Clock::time_point deadline, const std::function<bool()>& stop = {});
  // Whether a byte (or the peer's close) is waiting, without reading it.
  bool has_data() const;
  const std::string& peer() const { return peer_; }
  std::string error() const;  // why recv returned kClosed / send threw

 private:
  Recv read_exact(std::uint8_t* p, std::size_t n, Clock::time_point deadline,
                  const std::function<bool()>& stop, bool started);

  int fd_;
  std::string peer_;
  std::mutex send_mu_;
  mutable std::mutex err_mu_;
  std::string error_;
  bool broken_ = false;  // reader thread only
};

// The links of one rank. Rank 0: index r is the link to rank r (index 0 is empty);
// rank r > 0: index 0 is the link to rank 0.
struct TpMesh {
  int rank = 0;
  int size = 1;
  std::vector<std::shared_ptr<TpLink>> control, data;
};

// The endpoint of the links: the rendezvous port + 1 (ConfigError on port 65535).
TpEndpoint tp_link_endpoint(const TpEndpoint& master);

// Rank 0: listens on `at` until every rank 1..size-1 has opened both connections; ConfigError
// ("backend.tp_master") naming the missing ranks after `timeout`. on_listening(port) as in
// tp_rendezvous_serve.
TpMesh tp_mesh_accept(const TpEndpoint& at, int size, std::chrono::milliseconds timeout,
                      const std::function<void(std::uint16_t)>& on_listening = {});
// Rank r > 0: connects both channels to rank 0 (retrying until it listens, up to `timeout`).
TpMesh tp_mesh_connect(const TpEndpoint& at, int rank, int size, std::chrono::milliseconds timeout);

}  // namespace strata

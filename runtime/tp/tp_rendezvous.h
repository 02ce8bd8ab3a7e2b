// The TCP rendezvous that hands the NCCL unique id (128 opaque bytes) from rank 0 to the
// other ranks of a tensor-parallel group in separate processes or hosts
// (`--tp-rank R --tp-size N --tp-master host:port`, docs/tensor-parallel.md).
//
// Protocol (Boost.Asio, one TCP connection per joining rank):
//   rank r > 0 -> rank 0:  "STRATATP" (8 bytes), u32 rank, u32 size (little-endian)
//   rank 0 -> rank r:      u32 status (0 ok, 1 size mismatch, 2 rank out of range,
//                          3 rank already joined), then the 128-byte id (zeros unless ok)
// Rank 0 listens and answers every rank once; a joining rank retries the connection until
// rank 0 listens. Both sides give up after `timeout` with a ConfigError("backend.tp_master")
// that says who was missing or what went wrong: a rank that never shows up stops the
// start-up with a message instead of hanging.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace strata {

inline constexpr std::size_t kTpIdBytes = 128;  // sizeof(ncclUniqueId)
using TpUniqueId = std::array<std::uint8_t, kTpIdBytes>;

struct TpEndpoint {
  std::string host;  // name or address; rank 0 binds it ("0.0.0.0": every interface)
  std::uint16_t port = 0;
};
// "host:port" (ConfigError("--tp-master") otherwise); port 0 only for rank 0 in tests.
TpEndpoint parse_tp_endpoint(const std::string& text);

// Rank 0: listens on `at`, waits until ranks 1..size-1 have each joined once and sends them
// `id`. `on_listening(port)` is called once the socket listens (the bound port: tests pass
// port 0). Throws ConfigError naming the missing ranks after `timeout`.
void tp_rendezvous_serve(const TpEndpoint& at, int size, const TpUniqueId& id,
                         std::chrono::milliseconds timeout,
                         const std::function<void(std::uint16_t)>& on_listening = {});

// Rank r in [1, size): connects to rank 0 (retrying until it listens), joins, returns the id.
// Throws ConfigError when rank 0 refuses (size/rank mismatch, duplicate rank) or on timeout.
TpUniqueId tp_rendezvous_join(const TpEndpoint& master, int rank, int size,
                              std::chrono::milliseconds timeout);

}  // namespace strata

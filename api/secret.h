// Secrets and identifiers from the OS's cryptographic source (getrandom(2)), so that nothing
// a client sees (response ids) tells anything about anything else (the admin token, other
// ids): every call draws fresh bytes; there is no generator state to recover.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace strata::api {

// `bytes` random bytes as 2 * bytes lowercase hex digits. Throws std::system_error when the
// OS source fails (it does not on Linux >= 3.17 once the pool is initialised).
std::string random_hex(std::size_t bytes);

// Comparison whose time depends only on the lengths, never on where the strings differ.
bool secret_equal(std::string_view got, std::string_view secret);

}  // namespace strata::api

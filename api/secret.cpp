#include "api/secret.h"

#include <sys/random.h>

#include <cerrno>
#include <system_error>
#include <vector>

namespace strata::api {

std::string random_hex(std::size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  std::size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "getrandom");
    }
    got += static_cast<std::size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes);
  for (const unsigned char b : raw) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

bool secret_equal(std::string_view got, std::string_view secret) {
  if (got.size() != secret.size()) return false;
  unsigned diff = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    diff |= static_cast<unsigned char>(got[i]) ^ static_cast<unsigned char>(secret[i]);
  return diff == 0;
}

}  // namespace strata::api

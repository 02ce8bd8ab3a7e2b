#include "runtime/text_file.h"

#include <fstream>
#include <sstream>

#include "runtime/error.h"

namespace strata {

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ModelError(path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace strata

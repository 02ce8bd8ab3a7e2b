// The version `strata --version` and GET /version report. Strata has no releases yet: the
// number moves when the API or the command line change incompatibly (docs/api.md).
#pragma once

namespace strata {

inline constexpr const char* kVersion = "0.1.0";

}  // namespace strata

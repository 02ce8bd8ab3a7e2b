// The admin console page (HTML, CSS and JS in one document, embedded in the binary: the
// machines it runs on have no network, so no CDN). Charts are plain <canvas>.
#pragma once

namespace strata::api {
extern const char* const kAdminPage;
}

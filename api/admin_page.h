// The admin console page (HTML, CSS and JS in one document, embedded in the binary: the
// machines it runs on have no network, so no CDN). Charts are inline SVG
// (axes, legends and cells are DOM elements: tests/scripts/api_admin_browser.mjs checks them).
#pragma once

namespace strata::api {
extern const char* const kAdminPage;
}

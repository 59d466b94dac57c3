// Starts the vendored Swagger UI on /api/v1/docs with the settings the page carries as JSON
// (no inline script, so the site's Content-Security-Policy holds on this page too).
(function () {
  "use strict";
  var settings = JSON.parse(document.getElementById("swagger-settings").textContent);
  settings.dom_id = "#swagger-ui";
  window.ui = SwaggerUIBundle(settings);
})();

// A "Copy" button copies the text of the element its data-copy names (the new key on the keys page),
// and says so in its status line; where the clipboard is refused, the text is selected for Ctrl+C.
(function () {
  "use strict";
  function say(button, text) {
    var status = document.getElementById(button.getAttribute("aria-describedby") || "");
    if (status) status.textContent = text;
  }
  function selectText(element) {
    var range = document.createRange();
    range.selectNodeContents(element);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-copy]");
    if (!button) return;
    var source = document.getElementById(button.dataset.copy);
    if (!source) return;
    var text = source.textContent.trim();
    var fallback = function () {
      selectText(source);
      say(button, "Selected: press Ctrl+C (⌘C) to copy.");
    };
    if (!navigator.clipboard || !window.isSecureContext) return fallback();
    navigator.clipboard.writeText(text).then(function () {
      button.textContent = "Copied";
      say(button, "Copied to the clipboard.");
    }, fallback);
  });
})();

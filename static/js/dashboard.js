// The phone menu: the nav folds into a button (CSS under html.js); without this file it stays open.
document.documentElement.classList.add("js");
document.addEventListener("click", function (event) {
  var toggle = event.target.closest && event.target.closest(".navtoggle");
  var nav = document.querySelector(".mainnav");
  if (!nav) return;
  if (toggle) {
    var open = nav.classList.toggle("open");
    toggle.setAttribute("aria-expanded", open ? "true" : "false");
  } else if (nav.classList.contains("open") && !nav.contains(event.target)) {
    nav.classList.remove("open");
    nav.querySelector(".navtoggle").setAttribute("aria-expanded", "false");
  }
});
document.addEventListener("keydown", function (event) {
  var nav = document.querySelector(".mainnav.open");
  if (event.key === "Escape" && nav) {
    nav.classList.remove("open");
    var toggle = nav.querySelector(".navtoggle");
    toggle.setAttribute("aria-expanded", "false");
    toggle.focus();
  }
});

// Keyboard shortcuts for the review queue. Everything works without this file: it only moves focus
// and clicks the same buttons a mouse would.
(function () {
  "use strict";
  var current = null;

  function cards() {
    return Array.prototype.slice.call(document.querySelectorAll(".review-card"));
  }
  function openCards() {
    return cards().filter(function (c) { return !c.dataset.done; });
  }
  function focus(card) {
    if (current) current.classList.remove("focused");
    current = card || null;
    if (!current) return;
    current.classList.add("focused");
    current.focus({ preventScroll: true });
    current.scrollIntoView({ block: "nearest", behavior: "smooth" });
  }
  function move(step) {
    var list = cards();
    if (!list.length) return;
    var i = current ? list.indexOf(current) : -1;
    if (i === -1 && current && current.id) {
      // The focused card was swapped by htmx: find its replacement by id.
      i = list.findIndex(function (c) { return c.id === current.id; });
    }
    focus(list[Math.max(0, Math.min(list.length - 1, i + step))]);
  }
  function typing(target) {
    return target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName));
  }

  var lastDone = null;  // the id of the card decided last: `u` undoes it

  function toggleHelp() {
    var help = document.getElementById("review-help");
    if (!help || !help.showModal) return;
    if (help.open) help.close(); else help.showModal();
  }
  document.addEventListener("click", function (event) {
    var opener = event.target.closest && event.target.closest("[data-help]");
    if (opener) { toggleHelp(); event.preventDefault(); }
  });

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (!document.querySelector(".review-card")) return;
    if (typing(event.target)) {
      if (event.key === "Escape") event.target.blur();
      return;
    }
    if (event.key === "?") { toggleHelp(); event.preventDefault(); return; }
    var help = document.getElementById("review-help");
    if (help && help.open) return;
    var key = event.key.toLowerCase();
    if (key === "u") {
      var done = lastDone && document.getElementById(lastDone);
      var undo = done && done.querySelector("button[data-undo]");
      if (undo) { undo.click(); event.preventDefault(); }
      return;
    }
    if (key === "j") { move(1); event.preventDefault(); return; }
    if (key === "k") { move(-1); event.preventDefault(); return; }
    if (!current || !document.body.contains(current)) {
      focus(openCards()[0]);
      if (!current) return;
    }
    if (key === "x") {
      var box = current.querySelector("input[type=checkbox]");
      if (box) box.checked = !box.checked;
      event.preventDefault();
      return;
    }
    if (key === "m") {
      var merge = current.querySelector("details.merge");
      if (merge) { merge.open = true; merge.querySelector("textarea").focus(); event.preventDefault(); }
      return;
    }
    var button = current.querySelector('button[data-key="' + key + '"]');
    if (button) { button.click(); event.preventDefault(); }
  });

  // After a card is resolved (htmx swapped it), move on to the next open card.
  document.addEventListener("htmx:afterSwap", function (event) {
    var swapped = event.detail.target;
    if (!swapped || !swapped.id || swapped.id.indexOf("c-") !== 0) return;
    var card = document.getElementById(swapped.id);
    if (card && card.dataset.done) lastDone = card.id;
    var list = cards();
    var i = list.indexOf(card);
    var next = list.slice(i + 1).find(function (c) { return !c.dataset.done; });
    focus(next || card);
  });

  // Plain forms that deserve a second thought (no inline handlers: the pages carry no inline script).
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form.dataset && form.dataset.confirm && !window.confirm(form.dataset.confirm)) event.preventDefault();
  }, true);

  document.addEventListener("DOMContentLoaded", function () {
    var first = openCards()[0];
    if (first) { current = first; first.classList.add("focused"); }
  });
})();

// A context preview (user page, playground) is a GET form, so its address can be shared. A task of up to
// 2,000 characters in a non-Latin script is ~12-18 kB once escaped in an address, more than the web server
// reads of a request line; such a form goes as a POST instead (the same fields and the page's CSRF token,
// from data-post-when-long). Without this file a task that long is refused by the web server.
document.addEventListener("submit", function (event) {
  var form = event.target;
  if (!form.matches || !form.matches("form[data-post-when-long]") || form.method.toLowerCase() !== "get") return;
  var query = new URLSearchParams(new FormData(form)).toString();
  if (query.length <= 2000) return;
  event.preventDefault();
  form.method = "post";
  var token = document.createElement("input");
  token.type = "hidden";
  token.name = "csrfmiddlewaretoken";
  token.value = form.getAttribute("data-post-when-long");
  form.appendChild(token);
  form.submit();
});

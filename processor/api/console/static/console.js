// The console's only script (a static file: the CSP allows no inline script). Two jobs:
// - a Copy button copies the value of the field it names (the approval link);
// - on pages marked data-refresh, the parts marked data-live are fetched again every few seconds and swapped in,
//   so a batch visibly moves on without a reload and without touching what the operator is typing in a form.
(function () {
  "use strict";

  function wireCopy(root) {
    root.querySelectorAll("button[data-copy]").forEach(function (button) {
      button.addEventListener("click", function () {
        var field = document.getElementById(button.getAttribute("data-copy"));
        if (!field) { return; }
        field.select();
        var done = function () { button.textContent = "Copied"; };
        if (navigator.clipboard && window.isSecureContext) {
          navigator.clipboard.writeText(field.value).then(done, function () { document.execCommand("copy"); done(); });
        } else {
          document.execCommand("copy");
          done();
        }
      });
    });
  }

  // A part holding the field the operator is in, or a field they filled, is left alone until they are done.
  function typing(part) {
    var active = document.activeElement;
    if (part.contains(active) && active.tagName === "INPUT" && !active.readOnly) { return true; }
    return Array.prototype.some.call(part.querySelectorAll("input:not([type=hidden]):not([readonly])"), function (field) {
      return field.value !== "";
    });
  }

  function refresh(seconds) {
    var busy = false;
    window.setInterval(function () {
      if (busy || document.hidden) { return; }
      busy = true;
      fetch(window.location.href, { credentials: "same-origin", headers: { "X-Console-Refresh": "1" } })
        .then(function (answer) {
          if (!answer.ok || answer.redirected) { throw new Error("not refreshed"); }
          return answer.text();
        })
        .then(function (text) {
          var fresh = new DOMParser().parseFromString(text, "text/html");
          document.querySelectorAll("[data-live][id]").forEach(function (part) {
            var replacement = fresh.getElementById(part.id);
            if (replacement && replacement.innerHTML !== part.innerHTML && !typing(part)) {
              part.innerHTML = replacement.innerHTML;
              wireCopy(part);
            }
          });
        })
        .catch(function () { /* keep the page as it is; the next round tries again */ })
        .then(function () { busy = false; });
    }, seconds * 1000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    wireCopy(document);
    var seconds = parseFloat(document.body.getAttribute("data-refresh") || "");
    if (seconds > 0) { refresh(seconds); }
  });
})();

// A job's page: follows its output while it runs. Lines go in as text (textContent), never as markup.
(function () {
  "use strict";
  var pre = document.getElementById("logs");
  if (!pre || pre.dataset.final === "true") { return; }
  var status = document.getElementById("tail-status");
  var notes = document.getElementById("log-notes");
  var url = pre.dataset.url;
  var after = pre.dataset.after || "";
  var POLL_MS = 3000;
  var MAX_LINES = 5000;
  var shown = {};

  function say(text) { if (status) { status.textContent = text; } }

  function note(text) {
    if (!notes || shown[text]) { return; }
    shown[text] = true;
    var item = document.createElement("li");
    item.textContent = text;
    notes.appendChild(item);
  }

  function append(lines) {
    var atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    for (var i = 0; i < lines.length; i++) {
      pre.appendChild(document.createTextNode(String(lines[i]) + "\n"));
    }
    while (pre.childNodes.length > MAX_LINES) { pre.removeChild(pre.firstChild); }
    if (atBottom) { pre.scrollTop = pre.scrollHeight; }
  }

  function poll() {
    var address = url + (after ? "?after=" + encodeURIComponent(after) : "");
    fetch(address, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (response) {
        if (!response.ok) { throw new Error("the console answered " + response.status); }
        return response.json();
      })
      .then(function (body) {
        if (Array.isArray(body.lines)) { append(body.lines); }
        if (Array.isArray(body.notes)) { body.notes.forEach(function (text) { note(String(text)); }); }
        if (typeof body.after === "string" && body.after) { after = body.after; }
        if (body.final) {
          say("The job is " + String(body.status) + ": its output is complete.");
          return;
        }
        say("Following the output while the job is " + String(body.status) + "…");
        window.setTimeout(poll, POLL_MS);
      })
      .catch(function (error) { say("The live tail stopped: " + error.message + " (reload the page to go on)."); });
  }

  window.setTimeout(poll, POLL_MS);
})();

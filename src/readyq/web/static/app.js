// readyq dashboard: live updates (pausable), row selection. No inline script anywhere:
// the page's Content-Security-Policy allows this file and the vendored ones only.
(function () {
  "use strict";
  var body = document.body;
  var mode = body.getAttribute("data-live-mode");
  var pollSeconds = parseFloat(body.getAttribute("data-poll-seconds") || "5");
  var base = body.getAttribute("data-base") || "";
  var paused = window.localStorage && localStorage.getItem("readyq.paused") === "1";
  var toggle = document.getElementById("live-toggle");
  var status = document.getElementById("live-status");
  var lastRefresh = 0;
  var source = null;

  function selectedRows() {
    return document.querySelectorAll("#live input[type=checkbox][name=id]:checked").length;
  }

  function describe(extra) {
    if (!status) { return; }
    if (paused) { status.textContent = "live: paused"; return; }
    status.textContent = mode === "notify" ? "live: notifications, and every " + pollSeconds + " s"
      : "live: polling every " + pollSeconds + " s";
    if (extra) { status.textContent += " (" + extra + ")"; }
  }

  function refresh() {
    if (paused || !document.querySelector("[data-live-region]")) { return; }
    var note = document.querySelector("[data-selection-note]");
    if (document.querySelector("[data-pause-on-selection]") && selectedRows() > 0) {
      if (note) { note.hidden = false; }
      return;
    }
    if (note) { note.hidden = true; }
    lastRefresh = Date.now();
    body.dispatchEvent(new Event("rq-refresh"));
  }

  function setPaused(value, initial) {
    paused = value;
    if (window.localStorage) { localStorage.setItem("readyq.paused", value ? "1" : "0"); }
    if (toggle) {
      toggle.textContent = value ? "Resume" : "Pause";
      toggle.setAttribute("aria-pressed", value ? "true" : "false");
    }
    body.setAttribute("data-live-paused", value ? "yes" : "no");
    describe();
    // On load the page is fresh: the first refresh is the timer's.
    if (!value && !initial) { refresh(); }
  }

  if (toggle) {
    toggle.addEventListener("click", function () { setPaused(!paused); });
  }
  setPaused(paused, true);
  lastRefresh = Date.now();

  // A refresh sent before rows were selected must not swap them away when its answer
  // arrives: the form would then submit without the rows the user chose.
  body.addEventListener("htmx:beforeSwap", function (event) {
    var region = document.querySelector("[data-pause-on-selection]");
    if (region && event.detail && event.detail.target === region && selectedRows() > 0) {
      event.detail.shouldSwap = false;
      var note = document.querySelector("[data-selection-note]");
      if (note) { note.hidden = false; }
    }
  });

  // Polling everywhere; with notifications also at once when jobs become ready (a job
  // that ends sends no notification, so the polls stay).
  var every = pollSeconds * 1000;
  window.setInterval(function () {
    if (Date.now() - lastRefresh >= every - 50) { refresh(); }
  }, Math.min(every, 1000));

  if (mode === "notify" && window.EventSource && document.querySelector("[data-live-region]")) {
    source = new EventSource(base + "/api/events");
    source.addEventListener("change", function () {
      if (Date.now() - lastRefresh > 1000) { refresh(); }
    });
    source.addEventListener("error", function () { describe("reconnecting"); });
    source.addEventListener("hello", function () { describe(); });
  }

  // Select every row of the jobs table.
  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target && target.getAttribute && target.getAttribute("data-action") === "select-all") {
      var boxes = document.querySelectorAll("#live input[type=checkbox][name=id]");
      for (var i = 0; i < boxes.length; i++) { boxes[i].checked = target.checked; }
    }
  });
})();

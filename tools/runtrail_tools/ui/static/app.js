// runtrail run explorer: the few things a server-rendered page cannot do alone.
// Verify the chain now (and mark the first broken link in place), replay one node (mock, or
// live behind its own button), and follow a running run through server-sent events.
"use strict";

function post(url) {
  return fetch(url, { method: "POST", credentials: "same-origin" }).then(function (r) {
    return r.json().then(function (body) { return { status: r.status, body: body }; });
  });
}

function text(el, value) { el.textContent = value; return el; }

function make(tag, cls, content) {
  var el = document.createElement(tag);
  if (cls) el.className = cls;
  if (content !== undefined) text(el, content);
  return el;
}

function verify(button) {
  var verdict = document.getElementById("verdict");
  text(verdict, "verifying…");
  document.querySelectorAll(".event.broken").forEach(function (li) {
    li.classList.remove("broken");
    var note = li.querySelector(".broken-note");
    if (note) note.remove();
  });
  post(button.dataset.url).then(function (res) {
    var v = res.body;
    if (res.status !== 200) { text(verdict, v.error || "failed"); return; }
    verdict.className = v.valid ? "ok" : "bad";
    var inclusion = document.getElementById("inclusion");
    if (inclusion && v.inclusion) {
      text(inclusion, v.inclusion.text);
      inclusion.className = v.inclusion.valid === true ? "ok" : v.inclusion.valid === false ? "bad" : "";
    }
    if (v.valid) {
      text(verdict, "chain valid: " + v.length + " links");
      return;
    }
    // links are numbered from 1 on the page (row #N); the API's index is 0-based
    var where = v.firstBrokenIndex;
    text(verdict, "INVALID at link " + (where + 1) + " (" + v.reason + ")" + (v.detail ? ": " + v.detail : ""));
    verdict.dataset.brokenIndex = where;
    var li = document.querySelector('#timeline li.event[data-index="' + where + '"]');
    if (li) {
      li.classList.add("broken");
      li.insertBefore(make("span", "broken-note", "first broken link (#" + (where + 1) + "): " + v.reason), li.querySelector("details"));
      li.scrollIntoView({ block: "center" });
    }
  });
}

function replayNode(button, mode) {
  var out = button.parentElement.querySelector(".replay-out");
  text(out, mode === "live" ? "calling the other model…" : "replaying…");
  var runUrl = window.location.pathname;
  post(runUrl + "/nodes/" + encodeURIComponent(button.dataset.record) + "/" + mode).then(function (res) {
    out.textContent = "";
    var body = res.body;
    if (res.status !== 200) { out.appendChild(make("p", "bad", body.error || "failed")); return; }
    if (mode === "mock") {
      var pre = make("pre", "mock-result", JSON.stringify(body.result, null, 2));
      out.appendChild(make("div", "dim", "mock replay (nothing called):"));
      out.appendChild(pre);
      return;
    }
    var table = make("table", "diff");
    var head = make("tr");
    head.appendChild(make("th", "", "captured"));
    head.appendChild(make("th", "", "live"));
    table.appendChild(head);
    body.diff.forEach(function (row) {
      var tr = make("tr", "d-" + row.kind);
      tr.appendChild(make("td", "", row.left));
      tr.appendChild(make("td", "", row.right));
      table.appendChild(tr);
    });
    out.appendChild(table);
  });
}

function shownSequences() {
  var seen = {};
  document.querySelectorAll(".event[data-seq]").forEach(function (li) { seen[li.dataset.seq] = true; });
  return seen;
}

function follow(live) {
  var seen = shownSequences();
  var state = document.getElementById("live-state");
  var list = document.getElementById("live-events");
  var count = document.getElementById("event-count");
  var source = new EventSource(live.dataset.url + "?from=" + encodeURIComponent(live.dataset.from));
  source.onopen = function () { text(state, "live: following new events"); };
  source.onerror = function () { text(state, "live: reconnecting…"); };
  source.addEventListener("runtrail-event", function (msg) {
    var ev = JSON.parse(msg.data);
    if (seen[ev.sequence]) return;
    seen[ev.sequence] = true;
    var li = make("li", "event live-event");
    li.dataset.seq = ev.sequence;
    li.dataset.type = ev.type;
    li.appendChild(make("b", "", "#" + ev.sequence));
    li.appendChild(document.createTextNode(" "));
    li.appendChild(make("code", "", ev.type));
    li.appendChild(make("time", "", ev.recordedAt || ev.occurredAt || ""));
    list.appendChild(li);
    if (count) text(count, String(Number(count.textContent) + 1));
  });
}

document.addEventListener("click", function (event) {
  var target = event.target;
  if (!(target instanceof HTMLElement)) return;
  if (target.id === "verify") verify(target);
  else if (target.classList.contains("replay-mock")) replayNode(target, "mock");
  else if (target.classList.contains("replay-live")) replayNode(target, "live");
  else if (target.classList.contains("copy-cli")) copyCli(target);
});

// "copy": the clipboard where the browser allows it, else the command selected for Ctrl+C
function copyCli(button) {
  var code = document.getElementById(button.dataset.for);
  var state = document.getElementById("copy-state");
  function selectIt() {
    var range = document.createRange();
    range.selectNodeContents(code);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    text(state, "selected: press Ctrl+C");
  }
  if (!navigator.clipboard) { selectIt(); return; }
  navigator.clipboard.writeText(code.textContent).then(function () {
    text(state, "copied: " + code.textContent);
  }, selectIt);
}

// an event's data, and a node's prompt and raw response, are fetched when first opened
function fill(details, url, pick) {
  if (details.dataset.loaded) return;
  details.dataset.loaded = "1";
  var pre = details.querySelector("pre");
  text(pre, "loading…");
  fetch(url, { credentials: "same-origin" }).then(function (r) { return r.json(); }).then(function (body) {
    text(pre, JSON.stringify(pick(body), null, 2));
  });
}

document.addEventListener("toggle", function (event) {
  var details = event.target;
  if (!(details instanceof HTMLDetailsElement) || !details.open) return;
  var runUrl = window.location.pathname;
  var event = details.closest("li.event[data-index]");
  if (event) {
    if (!details.querySelector("pre")) details.appendChild(make("pre"));
    fill(details, runUrl + "/links/" + event.dataset.index, function (b) { return b.error ? b : b.event.data; });
  } else if (details.classList.contains("lazy-chat") && !details.dataset.loaded) {
    // the prompt as chat messages: an HTML fragment the server escaped, as it does every page
    details.dataset.loaded = "1";
    var slot = details.querySelector(".chat-slot");
    text(slot, "loading…");
    var node = details.closest(".node").dataset.record;
    fetch(runUrl + "/nodes/" + encodeURIComponent(node) + "/prompt", { credentials: "same-origin" })
      .then(function (r) { return r.text(); })
      .then(function (html) { slot.innerHTML = html; });
  } else if (details.classList.contains("lazy-io")) {
    var record = details.closest(".node").dataset.record;
    fill(details, runUrl + "/nodes/" + encodeURIComponent(record), function (b) { return b.error ? b : b[details.dataset.part]; });
  }
}, true);

// a jump to a step renders the page holding it; the step is then brought into view
function jumpToStep() {
  var timeline = document.getElementById("timeline");
  if (!timeline || !timeline.dataset.jump) return;
  var step = timeline.querySelector('section.step[data-step="' + timeline.dataset.jump + '"]');
  if (step) { step.classList.add("jumped"); step.scrollIntoView({ block: "start" }); }
}

document.addEventListener("DOMContentLoaded", function () {
  jumpToStep();
  var live = document.getElementById("live");
  if (live && window.EventSource) follow(live);
});

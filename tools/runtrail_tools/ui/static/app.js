// runtrail run explorer: the few things a server-rendered page cannot do alone.
// Verify the chain now (and mark the first broken link in place), replay one node (mock, or
// live behind its own button), and follow a running run through server-sent events.
"use strict";

function post(url, json) {
  var init = { method: "POST", credentials: "same-origin" };
  if (json !== undefined) {
    init.headers = { "Content-Type": "application/json" };
    init.body = JSON.stringify(json);
  }
  return fetch(url, init).then(function (r) {
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

function diffTable(part, left, right, rows) {
  var table = make("table", "diff diff-" + part);
  var head = make("tr");
  head.appendChild(make("th", "", left));
  head.appendChild(make("th", "", right));
  table.appendChild(head);
  rows.forEach(function (row) {
    var tr = make("tr", "d-" + row.kind);
    tr.appendChild(make("td", "", row.left));
    tr.appendChild(make("td", "", row.right));
    table.appendChild(tr);
  });
  return table;
}

// the operator's edit of the prompt: two JSON texts, sent as they parse (else said why not)
function editOf(button) {
  var box = button.closest(".replay-edit");
  var edit = {};
  try {
    edit.prompt = JSON.parse(box.querySelector(".edit-prompt").value);
    var params = box.querySelector(".edit-params").value.trim();
    edit.parameters = params ? JSON.parse(params) : {};
  } catch (err) {
    return { error: "not JSON: " + err.message };
  }
  return edit;
}

function replayNode(button, mode, edit) {
  var out = button.closest(".replay").querySelector(".replay-out");
  if (edit && edit.error) { out.textContent = ""; out.appendChild(make("p", "bad", edit.error)); return; }
  text(out, mode === "live" ? "calling the other model…" : "replaying…");
  var runUrl = window.location.pathname;
  post(runUrl + "/nodes/" + encodeURIComponent(button.dataset.record) + "/" + mode, edit).then(function (res) {
    out.textContent = "";
    var body = res.body;
    if (res.status !== 200) { out.appendChild(make("p", "bad", body.error || "failed")); return; }
    if (mode === "mock") {
      var pre = make("pre", "mock-result", JSON.stringify(body.result, null, 2));
      out.appendChild(make("div", "dim", "mock replay (nothing called):"));
      out.appendChild(pre);
      return;
    }
    var live = body.edited ? "live (edited prompt)" : "live";
    out.appendChild(make("div", "dim", "output"));
    out.appendChild(diffTable("output", "captured", live, body.diff));
    out.appendChild(make("div", "dim", "tool calls"));
    if (body.toolCalls.length) out.appendChild(diffTable("calls", "captured", live, body.toolCalls));
    else out.appendChild(make("div", "dim no-calls", "none on either side"));
    out.appendChild(make("div", "dim", "tokens"));
    out.appendChild(diffTable("tokens", "captured", live, body.tokens));
  });
}

// the editor is filled with the captured prompt when first opened
function fillEditor(details) {
  if (details.dataset.loaded) return;
  details.dataset.loaded = "1";
  var record = details.closest(".node").dataset.record;
  fetch(window.location.pathname + "/nodes/" + encodeURIComponent(record) + "/editable", { credentials: "same-origin" })
    .then(function (r) { return r.json(); })
    .then(function (body) {
      details.querySelector(".edit-prompt").value = JSON.stringify(body.prompt, null, 2);
      details.querySelector(".edit-params").value = JSON.stringify(body.parameters, null, 2);
    });
}

function shownSequences() {
  var seen = {};
  document.querySelectorAll(".event[data-seq]").forEach(function (li) { seen[li.dataset.seq] = true; });
  return seen;
}

// a live event goes where the server would render it: into the last step section when it
// is of the same (turn, step), else into a new section after it (as the timeline groups);
// the server's rendering of that step (node cards, link numbers), the header and the side
// panels then replace the page's, asked again while the stores lag behind the events seen
function stepLabel(ev) {
  if (ev.step === null || ev.step === undefined) return "run";
  return "step " + ev.step + (ev.turnId ? " · turn " + ev.turnId : "");
}

function lastStep(timeline) {
  var steps = timeline.querySelectorAll("section.step[data-step]");
  return steps.length ? steps[steps.length - 1] : null;
}

function sameStep(section, ev) {
  var step = ev.step === null || ev.step === undefined ? "" : String(ev.step);
  return section && section.dataset.step === step && section.dataset.turn === (ev.turnId || "");
}

function placeEvent(timeline, ev) {
  var section = lastStep(timeline);
  if (!sameStep(section, ev)) {
    var made = make("section", "step");
    made.dataset.step = ev.step === null || ev.step === undefined ? "" : String(ev.step);
    made.dataset.turn = ev.turnId || "";
    made.appendChild(make("h3", "", stepLabel(ev)));
    var body = make("div", "step-body");
    body.appendChild(make("ol", "events"));
    body.appendChild(make("div", "nodes"));
    made.appendChild(body);
    if (section) section.after(made); else timeline.appendChild(made);
    section = made;
  }
  var li = make("li", "event live-new");
  li.dataset.seq = ev.sequence;
  li.dataset.type = ev.type;
  li.appendChild(make("b", "link-no", "#" + ev.sequence));
  li.appendChild(document.createTextNode(" "));
  li.appendChild(make("code", "", ev.type));
  li.appendChild(make("time", "", ev.occurredAt || ev.recordedAt || ""));
  section.querySelector("ol.events").appendChild(li);
}

function replaceWith(el, html) {
  if (!el || html === null || html === undefined) return;
  var holder = document.createElement("div");
  holder.innerHTML = html; // the server's rendering, escaped as every page is
  var fresh = holder.firstElementChild;
  if (fresh) el.replaceWith(fresh);
}

function follow(live) {
  var seen = shownSequences();
  var state = document.getElementById("live-state");
  var timeline = document.getElementById("timeline");
  var placing = timeline.dataset.lastPage === "1" && !("filtered" in timeline.dataset);
  var events = Number(document.getElementById("event-count").textContent);
  var lastSeq = 0;
  Object.keys(seen).forEach(function (seq) { lastSeq = Math.max(lastSeq, Number(seq)); });
  var since = null, timer = null, tries = 0, settled = 0;

  // the server's rendering of every step from the one holding the first live event on,
  // once it holds every event the page shows there; else asked again
  function replaceSteps(view) {
    if (!placing || !view.steps.length) return false;
    var first = timeline.querySelector('li.event[data-seq="' + since + '"]');
    if (!first) return false;
    var sections = [];
    for (var el = first.closest("section.step"); el; el = el.nextElementSibling) {
      if (el.matches("section.step[data-step]")) sections.push(el);
    }
    var held = {};
    view.sequences.forEach(function (seq) { held[seq] = true; });
    var complete = sections.every(function (section) {
      return Array.prototype.every.call(section.querySelectorAll("li.event[data-seq]"), function (li) {
        return held[li.dataset.seq];
      });
    });
    if (!complete) return false;
    var holder = document.createElement("div");
    holder.innerHTML = view.steps.join(""); // the server's rendering, escaped as every page is
    var after = sections[sections.length - 1];
    sections.slice(0, -1).forEach(function (section) { section.remove(); });
    after.replaceWith.apply(after, Array.prototype.slice.call(holder.children));
    return true;
  }

  function refresh() {
    timer = null;
    var question = lastSeq;
    fetch(live.dataset.view + "?since=" + encodeURIComponent(since), { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (view) {
        if (view.error) return;
        var placed = replaceSteps(view);
        replaceWith(document.getElementById("run-summary"), view.summary);
        var count = document.getElementById("event-count");
        if (count && Number(count.textContent) < events) text(count, String(events));
        replaceWith(document.getElementById("actions"), view.actions);
        replaceWith(document.getElementById("resume"), view.resume);
        var verdict = document.getElementById("verdict");
        if (!verdict || !verdict.textContent) replaceWith(document.getElementById("proof"), view.proof);
        if (question !== lastSeq) return; // a newer event asked again already
        var behind = (placing && !placed) || view.version < lastSeq || view.events < events;
        if (behind && tries < 60) { tries += 1; later(500); }
        else if (!behind && settled < 2) { settled += 1; later(2500 * settled); } // capture writes node cards last
      });
  }

  function later(ms) {
    if (timer) clearTimeout(timer);
    timer = setTimeout(refresh, ms);
  }

  var source = new EventSource(live.dataset.url + "?from=" + encodeURIComponent(live.dataset.from));
  source.onopen = function () { text(state, "live: following new events"); };
  source.onerror = function () { text(state, "live: reconnecting…"); };
  source.addEventListener("runtrail-event", function (msg) {
    var ev = JSON.parse(msg.data);
    if (seen[ev.sequence]) return;
    seen[ev.sequence] = true;
    lastSeq = Math.max(lastSeq, Number(ev.sequence));
    if (since === null || Number(ev.sequence) < since) since = Number(ev.sequence);
    events += 1;
    if (placing) placeEvent(timeline, ev);
    text(document.getElementById("event-count"), String(events));
    tries = 0;
    settled = 0;
    later(150);
  });
}

// the runs list: a shown run's row is read again when an event of it arrives, and again
// while the stores have not reached that event's sequence yet
function followRuns(table) {
  var ids = Array.prototype.map.call(table.querySelectorAll("tr.run[data-run]"), function (tr) {
    return tr.dataset.run;
  });
  var query = function (list) {
    return list.map(function (id) { return "run=" + encodeURIComponent(id); }).join("&");
  };
  var wanted = {}, timer = null, tries = 0;
  function refresh() {
    timer = null;
    var asked = Object.keys(wanted);
    fetch("/live/rows.json?" + query(asked), { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (rows) {
        asked.forEach(function (id) {
          var row = rows[id];
          if (!row) return;
          var tr = table.querySelector('tr.run[data-run="' + CSS.escape(id) + '"]');
          var holder = document.createElement("tbody");
          holder.innerHTML = row.html; // the server's rendering, escaped as every page is
          if (tr && holder.firstElementChild) tr.replaceWith(holder.firstElementChild);
          if (row.version >= wanted[id]) delete wanted[id];
        });
        if (Object.keys(wanted).length && tries < 60) { tries += 1; later(500); }
      });
  }
  function later(ms) {
    if (timer) clearTimeout(timer);
    timer = setTimeout(refresh, ms);
  }
  var from = table.dataset.from ? "&from=" + encodeURIComponent(table.dataset.from) : "";
  var source = new EventSource(table.dataset.live + "?" + query(ids) + from);
  source.addEventListener("runtrail-run", function (msg) {
    var run = JSON.parse(msg.data);
    // no sequence: events came before the stream began; read the row until tries run out
    var at = run.sequence === null ? Number.MAX_SAFE_INTEGER : Number(run.sequence);
    wanted[run.runId] = Math.max(wanted[run.runId] || 0, at);
    tries = 0;
    later(150);
  });
}

document.addEventListener("click", function (event) {
  var target = event.target;
  if (!(target instanceof HTMLElement)) return;
  if (target.id === "verify") verify(target);
  else if (target.classList.contains("replay-mock")) replayNode(target, "mock");
  else if (target.classList.contains("replay-live")) replayNode(target, "live");
  else if (target.classList.contains("replay-edited")) replayNode(target, "live", editOf(target));
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
  } else if (details.classList.contains("replay-edit")) {
    fillEditor(details);
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
  var runs = document.getElementById("runs");
  if (runs && runs.dataset.live && window.EventSource) followRuns(runs);
});

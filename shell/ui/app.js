// The fleetd dashboard: reads GET /members and GET /overview with the caller's token, polls
// with backoff, and renders with textContent only (every string may come from a member).
"use strict";

const POLL_MS = 2000;
const MAX_BACKOFF_MS = 30000;
const BAD_HEALTH = new Set(["GONE", "NEVER_READY", "WAITING_ON_PERSON", "USAGE_LIMITED",
  "PROVIDER_ERROR", "ERROR_ON_SCREEN", "CONTROL_LINK_DOWN",
  "DELEGATION_ORPHANED", "REPLY_STRANDED", "STALL_SUSPECTED", "BLOCKED_AMBIGUOUS",
  "TURN_BOUNDARY_LOST", "MUTE"]);

let token = sessionStorage.getItem("fleetd-token");
let flow = null;
let delay = POLL_MS;
let lastOk = 0;
let timer = null;
let data = null;
// Answers being typed, by turn: a refresh redraws the rows, never what an operator is typing.
const drafts = new Map();

const $ = (id) => document.getElementById(id);

function el(tag, text, attrs) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  }
  return e;
}

function ago(ms) {
  if (ms === undefined || ms === null) return "";
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
  return Math.floor(s / 3600) + "h" + String(Math.floor(s % 3600 / 60)).padStart(2, "0") + "m";
}

const ROLE_WORDS = { PRIMARY: "lead", ARCHITECT: "architect", WORKER: "member, read only" };

function who(caller) {
  if (!caller) return "an unknown caller";
  return caller.name + " (" + (ROLE_WORDS[caller.role] || caller.role) + ")";
}

// A link's token is never used unasked, not even in a fresh tab: anyone can send an operator a
// link, and a page quietly acting as someone else is how they would be fooled. The page first
// reads whose token it is (GET /overview, a read), says so, and waits for a choice.
async function offerToken(offered) {
  if (offered === token) return;
  const box = $("token-offer");
  const text = $("token-offer-text");
  const use = $("token-use");
  const keep = $("token-keep");
  let caller = null;
  let refused = false;
  try {
    caller = (await getAs(offered, "/overview")).caller;
  } catch (e) {
    refused = e.status === 401;
    if (!refused) {
      text.textContent = "Could not ask this gateway whose the link's token is (" + e.message +
        "). Reload the link to ask again.";
    }
  }
  box.dataset.offer = refused ? "refused" : caller ? "ask" : "error";
  box.dataset.role = caller ? caller.role : "";
  box.dataset.name = caller ? caller.name : "";
  const mine = data && data.overview ? who(data.overview.caller) : null;
  if (refused) {
    text.textContent = "This link carries a token this gateway refused." +
      (mine ? " This tab goes on acting as " + mine + "." : "");
  } else if (caller) {
    text.textContent = "This link would have this page show and act as " + who(caller) +
      (token ? ", instead of " + (mine || "the token this tab holds") : "") +
      ". Use it only if you made the link yourself or trust whoever sent it.";
  }
  use.hidden = !caller;
  use.textContent = caller ? "act as " + caller.name : "";
  keep.textContent = token ? "keep mine" : (caller ? "don't use it" : "dismiss");
  box.hidden = false;
  use.onclick = () => { box.hidden = true; useToken(offered); schedule(0); };
  keep.onclick = () => { box.hidden = true; };
}

function useToken(t) {
  token = t;
  sessionStorage.setItem("fleetd-token", token);
}

function readHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  if (params.get("token")) {
    offerToken(params.get("token"));
    params.delete("token");
  }
  flow = params.get("flow");
  const rest = params.toString();
  // The token leaves the address bar (and the history) once read.
  history.replaceState(null, "", location.pathname + (rest ? "#" + rest : ""));
}

function get(path) {
  return getAs(token, path);
}

async function getAs(bearer, path) {
  const r = await fetch(path, { headers: { "Authorization": "Bearer " + bearer }, cache: "no-store" });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) {
    const e = new Error(body.message || ("HTTP " + r.status));
    e.status = r.status;
    throw e;
  }
  return body;
}

async function act(method, path, body) {
  const r = await fetch(path, {
    method,
    headers: { "Authorization": "Bearer " + token, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const v = await r.json().catch(() => ({}));
  if (!r.ok) alert(method + " " + path + ": " + (v.message || r.status));
  schedule(0);
}

function setState(state, text) {
  const s = $("state");
  s.dataset.state = state;
  s.textContent = text;
}

function schedule(ms) {
  clearTimeout(timer);
  timer = setTimeout(refresh, ms);
}

async function refresh() {
  if (!token) {
    $("login").hidden = false;
    setState("login", "no token");
    return;
  }
  try {
    // A caller with no session of its own has no task list: shown as empty, not as an error.
    const [members, overview, attention, tasks] = await Promise.all([
      get("/members"), get("/overview"), get("/attention"),
      get("/tasklist").catch((e) => { if (e.status === 401) throw e; return { tasks: [] }; }),
    ]);
    data = { rows: members.rows || [], overview, attention, tasks: tasks.tasks || [] };
    lastOk = Date.now();
    delay = POLL_MS;
    $("login").hidden = true;
    render();
    setState("live", "live · updated " + new Date(lastOk).toLocaleTimeString());
  } catch (e) {
    if (e.status === 401) {
      sessionStorage.removeItem("fleetd-token");
      token = null;
      $("login").hidden = false;
      setState("error", "the token was refused");
      return;
    }
    delay = Math.min(delay * 2, MAX_BACKOFF_MS);
    // What is on screen is kept, and said to be old.
    setState(data ? "stale" : "error",
      (data ? "stale: last updated " + new Date(lastOk).toLocaleTimeString() + " · " : "") +
      e.message + " · retrying in " + Math.round(delay / 1000) + "s");
  }
  schedule(delay);
}

function flowKey(d) { return d.trace || d.msg || d.ticket; }

function flowLink(id) {
  const a = el("a", id.slice(0, 8), { href: "#flow=" + encodeURIComponent(id), title: id, "data-flow": id });
  return a;
}

function render() {
  // The answer field being typed in keeps its focus across the redraw.
  const focused = document.activeElement && document.activeElement.dataset
    ? document.activeElement.dataset.turn : undefined;
  draw();
  if (focused) {
    const again = document.querySelector('input[data-turn="' + CSS.escape(focused) + '"]');
    if (again) again.focus();
  }
}

function draw() {
  const o = data.overview;
  const may = new Set(o.may || []);
  const acting = $("actions").checked && may.size > 0;
  $("actions-toggle").hidden = may.size === 0;
  $("host").textContent = "· " + o.host;
  // Whose token this page acts with, always in sight.
  $("who").textContent = "as " + who(o.caller);
  $("who").dataset.role = o.caller ? o.caller.role : "";
  $("who").dataset.name = o.caller ? o.caller.name : "";
  $("fleet").hidden = false;

  let delegations = o.delegations || [];
  let held = o.held || [];
  let rows = data.rows;
  $("flow-filter").hidden = !flow;
  if (flow) {
    $("flow-id").textContent = flow;
    delegations = delegations.filter((d) => d.trace === flow || d.msg === flow || d.ticket === flow);
    const involved = new Set();
    delegations.forEach((d) => { involved.add(d.target); if (d.lead) involved.add(d.lead); });
    rows = rows.filter((r) => r.kind === "gateway" || involved.has(r.gid));
    held = held.filter((h) => involved.has(h.target));
  }

  // Hosts, each with its own members: this host first, then the rest by name.
  const hostsEl = $("hosts");
  hostsEl.replaceChildren();
  const views = new Map((o.hosts || []).map((h) => [h.host, h]));
  const names = [...new Set([...views.keys(), ...rows.map((r) => r.host)])];
  for (const name of names) {
    const h = views.get(name) || { host: name, link: "UNKNOWN" };
    const box = el("div", null, { class: "host", "data-host": name, "data-link": h.link });
    const title = el("h3", name + " ");
    title.append(el("span", h.link, { class: "link-" + h.link, "data-role": "link" }));
    if (h.heard_ms_ago !== undefined) title.append(el("span", " · heard " + ago(h.heard_ms_ago) + " ago"));
    if (h.ops) {
      title.append(el("span", " · " + h.ops.delegations + " delegation(s), " + h.ops.held +
        " held, " + h.ops.dead_letters + " dead letter(s), " + h.ops.broker_drops + " broker drop(s)",
        { "data-dead-letters": h.ops.dead_letters, "data-held": h.ops.held }));
    }
    box.append(title);
    const members = rows.filter((r) => r.host === name && r.kind !== "gateway");
    if (members.length === 0) {
      box.append(el("p", "no members or leads", { class: "empty" }));
    } else {
      const t = el("table");
      const head = el("tr");
      ["gid", "kind", "status", "health", "role", "profile", "owner", "age", ""].forEach((c) => head.append(el("th", c)));
      t.append(head);
      for (const r of members) {
        const tr = el("tr", null, { "data-gid": r.gid, "data-status": r.status, "data-health": r.health, "data-kind": r.kind });
        tr.append(el("td", r.gid, { class: "id" }));
        tr.append(el("td", r.kind));
        tr.append(el("td", (r.status || "") + (r.busy ? " · in turn" : "") + (r.liveness === "unknown" ? " ?" : ""), { class: "status-" + r.status }));
        tr.append(el("td", r.health || "", { class: BAD_HEALTH.has(r.health) ? "health-bad" : "", title: r.health_reason || "" }));
        tr.append(el("td", r.role || ""));
        tr.append(el("td", r.profile || ""));
        tr.append(el("td", r.owner || "", { class: "id" }));
        tr.append(el("td", r.since ? ago(Date.now() - r.since) : ""));
        const cell = el("td");
        if (acting && may.has("STOP") && r.kind === "member") {
          const b = el("button", "stop", { class: "act", "data-action": "stop" });
          b.onclick = () => { if (confirm("Stop " + r.gid + "? Its pane closes and its open delegations end ABANDONED.")) act("DELETE", "/members/" + encodeURIComponent(r.gid)); };
          cell.append(b);
        }
        tr.append(cell);
        t.append(tr);
      }
      box.append(t);
    }
    hostsEl.append(box);
  }

  drawNeeds(acting && may.has("SEND"));
  drawTasks(acting && may.has("SEND"));

  const dBody = $("delegations").tBodies[0];
  dBody.replaceChildren();
  for (const d of delegations) {
    const tr = el("tr", null, { "data-ticket": d.ticket, "data-target": d.target, "data-phase": d.phase, "data-flow": flowKey(d) });
    const f = el("td", null, { class: "id" });
    f.append(flowLink(flowKey(d)));
    tr.append(f);
    tr.append(el("td", d.target, { class: "id" }));
    tr.append(el("td", d.lead || "", { class: "id" }));
    tr.append(el("td", d.half));
    tr.append(el("td", d.phase + (d.outcome ? " · " + d.outcome : ""), { class: "phase-" + d.phase }));
    tr.append(el("td", d.question || (d.phase === "ASKING" ? "(a question you may not answer)" : "")));
    tr.append(el("td", d.ends_in_ms !== undefined ? ago(d.ends_in_ms) : ""));
    const cell = el("td");
    if (d.phase === "ASKING" && d.turn_id && d.question) cell.append(el("span", "answer it above", { class: "empty" }));
    tr.append(cell);
    dBody.append(tr);
  }
  $("delegations-empty").hidden = delegations.length > 0;

  const hBody = $("held").tBodies[0];
  hBody.replaceChildren();
  for (const h of held) {
    const tr = el("tr", null, { "data-target": h.target, "data-count": h.count });
    tr.append(el("td", h.target, { class: "id" }));
    tr.append(el("td", h.lead || "(any lead)", { class: "id" }));
    tr.append(el("td", h.count));
    tr.append(el("td", h.bytes));
    tr.append(el("td", ago(h.oldest_ms)));
    hBody.append(tr);
  }
  $("held-empty").hidden = held.length > 0;
}

// What waits on this caller, oldest first: a question it may answer has its answer field.
function drawNeeds(answering) {
  const a = data.attention || { needs: [], elsewhere: [] };
  const body = $("needs").tBodies[0];
  body.replaceChildren();
  for (const n of a.needs || []) {
    const tr = el("tr", null, { "data-kind": n.kind, "data-need": n.id, "data-member": n.member || "" });
    tr.append(el("td", ago(n.waiting_ms)));
    tr.append(el("td", n.kind));
    tr.append(el("td", n.member || "", { class: "id" }));
    const what = el("td", n.summary);
    if (n.text) what.append(el("div", n.text, { class: "need-text" }));
    tr.append(what);
    const cell = el("td");
    if (answering && n.kind === "question" && n.turn_id && n.member) {
      const input = el("input", null, { placeholder: "answer", "data-action": "answer-text", "data-turn": n.turn_id });
      input.value = drafts.get(n.turn_id) || "";
      input.oninput = () => drafts.set(n.turn_id, input.value);
      const b = el("button", "answer", { class: "act", "data-action": "answer" });
      b.onclick = () => {
        if (!input.value.trim()) return;
        drafts.delete(n.turn_id);
        act("POST", "/sessions/" + encodeURIComponent(n.member) + "/message", { message: input.value, turnId: n.turn_id, wait: false });
      };
      cell.append(input, b);
    }
    tr.append(cell);
    body.append(tr);
  }
  $("needs-empty").hidden = (a.needs || []).length > 0;
  const elsewhere = (a.elsewhere || []).map((e) => e.waiting + " at " + e.host);
  $("needs-elsewhere").hidden = elsewhere.length === 0;
  $("needs-elsewhere").textContent = "and waiting on you elsewhere: " + elsewhere.join(", ");
}

// The caller's task list: a task in review (or failed) has its decisions when acting.
function drawTasks(deciding) {
  const body = $("tasks").tBodies[0];
  body.replaceChildren();
  const decisions = { review: ["done", "failed", "retry"], failed: ["retry"], pending: ["failed"], ready: ["failed"] };
  for (const t of data.tasks || []) {
    const tr = el("tr", null, { "data-task": t.id, "data-state": t.state });
    tr.append(el("td", "t-" + t.id));
    tr.append(el("td", t.state + (t.outcome ? " " + t.outcome : "")));
    tr.append(el("td", t.assignee, { class: "id" }));
    tr.append(el("td", (t.deps || []).map((d) => "t-" + d).join(", ")));
    tr.append(el("td", t.title));
    tr.append(el("td", t.why || ""));
    const cell = el("td");
    if (deciding) {
      for (const d of decisions[t.state] || []) {
        const b = el("button", d, { class: "act", "data-action": "review-" + d });
        b.onclick = () => act("POST", "/tasklist/" + t.id + "/review", { decision: d });
        cell.append(b);
      }
    }
    tr.append(cell);
    body.append(tr);
  }
  $("tasks-empty").hidden = (data.tasks || []).length > 0;
}

$("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const typed = $("token").value.trim();
  if (typed) useToken(typed);
  $("token").value = "";
  schedule(0);
});
$("actions").addEventListener("change", () => data && render());
$("flow-clear").addEventListener("click", (ev) => { ev.preventDefault(); history.replaceState(null, "", location.pathname); flow = null; data && render(); });
window.addEventListener("hashchange", () => { readHash(); if (data) render(); else schedule(0); });

readHash();
schedule(0);

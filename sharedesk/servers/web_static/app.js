// The sharedesk page: desks by activity, a desk's channel and threads live, a lens per
// participant. Every piece of stored text reaches the page through textContent (never
// innerHTML, never an attribute that a browser follows), and bidirectional controls are
// shown as visible escapes so that a row cannot reorder what surrounds it.
"use strict";

const BIDI = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
const POST_HEADERS = { "content-type": "application/json", "x-sharedesk-request": "1" };

const state = { desk: null, source: null, last: 0, oldest: null, me: null, replyTo: null, lensTimer: null, lensAsked: 0 };

function $(id) { return document.getElementById(id); }

function shown(text) {
  return String(text).replace(BIDI, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = shown(text);
  return node;
}

function who(author) {
  return author.kind === "operator" ? "operator" : author.label + " (" + author.kind + ")";
}

function deskPath(desk) { return "/api/desks/" + encodeURIComponent(desk); }

async function api(path, options) {
  const response = await fetch(path, Object.assign({ credentials: "same-origin" }, options || {}));
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || String(response.status));
  return body;
}

function fail(error) { $("status").textContent = shown(error.message || error); }

// -- the desks list --------------------------------------------------------------------

async function showDesks() {
  $("desk-page").hidden = true;
  $("desks-page").hidden = false;
  const list = $("desks");
  const { desks } = await api("/api/desks");
  list.replaceChildren();
  for (const desk of desks) {
    const item = el("li", "desk");
    const link = el("a", null, desk.id);
    link.href = "#desk=" + encodeURIComponent(desk.id);
    item.append(link, el("span", "meta", desk.last_sequence + " rows, last " + desk.last_activity));
    list.append(item);
  }
}

// -- a desk ----------------------------------------------------------------------------

function rowText(row) {
  if (row.type === "text") return row.content;
  if (row.type === "run_started") return "run started" + (row.model ? " (" + row.model + ")" : "");
  if (row.type === "run_finished") return "run " + row.status;
  return row.type.replace("_", " ");
}

function rowNode(row) {
  const node = el("li", row.type === "text" ? "row" : "row event");
  node.dataset.seq = String(row.sequence);
  node.append(el("span", "seq", "#" + row.sequence), el("span", "author", who(row.author)));
  if (row.parent !== null && !document.querySelector('#channel li[data-seq="' + row.parent + '"]')) {
    node.append(el("span", "seq", "\u21b3 #" + row.parent));
  }
  node.append(el("span", "content", rowText(row)));
  if (row.type === "run_started" && row.run_id) {
    const open = el("button", "reply run-open", "Transcript");
    open.type = "button";
    open.addEventListener("click", () => showRun(row.run_id).catch(fail));
    node.prepend(open);
  }
  if (row.type === "text" && row.parent === null) {
    if (state.me) {
      const reply = el("button", "reply", "Reply");
      reply.type = "button";
      reply.addEventListener("click", () => replyTo(row.sequence));
      node.prepend(reply);
    }
    node.append(el("ul", "replies"));
  }
  return node;
}

function place(row, where) {
  const node = rowNode(row);
  const root = row.parent === null ? null : document.querySelector('#channel li[data-seq="' + row.parent + '"] > .replies');
  if (root) root.append(node);
  else if (where === "top") $("channel").prepend(node);
  else $("channel").append(node);
}

async function loadOlder() {
  const query = state.oldest ? "?before=" + state.oldest : "";
  const { rows, next_before } = await api(deskPath(state.desk) + "/rows" + query);
  const channel = $("channel");
  const first = channel.firstChild;
  // Older rows go above what is shown, oldest first; their replies nest as they come.
  for (const row of rows) {
    const node = rowNode(row);
    const root = row.parent === null ? null : document.querySelector('#channel li[data-seq="' + row.parent + '"] > .replies');
    if (root) root.append(node);
    else channel.insertBefore(node, first);
    if (row.sequence > state.last) state.last = row.sequence;
  }
  state.oldest = next_before;
  $("older").hidden = next_before === null;
}

function follow() {
  if (state.source) state.source.close();
  const source = new EventSource(deskPath(state.desk) + "/events?after=" + state.last);
  source.addEventListener("row", (message) => {
    const row = JSON.parse(message.data);
    if (row.sequence <= state.last) return;
    state.last = row.sequence;
    place(row, "bottom");
    scheduleLens();
    refreshParticipants();
  });
  state.source = source;
}

async function refreshParticipants() {
  const { participants } = await api(deskPath(state.desk) + "/participants");
  const select = $("lens-who");
  const chosen = select.value;
  select.replaceChildren();
  for (const p of participants) {
    const key = p.author.kind === "operator" ? "operator" : p.author.kind + ":" + p.author.id;
    const option = el("option", null, who(p.author));
    option.value = key;
    select.append(option);
  }
  if (chosen) {
    addLensOption(chosen);  // one named by hand stays chosen while others write
    select.value = chosen;
  } else if (select.options.length) showLens();
}

function addLensOption(key) {
  const select = $("lens-who");
  if ([...select.options].some((o) => o.value === key)) return;
  const option = el("option", null, key);
  option.value = key;
  select.append(option);
}

function scheduleLens() {
  clearTimeout(state.lensTimer);
  state.lensTimer = setTimeout(showLens, 100);
}

async function showLens() {
  const as = $("lens-who").value;
  if (!as || !state.desk) return;
  const asked = ++state.lensAsked;
  const view = await api(deskPath(state.desk) + "/view?as=" + encodeURIComponent(as));
  if (asked !== state.lensAsked) return;  // a later lens was asked for while this one came
  const lens = $("lens");
  lens.replaceChildren();
  const mark = view.watermark;
  $("lens-state").textContent = mark === null
    ? shown(who(view.participant)) + " has taken no turn here yet"
    : shown(who(view.participant)) + " has seen up to #" + mark;
  let placed = mark === null;
  for (const m of view.messages) {
    if (!placed && m.sequence > mark) {
      lens.append(el("li", "seen", "seen up to here (#" + mark + ")"));
      placed = true;
    }
    const node = el("li", "msg");
    node.dataset.seq = String(m.sequence);
    node.append(el("span", "seq", "#" + m.sequence), el("span", "author", who(m.author)));
    if (m.parent !== null) node.append(el("span", "seq", "\u21b3 #" + m.parent));
    node.append(el("span", "content", m.content));
    lens.append(node);
  }
  if (!placed) lens.append(el("li", "seen", "seen up to here (#" + mark + ")"));
}

async function showRun(runId) {
  const run = await api(deskPath(state.desk) + "/runs/" + encodeURIComponent(runId));
  $("run").hidden = false;
  $("run-state").textContent = shown("run " + run.status + (run.model ? " on " + run.model : "") +
    (run.agent ? " for " + who(run.agent) : ""));
  const list = $("run-transcript");
  list.replaceChildren();
  for (const m of run.transcript) {
    const node = el("li", "msg");
    node.append(el("span", "seq", m.role), el("span", "author", m.author ? who(m.author) : ""));
    node.append(el("span", "content", m.content !== null ? m.content : "tool " + (m.tool_name || "")));
    list.append(node);
  }
}

function lensOf(key) {
  // A participant who wrote nothing lately is not listed: name it (person:ID, agent:ID).
  if (!key) return;
  addLensOption(key);
  $("lens-who").value = key;
  showLens().catch(fail);
}

function replyTo(sequence) {
  state.replyTo = sequence;
  $("reply-to").hidden = false;
  $("reply-to").textContent = "Replying in the thread of #" + sequence;
  $("cancel-reply").hidden = false;
  $("send").textContent = "Reply";
  $("content").focus();
}

function newThread() {
  state.replyTo = null;
  $("reply-to").hidden = true;
  $("cancel-reply").hidden = true;
  $("send").textContent = "Post";
}

async function send() {
  const content = $("content").value;
  if (!content.trim()) return;
  try {
    await api(deskPath(state.desk) + "/messages", {
      method: "POST",
      headers: POST_HEADERS,
      body: JSON.stringify({ content, parent: state.replyTo }),
    });
    $("content").value = "";
    $("post-error").textContent = "";
    newThread();
  } catch (error) {
    $("post-error").textContent = shown(error.message);
  }
}

async function showDesk(desk) {
  $("desks-page").hidden = true;
  $("desk-page").hidden = false;
  $("desk-title").textContent = shown(desk);
  Object.assign(state, { desk, last: 0, oldest: null, replyTo: null });
  $("channel").replaceChildren();
  $("lens").replaceChildren();
  $("run").hidden = true;
  $("lens-who").replaceChildren();
  $("compose").hidden = !state.me;
  newThread();
  await loadOlder();
  follow();
  await refreshParticipants();
}

async function route() {
  const params = new URLSearchParams(location.hash.slice(1));
  const desk = params.get("desk");
  if (state.source && !desk) { state.source.close(); state.source = null; }
  try {
    if (desk) await showDesk(desk);
    else await showDesks();
  } catch (error) {
    fail(error);
  }
}

async function start() {
  const me = await api("/api/me");
  state.me = me.participant;
  if (state.me) $("me").textContent = "signed in as " + shown(who(state.me));
  else $("me").textContent = "read-only";
  $("older").addEventListener("click", () => loadOlder().catch(fail));
  $("lens-who").addEventListener("change", () => showLens().catch(fail));
  $("lens-as").addEventListener("keydown", (event) => {
    if (event.key === "Enter") lensOf(event.target.value.trim());
  });
  $("send").addEventListener("click", send);
  $("cancel-reply").addEventListener("click", newThread);
  window.addEventListener("hashchange", route);
  await route();
  document.body.dataset.ready = "1";
}

start().catch(fail);

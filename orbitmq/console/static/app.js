// OrbitMQ console: one page, hash routes (#/cluster, #/topics, #/topic/<name>, #/groups, #/group/<name>,
// #/messages, #/dlq[/<group>], #/controller), plain DOM and fetch; no external assets.
"use strict";

const view = document.getElementById("view");
const errorBox = document.getElementById("error");
let refreshTimer = null;
let renderSeq = 0;

// ---- helpers -------------------------------------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function fmtTime(ms) {
  if (!ms || ms <= 0) return "-";
  const d = new Date(ms);
  const p = (n, w = 2) => String(n).padStart(w, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:` +
    `${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

function fmtNum(n) {
  return typeof n === "number" ? n.toLocaleString("en-US") : (n === null || n === undefined ? "-" : String(n));
}

function badge(text, cls) {
  return el("span", {class: `badge ${cls || text}`}, text);
}

function topicLink(t) {
  return el("a", {href: "#/topic/" + encodeURIComponent(t), "data-topic-link": t}, t);
}

function groupLink(g) {
  return el("a", {href: "#/group/" + encodeURIComponent(g), "data-group-link": g}, g);
}

// columns: [{key, label, num, render(row)}]
function table(id, columns, rows, empty) {
  if (!rows.length) return el("p", {class: "note", id: id ? id + "-empty" : null}, empty || "nothing to show");
  const head = el("tr", {}, columns.map((c) => el("th", {class: c.num ? "num" : null}, c.label)));
  const body = rows.map((r) => el("tr", {"data-key": r.__key ?? null},
    columns.map((c) => el("td", {class: c.num ? "num" : null, "data-col": c.key},
      c.render ? c.render(r) : (c.num ? fmtNum(r[c.key]) : (r[c.key] ?? "-"))))));
  return el("table", {id}, el("thead", {}, head), el("tbody", {}, body));
}

function stat(id, label, value) {
  return el("div", {class: "stat"}, el("b", {id}, fmtNum(value)), el("span", {}, label));
}

async function api(path, opts) {
  const init = Object.assign({credentials: "same-origin"}, opts || {});
  if (init.json !== undefined) {
    init.method = init.method || "POST";
    init.headers = {"Content-Type": "application/json"};
    init.body = JSON.stringify(init.json);
    delete init.json;
  }
  const resp = await fetch(path, init);
  if (resp.status === 401) {
    location.href = "/login";
    throw new Error("login required");
  }
  const data = await resp.json().catch(() => ({error: `HTTP ${resp.status}`}));
  if (!resp.ok) throw new Error(data.error || `HTTP ${resp.status}`);
  return data;
}

function showError(e) {
  errorBox.textContent = e ? String(e.message || e) : "";
  errorBox.hidden = !e;
}

function toMs(localValue) {  // <input type=datetime-local> value -> epoch ms (local time)
  return localValue ? new Date(localValue).getTime() : null;
}

function localInput(ms) {
  const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60000);
  return d.toISOString().slice(0, 19);
}

function refreshButton(fn) {
  return el("button", {id: "refresh", type: "button", class: "secondary", onclick: () => fn()}, "Refresh");
}

function title(text, extra) {
  return el("div", {class: "row"}, el("h2", {}, text), extra || null);
}

// inline SVG line chart of [{t, tps}]
function chart(series, width = 640, height = 180) {
  const pad = 36;
  const svg = (tag, attrs) => {
    const n = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
    return n;
  };
  const root = svg("svg", {class: "chart", id: "tps-chart", width, height, viewBox: `0 0 ${width} ${height}`});
  root.append(svg("line", {class: "axis", x1: pad, y1: height - pad, x2: width - 8, y2: height - pad}));
  root.append(svg("line", {class: "axis", x1: pad, y1: 8, x2: pad, y2: height - pad}));
  if (series.length < 1) {
    const t = svg("text", {x: pad + 10, y: height / 2});
    t.textContent = "collecting samples...";
    root.append(t);
    return root;
  }
  const maxY = Math.max(1, ...series.map((p) => p.tps));
  const t0 = series[0].t, t1 = Math.max(series[series.length - 1].t, t0 + 1);
  const x = (t) => pad + (t - t0) / (t1 - t0) * (width - pad - 12);
  const y = (v) => height - pad - v / maxY * (height - pad - 12);
  const pts = series.length === 1 ? [[pad, y(series[0].tps)], [width - 12, y(series[0].tps)]]
    : series.map((p) => [x(p.t), y(p.tps)]);
  root.append(svg("polyline", {class: "line", points: pts.map((p) => p.join(",")).join(" ")}));
  const label = (text, xx, yy, anchor) => {
    const n = svg("text", {x: xx, y: yy, "text-anchor": anchor || "start"});
    n.textContent = text;
    root.append(n);
  };
  label(maxY.toFixed(maxY < 10 ? 1 : 0), pad - 4, 16, "end");
  label("0", pad - 4, height - pad, "end");
  label(fmtTime(t0).slice(11, 19), pad, height - pad + 16);
  label(fmtTime(t1).slice(11, 19), width - 12, height - pad + 16, "end");
  label("messages/s", width - 12, 16, "end");
  return root;
}

// ---- pages ---------------------------------------------------------------------------------------------------
async function pageCluster() {
  const data = await api("/api/cluster");
  const b = data.brokers;
  const cols = [
    {key: "cluster", label: "Cluster"}, {key: "brokerName", label: "Broker"}, {key: "BID", label: "ID", num: true},
    {key: "addr", label: "Address"}, {key: "role", label: "Role", render: (r) => badge(r.role)},
    {key: "version", label: "Version"}, {key: "inTPS", label: "In TPS", num: true},
    {key: "outTPS", label: "Out TPS", num: true}, {key: "putToday", label: "Put today", num: true},
    {key: "getToday", label: "Get today", num: true}, {key: "lagBytes", label: "Replication lag (bytes)", num: true},
    {key: "actingMaster", label: "Acting master"}, {key: "minBID", label: "Min ID"},
  ];
  const optional = {epoch: "Epoch", inSync: "In SyncStateSet", leaseState: "Lease", leaseEpoch: "Lease epoch",
    leaseRemainingMs: "Lease left (ms)", leaseMaster: "Lease master"};
  for (const c of data.columns) cols.push({key: c, label: optional[c] || c});
  cols.push({key: "online", label: "State", render: (r) => badge(r.online ? "online" : "offline")});
  return [
    title("Cluster", refreshButton(render)),
    el("div", {class: "stats"},
      stat("stat-clusters", "clusters", new Set(b.map((r) => r.cluster)).size),
      stat("stat-brokers", "brokers", b.length),
      stat("stat-masters", "masters", b.filter((r) => r.BID === 0).length),
      stat("stat-offline", "not answering", b.filter((r) => !r.online).length)),
    table("brokers", cols, b.map((r) => Object.assign({__key: r.addr}, r)), "no broker registered"),
    el("p", {class: "note"}, `name server ${data.namesrv}; refreshed every 5 s`),
  ];
}

async function pageTopics() {
  const showSystem = sessionStorage.getItem("showSystem") === "1";
  const rows = await api("/api/topics" + (showSystem ? "?system=1" : ""));
  const filter = sessionStorage.getItem("topicFilter") || "";
  const shown = rows.filter((r) => r.topic.toLowerCase().includes(filter.toLowerCase()))
    .sort((a, b) => a.topic.localeCompare(b.topic));
  const form = el("form", {class: "row card", id: "create-topic", onsubmit: async (ev) => {
    ev.preventDefault();
    const f = ev.target;
    try {
      await api("/api/topics", {json: {topic: f.topic.value.trim(), readQueues: +f.queues.value,
        writeQueues: +f.queues.value, perm: +f.perm.value}});
      showError(null);
      await render();
    } catch (e) { showError(e); }
  }},
  el("label", {}, "New topic", el("input", {name: "topic", required: true, placeholder: "TopicName"})),
  el("label", {}, "Queues", el("input", {name: "queues", type: "number", min: 1, max: 1024, value: 8})),
  el("label", {}, "Permission", el("select", {name: "perm"}, el("option", {value: 6}, "read + write"),
    el("option", {value: 4}, "read only"), el("option", {value: 2}, "write only"))),
  el("button", {type: "submit"}, "Create / update"));
  const search = el("input", {id: "topic-filter", placeholder: "filter", value: filter, oninput: (ev) => {
    sessionStorage.setItem("topicFilter", ev.target.value);
    render();
  }});
  const sys = el("input", {type: "checkbox", id: "show-system", checked: showSystem, onchange: (ev) => {
    sessionStorage.setItem("showSystem", ev.target.checked ? "1" : "0");
    render();
  }});
  return [
    title("Topics", refreshButton(render)), form,
    el("div", {class: "row"}, el("label", {}, "Filter", search), el("label", {}, "System topics", sys)),
    table("topics", [
      {key: "topic", label: "Topic", render: (r) => topicLink(r.topic)},
      {key: "kind", label: "Kind", render: (r) => badge(r.kind)},
      {key: "queues", label: "Queues", num: true},
      {key: "messages", label: "Messages", num: true},
      {key: "lastUpdated", label: "Last message", render: (r) => fmtTime(r.lastUpdated)},
    ], shown.map((r) => Object.assign({__key: r.topic}, r)), "no topic"),
  ];
}

async function pageTopic(name) {
  const d = await api("/api/topics/" + encodeURIComponent(name));
  return [
    title(`Topic ${d.topic}`, refreshButton(render)),
    el("div", {class: "stats"}, stat("topic-messages", "messages", d.messages),
      stat("topic-queues", "queues", d.queues.length),
      stat("topic-tps", "messages/s (last sample)", d.tps.length ? d.tps[d.tps.length - 1].tps : 0)),
    el("h3", {}, "TPS"), chart(d.tps),
    el("p", {class: "note"}, `sampled by the console every ${d.sampleIntervalSeconds} s while the topic is viewed`),
    el("h3", {}, "Route"),
    table("route", [{key: "brokerName", label: "Broker"}, {key: "readQueues", label: "Read queues", num: true},
      {key: "writeQueues", label: "Write queues", num: true}, {key: "perm", label: "Permission"}], d.route),
    el("h3", {}, "Queues"),
    table("queues", [{key: "brokerName", label: "Broker"}, {key: "queueId", label: "Queue", num: true},
      {key: "minOffset", label: "Min offset", num: true}, {key: "maxOffset", label: "Max offset", num: true},
      {key: "messages", label: "Messages", num: true},
      {key: "lastUpdated", label: "Last message", render: (r) => fmtTime(r.lastUpdated)}], d.queues),
    el("h3", {}, "Consumer groups"),
    d.consumerGroups.length ? el("ul", {id: "topic-groups"}, d.consumerGroups.map((g) => el("li", {}, groupLink(g))))
      : el("p", {class: "note"}, "no group consumes this topic"),
    el("p", {}, el("a", {href: "#/messages?topic=" + encodeURIComponent(d.topic)}, "Query messages of this topic")),
  ];
}

async function pageGroups() {
  const rows = (await api("/api/groups")).sort((a, b) => a.group.localeCompare(b.group));
  return [
    title("Consumer groups", refreshButton(render)),
    table("groups", [
      {key: "group", label: "Group", render: (r) => groupLink(r.group)},
      {key: "online", label: "State", render: (r) => badge(r.online ? "online" : "offline")},
      {key: "clients", label: "Clients", num: true},
      {key: "messageModel", label: "Model"}, {key: "consumeType", label: "Type"},
      {key: "topics", label: "Topics", render: (r) => r.topics.join(", ") || "-"},
      {key: "lag", label: "Lag", num: true, render: (r) => r.problems.length
        ? el("span", {class: "bad", title: r.problems.join("; ")}, `${fmtNum(r.lag)} (incomplete)`) : fmtNum(r.lag)},
      {key: "consumeTps", label: "Consumed / s", num: true},
      {key: "dlq", label: "", render: (r) => el("a", {href: "#/dlq/" + encodeURIComponent(r.group)}, "dead letters")},
    ], rows.map((r) => Object.assign({__key: r.group}, r)), "no consumer group"),
  ];
}

async function pageGroup(name) {
  const d = await api("/api/groups/" + encodeURIComponent(name));
  const topics = [...new Set(d.progress.map((p) => p.topic))].filter((t) => !t.startsWith("%RETRY%"));
  const conn = d.connection;
  const reset = el("form", {class: "row card", id: "reset-offset", onsubmit: async (ev) => {
    ev.preventDefault();
    const f = ev.target;
    const ts = toMs(f.when.value);
    if (!confirm(`Reset ${name} on ${f.topic.value} to ${fmtTime(ts)}?`)) return;
    try {
      const r = await api(`/api/groups/${encodeURIComponent(name)}/reset-offset`,
        {json: {topic: f.topic.value, timestamp: ts}});
      document.getElementById("reset-result").textContent =
        `reset ${r.offsets.length} queue(s): ` + r.offsets.map((o) => `${o.brokerName}/${o.queueId}→${o.offset}`).join(", ");
      showError(null);
    } catch (e) { showError(e); }
  }},
  el("label", {}, "Topic", el("select", {name: "topic"}, topics.map((t) => el("option", {value: t}, t)))),
  el("label", {}, "Consume again from", el("input", {name: "when", type: "datetime-local", step: 1,
    value: localInput(Date.now() - 3600 * 1000)})),
  el("button", {type: "submit", disabled: !topics.length}, "Reset offset"),
  el("span", {id: "reset-result", class: "note"}));
  return [
    title(`Consumer group ${d.group}`, refreshButton(render)),
    el("div", {class: "stats"}, stat("group-lag", "messages behind (lag)", d.lag),
      stat("group-tps", "consumed / s", d.consumeTps),
      stat("group-clients", "clients online", conn ? conn.connections.length : 0)),
    d.problems.length ? el("div", {class: "error", id: "group-problems"},
      "Not counted (a broker did not answer): ", d.problems.join("; ")) : null,
    el("h3", {}, "Progress per queue"),
    table("progress", [{key: "topic", label: "Topic", render: (r) => topicLink(r.topic)},
      {key: "brokerName", label: "Broker"}, {key: "queueId", label: "Queue", num: true},
      {key: "brokerOffset", label: "Broker offset", num: true},
      {key: "consumerOffset", label: "Consumer offset", num: true}, {key: "lag", label: "Lag", num: true},
      {key: "lastTimestamp", label: "Last consumed", render: (r) => fmtTime(r.lastTimestamp)}], d.progress,
    "no offsets yet"),
    el("h3", {}, "Connections"),
    conn ? table("connections", [{key: "clientId", label: "Client id"}, {key: "clientAddr", label: "Address"},
      {key: "language", label: "Language"}, {key: "version", label: "Version", num: true}], conn.connections)
      : el("p", {class: "note", id: "connections-empty"}, "no client of this group is online"),
    conn ? el("p", {class: "note"}, `${conn.messageModel} ${conn.consumeType}, from ${conn.consumeFromWhere};` +
      ` subscribes ${conn.subscriptions.join(", ")}`) : null,
    el("h3", {}, "Reset offset by time"), reset,
    el("p", {}, el("a", {href: "#/dlq/" + encodeURIComponent(d.group)}, "Dead letters of this group")),
  ];
}

function messageTable(msgs, id) {
  return table(id || "messages", [
    {key: "msgId", label: "Message id", render: (r) => el("a", {href: "#", "data-msgid": r.offsetMsgId,
      onclick: (ev) => { ev.preventDefault(); showMessage(r.offsetMsgId, r.topic); }}, r.msgId)},
    {key: "topic", label: "Topic"}, {key: "tags", label: "Tags"},
    {key: "keys", label: "Keys", render: (r) => r.keys.join(" ") || "-"},
    {key: "queue", label: "Queue", render: (r) => `${r.brokerName || "?"}/${r.queueId}@${r.queueOffset}`},
    {key: "storeTimestamp", label: "Stored", render: (r) => fmtTime(r.storeTimestamp)},
    {key: "body", label: "Body", render: (r) => r.body.length > 80 ? r.body.slice(0, 80) + "…" : r.body},
  ], msgs.map((m) => Object.assign({__key: m.offsetMsgId}, m)), "no message found");
}

async function showMessage(msgId, topic) {
  const box = document.getElementById("message-detail");
  try {
    const m = await api(`/api/messages/by-id?msgId=${encodeURIComponent(msgId)}` +
      (topic ? `&topic=${encodeURIComponent(topic)}` : ""));
    box.replaceChildren(el("h3", {}, `Message ${m.msgId}`),
      table("message-props", [{key: "k", label: "Field"}, {key: "v", label: "Value"}], [
        {k: "offset message id", v: m.offsetMsgId}, {k: "topic", v: m.topic},
        {k: "queue", v: `${m.brokerName}/${m.queueId}@${m.queueOffset}`}, {k: "born", v: `${fmtTime(m.bornTimestamp)} from ${m.bornHost}`},
        {k: "stored", v: `${fmtTime(m.storeTimestamp)} at ${m.storeHost}`}, {k: "reconsume times", v: m.reconsumeTimes},
        ...Object.entries(m.properties).map(([k, v]) => ({k, v}))]),
      el("h3", {}, "Delivery per consumer group"),
      table("delivery", [{key: "group", label: "Group", render: (r) => groupLink(r.group)},
        {key: "status", label: "Status", render: (r) => badge(r.status)},
        {key: "online", label: "Group", render: (r) => badge(r.online ? "online" : "offline")},
        {key: "consumerOffset", label: "Group offset", num: true}],
      m.delivery.map((d) => Object.assign({__key: d.group}, d)), "no consumer group for this topic"),
      el("h3", {}, `Body (${m.bodySize} bytes${m.bodyTruncated ? ", truncated" : ""})`), el("pre", {id: "message-body"}, m.body));
    showError(null);
  } catch (e) { showError(e); }
}

async function pageMessages(params) {
  const results = el("div", {id: "message-results"});
  const detail = el("div", {id: "message-detail", class: "card"});
  const topicInput = (name) => el("input", {name, required: true, value: params.get("topic") || "", placeholder: "topic"});
  const run = (fn) => async (ev) => {
    ev.preventDefault();
    try {
      const msgs = await fn(ev.target);
      results.replaceChildren(el("p", {class: "note", id: "result-count"}, `${msgs.length} message(s)`), messageTable(msgs));
      showError(null);
    } catch (e) { showError(e); results.replaceChildren(); }
  };
  const now = Date.now();
  return [
    title("Messages"),
    el("form", {class: "row card", id: "by-key", onsubmit: run((f) =>
      api(`/api/messages/by-key?topic=${encodeURIComponent(f.topic.value)}&key=${encodeURIComponent(f.key.value)}`))},
    el("label", {}, "Topic", topicInput("topic")), el("label", {}, "Key", el("input", {name: "key", required: true})),
    el("button", {type: "submit"}, "Find by key")),
    el("form", {class: "row card", id: "by-id", onsubmit: async (ev) => {
      ev.preventDefault();
      await showMessage(ev.target.msgId.value.trim(), ev.target.topic.value.trim());
    }},
    el("label", {}, "Message id (offset id, or unique key with a topic)", el("input", {name: "msgId", required: true, size: 34})),
    el("label", {}, "Topic (optional)", el("input", {name: "topic", value: params.get("topic") || ""})),
    el("button", {type: "submit"}, "Find by id")),
    el("form", {class: "row card", id: "by-time", onsubmit: run((f) =>
      api(`/api/messages/by-time?topic=${encodeURIComponent(f.topic.value)}&begin=${toMs(f.begin.value)}&end=${toMs(f.end.value)}`))},
    el("label", {}, "Topic", topicInput("topic")),
    el("label", {}, "From", el("input", {name: "begin", type: "datetime-local", step: 1, value: localInput(now - 3600000)})),
    el("label", {}, "To", el("input", {name: "end", type: "datetime-local", step: 1, value: localInput(now + 60000)})),
    el("button", {type: "submit"}, "Find by time")),
    results, detail,
  ];
}

async function pageDlq(group) {
  const groups = (await api("/api/groups")).map((g) => g.group).sort();
  const pick = el("form", {class: "row card", id: "dlq-pick", onsubmit: (ev) => {
    ev.preventDefault();
    location.hash = "#/dlq/" + encodeURIComponent(ev.target.group.value);
  }}, el("label", {}, "Consumer group", el("select", {name: "group"},
    groups.map((g) => el("option", {value: g, selected: g === group}, g)))), el("button", {type: "submit"}, "Show"));
  if (!group) return [title("Dead letters"), pick, el("p", {class: "note"}, "pick a consumer group")];
  const d = await api("/api/dlq/" + encodeURIComponent(group));
  const target = el("select", {id: "resend-target"}, el("option", {value: "retry"}, "this group's retry topic"),
    el("option", {value: "topic"}, "the original topic (every group)"));
  const out = el("p", {class: "note", id: "resend-result"});
  const rows = d.messages.map((m) => Object.assign({__key: m.offsetMsgId}, m));
  return [
    title(`Dead letters of ${group}`, refreshButton(render)), pick,
    el("div", {class: "stats"}, stat("dlq-total", `messages in ${d.topic}`, d.total)),
    d.note ? el("p", {class: "note"}, d.note) : null,
    el("div", {class: "row"}, el("label", {}, "Resend to", target)), out,
    table("dlq", [
      {key: "msgId", label: "Message id"}, {key: "originalTopic", label: "Original topic",
        render: (r) => r.properties.RETRY_TOPIC || "-"},
      {key: "keys", label: "Keys", render: (r) => r.keys.join(" ") || "-"},
      {key: "reconsumeTimes", label: "Tries", num: true},
      {key: "storeTimestamp", label: "Dead since", render: (r) => fmtTime(r.storeTimestamp)},
      {key: "body", label: "Body", render: (r) => r.body.length > 60 ? r.body.slice(0, 60) + "…" : r.body},
      {key: "resend", label: "", render: (r) => el("button", {type: "button", class: "resend",
        "data-msgid": r.offsetMsgId, onclick: async (ev) => {
          ev.target.disabled = true;
          try {
            const res = await api(`/api/dlq/${encodeURIComponent(group)}/resend`,
              {json: {msgId: r.offsetMsgId, target: target.value}});
            out.textContent = `resent ${r.msgId} to ${res.topic} as ${res.msgId} (${res.status})`;
            showError(null);
          } catch (e) { showError(e); ev.target.disabled = false; }
        }}, "Resend")},
    ], rows, "no dead letter"),
  ];
}

async function pageController() {
  const d = await api("/api/controller");
  const parts = [title("Controller", refreshButton(render))];
  if (!d.controllers.length) {
    parts.push(el("p", {class: "note", id: "no-controllers"},
      "no controller configured (start the console with --controllers host:port, or controllers: in its config); " +
      "what the brokers report:"));
  } else {
    parts.push(table("controllers", [{key: "addr", label: "Controller"}, {key: "group", label: "Raft group"},
      {key: "isLeader", label: "Role", render: (r) => r.error ? badge("dead") : badge(r.isLeader ? "leader" : "follower",
        r.isLeader ? "MASTER" : "SLAVE")},
      {key: "leaderAddress", label: "Leader it knows"}, {key: "peers", label: "Peers"},
      {key: "error", label: "Error"}], d.controllers.map((r) => Object.assign({__key: r.addr}, r))));
    if (d.error) parts.push(el("p", {class: "error"}, d.error));
    parts.push(el("h3", {}, "SyncStateSets"), table("sync-state", [{key: "brokerName", label: "Broker"},
      {key: "masterBrokerId", label: "Master id", num: true}, {key: "masterAddress", label: "Master"},
      {key: "masterEpoch", label: "Master epoch", num: true}, {key: "syncStateSetEpoch", label: "Set epoch", num: true},
      {key: "inSync", label: "In sync", render: (r) => r.inSync.map((x) => `${x.brokerId}@${x.addr}${x.alive ? "" : " (dead)"}`).join(", ") || "-"},
      {key: "notInSync", label: "Not in sync", render: (r) => r.notInSync.map((x) => `${x.brokerId}@${x.addr}${x.alive ? "" : " (dead)"}`).join(", ") || "-"},
    ], d.syncStateSets.map((r) => Object.assign({__key: r.brokerName}, r)),
    "no SyncStateSet (brokers not in controller mode?)"));
  }
  parts.push(el("h3", {}, "Brokers"), table("controller-brokers", [{key: "brokerName", label: "Broker"},
    {key: "BID", label: "ID", num: true}, {key: "addr", label: "Address"}, {key: "role", label: "Role", render: (r) => badge(r.role)},
    {key: "epoch", label: "Epoch"}, {key: "syncStateSet", label: "SyncStateSet (ids)"},
    {key: "actingMaster", label: "Acting master"}], d.brokers.map((r) => Object.assign({__key: r.addr}, r))));
  return parts;
}

// ---- router --------------------------------------------------------------------------------------------------
const AUTO_REFRESH = new Set(["cluster", "topic", "group", "controller"]);

async function render() {
  const seq = ++renderSeq;
  clearTimeout(refreshTimer);
  const hash = location.hash || "#/cluster";
  const [pathPart, query] = hash.slice(2).split("?");
  const [page, ...rest] = pathPart.split("/");
  const arg = rest.length ? decodeURIComponent(rest.join("/")) : null;
  const params = new URLSearchParams(query || "");
  for (const a of document.querySelectorAll("#nav a")) {
    const p = a.dataset.page;
    a.classList.toggle("active", p === page || (p === "topics" && page === "topic") || (p === "groups" && page === "group"));
  }
  const pages = {cluster: pageCluster, topics: pageTopics, topic: () => pageTopic(arg), groups: pageGroups,
    group: () => pageGroup(arg), messages: () => pageMessages(params), dlq: () => pageDlq(arg), controller: pageController};
  const fn = pages[page] || pageCluster;
  try {
    const nodes = await fn();
    if (seq !== renderSeq) return;  // a newer render started meanwhile
    const focused = document.activeElement && document.activeElement.id;
    view.replaceChildren(...nodes.filter((n) => n));
    view.dataset.page = page;
    view.dataset.loaded = String(Date.now());
    if (focused) { const f = document.getElementById(focused); if (f) f.focus(); }
    showError(null);
  } catch (e) {
    if (seq === renderSeq) showError(e);
  }
  if (AUTO_REFRESH.has(page) && seq === renderSeq) refreshTimer = setTimeout(autoRefresh, 5000);
}

function autoRefresh() {  // never re-render under the user's cursor (a form being filled in)
  const a = document.activeElement;
  if (a && view.contains(a) && ["INPUT", "SELECT", "TEXTAREA"].includes(a.tagName)) {
    refreshTimer = setTimeout(autoRefresh, 5000);
    return;
  }
  render();
}

async function boot() {
  try {
    const s = await api("/api/session");
    document.getElementById("namesrv").textContent = "name server " + s.namesrv;
    if (s.loginRequired) {
      if (!s.user) { location.href = "/login"; return; }
      document.getElementById("user").textContent = "· " + s.user;
      const out = document.getElementById("logout");
      out.hidden = false;
      out.addEventListener("click", async () => { await api("/api/logout", {json: {}}); location.href = "/login"; });
    }
  } catch (e) { showError(e); }
  window.addEventListener("hashchange", render);
  await render();
}

boot();

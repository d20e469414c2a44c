// gpubroker dashboard: polls the JSON API with the token kept in this tab's
// sessionStorage and redraws. No framework, nothing loaded from elsewhere.
"use strict";

const REFRESH_MS = 5000;
const SERIES_WINDOW = "30m";
const KEY = "gpubroker.token";
const SIDE_NAMES = { yarn: "YARN", k8s: "Kubernetes", none: "Unassigned" };

let timer = null;

function $(sel) { return document.querySelector(sel); }

// el builds an element; text children are set as text, never as HTML.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "title") e.title = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function token() { return sessionStorage.getItem(KEY) || ""; }

// api calls the JSON API. opts: method, body (sent as JSON) and ifMatch
// (a version, sent as the ETag If-Match asks for). A failed call throws an
// Error with the API's message, its status and its body.
async function api(path, opts) {
  opts = opts || {};
  const headers = { Authorization: "Bearer " + token() };
  const init = { method: opts.method || "GET", headers: headers };
  if (opts.body !== undefined) { headers["Content-Type"] = "application/json"; init.body = JSON.stringify(opts.body); }
  if (opts.ifMatch !== undefined) headers["If-Match"] = '"' + opts.ifMatch + '"';
  const res = await fetch("/api/v1" + path, init);
  if (res.status === 401) throw Object.assign(new Error("unauthorized"), { auth: true });
  const text = await res.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (e) { body = null; }
  if (!res.ok) {
    const msg = (body && body.error && body.error.message) || res.statusText;
    throw Object.assign(new Error(msg), { status: res.status, body: body });
  }
  return body;
}

// NODE_PAGE is the page size the dashboard reads /nodes in: the API's
// largest (its default is 500).
const NODE_PAGE = 1000;

// apiAll reads every page of a paged list (path with a query), following
// next, and returns the items. A tick between two pages may move a node
// across them; each node still shows once, since pages go by name.
async function apiAll(path) {
  let items = [], next = "";
  for (let i = 0; i < 200; i++) { // 200,000 nodes: beyond any pool's bound
    const page = await api(path + (next ? "&after=" + encodeURIComponent(next) : ""));
    items = items.concat(page.items);
    next = page.next || "";
    if (!next) break;
  }
  return items;
}

// me is the signed-in token (GET /whoami): its role decides which actions
// the dashboard offers; the API decides what is allowed.
let me = { role: "viewer", tenant: "" };
function isAdmin() { return me.role === "admin"; }
// scope is the one tenant a tenant-admin sees; "" for everyone else.
function scope() { return me.role === "tenant-admin" ? me.tenant : ""; }
// otherTenants are the tenants a tenant-admin must not see named: their
// names in reasons and victims read "another tenant".
let otherTenants = [];
function redact(text) {
  if (!scope() || !text) return text;
  let out = String(text);
  for (const n of otherTenants) out = out.replace(new RegExp("\\b" + n.replace(/[-.]/g, "\\$&") + "\\b", "g"), "another tenant");
  return out;
}
// A tenant-admin may change none of a tenant's fields today (each ranks or
// sizes its tenant against the others, or claims work: api/scope.go's
// tenantFieldRules), so only admins are offered the edit.
function mayEditTenant(name) { return isAdmin(); }

// say writes an outcome under an action: ok or bad.
function say(sel, text, kind) {
  const m = $(sel);
  m.textContent = text;
  m.className = "msg " + (kind || "");
}

// whoChanged asks the audit trail who last changed target, for a 412:
// the error body's changed_by when the API sends it, else the newest
// successful entry of GET /audit (admins and tenant-admins).
async function whoChanged(err, target) {
  const cb = err.body && err.body.error && err.body.error.changed_by;
  if (cb) return " Changed by " + cb.actor + (cb.at ? " at " + fmtTime(cb.at) : "") + ".";
  try {
    const a = await api("/audit?target=" + encodeURIComponent(target) + "&limit=20");
    const e = (a.items || []).find(x => x.status >= 200 && x.status < 300);
    if (e) return " Changed by " + e.actor + " at " + fmtTime(e.at) + ".";
  } catch (e) { /* no audit trail on this server */ }
  return "";
}

function fmtWait(s) {
  if (s < 60) return Math.round(s) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m " + String(Math.round(s % 60)).padStart(2, "0") + "s";
  return Math.floor(s / 3600) + "h " + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
}

function fmtTime(t) {
  const d = new Date(t);
  return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

function bar(parts, total) {
  const b = el("div", { class: "bar" });
  for (const [cls, n] of parts) {
    if (n > 0 && total > 0) {
      const s = el("span", { class: cls, title: cls + ": " + n });
      s.style.width = (100 * n / total) + "%";
      b.append(s);
    }
  }
  return b;
}

function replaceRows(tbody, rows, empty, cols) {
  tbody.replaceChildren(...(rows.length ? rows : [el("tr", { class: "empty" }, el("td", { colspan: String(cols), class: "muted" }, empty))]));
}

function renderSides(cap, pending) {
  const cards = [];
  let total = { gpus_total: 0, gpus_busy: 0, gpus_idle: 0, gpus_in_flight: 0, nodes: 0 };
  for (const s of cap.sides) {
    for (const k of Object.keys(total)) total[k] += s[k];
    cards.push(card(SIDE_NAMES[s.side] || s.side, s.side, s));
  }
  const all = card("All GPUs", "total", total);
  all.append(el("div", { class: "detail" }, pending.total + " GPUs of demand pending"));
  $("#sides").replaceChildren(all, ...cards);
}

function card(label, cls, s) {
  return el("div", { class: "card c-" + cls, "data-side": cls },
    el("div", { class: "label" }, label),
    el("div", { class: "big" }, s.gpus_busy + " / " + s.gpus_total, el("span", { class: "muted" }, " GPUs busy")),
    el("div", { class: "detail" }, s.gpus_idle + " idle · " + s.gpus_in_flight + " in flight · " + s.nodes + " nodes"),
    bar([["busy", s.gpus_busy], ["idle", s.gpus_idle], ["inflight", s.gpus_in_flight]], s.gpus_total));
}

function renderPools(cap) {
  const rows = cap.pools.map(p => {
    const side = p.gpus_by_side || {};
    const bySide = bar([["yarn", side.yarn || 0], ["k8s", side.k8s || 0], ["none", side.none || 0]], p.gpus_total);
    const sideText = ["yarn", "k8s", "none"].filter(k => side[k]).map(k => SIDE_NAMES[k] + " " + side[k]).join(" · ") || "no GPUs";
    const name = el("td", {}, p.name);
    const fleet = p.provider === "fleet";
    if (fleet) name.append(" ", el("span", { class: "tag fleet" }, "fleet"));
    if (p.backoff_reason) name.append(el("div", { class: "muted" }, "backs off: " + p.backoff_reason));
    if (p.hand_overs_24h) name.append(el("div", { class: "muted" }, p.hand_overs_24h + " hand-overs in 24 h"));
    if (p.idle && p.idle.length) {
      const i = p.idle[0];
      name.append(el("div", { class: "muted" }, p.idle.length + " idle; longest: " + i.node + " on " +
        (SIDE_NAMES[i.side] || i.side) + " for " + fmtWait(i.idle_seconds)));
    }
    if (p.missing_hosts && p.missing_hosts.length) {
      name.append(el("div", { class: "muted missing" }, "listed by neither side: " + p.missing_hosts.join(", ")));
    }
    return el("tr", {},
      name,
      el("td", {}, p.gpus_per_node ? p.gpus_per_node + "× " + (p.gpu_model || "GPU") : "CPU"),
      el("td", { class: "num" }, p.nodes + (p.nodes_in_flight ? " (+" + p.nodes_in_flight + " in flight)" : "")),
      el("td", { class: "num" }, fleet ? "owned, " + p.max_nodes : p.min_nodes + "–" + p.max_nodes),
      el("td", {}, el("div", { class: "muted" }, sideText), bySide),
      el("td", { class: "num" }, p.gpus_busy + "/" + p.gpus_total));
  });
  replaceRows($("#pools tbody"), rows, "no pools", 6);
}

function renderNodes(nodes) {
  const tiles = nodes.map(n => {
    const cls = ["node", n.owner];
    if (n.in_flight) cls.push("inflight");
    if (!n.healthy) cls.push("unhealthy");
    const gpus = el("div", { class: "gpus" });
    for (let i = 0; i < n.gpus_total; i++) gpus.append(el("i", { class: i < n.gpus_allocated ? "on" : "" }));
    const util = n.utilisation >= 0 ? Math.round(n.utilisation * 100) + "%" : "n/a";
    const title = n.name + "\nowner " + n.owner + ", " + n.phase + "\n" + n.gpus_allocated + "/" + n.gpus_total +
      " GPUs allocated, " + util + (n.protected ? "\nprotected from scale-down" : "") + (n.healthy ? "" : "\nunhealthy: " + n.health_reason);
    if (n.name === selectedNode) cls.push("selected");
    return el("div", { class: cls.join(" "), title: title, "data-node": n.name, "data-owner": n.owner, tabindex: "0" },
      el("div", { class: "name" }, n.name),
      el("div", {}, n.phase + (n.protected ? " · protected" : "")),
      el("div", {}, n.in_flight ? "GPUs on the way" : n.gpus_allocated + "/" + n.gpus_total + " GPU · " + util),
      gpus);
  });
  $("#nodes").replaceChildren(...(tiles.length ? tiles : [el("p", { class: "muted" }, "no nodes")]));
  $("#node-count").textContent = nodes.length + " nodes";
}

function reasonTag(r) { return el("span", { class: "tag " + (r || "none") }, r || "not planned yet"); }

// pendingOf is the one source of truth for "pending" on this page: one
// read of the ledger (GET /demand, a tenant-admin's tenant only) gives the
// list, the groups by tenant, priority and reason, the GPUs per tenant and
// the total, so every panel counts the same demand at the same moment.
// (Before, the groups and the total came from /capacity, read and cached
// at another moment than the list: with demand that lives about a tick,
// "4 GPUs pending" sat next to "nothing waits".) Only when the ledger
// holds more than one page does it take the server's groups, and says so.
function pendingOf(page, cap) {
  const sc = scope();
  let groups;
  if (!page.next) {
    const m = new Map();
    for (const d of page.items) {
      const k = d.tenant + "\u0000" + d.priority + "\u0000" + (d.wait_reason || "");
      let g = m.get(k);
      if (!g) m.set(k, g = { tenant: d.tenant, priority: d.priority, wait_reason: d.wait_reason || "", count: 0, gpus: 0, oldest_wait_seconds: 0 });
      g.count++;
      g.gpus += d.gpus_per_unit * d.units;
      g.oldest_wait_seconds = Math.max(g.oldest_wait_seconds, d.wait_seconds);
    }
    groups = [...m.values()].sort((a, b) => a.tenant.localeCompare(b.tenant) || b.priority - a.priority || a.wait_reason.localeCompare(b.wait_reason));
  } else {
    groups = cap.demand.filter(g => !sc || g.tenant === sc);
  }
  const byTenant = new Map();
  let total = 0;
  for (const g of groups) {
    total += g.gpus;
    byTenant.set(g.tenant, (byTenant.get(g.tenant) || 0) + g.gpus);
  }
  return { items: page.items, groups: groups, total: total, byTenant: byTenant, partial: Boolean(page.next), at: cap.at };
}

function renderDemandGroups(pending) {
  const rows = pending.groups.map(g => el("tr", {},
    el("td", {}, g.tenant),
    el("td", { class: "num" }, g.priority),
    el("td", { class: "num" }, g.count),
    el("td", { class: "num" }, g.gpus),
    el("td", { class: "num" }, fmtWait(g.oldest_wait_seconds)),
    el("td", {}, reasonTag(g.wait_reason))));
  replaceRows($("#demand-groups tbody"), rows, "no pending demand", 6);
  $("#pending-total").textContent = pending.total + " GPUs pending" + (pending.partial ? " (over 1000 demands: groups from the server's summary)" : "");
}

function renderDemand(pending) {
  const rows = pending.items.slice(0, 12).map(d => el("tr", {},
    el("td", { title: d.source + "/" + d.key }, (d.source === "yarn" ? "YARN " : "k8s ") + (d.name || d.key)),
    el("td", {}, d.tenant),
    el("td", { class: "num" }, d.gpus_per_unit * d.units),
    el("td", { class: "num" }, fmtWait(d.wait_seconds)),
    el("td", { class: "reason" }, reasonTag(d.wait_reason), " ", redact(d.wait_detail || ""), " ",
      el("button", { type: "button", class: "link", "data-why": d.source + "/" + d.key }, "history"))));
  if (pending.items.length > 12) {
    rows.push(el("tr", { class: "more" }, el("td", { colspan: "5", class: "muted" }, "and " + (pending.items.length - 12) + " more")));
  }
  replaceRows($("#demand tbody"), rows, "nothing waits", 5);
}

// showWhy prints a demand's history (GET /demand/{id}/why) under the list.
async function showWhy(id) {
  const box = $("#why-box");
  box.hidden = false;
  box.replaceChildren(el("p", { class: "muted" }, "loading the history of " + id + "…"));
  try {
    const w = await api("/demand/" + encodeURIComponent(id) + "/why");
    const parts = [];
    for (const d of w.demands) {
      parts.push(el("p", {}, el("strong", {}, d.name || d.id), " · tenant " + d.tenant + " · " +
        (d.state === "closed" ? "closed (" + d.close_reason + ") after " + fmtWait(d.waited_seconds || 0) : "pending " + fmtWait(d.wait_seconds || 0) + ": " + (d.wait_reason || "not planned yet"))));
      const ul = el("ul", {});
      for (const x of d.decisions) ul.append(el("li", {}, fmtTime(x.at) + " ", el("span", { class: "tag " + x.kind }, x.kind), " " + redact(x.reason)));
      if (!d.decisions.length) ul.append(el("li", { class: "muted" }, "no decisions recorded yet"));
      parts.push(ul);
    }
    box.replaceChildren(...parts, el("button", { type: "button", class: "link", "data-act": "close-why" }, "close"));
  } catch (err) {
    if (err.auth) { signOut("The token was refused; paste a valid one."); return; }
    box.replaceChildren(el("p", { class: "error" }, "no history for " + id + ": " + err.message));
  }
}

function renderDecisions(page) {
  const rows = page.items.slice(0, 10).map(d => el("tr", {},
    el("td", {}, fmtTime(d.at)),
    el("td", {}, el("span", { class: "tag " + d.kind }, d.kind)),
    el("td", {}, d.node || d.pool || d.demand || ""),
    el("td", { class: "reason" }, redact(d.reason))));
  replaceRows($("#decisions tbody"), rows, "no decisions yet", 4);
}

// renderOps lists open ops, then recently failed ones with why they ended.
// refreshAudit shows the latest writes to admins and tenant-admins (a
// tenant-admin sees its tenant's); for other roles the panel stays hidden.
async function refreshAudit() {
  let page;
  try { page = await api("/audit?limit=10"); } catch (err) { $("#audit-panel").hidden = true; return; }
  $("#audit-panel").hidden = false;
  const rows = page.items.map(a => el("tr", {},
    el("td", {}, fmtTime(a.at)),
    el("td", { title: a.actor_kind }, a.actor + (a.role ? " (" + a.role + ")" : "")),
    el("td", {}, a.method + " " + a.route),
    el("td", {}, a.target || ""),
    el("td", { class: "num" }, a.status)));
  replaceRows($("#audit tbody"), rows, "no changes recorded", 5);
}

// ownDemand keeps, for a tenant-admin, only what serves its tenant's
// pending demand (ops and planned actions name demand, not tenants).
function ownDemand(xs) {
  if (!scope()) return xs;
  if (!lastPending) return [];
  const mine = new Set(lastPending.items.map(d => d.source + "/" + d.key));
  return xs.filter(x => (x.serves || []).some(id => mine.has(id)) || mine.has(x.demand));
}

function renderOps(open, failed) {
  open = { items: ownDemand(open.items) };
  failed = { items: ownDemand(failed.items) };
  const rows = open.items.concat(failed.items).slice(0, 20).map(o => el("tr", {},
    el("td", { class: "num" }, "#" + o.id),
    el("td", {}, el("span", { class: "tag " + o.kind }, o.kind)),
    el("td", {}, o.node || o.pool || ""),
    el("td", {}, el("span", { class: "tag " + (o.state === "failed" ? "bad" : o.state) }, o.state)),
    el("td", {}, o.step || ""),
    el("td", { class: "num" }, o.attempts),
    el("td", { class: "reason" }, redact(o.last_error ? o.reason + " — " + o.last_error : o.reason)),
    el("td", {}, fmtTime(o.updated_at))));
  replaceRows($("#ops tbody"), rows, "no open or failed operations", 8);
  $("#ops-summary").textContent = open.items.length + " open · " + failed.items.length + " recently failed, with why they ended";
}

// chart draws stacked areas (busy, idle, in flight) and the pending demand
// line of one side as SVG.
function chart(container, points, side) {
  const W = Math.max(container.clientWidth, 200), H = 150, L = 30, R = 6, T = 8, B = 18;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  svg.setAttribute("role", "img");
  svg.setAttribute("data-points", String(points.length));
  const mk = (tag, attrs) => { const e = document.createElementNS(ns, tag); for (const k in attrs) e.setAttribute(k, attrs[k]); svg.append(e); return e; };
  const vals = points.map(p => {
    const s = p.sides[side] || { gpus_busy: 0, gpus_idle: 0, gpus_in_flight: 0, gpus_pending: 0 };
    return { t: new Date(p.at).getTime(), busy: s.gpus_busy, idle: s.gpus_idle, fly: s.gpus_in_flight, pend: s.gpus_pending };
  });
  if (vals.length < 2) {
    const t = mk("text", { x: W / 2, y: H / 2, "text-anchor": "middle" });
    t.textContent = "waiting for samples…";
    container.replaceChildren(svg);
    return;
  }
  const t0 = vals[0].t, t1 = vals[vals.length - 1].t;
  let ymax = 1;
  for (const v of vals) ymax = Math.max(ymax, v.busy + v.idle + v.fly, v.pend);
  ymax = Math.ceil(ymax * 1.1);
  const x = t => L + (W - L - R) * (t - t0) / Math.max(1, t1 - t0);
  const y = v => T + (H - T - B) * (1 - v / ymax);
  for (const f of [0, 0.5, 1]) {
    const v = Math.round(ymax * f);
    mk("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#e1e6eb" });
    mk("text", { x: L - 4, y: y(v) + 3, "text-anchor": "end" }).textContent = v;
  }
  mk("text", { x: L, y: H - 4 }).textContent = fmtTime(t0);
  mk("text", { x: W - R, y: H - 4, "text-anchor": "end" }).textContent = fmtTime(t1);
  const layers = [["busy", v => v.busy, "#2f8f5b"], ["idle", v => v.busy + v.idle, "#b9d9c6"], ["inflight", v => v.busy + v.idle + v.fly, "#f2c14e"]];
  let lower = () => 0;
  for (const [name, upper, colour] of layers) {
    const top = vals.map(v => x(v.t) + "," + y(upper(v)));
    const bottom = vals.slice().reverse().map(v => x(v.t) + "," + y(lower(v)));
    mk("polygon", { points: top.concat(bottom).join(" "), fill: colour, "data-layer": name });
    lower = upper;
  }
  mk("polyline", { points: vals.map(v => x(v.t) + "," + y(v.pend)).join(" "), fill: "none", stroke: "#d3455b", "stroke-width": 2, "data-layer": "pending" });
  container.replaceChildren(svg);
}

const TENANT_COLOURS = ["#326ce5", "#e08a1e", "#2f8f5b", "#9b59b6", "#d3455b", "#16a2b8", "#8d6e63", "#7f8c8d"];

// tenantPoints is pending demand GPUs by tenant at every step of the
// series window: steps without demand are zero (the API lists only steps
// that had some, so short-lived demand left the chart empty), and the
// newest point is the live read the tables show.
function tenantPoints(series, pending) {
  const sc = scope();
  const step = Math.max(1, series.step_seconds || 30) * 1000;
  const from = new Date(series.from).getTime(), to = new Date(series.to).getTime();
  const byTime = new Map();
  for (let t = Math.floor(from / step) * step + step; t <= to; t += step) byTime.set(t, new Map());
  for (const d of series.demand || []) {
    if (sc && d.tenant !== sc) continue;
    const t = new Date(d.at).getTime();
    if (!byTime.has(t)) byTime.set(t, new Map());
    const m = byTime.get(t);
    m.set(d.tenant, (m.get(d.tenant) || 0) + d.gpus);
  }
  if (pending) byTime.set(Math.max(to, new Date(pending.at).getTime()), new Map(pending.byTenant));
  return byTime;
}

// tenantChart stacks pending demand GPUs by tenant (all priorities) over
// time, the largest tenants first; beyond seven, the rest are "others".
function tenantChart(container, legend, byTime) {
  const W = Math.max(container.clientWidth, 200), H = 150, L = 30, R = 6, T = 8, B = 18;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  svg.setAttribute("role", "img");
  const mk = (tag, attrs) => { const e = document.createElementNS(ns, tag); for (const k in attrs) e.setAttribute(k, attrs[k]); svg.append(e); return e; };
  const totals = new Map();
  const times = [...byTime.keys()].sort((a, b) => a - b);
  for (const m of byTime.values()) for (const [tn, v] of m) if (v > 0) totals.set(tn, (totals.get(tn) || 0) + v);
  let tenants = [...totals.keys()].sort((a, b) => totals.get(b) - totals.get(a) || a.localeCompare(b));
  if (tenants.length > 8) tenants = tenants.slice(0, 7).concat(["others"]);
  const val = (t, tenant) => {
    const m = byTime.get(t);
    if (tenant !== "others") return m.get(tenant) || 0;
    let s = 0;
    for (const [k, v] of m) if (!tenants.slice(0, 7).includes(k)) s += v;
    return s;
  };
  svg.setAttribute("data-points", String(tenants.length ? times.length : 0));
  legend.replaceChildren(...tenants.map((tn, i) => {
    const sw = el("i", { class: "sw" });
    sw.style.background = TENANT_COLOURS[i % 8]; // CSSOM, allowed by the CSP; a style attribute is not
    return el("span", {}, sw, tn);
  }));
  if (times.length < 2 || tenants.length === 0) {
    mk("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }).textContent = "no pending demand in this window";
    container.replaceChildren(svg);
    return;
  }
  const t0 = times[0], t1 = times[times.length - 1];
  const stack = times.map(t => { let acc = 0; return tenants.map(tn => (acc += val(t, tn))); });
  const ymax = Math.max(1, Math.ceil(Math.max(...stack.map(s => s[s.length - 1] || 0)) * 1.1));
  const x = t => L + (W - L - R) * (t - t0) / Math.max(1, t1 - t0);
  const y = v => T + (H - T - B) * (1 - v / ymax);
  for (const f of [0, 0.5, 1]) {
    const v = Math.round(ymax * f);
    mk("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#e1e6eb" });
    mk("text", { x: L - 4, y: y(v) + 3, "text-anchor": "end" }).textContent = v;
  }
  mk("text", { x: L, y: H - 4 }).textContent = fmtTime(t0);
  mk("text", { x: W - R, y: H - 4, "text-anchor": "end" }).textContent = fmtTime(t1);
  tenants.forEach((tn, i) => {
    const top = times.map((t, j) => x(t) + "," + y(stack[j][i]));
    const bottom = times.map((t, j) => x(t) + "," + y(i ? stack[j][i - 1] : 0)).reverse();
    mk("polygon", { points: top.concat(bottom).join(" "), fill: TENANT_COLOURS[i % 8], "data-layer": tn, opacity: 0.85 });
  });
  container.replaceChildren(svg);
}

// tenants are the tenants as last read (name → tenant with its version),
// the versions edits are based on.
let tenants = new Map();
let editing = null;
let policy = null;
let selectedNode = null;

function renderTenants(list, pending) {
  const sc = scope();
  tenants = new Map();
  otherTenants = sc ? list.items.map(t => t.name).filter(n => n !== sc).sort((a, b) => b.length - a.length) : [];
  const rows = [];
  for (const t of list.items) {
    if (sc && t.name !== sc) continue; // a tenant-admin sees its own tenant only
    tenants.set(t.name, t);
    const where = (t.yarn_queues || []).concat(t.namespaces || []).join(", ");
    rows.push(el("tr", { "data-tenant": t.name },
      el("td", {}, t.name),
      el("td", { class: "num" }, t.guaranteed_gpus || 0),
      el("td", { class: "num" }, t.max_gpus),
      el("td", { class: "num" }, t.weight),
      el("td", { class: "num" }, pending.byTenant.get(t.name) || 0),
      el("td", { class: "muted" }, where),
      el("td", {}, mayEditTenant(t.name) ? el("button", { type: "button", "data-edit": t.name }, "Edit") : "")));
  }
  replaceRows($("#tenants tbody"), rows, "no tenants", 7);
  $("#tenant-scope").textContent = sc ? "your tenant (" + sc + ")" : list.items.length + " tenants";
}

function editTenant(name) {
  const t = tenants.get(name);
  if (!t) return;
  const f = $("#tenant-form");
  f.dataset.tenant = name;
  editing = t; // the edit is based on this version, whatever refreshes bring
  $("#tenant-form-name").textContent = name + " (version " + t.version + ")";
  f.elements.guaranteed_gpus.value = t.guaranteed_gpus || 0;
  f.elements.max_gpus.value = t.max_gpus;
  f.elements.weight.value = t.weight;
  f.hidden = false;
  say("#tenant-msg", "");
}

// saveTenant writes changes (quota and weight) over the tenant as read,
// with If-Match on the version read: an edit made meanwhile by someone
// else is a 412, shown with who made it, never overwritten.
async function saveTenant(name, changes) {
  let cur = editing && editing.name === name ? editing : tenants.get(name);
  try {
    if (!cur) cur = await api("/tenants/" + encodeURIComponent(name));
    const body = Object.assign({}, cur, changes);
    delete body.version;
    delete body.captures; // what the last save's claims took: not a field
    delete body.parent_claims;
    for (const k of Object.keys(body)) if (body[k] === null) delete body[k]; // the API refuses nulls
    const updated = await api("/tenants/" + encodeURIComponent(name), { method: "PUT", body: body, ifMatch: cur.version });
    tenants.set(name, updated);
    editing = null;
    $("#tenant-form").hidden = true;
    say("#tenant-msg", "saved tenant " + name + ": guaranteed " + (updated.guaranteed_gpus || 0) + ", max " + updated.max_gpus +
      " GPUs, weight " + updated.weight + " (version " + updated.version + ")", "ok");
    refresh();
  } catch (err) {
    if (err.auth) { signOut("The token was refused; paste a valid one."); return; }
    let msg = "not saved: " + err.message;
    if (err.status === 412) msg += await whoChanged(err, "tenant/" + name) + " Reload to see the current values.";
    say("#tenant-msg", msg, "bad");
  }
}

const POLICY_ROWS = [["cluster_max_gpus", "cluster max GPUs"], ["scale_down_unneeded", "scale-down unneeded time"],
  ["scale_down_utilisation", "scale-down utilisation"], ["expander", "expander"], ["preemption", "preemption"],
  ["ownership_transfer", "ownership transfer"], ["max_provision_time", "max provision time"], ["drain_timeout", "drain timeout"],
  ["consolidation_migrate", "migration"], ["consolidation_max_migrations_per_hour", "max migrations per hour"]];

function renderPolicy(p) {
  policy = p;
  // Fields the API leaves out when unset: migration is off, the budget
  // the server's default.
  const unset = { consolidation_migrate: "off", consolidation_max_migrations_per_hour: "default" };
  const rows = POLICY_ROWS.map(([k, label]) => el("tr", {}, el("td", { class: "muted" }, label),
    el("td", { "data-field": k }, p[k] === undefined || p[k] === "" ? (unset[k] || "") : String(p[k]))));
  replaceRows($("#policy tbody"), rows, "no policy", 2);
  $("#policy-version").textContent = "version " + p.version;
  $("#policy-edit").hidden = !isAdmin() || !$("#policy-form").hidden;
}

function editPolicy() {
  const f = $("#policy-form");
  for (const k of ["cluster_max_gpus", "scale_down_unneeded", "scale_down_utilisation", "expander"]) f.elements[k].value = policy[k];
  f.elements.preemption.checked = Boolean(policy.preemption);
  f.elements.ownership_transfer.checked = Boolean(policy.ownership_transfer);
  f.dataset.version = String(policy.version);
  f.hidden = false;
  $("#policy-edit").hidden = true;
  say("#policy-msg", "");
}

// savePolicy patches the fields the form changed, with If-Match on the
// version the form was filled from.
async function savePolicy(changes, version) {
  try {
    const updated = await api("/policy", { method: "PATCH", body: changes, ifMatch: version });
    $("#policy-form").hidden = true;
    renderPolicy(updated);
    say("#policy-msg", "saved the policy (version " + updated.version + ")", "ok");
  } catch (err) {
    if (err.auth) { signOut("The token was refused; paste a valid one."); return; }
    let msg = "not saved: " + err.message;
    if (err.status === 412) msg += await whoChanged(err, "policy") + " Reload to see the current values.";
    say("#policy-msg", msg, "bad");
  }
}

function selectNode(tile) {
  selectedNode = tile.dataset.node;
  for (const n of document.querySelectorAll("#nodes .node")) n.classList.toggle("selected", n.dataset.node === selectedNode);
  if (!isAdmin()) { say("#node-msg", "node " + selectedNode + ": only an admin may cordon, drain or transfer nodes", ""); return; }
  $("#node-selected").textContent = selectedNode;
  for (const b of document.querySelectorAll("#node-actions [data-to]")) b.hidden = b.dataset.to === tile.dataset.owner;
  $("#node-actions").hidden = false;
  say("#node-msg", "");
}

// nodeAction journals a manual operation; the API answers 202 once it is
// accepted, and the executor carries it out (see the operations journal).
async function nodeAction(act, to) {
  const node = selectedNode;
  if (!node) return;
  try {
    const body = act === "transfer" ? { to: to } : undefined;
    const a = await api("/nodes/" + encodeURIComponent(node) + "/" + act, { method: "POST", body: body });
    say("#node-msg", a.action + " of " + a.node + (a.to ? " to " + (SIDE_NAMES[a.to] || a.to) : "") + " " + a.status +
      ": journaled, the executor carries it out (see the operations journal)", "ok");
    refresh();
  } catch (err) {
    if (err.auth) { signOut("The token was refused; paste a valid one."); return; }
    say("#node-msg", act + " of " + node + " refused: " + err.message, "bad");
  }
}

// fmtHours shows GPU-hours with sense at every size: 12, 3.5, 0.0012.
function fmtHours(h) {
  if (h >= 10) return h.toFixed(0);
  if (h >= 0.1) return h.toFixed(1);
  return h > 0 ? h.toPrecision(2) : "0";
}

function renderPreemptions(page) {
  const rows = page.items.map(d => {
    const a = d.detail || {};
    const victims = (a.victims || []).map(v => (scope() && v.tenant !== scope() ? "work of another tenant" : (v.name || v.source + "/" + v.key)) +
      " (" + v.gpus + " GPUs, priority " + v.priority + ")").join(", ");
    return el("tr", {},
      el("td", {}, fmtTime(d.at)),
      el("td", {}, d.node || a.node || ""),
      el("td", {}, (a.serves || [d.demand]).filter(Boolean).join(", ")),
      el("td", {}, victims || "—"),
      el("td", { class: "num" }, fmtHours(a.gpu_hours_lost || 0)),
      el("td", { class: "reason" }, redact(d.reason)));
  });
  replaceRows($("#preemptions tbody"), rows, "no preemptions", 6);
}

function renderMigrations(page) {
  const rows = page.items.map(d => {
    const a = d.detail || {};
    const tasks = (a.victims || []).map(v => (scope() && v.tenant !== scope() ? "work of another tenant" : (v.name || v.source + "/" + v.key)) +
      " (" + v.gpus + " GPUs)").join(", ");
    return el("tr", {},
      el("td", {}, fmtTime(d.at)),
      el("td", {}, d.node || a.node || ""),
      el("td", {}, tasks || "—"),
      el("td", {}, (a.landing || []).join(", ") || "—"),
      el("td", { class: "num" }, fmtHours(a.gpu_hours_lost || 0)),
      el("td", { class: "reason" }, redact(d.reason)));
  });
  replaceRows($("#migrations tbody"), rows, "no migrations", 6);
}

async function previewPlan() {
  $("#plan-summary").textContent = "planning…";
  try {
    const pl = await api("/plan", { method: "POST" });
    pl.actions = ownDemand(pl.actions);
    pl.waits = ownDemand(pl.waits);
    const rows = pl.actions.map(a => el("tr", {},
      el("td", {}, el("span", { class: "tag " + a.kind }, a.kind)),
      el("td", {}, a.node || a.pool || "" ) ,
      el("td", { class: "reason" }, redact(a.reason))));
    replaceRows($("#plan tbody"), rows, "no actions: nothing to change now", 3);
    const why = new Map();
    for (const w of pl.waits) why.set(w.reason, (why.get(w.reason) || 0) + 1);
    $("#plan-summary").textContent = pl.actions.length + " actions, " + pl.waits.length + " waits" +
      (why.size ? " (" + [...why].map(([r, n]) => n + " " + r).join(", ") + ")" : "") +
      (pl.reused ? "; observed at " + fmtTime(pl.observed_at) + " for an earlier preview (one observation per tick)" : "");
  } catch (err) {
    if (err.auth) { signOut("The token was refused; paste a valid one."); return; }
    $("#plan-summary").textContent = "no plan: " + err.message;
  }
}

let lastSeries = null;
let lastPending = null;

async function refresh() {
  try {
    const sc = scope(), q = sc ? "&tenant=" + encodeURIComponent(sc) : "";
    const [cap, series, nodes, demand, decisions, openOps, failedOps, tenantList, pol, preempts, migrations] = await Promise.all([
      api("/capacity"), api("/capacity/series?window=" + SERIES_WINDOW), apiAll("/nodes?limit=" + NODE_PAGE),
      api("/demand?limit=1000" + q), api("/decisions?limit=20" + q),
      api("/ops?state=open&limit=20"), api("/ops?state=failed&limit=10"),
      api("/tenants"), api("/policy"), api("/decisions?kind=preempt&limit=10" + q), api("/decisions?kind=migrate&limit=10" + q)]);
    const pending = pendingOf(demand, cap);
    lastPending = pending;
    renderTenants(tenantList, pending); // first: it learns which tenant names to hide
    renderSides(cap, pending);
    renderPools(cap);
    renderDemandGroups(pending);
    renderNodes(nodes);
    renderDemand(pending);
    renderDecisions(decisions);
    renderOps(openOps, failedOps);
    refreshAudit();
    renderPolicy(pol);
    renderPreemptions(preempts);
    renderMigrations(migrations);
    lastSeries = series;
    drawCharts();
    renderStatus(cap.runtime);
    $("#updated").textContent = "updated " + fmtTime(cap.at);
    document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
  } catch (err) {
    if (err.auth) { signOut("The token was refused; paste a valid one."); return; }
    $("#status").textContent = "error: " + err.message;
    $("#status").className = "pill bad";
  }
}

function drawCharts() {
  if (!lastSeries) return;
  chart($("#chart-yarn"), lastSeries.points, "yarn");
  chart($("#chart-k8s"), lastSeries.points, "k8s");
  tenantChart($("#chart-tenants"), $("#tenant-legend"), tenantPoints(lastSeries, lastPending));
}

function renderStatus(rt) {
  const st = $("#status"), stale = $("#stale");
  if (!rt) { st.textContent = "read-only (no tick loop)"; st.className = "pill warn"; stale.hidden = true; return; }
  st.textContent = (rt.leader ? "leader" : "follower") + (rt.last_tick ? " · last tick " + fmtTime(rt.last_tick) : "");
  st.className = "pill " + (rt.leader ? "ok" : "");
  const s = Object.entries(rt.stale || {});
  stale.hidden = s.length === 0;
  stale.textContent = s.map(([k, v]) => (SIDE_NAMES[k] || k) + " stale: " + v).join(" · ");
}

async function start() {
  $("#login").hidden = true;
  $("#app").hidden = false;
  $("#logout").hidden = false;
  try {
    me = await api("/whoami");
  } catch (err) {
    if (err.auth) { signOut("The token was refused; paste a valid one."); return; }
    me = { role: "viewer", tenant: "" };
  }
  $("#whoami").textContent = (me.name ? me.name + " · " : "") + me.role + (me.tenant ? " of " + me.tenant : "");
  // A dry run observes every source live: admins only (POST /plan).
  $("#plan-run").hidden = !isAdmin();
  $("#plan-summary").textContent = isAdmin() ? "" : "Only an admin may preview the plan (it observes every source live); " +
    "the decisions and a demand's history say why demand waits.";
  document.body.dataset.role = me.role;
  refresh();
  clearInterval(timer);
  timer = setInterval(refresh, REFRESH_MS);
}

// wire connects the dashboard's buttons and forms (no inline handlers:
// the Content-Security-Policy forbids them).
function wire() {
  $("#nodes").addEventListener("click", ev => { const t = ev.target.closest(".node"); if (t) selectNode(t); });
  $("#node-actions").addEventListener("click", ev => {
    const b = ev.target.closest("button");
    if (!b) return;
    if (b.dataset.act === "close") { $("#node-actions").hidden = true; selectedNode = null; return; }
    nodeAction(b.dataset.act, b.dataset.to);
  });
  $("#tenants").addEventListener("click", ev => { const b = ev.target.closest("[data-edit]"); if (b) editTenant(b.dataset.edit); });
  $("#tenant-form").addEventListener("submit", ev => {
    ev.preventDefault();
    const f = ev.target;
    saveTenant(f.dataset.tenant, { guaranteed_gpus: Number(f.elements.guaranteed_gpus.value), max_gpus: Number(f.elements.max_gpus.value),
      weight: Number(f.elements.weight.value) });
  });
  $("#tenant-form [data-act=cancel]").addEventListener("click", () => { $("#tenant-form").hidden = true; });
  $("#policy-edit").addEventListener("click", editPolicy);
  $("#policy-form").addEventListener("submit", ev => {
    ev.preventDefault();
    const f = ev.target, changes = {};
    const num = { cluster_max_gpus: true, scale_down_utilisation: true };
    for (const k of ["cluster_max_gpus", "scale_down_unneeded", "scale_down_utilisation", "expander"]) {
      const v = num[k] ? Number(f.elements[k].value) : f.elements[k].value;
      if (String(v) !== String(policy[k])) changes[k] = v;
    }
    for (const k of ["preemption", "ownership_transfer"]) if (f.elements[k].checked !== Boolean(policy[k])) changes[k] = f.elements[k].checked;
    savePolicy(changes, Number(f.dataset.version));
  });
  $("#policy-form [data-act=cancel]").addEventListener("click", () => { $("#policy-form").hidden = true; $("#policy-edit").hidden = !isAdmin(); });
  $("#plan-run").addEventListener("click", previewPlan);
  $("#demand").addEventListener("click", ev => { const b = ev.target.closest("[data-why]"); if (b) showWhy(b.dataset.why); });
  $("#why-box").addEventListener("click", ev => { if (ev.target.closest("[data-act=close-why]")) $("#why-box").hidden = true; });
}

// The actions, for the browser tests and the console.
window.gpubroker = { saveTenant: saveTenant, savePolicy: savePolicy, nodeAction: nodeAction, refresh: refresh };

function signOut(msg) {
  clearInterval(timer);
  me = { role: "viewer", tenant: "" };
  lastPending = null;
  sessionStorage.removeItem(KEY);
  $("#app").hidden = true;
  $("#logout").hidden = true;
  $("#login").hidden = false;
  $("#login-error").textContent = msg || "";
  $("#status").textContent = "signed out";
  $("#status").className = "pill";
}

// takeHashToken moves a token in the URL fragment (#token=...), which never
// reaches the server, to sessionStorage and removes it from the address bar.
function takeHashToken() {
  const m = location.hash.match(/token=([^&]+)/);
  if (!m) return false;
  sessionStorage.setItem(KEY, decodeURIComponent(m[1]));
  history.replaceState(null, "", location.pathname + location.search);
  return true;
}

document.addEventListener("DOMContentLoaded", () => {
  wire();
  takeHashToken();
  window.addEventListener("hashchange", () => { if (takeHashToken()) start(); });
  $("#login").addEventListener("submit", ev => {
    ev.preventDefault();
    const v = $("#token").value.trim();
    if (!v) return;
    sessionStorage.setItem(KEY, v);
    $("#token").value = "";
    start();
  });
  $("#logout").addEventListener("click", () => signOut(""));
  window.addEventListener("resize", drawCharts);
  if (token()) start(); else signOut("");
});

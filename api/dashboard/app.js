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

async function api(path) {
  const res = await fetch("/api/v1" + path, { headers: { Authorization: "Bearer " + token() } });
  if (res.status === 401) throw Object.assign(new Error("unauthorized"), { auth: true });
  const body = await res.json();
  if (!res.ok) throw new Error((body.error && body.error.message) || res.statusText);
  return body;
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

function renderSides(cap) {
  const cards = [];
  let total = { gpus_total: 0, gpus_busy: 0, gpus_idle: 0, gpus_in_flight: 0, nodes: 0 };
  for (const s of cap.sides) {
    for (const k of Object.keys(total)) total[k] += s[k];
    cards.push(card(SIDE_NAMES[s.side] || s.side, s.side, s));
  }
  const all = card("All GPUs", "total", total);
  all.append(el("div", { class: "detail" }, cap.pending_gpus + " GPUs of demand pending"));
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
    if (p.backoff_reason) name.append(el("div", { class: "muted" }, "backs off: " + p.backoff_reason));
    return el("tr", {},
      name,
      el("td", {}, p.gpus_per_node ? p.gpus_per_node + "× " + (p.gpu_model || "GPU") : "CPU"),
      el("td", { class: "num" }, p.nodes + (p.nodes_in_flight ? " (+" + p.nodes_in_flight + " in flight)" : "")),
      el("td", { class: "num" }, p.min_nodes + "–" + p.max_nodes),
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
    return el("div", { class: cls.join(" "), title: title, "data-node": n.name },
      el("div", { class: "name" }, n.name),
      el("div", {}, n.phase + (n.protected ? " · protected" : "")),
      el("div", {}, n.in_flight ? "GPUs on the way" : n.gpus_allocated + "/" + n.gpus_total + " GPU · " + util),
      gpus);
  });
  $("#nodes").replaceChildren(...(tiles.length ? tiles : [el("p", { class: "muted" }, "no nodes")]));
  $("#node-count").textContent = nodes.length + " nodes";
}

function reasonTag(r) { return el("span", { class: "tag " + (r || "none") }, r || "not planned yet"); }

function renderDemandGroups(cap) {
  const rows = cap.demand.map(g => el("tr", {},
    el("td", {}, g.tenant),
    el("td", { class: "num" }, g.priority),
    el("td", { class: "num" }, g.count),
    el("td", { class: "num" }, g.gpus),
    el("td", { class: "num" }, fmtWait(g.oldest_wait_seconds)),
    el("td", {}, reasonTag(g.wait_reason))));
  replaceRows($("#demand-groups tbody"), rows, "no pending demand", 6);
  $("#pending-total").textContent = cap.pending_gpus + " GPUs pending";
}

function renderDemand(page) {
  const rows = page.items.slice(0, 12).map(d => el("tr", {},
    el("td", { title: d.source + "/" + d.key }, (d.source === "yarn" ? "YARN " : "k8s ") + (d.name || d.key)),
    el("td", {}, d.tenant),
    el("td", { class: "num" }, d.gpus_per_unit * d.units),
    el("td", { class: "num" }, fmtWait(d.wait_seconds)),
    el("td", { class: "reason" }, reasonTag(d.wait_reason), " ", d.wait_detail || "")));
  replaceRows($("#demand tbody"), rows, "nothing waits", 5);
}

function renderDecisions(page) {
  const rows = page.items.slice(0, 10).map(d => el("tr", {},
    el("td", {}, fmtTime(d.at)),
    el("td", {}, el("span", { class: "tag " + d.kind }, d.kind)),
    el("td", {}, d.node || d.pool || d.demand || ""),
    el("td", { class: "reason" }, d.reason)));
  replaceRows($("#decisions tbody"), rows, "no decisions yet", 4);
}

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

// renderOps lists open ops, then recently failed ones with why they ended.
function renderOps(open, failed) {
  const rows = open.items.concat(failed.items).slice(0, 20).map(o => el("tr", {},
    el("td", { class: "num" }, "#" + o.id),
    el("td", {}, el("span", { class: "tag " + o.kind }, o.kind)),
    el("td", {}, o.node || o.pool || ""),
    el("td", {}, el("span", { class: "tag " + (o.state === "failed" ? "bad" : o.state) }, o.state)),
    el("td", {}, o.step || ""),
    el("td", { class: "num" }, o.attempts),
    el("td", { class: "reason" }, o.last_error ? o.reason + " — " + o.last_error : o.reason),
    el("td", {}, fmtTime(o.updated_at))));
  replaceRows($("#ops tbody"), rows, "no open or failed operations", 8);
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

// tenantChart stacks pending demand GPUs by tenant (all priorities) over
// time, the largest tenants first; beyond seven, the rest are "others".
function tenantChart(container, legend, demand) {
  const W = Math.max(container.clientWidth, 200), H = 150, L = 30, R = 6, T = 8, B = 18;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  svg.setAttribute("role", "img");
  const mk = (tag, attrs) => { const e = document.createElementNS(ns, tag); for (const k in attrs) e.setAttribute(k, attrs[k]); svg.append(e); return e; };
  const totals = new Map(), times = [], byTime = new Map();
  for (const d of demand) {
    const t = new Date(d.at).getTime();
    if (!byTime.has(t)) { byTime.set(t, new Map()); times.push(t); }
    const m = byTime.get(t);
    m.set(d.tenant, (m.get(d.tenant) || 0) + d.gpus);
    totals.set(d.tenant, (totals.get(d.tenant) || 0) + d.gpus);
  }
  times.sort((a, b) => a - b);
  let tenants = [...totals.keys()].sort((a, b) => totals.get(b) - totals.get(a) || a.localeCompare(b));
  if (tenants.length > 8) tenants = tenants.slice(0, 7).concat(["others"]);
  const val = (t, tenant) => {
    const m = byTime.get(t);
    if (tenant !== "others") return m.get(tenant) || 0;
    let s = 0;
    for (const [k, v] of m) if (!tenants.slice(0, 7).includes(k)) s += v;
    return s;
  };
  svg.setAttribute("data-points", String(times.length));
  legend.replaceChildren(...tenants.map((tn, i) => {
    const sw = el("i", { class: "sw" });
    sw.style.background = TENANT_COLOURS[i % 8]; // CSSOM, allowed by the CSP; a style attribute is not
    return el("span", {}, sw, tn);
  }));
  if (times.length < 2) {
    mk("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }).textContent = times.length ? "" : "no pending demand in this window";
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

let lastSeries = null;

async function refresh() {
  try {
    const [cap, series, nodes, demand, decisions, openOps, failedOps] = await Promise.all([
      api("/capacity"), api("/capacity/series?window=" + SERIES_WINDOW), api("/nodes"),
      api("/demand?limit=50"), api("/decisions?limit=20"),
      api("/ops?state=open&limit=20"), api("/ops?state=failed&limit=10")]);
    renderSides(cap);
    renderPools(cap);
    renderDemandGroups(cap);
    renderNodes(nodes.items);
    renderDemand(demand);
    renderDecisions(decisions);
    renderOps(openOps, failedOps);
    refreshAudit();
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
  tenantChart($("#chart-tenants"), $("#tenant-legend"), lastSeries.demand || []);
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

function start() {
  $("#login").hidden = true;
  $("#app").hidden = false;
  $("#logout").hidden = false;
  refresh();
  clearInterval(timer);
  timer = setInterval(refresh, REFRESH_MS);
}

function signOut(msg) {
  clearInterval(timer);
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

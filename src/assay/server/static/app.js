// Assay dashboard: hash-routed views over the JSON API; plots are inline SVG drawn here (no library, no CDN).
"use strict";

const view = document.getElementById("view");
const crumbs = document.getElementById("crumbs");
const SVG = "http://www.w3.org/2000/svg";
const COLOURS = ["#1565c0", "#c62828", "#2e7d32", "#ef6c00", "#6a1b9a", "#00838f", "#5d4037", "#ad1457"];
let cleanup = [];
let passK = 3;  // the k of the campaign page's pass^k table (its input changes it)

// HTML is written only through html`...` (Jinja2's autoescape, in the browser): every ${value} is escaped unless it
// is itself the product of html`...`; an array is each of its items, the same way. show() and append() take only
// such fragments, so no string reaches innerHTML unescaped.
class Safe {
  constructor(text) { this.text = text; }
}
function escapeText(value) {
  return String(value ?? "").replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}
function interpolate(value) {
  if (value instanceof Safe) return value.text;
  if (Array.isArray(value)) return value.map(interpolate).join("");
  return escapeText(value);
}
function html(strings, ...values) {
  return new Safe(strings.reduce((out, text, i) => out + interpolate(values[i - 1]) + text));
}
function fragment(value) {
  if (!(value instanceof Safe)) throw new TypeError("HTML must come from html`...`");
  return value.text;
}
function show(node, value) { node.innerHTML = fragment(value); }
function append(node, value) { node.insertAdjacentHTML("beforeend", fragment(value)); }
function pct(x) { return x === null || x === undefined ? "–" : Math.round(100 * x) + "%"; }
async function api(path, options) {
  const response = await fetch(path, options);
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw Object.assign(new Error(body.detail || response.statusText), {status: response.status});
  return body;
}
function el(tag, attrs, parent) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

// -- a line plot: series over time, with a cursor that follows the video ---------------------------
function linePlot(container, title, t, matrix, labels, onSeek) {
  const box = document.createElement("div");
  box.className = "plot";
  const legend = labels.map((l, d) => html`<span style="color:${COLOURS[d % COLOURS.length]}">■ ${l}</span> `);
  show(box, html`<h3>${title} <small class="legend">${legend}</small></h3>`);
  container.appendChild(box);
  const W = 800, H = 150, L = 40, R = 8, T = 8, B = 18;
  const svg = el("svg", {class: "chart", viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", "data-plot": title}, box);
  const values = matrix.flat().filter(v => v !== null);
  let lo = Math.min(...values), hi = Math.max(...values);
  if (!isFinite(lo)) { lo = 0; hi = 1; }
  if (hi - lo < 1e-9) { lo -= 1; hi += 1; }
  const t0 = t[0] ?? 0, t1 = t[t.length - 1] ?? 1;
  const x = v => L + (W - L - R) * (t1 > t0 ? (v - t0) / (t1 - t0) : 0);
  const y = v => T + (H - T - B) * (1 - (v - lo) / (hi - lo));
  el("line", {x1: L, x2: W - R, y1: y(lo), y2: y(lo), stroke: "#999"}, svg);
  for (const v of [lo, hi]) {
    const label = el("text", {x: 2, y: y(v) + 4, "font-size": 10, fill: "#555"}, svg);
    label.textContent = v.toFixed(2);
  }
  const dims = matrix.length ? matrix[0].length : 0;
  for (let d = 0; d < dims; d++) {
    const points = [];
    matrix.forEach((row, i) => { if (row[d] !== null) points.push(`${x(t[i]).toFixed(1)},${y(row[d]).toFixed(1)}`); });
    el("polyline", {points: points.join(" "), fill: "none", stroke: COLOURS[d % COLOURS.length], "stroke-width": 1.3,
                    "vector-effect": "non-scaling-stroke"}, svg).appendChild(el("title", {})).textContent = labels[d] || `dim ${d}`;
  }
  const cursor = el("line", {x1: L, x2: L, y1: T, y2: H - B, stroke: "#000", "stroke-width": 1, class: "cursor",
                             "vector-effect": "non-scaling-stroke"}, svg);
  svg.addEventListener("click", event => {
    const rect = svg.getBoundingClientRect();
    const frac = Math.min(1, Math.max(0, ((event.clientX - rect.left) / rect.width * W - L) / (W - L - R)));
    onSeek(t0 + frac * (t1 - t0));
  });
  return time => { const px = x(Math.min(t1, Math.max(t0, time))); cursor.setAttribute("x1", px); cursor.setAttribute("x2", px); };
}

function timeline(container, events, tEnd, onSeek) {
  // Labels never overlap: each goes on the first row (above the line) where it clears the labels already there.
  const W = 800, L = 40, R = 8, ROW = 12, CHAR = 6;
  const x = v => L + (W - L - R) * (tEnd > 0 ? v / tEnd : 0);
  const rows = [], placed = [];
  events.forEach(e => {
    const text = `${e.label} @${e.step}`, width = text.length * CHAR, cx = x(e.t);
    let start = Math.min(Math.max(cx - width / 2, 0), W - width);
    let row = rows.findIndex(end => start > end + 6);
    if (row < 0) { rows.push(-Infinity); row = rows.length - 1; }
    rows[row] = start + width;
    placed.push({e, text, start, row, cx});
  });
  const lineY = 14 + ROW * rows.length, H = lineY + 10;
  const svg = el("svg", {class: "timeline", viewBox: `0 0 ${W} ${H}`, "data-plot": "events"}, container);
  el("line", {x1: L, x2: W - R, y1: lineY, y2: lineY, stroke: "#999"}, svg);
  const colour = {start: "#555", success: "#2e7d32", terminated: "#c62828", truncated: "#ef6c00", ponr: "#b71c1c", end: "#000"};
  placed.forEach(({e, text, start, row, cx}) => {
    const g = el("g", {class: "event", "data-kind": e.kind, style: "cursor:pointer"}, svg);
    el("circle", {cx, cy: lineY, r: 5, fill: colour[e.kind] || "#1565c0"}, g);
    const y = 10 + ROW * (rows.length - 1 - row);
    el("line", {x1: cx, x2: cx, y1: y + 2, y2: lineY - 5, stroke: "#ccc"}, g);
    el("text", {x: start, y, "font-size": 10, "text-anchor": "start"}, g).textContent = text;
    g.addEventListener("click", () => onSeek(e.t));
  });
}

// -- views -----------------------------------------------------------------------------------------
async function campaignsView() {
  crumbs.textContent = "";
  const [campaigns, runs] = await Promise.all([api("/api/campaigns"), api("/api/runs")]);
  show(view, html`<section><h2>Campaigns</h2><table id="campaigns"><thead><tr><th>campaign</th><th>progress</th>
    <th class="num">episodes</th><th>policies</th><th>tasks</th><th>variants</th><th>updated</th></tr></thead><tbody>
    ${campaigns.map(c => html`<tr data-campaign="${c.name}"><td><a href="#/c/${encodeURIComponent(c.name)}">${c.name}</a>
      ${c.running ? html`<span class='timeout'> running</span>` : ""}</td>
      <td><span class="bar"><span style="width:${Math.round(100 * Math.min(1, c.progress))}%"></span></span> ${pct(c.progress)}</td>
      <td class="num">${c.episodes} / ${c.jobs}</td><td>${c.policies.join(", ")}</td><td>${c.tasks.join(", ")}</td>
      <td>${c.variants.join(", ")}</td><td>${c.updated_at}</td></tr>`)}</tbody></table></section>
    <section><h2>Start a campaign</h2><p class="muted">A YAML file inside the server's campaign directory; needs the token printed by <code>assay serve</code>.</p>
    <input id="path" type="text" placeholder="campaign.yaml"> <input id="token" type="password" placeholder="token">
    <button id="start">Start</button> <span id="start-result"></span>
    <h2 style="margin-top:14px">Runs</h2><table><thead><tr><th>run</th><th>campaign</th><th>state</th><th>started</th><th></th></tr></thead><tbody>
    ${runs.map(r => html`<tr><td>${r.id}</td><td>${r.campaign}</td><td>${r.state}${r.error ? html`: <span class="run-error">${r.error}</span>` : ""}</td><td>${r.started_at}</td>
      <td>${r.state === "running" ? html`<button data-cancel="${r.id}">Cancel</button>` : ""}</td></tr>`)}</tbody></table></section>`);
  const token = document.getElementById("token");
  token.value = sessionStorage.getItem("assay-token") || "";
  const write = async (path, body) => {
    sessionStorage.setItem("assay-token", token.value);
    const headers = {"Content-Type": "application/json"};
    if (token.value) headers.Authorization = `Bearer ${token.value}`;
    return api(path, {method: "POST", headers, body: JSON.stringify(body || {})});
  };
  document.getElementById("start").onclick = async () => {
    const out = document.getElementById("start-result");
    try { const run = await write("/api/runs", {path: document.getElementById("path").value}); out.textContent = `started ${run.id}`; setTimeout(route, 800); }
    catch (e) { show(out, html`<span class="warn">${e.status}: ${e.message}</span>`); }
  };
  view.querySelectorAll("[data-cancel]").forEach(b => b.onclick = async () => { await write(`/api/runs/${b.dataset.cancel}/cancel`); route(); });
  if (campaigns.some(c => c.running) || runs.some(r => r.state === "running")) {  // refresh while something runs
    const timer = setTimeout(() => { if (!document.activeElement || document.activeElement.tagName !== "INPUT") route(); }, 2000);
    cleanup.push(() => clearTimeout(timer));
  }
}

function completenessText(c) {
  const missing = c.missing_cells.length ? `; ${c.missing_cells.length} cell(s) have none (${c.missing_cells.slice(0, 4).join(", ")}${c.missing_cells.length > 4 ? " and more" : ""})` : "";
  return `${c.complete ? "complete" : "incomplete"}: ${c.recorded} of ${c.planned} planned episodes recorded${missing}`;
}

// The campaign page is drawn from the campaign's cell counts first (header, completeness, the rate table: one
// request, bounded by cells), then each other section fills in as its own request arrives; episodes and failures
// come a page at a time (newest first, `?after=KEY&limit=50`), with a button for the next page.
const PAGE = 50;
let generation = 0;  // a refresh's sections replace an older one's only while it is the newest

function leakageLines(extras) {
  return (extras.leakage || []).map(l => html`<p class="${l.contaminated ? "warn" : "muted"}" data-leakage="${l.contaminated}">leakage:
      ${l.checkpoint}: ${l.error ? `not checked (${l.error})` : l.contaminated ? `${l.contaminated} of ${l.episodes} episodes are scenes it was trained on` : "clean"}</p>`);
}

function safetySection(extras) {
  if (!(extras.safety || []).length) return html``;
  return html`<section id="safety-section"><h2>Safety filter interventions (steps)${extras.safety_scope ? html` <span class="muted">(${extras.safety_scope.label})</span>` : ""}</h2><table id="safety"><thead><tr>
      <th>policy</th><th>task</th><th>variant</th><th class="num">episodes</th><th class="num">nan</th><th class="num">limit</th><th class="num">workspace</th></tr></thead><tbody>
      ${extras.safety.map(r => html`<tr><td>${r.policy}</td><td>${r.task}</td><td>${r.variant}</td><td class="num">${r.episodes}</td>
        <td class="num">${r.nan}</td><td class="num">${r.limit}</td><td class="num">${r.workspace}</td></tr>`)}</tbody></table></section>`;
}

function leaderboardSection(board) {
  return html`<section id="leaderboard-section"><h2>Leaderboard <span class="muted" id="leaderboard-scope">(${board.scope ? board.scope.label : ""})</span></h2>
      ${board.withheld ? html`<p class="warn" id="leaderboard-withheld">${board.withheld}</p>` : ""}
      <table id="leaderboard"><thead><tr><th>policy</th><th>rank [interval]</th><th class="num">score</th>
      <th class="num">${pct(board.confidence)} interval</th><th class="num">scored</th><th class="num">errors</th><th class="num">recorded</th></tr></thead><tbody>
      ${(board.rows || []).map(r => html`<tr><td>${r.policy}</td><td>${board.rank_text[r.policy]}</td><td class="num">${pct(r.score)}</td>
        <td class="num">[${pct(r.ci_low)}, ${pct(r.ci_high)}]</td><td class="num">${r.scored}</td><td class="num">${r.errors}</td>
        <td class="num${r.complete ? "" : " warn"}">${r.recorded}/${r.planned}</td></tr>`)}</tbody></table>
      <p>${(board.signoff || []).map((s, i) => html`${i ? html`<br>` : ""}${s.task}: <span class="${s.validated ? "success" : "warn"}">${s.status}</span> <span class="muted">(${s.reason})</span>`)}</p></section>`;
}

function ratesSection(campaign) {
  return html`<section><h2>Success by policy × task × variant <span class="muted">(${campaign.rates_scope.label})</span></h2>
      <p id="completeness" class="${campaign.completeness.complete ? "muted" : "warn"}">${completenessText(campaign.completeness)}</p>
      ${campaign.stamp ? html`<p id="stamp" class="${campaign.stamp.status === "reportable" ? "success" : "warn"}">${campaign.stamp.label}</p>` : ""}
      <table id="rates"><thead><tr><th>policy</th><th>task</th><th>variant</th><th class="num">success</th>
      <th class="num">${campaign.interval}</th><th class="num">n</th><th class="num">recorded</th></tr></thead><tbody>
      ${campaign.rates.map(r => html`<tr><td>${r.group.policy}</td><td>${r.group.task}</td><td>${r.group.variant}</td>
        <td class="num">${pct(r.rate)}</td><td class="num">${r.ci_low === null ? "–" : `[${pct(r.ci_low)}, ${pct(r.ci_high)}]`}</td><td class="num">${r.successes}/${r.scored}</td>
        <td class="num${r.complete ? "" : " warn"}">${r.recorded}/${r.planned}</td></tr>`)}</tbody></table>
      ${campaign.coverage_note ? html`<p class="warn" id="coverage-note">${campaign.coverage_note}</p>` : ""}</section>`;
}

function loading(title) {
  return html`<section><h2>${title}</h2><p class="muted loading">loading…</p></section>`;
}

// Draws the campaign's tables into `box`: what the cell counts say at once, the rest as each request arrives. A
// redraw (the run moved on) keeps each section as it is until its new content arrives.
function drawCampaign(name, campaign, box) {
  const mine = ++generation;
  const path = `/api/campaigns/${encodeURIComponent(name)}`;
  if (!document.getElementById("rates-box")) {
    show(box, html`<div id="leakage-box"></div><div id="leaderboard-box">${loading("Leaderboard")}</div><div id="rates-box"></div>
      <div id="pass-k-box">${loading("Reliability: pass^k")}</div><div id="safety-box"></div>
      <div id="failures-box">${loading("Failures")}</div><div id="sets-box">${loading(`Regression sets mined from ${name}`)}</div>
      <div id="episodes-box">${loading(`Episodes (${campaign.episodes})`)}</div>`);
  }
  const place = (id, value) => { const node = document.getElementById(id); if (node) show(node, value); };
  place("rates-box", ratesSection(campaign));
  const fill = (request, draw) => request.then(found => { if (mine === generation) draw(found); })
    .catch(error => { if (mine === generation) console.warn(error); });
  fill(api(`${path}/leaderboard`), board => place("leaderboard-box", leaderboardSection(board)));
  fillPassK(name, mine);
  fill(api(`${path}/extras`), extras => {
    place("leakage-box", html`${leakageLines(extras)}`);
    place("safety-box", safetySection(extras));
  });
  fill(api(`/api/regression?campaign=${encodeURIComponent(name)}`), sets => place("sets-box",
    html`<section><h2>Regression sets mined from ${name} (${sets.length})</h2>${setTable(sets, "campaign-sets")}</section>`));
  const failures = pager(`${path}/failures`, "failures", mine, (found, first) => {
    if (!first) return append(document.querySelector("#failures tbody"), failureRows(found.episodes));
    const total = Object.values(found.by_policy).reduce((n, o) => n + Object.values(o).reduce((a, b) => a + b, 0), 0);
    place("failures-box", html`<section id="failures-section"><h2 id="failures-title">Failures (${total})${found.scope ? html` <span class="muted" id="failures-scope">(${found.scope.label})</span>` : ""}</h2>
      ${failureTable(found.episodes)}<p><button id="failures-more" hidden>next ${PAGE}</button></p></section>`);
  });
  const episodes = pager(`${path}/episodes`, "episodes", mine, (found, first) => {
    if (!first) return append(document.querySelector("#episodes tbody"), episodeRows(found.rows));
    place("episodes-box", html`<section id="episodes-section"><h2 id="episodes-title">Episodes (${campaign.episodes})</h2>
      ${episodeTable(found.rows, "episodes")}<p><button id="episodes-more" hidden>next ${PAGE}</button></p></section>`);
  });
  failures();
  episodes();
}

// One paged list: each call fetches the next page (`after` the last one's `next`) and hands it to `draw` (the first
// page draws the section, a later one appends its rows); the section's "next" button asks for the page after.
function pager(address, id, mine, draw) {
  let after = null, first = true;
  const next = async () => {
    const url = `${address}?limit=${PAGE}${after ? `&after=${encodeURIComponent(after)}` : ""}`;
    const response = await fetch(url);
    const body = await response.json().catch(() => ({}));
    if (mine !== generation) return;
    if (!response.ok) { console.warn(body.detail || response.statusText); return; }
    const found = Array.isArray(body) ? {rows: body, next: nextOf(response)} : body;
    draw(found, first);
    after = found.next;
    first = false;
    const button = document.getElementById(`${id}-more`);
    if (button) { button.hidden = !after; button.onclick = () => { button.disabled = true; next().finally(() => { button.disabled = false; }); }; }
  };
  return next;
}

function nextOf(response) {  // the `after` of the Link header's rel="next" address (none on the last page)
  const link = response.headers.get("Link") || "";
  const found = link.match(/[?&]after=([^&>]+)[^>]*>;\s*rel="next"/);
  return found ? decodeURIComponent(found[1]) : null;
}

function fillPassK(name, mine) {
  api(`/api/campaigns/${encodeURIComponent(name)}/pass-k?k=${passK}`).then(passk => {
    if (mine === generation && passk.k === passK) show(document.getElementById("pass-k-box"), passKTables(passk));
  }).catch(error => console.warn(error));
}

function passKTables(passk) {
  const num = x => x === null || x === undefined ? "–" : x.toFixed(3);
  const ci = (lo, hi) => lo === null || lo === undefined ? "–" : `[${lo.toFixed(3)}, ${hi.toFixed(3)}]`;
  return html`<section><h2>Reliability: pass^<input id="pass-k" type="number" min="1" max="1000" value="${passk.k}" style="width:4em">${passk.scope ? html` <span class="muted">(${passk.scope.label})</span>` : ""}</h2>
    <p class="muted">P(${passk.k} independent episodes all succeed): C(c,${passk.k})/C(n,${passk.k}), unbiased; interval: the mid-p ${pct(passk.confidence)} interval of the rate to the power ${passk.k}. Per policy: the mean over its tasks.</p>
    <table id="pass-k-cells"><thead><tr><th>policy</th><th>task</th><th class="num">succ/n</th><th class="num">pass^${passk.k}</th>
      <th class="num">C(c,k)/C(n,k)</th><th class="num">interval</th><th>why undefined</th></tr></thead><tbody>
      ${passk.cells.map(c => html`<tr><td>${c.group.policy}</td><td>${c.group.task}</td><td class="num">${c.successes}/${c.trials}</td>
        <td class="num">${num(c.estimate)}</td><td class="num">${c.fraction}</td><td class="num">${ci(c.ci_low, c.ci_high)}</td>
        <td class="muted">${c.reason || ""}</td></tr>`)}</tbody></table>
    <table id="pass-k-policies"><thead><tr><th>policy</th><th class="num">tasks</th><th class="num">pass^${passk.k}</th><th class="num">interval</th>
      <th>why undefined</th></tr></thead><tbody>
      ${passk.policies.map(p => html`<tr><td>${p.policy}</td><td class="num">${p.tasks}</td><td class="num">${num(p.estimate)}</td>
        <td class="num">${ci(p.ci_low, p.ci_high)}</td><td class="muted">${p.reason || ""}</td></tr>`)}</tbody></table></section>`;
}

async function campaignView(name) {
  show(crumbs, html`/ <a href="#/c/${encodeURIComponent(name)}">${name}</a>`);
  const campaign = await api(`/api/campaigns/${encodeURIComponent(name)}`);
  show(view, html`<section><h2>${name}</h2><p id="progress"><span class="bar"><span style="width:${pct(campaign.progress)}"></span></span>
      <span id="progress-text">${campaign.episodes} / ${campaign.jobs} episodes</span></p></section>
    <div id="campaign-tables"></div>`);
  const box = document.getElementById("campaign-tables");
  drawCampaign(name, campaign, box);
  const onK = event => {
    if (event.target.id !== "pass-k") return;
    const k = parseInt(event.target.value, 10);
    if (k >= 1 && k <= 1000 && k !== passK) { passK = k; fillPassK(name, generation); }
  };
  // as typed, not only on change: the campaign's last refresh redraws this box, and a k typed but not yet
  // committed would be lost with the old input (a later answer for another k is not drawn: fillPassK)
  box.addEventListener("input", onK);
  box.addEventListener("change", onK);
  // Tables follow the run: re-read them when the episode count moves (at most every REFRESH_MS) and once at the end.
  let shown = campaign.episodes, pending = null, live = true;
  const refresh = async () => {
    pending = null;
    const next = await api(`/api/campaigns/${encodeURIComponent(name)}`);
    const box = document.getElementById("campaign-tables");
    if (!live || !box) return;
    drawCampaign(name, next, box);
    shown = next.episodes;
  };
  const source = new EventSource(`/api/campaigns/${encodeURIComponent(name)}/events`);
  const update = (event, final) => {
    const row = JSON.parse(event.data);
    document.querySelector("#progress .bar>span").style.width = pct(row.progress);
    document.getElementById("progress-text").textContent = `${row.episodes} / ${row.jobs} episodes${row.running ? " (running)" : ""}`;
    if (final) { clearTimeout(pending); refresh(); }
    else if (row.episodes !== shown && pending === null) pending = setTimeout(refresh, REFRESH_MS);
  };
  source.addEventListener("progress", event => update(event, false));
  source.addEventListener("done", event => { update(event, true); source.close(); });
  cleanup.push(() => { live = false; generation++; clearTimeout(pending); source.close(); });
}

function episodeRows(episodes) {
  return html`${episodes.map(e => html`<tr data-key="${e.key}"><td><a href="#/e/${e.key}">${e.key.slice(0, 12)}</a></td><td>${e.policy}</td><td>${e.task}</td>
      <td>${e.variant}</td><td class="num">${e.seed}</td><td class="${e.outcome}">${e.outcome}</td>
      <td class="num">${e.steps}</td><td class="num">${e.return.toFixed(1)}</td></tr>`)}`;
}

function episodeTable(episodes, id) {
  return html`<table id="${id}"><thead><tr><th>episode</th><th>policy</th><th>task</th><th>variant</th><th class="num">seed</th>
    <th>outcome</th><th class="num">steps</th><th class="num">return</th></tr></thead><tbody>${episodeRows(episodes)}</tbody></table>`;
}

const REFRESH_MS = 1500;

function ponrText(p) {
  if (!p) return "–";
  if (p.verified === false) return "replay mismatch";
  if (p.t === null) return "beyond the expert";
  if (p.lost === false) return `never lost (budget ${p.budget})`;
  return `step ${p.t} of ${p.steps}`;
}

function failureRows(failures) {
  // what `assay failures mine` and `assay failures ponr` found, beside each unsuccessful episode
  return html`${failures.map(e => { const f = e.failure || {}, a = f.attribution;
      return html`<tr data-key="${e.key}"><td><a href="#/e/${e.key}">${e.key.slice(0, 12)}</a></td><td>${e.policy}</td>
      <td>${e.task}</td><td>${e.variant}</td><td class="${e.outcome}">${e.outcome}</td>
      <td>${f.category ?? "–"}</td><td title="${a ? a.evidence : ""}">${a ? html`${a.capability} <span class="muted">(${a.confidence})</span>` : "–"}</td>
      <td class="ponr">${ponrText(f.ponr)}</td><td><a class="timeline-link" href="/timeline#${e.key}">timeline</a></td></tr>`; })}`;
}

function failureTable(failures) {
  return html`<table id="failures"><thead><tr><th>episode</th><th>policy</th><th>task</th><th>variant</th><th>outcome</th>
    <th>category</th><th>attributed to</th><th>point of no return</th><th>per-layer trace</th></tr></thead><tbody>${failureRows(failures)}</tbody></table>`;
}

// -- regression sets -------------------------------------------------------------------------------
function setTable(sets, id) {
  if (!sets.length) return html`<p class="muted">No regression sets yet (<code>assay regress add NAME --from CAMPAIGN</code>).</p>`;
  return html`<table id="${id}"><thead><tr><th>set</th><th>split</th><th class="num">version</th><th>source campaign</th>
    <th class="num">cases</th><th>latest run</th><th class="num">passed</th><th class="num">fixed</th>
    <th class="num">still failing</th><th class="num">newly failing</th></tr></thead><tbody>
    ${sets.map(s => { const r = s.latest, d = (r && r.diff) || {};
      return html`<tr data-set="${s.name}"><td><a href="#/r/${encodeURIComponent(s.name)}">${s.name}</a></td>
      <td>${s.split}</td><td class="num">v${s.version}</td>
      <td><a href="#/c/${encodeURIComponent(s.source)}">${s.source}</a></td><td class="num">${s.cases}</td>
      <td>${r ? html`#${r.run} ${r.policy}${r.version !== s.version ? html` <span class="muted">(v${r.version})</span>` : ""}` : html`<span class='muted'>never run</span>`}</td>
      <td class="num">${r ? `${r.passed} / ${r.cases}` : "–"}</td><td class="num success">${d.fixed ?? "–"}</td>
      <td class="num failure">${d.still_failing ?? "–"}</td><td class="num failure">${d.newly_failing ?? "–"}</td></tr>`; })}</tbody></table>`;
}

async function regressionView() {
  show(crumbs, html`/ <a href="#/r">regression sets</a>`);
  const sets = await api("/api/regression");
  show(view, html`<section><h2>Regression sets (${sets.length})</h2><p class="muted">Failing (task, variant, seed) cases
    frozen from a campaign and rerun with <code>assay regress run</code>; the diff is against the previous run
    (the first run: against the mined failures).</p>${setTable(sets, "regression")}</section>`);
}

function historyPlot(container, runs) {
  // one bar per run, oldest first: the passed share in green over the failed share in red
  const W = 800, H = 150, L = 40, R = 8, T = 8, B = 34;
  const svg = el("svg", {class: "history", viewBox: `0 0 ${W} ${H}`, "data-plot": "history"}, container);
  const y = frac => T + (H - T - B) * (1 - frac);
  for (const v of [0, 1]) {
    el("line", {x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#ddd"}, svg);
    el("text", {x: 2, y: y(v) + 4, "font-size": 10, fill: "#555"}, svg).textContent = pct(v);
  }
  const slot = (W - L - R) / Math.max(runs.length, 1), width = Math.min(48, slot * 0.7);
  runs.forEach((r, i) => {
    const x0 = L + slot * i + (slot - width) / 2, share = r.cases ? r.passed / r.cases : 0;
    const g = el("g", {class: "run", "data-run": r.run, "data-passed": r.passed, "data-cases": r.cases}, svg);
    el("rect", {x: x0, y: y(1), width, height: y(0) - y(1), fill: "#ef9a9a"}, g);
    el("rect", {x: x0, y: y(share), width, height: y(0) - y(share), fill: "#2e7d32", class: "passed"}, g);
    el("title", {}, g).textContent = `run ${r.run} (${r.policy}, v${r.version}): ${r.passed}/${r.cases} passed`;
    const label = el("text", {x: x0 + width / 2, y: H - B + 14, "font-size": 10, "text-anchor": "middle"}, g);
    label.textContent = `#${r.run} ${r.policy}`;
    el("text", {x: x0 + width / 2, y: H - B + 27, "font-size": 10, "text-anchor": "middle", fill: "#555"}, g)
      .textContent = `${r.passed}/${r.cases}`;
  });
}

async function regressionSetView(name) {
  const detail = await api(`/api/regression/${encodeURIComponent(name)}`);
  const s = detail.set;
  show(crumbs, html`/ <a href="#/r">regression sets</a> / ${s.name}`);
  const outcome = r => r === null ? html`<td class="muted">–</td>`
    : html`<td class="${r.passed ? "cell-pass" : "cell-fail"}"><a href="#/e/${encodeURIComponent(r.key)}" class="${r.passed ? "success" : "failure"}">${r.passed ? "pass" : "fail"}</a></td>`;
  show(view, html`<section><h2>Regression set ${s.name} <small class="muted">v${s.version} · ${s.split}</small></h2>
      <p>${s.cases} cases mined from <a href="#/c/${encodeURIComponent(s.source)}">${s.source}</a>;
      ${s.runs.length} run${s.runs.length === 1 ? "" : "s"}.</p>${setTable([s], "set-summary")}</section>
    <section id="history-section"><h2>Pass / fail per run</h2></section>
    <section><h2>Cases</h2><table id="cases"><thead><tr><th>case</th><th>task</th><th>variant</th><th class="num">seed</th>
      <th>mined from</th>${s.runs.map(r => html`<th>#${r.run} ${r.policy}</th>`)}</tr></thead><tbody>
      ${detail.cases.map(c => html`<tr data-case="${c.id}"><td title="${c.instruction}">${c.id}</td><td>${c.task}</td>
        <td>${c.variant}</td><td class="num">${c.seed}</td>
        <td><a href="#/e/${encodeURIComponent(c.source_key)}">${c.source_key.slice(0, 12)}</a></td>
        ${c.runs.map(outcome)}</tr>`)}</tbody></table></section>`);
  const history = document.getElementById("history-section");
  if (s.runs.length) historyPlot(history, s.runs);
  else append(history, html`<p class="muted">Never run: <code>assay regress run ${s.name} --policy POLICY</code>.</p>`);
}

function failureFacts(f) {
  if (!f) return html``;
  const a = f.attribution;
  return html`<p id="failure-facts">category <b>${f.category ?? "not mined"}</b> · attributed to
    <b>${a ? a.capability : "–"}</b>${a ? html` <span class="muted">(${a.evidence})</span>` : ""} ·
    point of no return <b>${ponrText(f.ponr)}</b></p>`;
}

async function episodeView(key) {
  const detail = await api(`/api/episodes/${encodeURIComponent(key)}`);
  const e = detail.episode;
  show(crumbs, html`/ <a href="#/c/${encodeURIComponent(e.campaign)}">${e.campaign}</a> / ${key.slice(0, 12)}`);
  show(view, html`<section><h2>Episode ${e.key}</h2>
    <p>${e.policy_name} · ${e.task_id} · ${e.variant_name} · seed ${e.seed} ·
      <b class="${e.outcome}">${e.outcome}</b> after ${e.steps} steps ${e.reason ? "— " + e.reason : ""}</p>
    <p class="muted">“${e.instruction}”</p>${failureFacts(detail.failure)}</section>
    <section class="viewer"><div id="media"></div><div id="plots"></div></section>`);
  const media = document.getElementById("media");
  const plots = document.getElementById("plots");
  let video = null;
  if (detail.videos.length) {
    show(media, html`<select id="camera">${detail.videos.map(v => html`<option value="${v.path}">${v.camera}</option>`)}</select><br>
      <video id="video" controls muted loop playsinline preload="auto"></video><p class="muted" id="clock"></p>`);
    video = document.getElementById("video");
    video.src = "/api/files/" + detail.videos[0].path;
    document.getElementById("camera").onchange = ev => { const at = video.currentTime; video.src = "/api/files/" + ev.target.value; video.currentTime = at; };
  } else {
    show(media, html`<p class='muted'>No camera video for this episode (its campaign had no cameras).</p>`);
  }
  const s = detail.series;
  if (!s) { show(plots, html`<p class='muted'>No step data (the episode errored before stepping).</p>`); return; }
  const tEnd = s.t[s.t.length - 1] || 0;
  // the video's frame i is the image seen at step i, so video time and step time share one clock
  const seek = time => { if (video) video.currentTime = time; cursors.forEach(c => c(time)); };
  const cursors = [
    linePlot(plots, "action", s.t, s.action, s.action[0].map((_, d) => `action[${d}]`), seek),
    linePlot(plots, "state (first 7 dims: hand xyz, gripper, object xyz)", s.t, s.state.map(r => r.slice(0, 7)),
             ["hand x", "hand y", "hand z", "gripper", "obj x", "obj y", "obj z"], seek),
    linePlot(plots, "reward", s.t, s.reward, ["reward"], seek),
  ];
  const trace = detail.trace || {numeric: {}, text: {}};
  const traceNames = Object.keys(trace.numeric);
  if (traceNames.length) {
    cursors.push(linePlot(plots, "the policy's own account (trace)", s.t,
                          s.t.map((_, i) => traceNames.map(n => trace.numeric[n][i])), traceNames, seek));
  }
  const texts = Object.entries(trace.text);
  if (texts.length) {
    const box = document.createElement("div");
    box.className = "plot";
    box.id = "trace-text";
    show(box, html`<h3>trace (text)</h3>${texts.map(([name, runs]) => html`<p><b>${name}</b>: ${
      runs.map(([v, a, b], i) => html`${i ? ", " : ""}${v} <span class="muted">(steps ${a}–${b})</span>`)}</p>`)}`);
    plots.appendChild(box);
  }
  const events = document.createElement("div");
  events.className = "plot";
  show(events, html`<h3>events</h3>`);
  plots.appendChild(events);
  timeline(events, detail.events, tEnd, seek);
  if (video) {
    let frame = 0;
    const follow = () => {
      cursors.forEach(c => c(video.currentTime));
      document.getElementById("clock").textContent = `t = ${video.currentTime.toFixed(2)} s`;
      frame = requestAnimationFrame(follow);
    };
    frame = requestAnimationFrame(follow);
    cleanup.push(() => cancelAnimationFrame(frame));
    video.play().catch(() => {});  // muted autoplay is allowed; controls remain if it is not
  }
}

async function route() {
  cleanup.forEach(f => f());
  cleanup = [];
  const [, kind, arg] = (location.hash.match(/^#\/(c|e|r)(?:\/(.+))?$/) || []);
  try {
    if (kind === "c" && arg) await campaignView(decodeURIComponent(arg));
    else if (kind === "e" && arg) await episodeView(decodeURIComponent(arg));
    else if (kind === "r" && arg) await regressionSetView(decodeURIComponent(arg));
    else if (kind === "r") await regressionView();
    else await campaignsView();
  } catch (error) {
    show(view, html`<section><p class="warn">${error.message}</p></section>`);
  }
}
window.addEventListener("hashchange", route);
route();

// Assay per-layer timeline: /timeline#KEY draws GET /api/episodes/KEY/timeline as one lane per layer.
// Every node is built with createElement and textContent (no innerHTML), so no value from the store is parsed
// as markup. The video's frame i is the image seen at step i, so a click on a lane seeks the video to that step.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const PALETTE = ["#1565c0", "#c62828", "#2e7d32", "#ef6c00", "#6a1b9a", "#00838f"];
const MARK_COLOURS = {ponr: "#b71c1c", success: "#2e7d32", event: "#999"};
const W = 960, GUTTER = 8, ROW = 13, CHAR = 6;

function node(tag, attrs = {}, parent = null, text = null) {
  const made = tag.startsWith("svg:") ? document.createElementNS(SVG_NS, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) made.setAttribute(k, v);
  if (text !== null) made.textContent = text;
  if (parent) parent.appendChild(made);
  return made;
}

function xOf(step, steps) { return GUTTER + (W - 2 * GUTTER) * (steps > 1 ? step / (steps - 1) : 0); }

function stepAt(svg, event, steps) {
  const rect = svg.getBoundingClientRect();
  const frac = ((event.clientX - rect.left) / rect.width * W - GUTTER) / (W - 2 * GUTTER);
  return Math.round(Math.min(1, Math.max(0, frac)) * (steps - 1));
}

function marksRow(parent, marks, steps) {
  // labels never overprint: each goes on the first row where it clears the labels already placed
  const rows = [], placed = [];
  for (const m of marks) {
    const text = `${m.label} @${m.step}`, width = text.length * CHAR, cx = xOf(m.step, steps);
    const start = Math.min(Math.max(cx - width / 2, 0), W - width);
    let row = rows.findIndex(end => start > end + 6);
    if (row < 0) { rows.push(-Infinity); row = rows.length - 1; }
    rows[row] = start + width;
    placed.push({m, text, start, row});
  }
  const svg = node("svg:svg", {class: "marks", viewBox: `0 0 ${W} ${ROW * Math.max(1, rows.length) + 4}`,
                               "data-plot": "marks"}, parent);
  for (const {m, text, start, row} of placed) {
    const g = node("svg:g", {class: "mark", "data-kind": m.kind, "data-step": m.step}, svg);
    node("svg:text", {x: start, y: ROW * (row + 1), "font-size": 10, fill: MARK_COLOURS[m.kind] || "#555"}, g, text);
  }
}

function lanePlot(parent, lane, data, seek) {
  const box = node("div", {class: "lane", "data-layer": lane.layer}, parent);
  node("h3", {}, box, lane.layer);
  const keys = node("div", {class: "keys"}, box);
  const names = Object.keys(lane.series);
  if (Object.keys(lane.facts).length) {
    node("div", {class: "facts"}, box, Object.entries(lane.facts).map(([k, v]) => `${k} ${v}`).join(" · "));
  }
  if (!names.length && !lane.events.length) {  // the executor's part is per episode: its facts, no plot
    if (!Object.keys(lane.facts).length) node("p", {class: "muted"}, box, "nothing recorded in this layer");
    return () => {};
  }
  const svg = node("svg:svg", {class: "lane-plot", viewBox: `0 0 ${W} 64`, preserveAspectRatio: "none",
                               "data-layer": lane.layer}, box);
  names.forEach((name, i) => {
    const values = lane.series[name];
    const finite = values.filter(v => v !== null);
    const lo = Math.min(0, ...finite), hi = Math.max(...finite);
    const span = hi - lo > 1e-12 ? hi - lo : 1;
    const colour = PALETTE[i % PALETTE.length];
    node("span", {style: `color:${colour}`}, keys, `■ ${name.replace(/^layer\./, "")} (max ${hi.toPrecision(3)})`);
    const points = [];
    values.forEach((v, j) => { if (v !== null) points.push(`${xOf(data.rows[j], data.steps).toFixed(1)},${(58 - 52 * (v - lo) / span).toFixed(1)}`); });
    const line = node("svg:polyline", {points: points.join(" "), fill: "none", stroke: colour, "stroke-width": 1.2,
                                       "vector-effect": "non-scaling-stroke", class: "series", "data-name": name}, svg);
    node("svg:title", {}, line, name);
  });
  for (const e of lane.events) {
    const tick = node("svg:line", {x1: xOf(e.step, data.steps), x2: xOf(e.step, data.steps), y1: 52, y2: 64,
                                   stroke: "#444", "stroke-width": 1, class: "event", "data-step": e.step,
                                   "vector-effect": "non-scaling-stroke"}, svg);
    node("svg:title", {}, tick, `${e.label} @${e.step}`);
  }
  if (lane.events_left_out) node("span", {class: "muted"}, keys, `(+${lane.events_left_out} events)`);
  for (const m of data.marks) {
    if (m.kind === "event") continue;
    node("svg:line", {x1: xOf(m.step, data.steps), x2: xOf(m.step, data.steps), y1: 0, y2: 64,
                      stroke: MARK_COLOURS[m.kind], "stroke-width": 1.5, class: "mark-line", "data-kind": m.kind,
                      "vector-effect": "non-scaling-stroke"}, svg);
  }
  const cursor = node("svg:line", {x1: 0, x2: 0, y1: 0, y2: 64, stroke: "#000", "stroke-width": 1, class: "cursor",
                                   "vector-effect": "non-scaling-stroke"}, svg);
  svg.addEventListener("click", event => seek(stepAt(svg, event, data.steps)));
  return step => { const px = xOf(step, data.steps); cursor.setAttribute("x1", px); cursor.setAttribute("x2", px); };
}

async function draw() {
  const view = document.getElementById("view");
  view.replaceChildren();
  const key = decodeURIComponent(location.hash.slice(1));
  if (!key) { node("p", {class: "warn"}, view, "No episode: open /timeline#EPISODE_KEY."); return; }
  const response = await fetch(`/api/episodes/${encodeURIComponent(key)}/timeline`);
  const data = await response.json().catch(() => ({}));
  if (!response.ok) { node("p", {class: "warn", id: "timeline-error"}, view, data.detail || response.statusText); return; }
  const crumbs = document.getElementById("crumbs");
  crumbs.replaceChildren("/ ", node("a", {href: `/#/c/${encodeURIComponent(data.campaign)}`}, null, data.campaign),
                         " / ", node("a", {href: `/#/e/${encodeURIComponent(data.key)}`}, null, data.key.slice(0, 12)));
  const head = node("section", {}, view);
  node("h2", {}, head, `Timeline of episode ${data.key}`);
  node("p", {}, head, `${data.policy} · ${data.task} · ${data.variant} · seed ${data.seed} · ${data.outcome} after ${data.steps} steps`);
  const body = node("section", {class: "timeline-top"}, view);
  const media = node("div", {}, body);
  const lanes = node("div", {id: "lanes"}, body);
  let video = null;
  const camera = data.videos.length ? data.videos[0].camera : null;
  if (camera) {
    video = node("video", {id: "video", controls: "", muted: "", playsinline: "", preload: "auto"}, media);
    video.muted = true;
    video.src = "/api/files/" + data.videos[0].path;
    node("p", {class: "muted", id: "clock"}, media, "");
  } else {
    node("p", {class: "muted"}, media, "No camera video for this episode.");
  }
  marksRow(lanes, data.marks, data.steps);
  const frames = camera ? data.frames[camera] || [] : [];
  const seek = step => {
    cursors.forEach(c => c(step));
    if (!video || !data.video_rate) return;
    const row = data.rows.findIndex(r => r >= step);
    const frame = frames[row < 0 ? frames.length - 1 : row];
    if (frame !== null && frame !== undefined && frame >= 0) video.currentTime = frame / data.video_rate;
  };
  const cursors = data.lanes.map(lane => lanePlot(lanes, lane, data, seek));
  if (video) {
    const follow = () => {
      const step = Math.round(video.currentTime * data.video_rate);
      const shown = frames.findIndex(f => f !== null && f >= step);
      cursors.forEach(c => c(shown < 0 ? data.steps - 1 : data.rows[shown]));
      document.getElementById("clock").textContent = `t = ${video.currentTime.toFixed(2)} s`;
      requestAnimationFrame(follow);
    };
    requestAnimationFrame(follow);
  }
}

window.addEventListener("hashchange", draw);
draw();

// The usage view: what each app (the key's name) used of each model, from GET /v1/usage.
// A table of totals per app and model, and one bar plot per app and model with a bar
// per day (plain SVG). An admin key sees every app, a client key its own.
// Uses $, api and notice from app.js.
"use strict";

const USAGE_MEASURES = {
  requests: "requests",
  total_tokens: "tokens (input + output)",
  input_tokens: "input tokens",
  output_tokens: "output tokens",
  audio_seconds: "seconds of audio",
  images: "images",
  duration: "seconds answering",
};
const SVG = "http://www.w3.org/2000/svg";
const DAY = 86400;

function usageDays(start, end) {
  const days = [];
  for (let t = Math.floor(start / DAY) * DAY; t < end; t += DAY) {
    days.push(new Date(t * 1000).toISOString().slice(0, 10));
  }
  return days;
}

function svgNode(name, attributes, text) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attributes)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

function figure(value) {
  if (value >= 1e6) return (value / 1e6).toFixed(1) + "M";
  if (value >= 1e4) return (value / 1e3).toFixed(0) + "k";
  return Number.isInteger(value) ? String(value) : value.toFixed(1);
}

// One plot: a bar per day of `measure`, the largest day's value on top.
function usagePlot(title, perDay, days, measure) {
  const width = 360, height = 120, top = 14, bottom = 16;
  const values = days.map((d) => perDay[d]?.[measure] || 0);
  const most = Math.max(...values, 0);
  const slot = width / days.length;
  const svg = svgNode("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", class: "usage-plot" });
  svg.append(svgNode("title", {}, `${title}: ${USAGE_MEASURES[measure]} per day`));
  values.forEach((value, i) => {
    const h = most ? (value / most) * (height - top - bottom) : 0;
    const bar = svgNode("rect", {
      x: i * slot + slot * 0.1, y: height - bottom - h, width: Math.max(slot * 0.8, 1), height: h,
      "data-day": days[i], "data-value": value,
    });
    bar.append(svgNode("title", {}, `${days[i]}: ${figure(value)}`));
    svg.append(bar);
  });
  svg.append(svgNode("line", { x1: 0, x2: width, y1: height - bottom, y2: height - bottom }));
  svg.append(svgNode("text", { x: 0, y: 10 }, `max ${figure(most)}`));
  svg.append(svgNode("text", { x: 0, y: height - 3 }, days[0]));
  svg.append(svgNode("text", { x: width, y: height - 3, "text-anchor": "end" }, days[days.length - 1]));
  return svg;
}

async function loadUsage() {
  const range = Number($("#usage-range").value);
  const measure = $("#usage-measure").value;
  const end = Date.now() / 1000;
  const start = end - range * DAY;
  $("#usage-state").textContent = "loading…";
  let rows;
  try {
    const response = await api(`/v1/usage?group_by=key,model,day&start=${start}&end=${end}`);
    rows = (await response.json()).data;
    notice("", "usage");
  } catch (error) {
    $("#usage-state").textContent = "";
    notice("Usage: " + error.message, "usage");
    return;
  }
  const days = usageDays(start, end);
  const series = new Map();  // "app\u0000model" → {key, model, days: {day: row}, total}
  for (const row of rows) {
    const id = row.key + "\u0000" + row.model;
    if (!series.has(id)) series.set(id, { key: row.key, model: row.model, days: {}, total: {} });
    const s = series.get(id);
    s.days[row.day] = row;
    for (const [name, value] of Object.entries(row)) {
      if (typeof value === "number") s.total[name] = (s.total[name] || 0) + value;
    }
  }
  const columns = { requests: "Requests", input_tokens: "Input", cached_tokens: "Cached",
    output_tokens: "Output", audio_seconds: "Audio s", images: "Images", errors: "Errors" };
  $("#usage-table tbody").replaceChildren(...[...series.values()].map((s) => {
    const tr = document.createElement("tr");
    for (const [label, value] of [["App", s.key], ["Model", s.model], ...Object.entries(columns).map(([c, label]) => [label, figure(s.total[c] || 0)])]) {
      const td = document.createElement("td");
      td.dataset.label = label;
      td.textContent = value;
      tr.append(td);
    }
    return tr;
  }));
  $("#usage-plots").replaceChildren(...[...series.values()].map((s) => {
    const box = document.createElement("figure");
    box.className = "usage-series";
    box.dataset.key = s.key;
    box.dataset.model = s.model;
    const caption = document.createElement("figcaption");
    caption.textContent = `${s.key} · ${s.model}: ${figure(s.total[measure] || 0)} ${USAGE_MEASURES[measure]}`;
    box.append(caption, usagePlot(`${s.key} · ${s.model}`, s.days, days, measure));
    return box;
  }));
  $("#usage-empty").hidden = series.size > 0;
  $("#usage-state").textContent = `${rows.length} day rows, ${new Date().toLocaleTimeString()}`;
}

$("#usage-measure").replaceChildren(...Object.entries(USAGE_MEASURES).map(([v, label]) => new Option(label, v)));
for (const id of ["#usage-range", "#usage-measure"]) $(id).addEventListener("change", loadUsage);
$("#usage-refresh").addEventListener("click", loadUsage);
$('nav button[data-view="usage"]').addEventListener("click", loadUsage);
if (location.hash === "#usage") loadUsage();

// mlx-gateway web UI: plain JavaScript, no build step. Everything it shows comes
// from the gateway's own API, called with the key typed into the page.
"use strict";

const $ = (sel) => document.querySelector(sel);
const state = { models: [], samples: [], logAbort: null, chatAbort: null, recorder: null, recorded: null };
const HISTORY_SECONDS = 300;

// ------------------------------------------------------------------ API access
function key() { return localStorage.getItem("mlx-gateway-key") || ""; }
function headers(extra = {}) {
  const h = { ...extra };
  if (key()) h["Authorization"] = "Bearer " + key();
  return h;
}
// One notice line; each part of the page clears only the notice it set itself.
function notice(text, source = "action") {
  const el = $("#notice");
  if (!text && el.dataset.source && el.dataset.source !== source) return;
  el.textContent = text || "";
  el.dataset.source = text ? source : "";
  el.hidden = !text;
}
async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: headers(options.headers) });
  if (!response.ok) {
    let message = response.status + " " + response.statusText;
    try { const body = await response.json(); message = body.error?.message || message; } catch (e) { /* not JSON */ }
    const error = new Error(message);
    error.status = response.status;
    throw error;
  }
  return response;
}
// Reads an SSE body: onEvent(json or "[DONE]") for data lines, onComment(text) for ": …".
async function readSSE(response, onEvent, onComment) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of block.split("\n")) {
        if (line.startsWith("data: ")) {
          const data = line.slice(6);
          onEvent(data === "[DONE]" ? data : JSON.parse(data));
        } else if (line.startsWith(":") && onComment) {
          onComment(line.slice(1).trim());
        }
      }
    }
  }
}

// ------------------------------------------------------------------ views
function show(view) {
  for (const tab of document.querySelectorAll("nav button")) {
    tab.setAttribute("aria-selected", String(tab.dataset.view === view));
  }
  for (const section of document.querySelectorAll(".view")) {
    section.hidden = section.id !== "view-" + view;
  }
  if (view === "logs") startLogs(); else stopLogs();
  location.hash = view;
}

// ------------------------------------------------------------------ models
function bytes(n) {
  if (n == null) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return n.toFixed(n < 10 && i ? 1 : 0) + " " + units[i];
}
function rate(model, field, seconds) {
  const now = state.samples[state.samples.length - 1];
  if (!now) return 0;
  const then = state.samples.find((s) => now.time - s.time <= seconds) || now;
  const dt = now.time - then.time;
  if (dt <= 0) return 0;
  return ((now.models[model]?.[field] || 0) - (then.models[model]?.[field] || 0)) / dt;
}
function sparkline(model) {
  const points = [];
  for (let i = 1; i < state.samples.length; i++) {
    const a = state.samples[i - 1], b = state.samples[i];
    const dt = b.time - a.time;
    const tokens = (b.models[model]?.completion_tokens || 0) - (a.models[model]?.completion_tokens || 0);
    points.push(dt > 0 ? tokens / dt : 0);
  }
  const max = Math.max(1, ...points);
  const w = 90, h = 22;
  const path = points.map((p, i) => `${(i / Math.max(1, points.length - 1)) * w},${h - (p / max) * h}`).join(" ");
  return `<svg class="spark" width="${w}" height="${h}" aria-hidden="true"><polyline fill="none" stroke="currentColor" stroke-width="1.2" points="${path}"/></svg>`;
}
function escapeHtml(text) {
  return String(text ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function renderBudget(health) {
  const memory = health.memory || health.budget;
  const box = $("#budget");
  if (!memory || memory.budget == null) { box.hidden = true; return; }
  box.hidden = false;
  const reserved = memory.reserved ?? 0;
  box.querySelector(".budget-text").textContent =
    `Memory budget ${bytes(memory.budget)} · reserved ${bytes(reserved)} · free ${bytes(memory.free ?? memory.budget - reserved)}`;
  box.querySelector(".reserved").style.width = Math.min(100, (100 * reserved) / memory.budget) + "%";
}
function fitText(fit) {
  if (!fit) return '<span class="muted">–</span>';
  const words = { resident: "loaded", fits: "yes", too_big: "too big for the budget" };
  if (fit.verdict === "evicts") return "evicts " + escapeHtml(fit.evict.join(", "));
  if (fit.verdict === "waits") return "waits for " + escapeHtml(fit.blockers.join(", "));
  return escapeHtml(words[fit.verdict] || fit.verdict);
}
function expiry(m) {
  // When an idle model will be unloaded (its idle_timeout, or a client's keep_alive).
  if (m.state !== "ready") return "";
  if (m.expires_at == null) return m.keep_alive === -1 ? '<div class="muted">kept loaded</div>' : "";
  const at = new Date(m.expires_at * 1000).toLocaleTimeString();
  return `<div class="muted" data-expires>unloads at ${escapeHtml(at)}</div>`;
}
const SOURCES = { hub_cache: "HF cache", pulled: "pulled", ollama: "Ollama library", lmstudio: "LM Studio" };
function renderModels() {
  const budget = state.budget || 0;
  // A route (m.route) is no model to load: it is offered in the playground only.
  const rows = state.models.filter((m) => !m.route).map((m) => {
    const need = m.memory ?? m.memory_need;
    const width = budget && need ? Math.min(100, (100 * need) / budget) : 0;
    const progress = m.load_progress ? ` ${Math.round(100 * (m.load_progress.fraction || 0))}% ${escapeHtml(m.load_progress.stage)}` : "";
    const perMinute = rate(m.id, "requests", 60) * 60;
    const tokens = rate(m.id, "completion_tokens", 60);
    return `<tr data-model="${escapeHtml(m.id)}">
      <td data-label="Model"><strong>${escapeHtml(m.id)}</strong>${m.aliases?.length ? `<div class="muted">${escapeHtml(m.aliases.join(", "))}</div>` : ""}</td>
      <td data-label="Type">${escapeHtml(m.model_type)}${m.source && m.source !== "config" ? `<div class="muted">${escapeHtml(SOURCES[m.source] || m.source)}</div>` : ""}</td>
      <td data-label="State"><span class="state state-${escapeHtml(m.state)}">${escapeHtml(m.state)}</span>${progress}${m.pinned ? ' <span class="muted">pinned</span>' : ""}${m.draining ? ' <span class="muted">draining</span>' : ""}${expiry(m)}</td>
      <td data-label="Memory">${bytes(need)}${m.memory == null && need != null ? ' <span class="muted">(est.)</span>' : ""}<div class="bar"><span style="width:${width}%"></span></div></td>
      <td data-label="Fits?">${fitText(m.fit)}</td>
      <td data-label="Requests">${m.inflight} in flight · ${m.waiting ?? 0} queued<div class="muted">${perMinute.toFixed(1)}/min · ${tokens.toFixed(1)} tok/s</div>${m.step ? `<div class="muted">step: ${escapeHtml(m.step)}</div>` : ""}</td>
      <td data-label="Activity">${sparkline(m.id)}</td>
      <td data-label="Last error">${m.error ? escapeHtml(m.error) : '<span class="muted">–</span>'}${m.crashes ? `<div class="muted">${m.crashes} crash(es)${m.stalls ? `, ${m.stalls} stuck` : ""}</div>` : ""}</td>
      <td class="actions">
        <button data-action="load" ${m.state === "ready" || m.state === "loading" ? "disabled" : ""}>Load</button>
        <button data-action="unload" ${m.state === "unloaded" ? "disabled" : ""}>Unload</button>
        <button data-action="pin">${m.pinned ? "Unpin" : "Pin"}</button>
      </td></tr>`;
  });
  $("#models tbody").innerHTML = rows.join("");
}
// The requests running now (GET /v1/requests, an admin endpoint: hidden without access).
async function refreshRequests() {
  const table = $("#requests");
  let running;
  try {
    running = (await api("/v1/requests").then((r) => r.json())).data;
  } catch (error) {
    table.hidden = true;
    return;
  }
  table.hidden = false;
  $("#requests tbody").innerHTML = running.length ? running.map((r) => `<tr data-request="${escapeHtml(r.id)}">
      <td data-label="Request"><code>${escapeHtml(r.id)}</code></td>
      <td data-label="Model">${escapeHtml(r.model || "–")}</td>
      <td data-label="Path">${escapeHtml(r.path)}</td>
      <td data-label="Phase">${escapeHtml(r.phase)}</td>
      <td data-label="Age">${Number(r.age).toFixed(1)} s</td>
      <td data-label="Tokens">${r.prompt_tokens} in · ${r.completion_tokens} out</td>
      <td data-label="Client">${escapeHtml(r.client || "–")}</td>
      <td class="actions"><button data-action="cancel">Cancel</button></td></tr>`).join("")
    : '<tr><td colspan="8" class="muted">No request running.</td></tr>';
}
async function cancelRequest(id) {
  try {
    await api(`/v1/requests/${encodeURIComponent(id)}/cancel`, { method: "POST" });
    notice("");
  } catch (error) {
    notice(`cancel '${id}' refused: ${error.message}`);
  }
  refreshRequests();
}
async function refresh() {
  refreshRequests();
  try {
    const [models, stats, health] = await Promise.all([
      api("/v1/models").then((r) => r.json()),
      api("/ui/stats").then((r) => r.json()),
      fetch("/health").then((r) => r.json()),
    ]);
    state.models = models.data;
    state.samples.push(stats);
    while (state.samples.length > 2 && stats.time - state.samples[0].time > HISTORY_SECONDS) state.samples.shift();
    const memory = health.memory || health.budget;
    state.budget = memory?.budget || 0;
    renderBudget(health);
    renderModels();
    fillModelSelects();
    notice("", "refresh");
  } catch (error) {
    notice(error.status === 401 ? "This gateway needs an API key: type it at the top right." : "Cannot reach the gateway: " + error.message, "refresh");
  }
}
async function modelAction(name, action, pinned) {
  const path = `/v1/models/${encodeURIComponent(name).replace(/%2F/g, "/")}/${action}`;
  const body = action === "pin" ? JSON.stringify({ pinned: !pinned }) : undefined;
  try {
    await api(path, { method: "POST", body, headers: body ? { "Content-Type": "application/json" } : {} });
    notice("");
  } catch (error) {
    notice(`${action} '${name}' refused: ${error.message}`);
  }
  refresh();
}

// Pulls a Hugging Face repo through Ollama's /api/pull (an admin endpoint) and
// shows its NDJSON progress; the model is served by its repo id once it succeeds.
async function pullModel(event) {
  event.preventDefault();
  const repo = $("#pull-repo").value.trim();
  const status = $("#pull-state");
  const button = $("#pull-run");
  if (!repo) return;
  button.disabled = true;
  status.textContent = `pulling ${repo}…`;
  try {
    const response = await fetch("/api/pull", {
      method: "POST",
      headers: headers({ "Content-Type": "application/json" }),
      body: JSON.stringify({ model: repo, stream: true }),
    });
    if (!response.ok) {
      let message = response.status + " " + response.statusText;
      try { const body = await response.json(); message = body.error?.message || body.error || message; } catch (e) { /* not JSON */ }
      throw new Error(message);
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "", last = {};
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, cut).trim();
        buffer = buffer.slice(cut + 1);
        if (!line) continue;
        last = JSON.parse(line);
        if (last.error) throw new Error(last.error);
        const part = last.total ? ` ${bytes(last.completed || 0)} of ${bytes(last.total)}` : "";
        status.textContent = `${last.status}${part}`;
      }
    }
    if (last.status !== "success") throw new Error("the pull ended early");
    status.textContent = `${repo}: pulled, served as ${repo}`;
    notice("");
  } catch (error) {
    status.textContent = "";
    notice(error.message.startsWith("pull ") ? error.message : `pull ${repo}: ${error.message}`);
  } finally {
    button.disabled = false;
    refresh();
  }
}

// ------------------------------------------------------------------ logs
function fillModelSelects() {
  const names = state.models.map((m) => m.id);
  for (const [sel, withAll] of [["#log-model", true], ["#pg-model", false]]) {
    const select = $(sel);
    const current = [...select.options].map((o) => o.value).filter((v) => v);
    if (current.join("\n") === names.join("\n")) continue;
    const value = select.value;
    select.innerHTML = (withAll ? '<option value="">all</option>' : "") +
      names.map((n) => `<option value="${escapeHtml(n)}">${escapeHtml(n)}</option>`).join("");
    if (names.includes(value)) select.value = value;
    if (sel === "#pg-model") choosePlayground();
  }
  chooseAdapters(state.models.find((m) => m.id === $("#pg-model").value));
  window.fillTalk?.(); // talk.js
}
function stopLogs() {
  if (state.logAbort) state.logAbort.abort();
  state.logAbort = null;
}
async function startLogs() {
  stopLogs();
  const controller = new AbortController();
  state.logAbort = controller;
  const model = $("#log-model").value;
  const out = $("#log-lines");
  out.textContent = "";
  $("#log-state").textContent = "connecting…";
  try {
    const response = await api("/ui/logs" + (model ? "?model=" + encodeURIComponent(model) : ""), { signal: controller.signal });
    $("#log-state").textContent = "live";
    notice("", "logs");
    await readSSE(response, (entry) => {
      const line = document.createElement("span");
      line.className = "lvl-" + entry.level;
      const time = new Date(entry.ts * 1000).toLocaleTimeString();
      line.textContent = `${time} ${entry.level.padEnd(7)} ${entry.model ? "[" + entry.model + "] " : ""}${entry.message}\n`;
      out.appendChild(line);
      while (out.childNodes.length > 2000) out.removeChild(out.firstChild);
      if ($("#log-follow").checked) out.scrollTop = out.scrollHeight;
    });
    $("#log-state").textContent = "ended";
  } catch (error) {
    if (error.name !== "AbortError") {
      $("#log-state").textContent = "";
      notice(error.status === 403 || error.status === 401 ? "Logs need the admin key: " + error.message : "Logs: " + error.message, "logs");
    }
  }
}

// ------------------------------------------------------------------ playground
function kindOf(model) {
  const type = model?.model_type || "";
  if (type === "vlm" || type === "multimodal") return "vlm";
  if (type === "embeddings") return "embeddings";
  if (type === "whisper") return "audio";
  if (type === "tts") return "speak";
  if (type.startsWith("image")) return "image";
  return "lm";
}
function choosePlayground() {
  const model = state.models.find((m) => m.id === $("#pg-model").value);
  const kind = kindOf(model);
  $("#pg-kind").textContent = model ? model.model_type : "";
  $("#pg-chat").hidden = !(kind === "lm" || kind === "vlm");
  $("#chat-image-label").hidden = kind !== "vlm";
  chooseAdapters(model);
  $("#pg-embeddings").hidden = kind !== "embeddings";
  $("#pg-audio").hidden = kind !== "audio";
  $("#pg-speak").hidden = kind !== "speak";
  if (kind === "speak") listVoices(model);
  $("#pg-image").hidden = kind !== "image";
}
function chooseAdapters(model) {
  // A language model's LoRA adapters: the model's default, the base model, or one.
  const ids = model?.adapters || [];
  const select = $("#chat-adapter");
  const listed = (model?.id || "") + ":" + ids.join("\n");
  if (select.dataset.listed === listed) return; // unchanged: keep the open list as it is
  select.dataset.listed = listed;
  const kept = select.value;
  select.replaceChildren();
  for (const [value, label] of [["", "model default"], ["none", "none (base model)"], ...ids.map((id) => [id, id])]) {
    const option = document.createElement("option");
    option.value = value;
    option.textContent = label;
    select.appendChild(option);
  }
  if (ids.includes(kept) || kept === "none") select.value = kept;
  $("#chat-adapter-label").hidden = ids.length === 0;
}
function bubble(role) {
  const el = document.createElement("div");
  el.className = "msg " + role;
  $("#chat-log").appendChild(el);
  return el;
}
const chatHistory = [];
function fileAsDataURL(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}
async function sendChat(event) {
  event.preventDefault();
  const text = $("#chat-input").value.trim();
  if (!text) return;
  const media = $("#chat-image").files[0];
  let content = text;
  if (media && !$("#chat-image-label").hidden) {
    // A video goes as a video_url part (the worker samples its frames), else an image.
    const url = await fileAsDataURL(media);
    const part = media.type.startsWith("video/")
      ? { type: "video_url", video_url: { url } }
      : { type: "image_url", image_url: { url } };
    content = [part, { type: "text", text }];
    $("#chat-image").value = "";
  }
  chatHistory.push({ role: "user", content });
  bubble("user").textContent = media && content !== text ? `[${media.name}] ${text}` : text;
  $("#chat-input").value = "";
  const answer = bubble("assistant");
  const reasoning = document.createElement("details");
  reasoning.innerHTML = "<summary>Reasoning</summary><div></div>";
  reasoning.hidden = true;
  const body = document.createElement("div");
  const tools = document.createElement("div");
  tools.className = "tools";
  answer.append(reasoning, body, tools);
  const calls = [];
  const controller = new AbortController();
  state.chatAbort = controller;
  $("#chat-stop").hidden = false;
  $("#chat-send").disabled = true;
  try {
    const response = await api("/v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({
        model: $("#pg-model").value,
        messages: chatHistory,
        stream: true,
        ...(!$("#chat-adapter-label").hidden && $("#chat-adapter").value ? { adapter: $("#chat-adapter").value } : {}),
      }),
      signal: controller.signal,
    });
    await readSSE(response, (chunk) => {
      if (chunk === "[DONE]") return;
      if (chunk.error) throw new Error(chunk.error.message);
      const delta = chunk.choices?.[0]?.delta || {};
      if (delta.reasoning_content) {
        reasoning.hidden = false;
        reasoning.querySelector("div").textContent += delta.reasoning_content;
      }
      if (delta.content) body.textContent += delta.content;
      for (const call of delta.tool_calls || []) {
        const entry = (calls[call.index] ||= { name: "", arguments: "" });
        entry.name += call.function?.name || "";
        entry.arguments += call.function?.arguments || "";
        tools.textContent = calls.map((c) => `tool call ${c.name}(${c.arguments})`).join("\n");
      }
    });
    chatHistory.push({ role: "assistant", content: body.textContent });
  } catch (error) {
    if (error.name !== "AbortError") body.textContent += `\n[error: ${error.message}]`;
  } finally {
    $("#chat-stop").hidden = true;
    $("#chat-send").disabled = false;
    state.chatAbort = null;
  }
}
async function compareEmbeddings() {
  const texts = $("#emb-input").value.split("\n").map((t) => t.trim()).filter(Boolean);
  const out = $("#emb-out");
  try {
    const reply = await (await api("/v1/embeddings", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ model: $("#pg-model").value, input: texts }),
    })).json();
    const vectors = reply.data.map((d) => d.embedding);
    const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
    const cos = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0) / (norm(a) * norm(b));
    let html = '<table class="sim"><tr><th></th>' + texts.map((_, i) => `<th>${i + 1}</th>`).join("") + "</tr>";
    texts.forEach((t, i) => {
      html += `<tr><th title="${escapeHtml(t)}">${i + 1}. ${escapeHtml(t.slice(0, 40))}</th>` +
        vectors.map((v) => `<td>${cos(vectors[i], v).toFixed(3)}</td>`).join("") + "</tr>";
    });
    out.innerHTML = html + "</table>";
  } catch (error) {
    out.textContent = "error: " + error.message;
  }
}
async function nearestText(file) {
  const texts = $("#emb-input").value.split("\n").map((t) => t.trim()).filter(Boolean);
  const out = $("#emb-image-out");
  const image = file || $("#emb-image").files[0];
  if (!image || !texts.length) { out.textContent = "pick an image and write a few texts above"; return; }
  out.textContent = "embedding…";
  try {
    const url = await fileAsDataURL(image);
    const response = await api("/v1/embeddings", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({
        model: $("#pg-model").value,
        input: [{ type: "image_url", image_url: { url } }, ...texts],
        encoding_format: "float",
      }),
    });
    const reply = await response.json();
    const [picture, ...vectors] = reply.data.map((d) => d.embedding);
    const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
    const cos = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0) / (norm(a) * norm(b));
    const ranked = texts.map((t, i) => [t, cos(picture, vectors[i])]).sort((a, b) => b[1] - a[1]);
    out.innerHTML = `<img class="emb-thumb" alt="" src="${url}"><table class="sim">` +
      ranked.map(([t, c], i) => `<tr${i ? "" : ' class="nearest"'}><th>${escapeHtml(t)}</th>` +
        `<td>${c.toFixed(3)}</td></tr>`).join("") + "</table>";
  } catch (error) {
    out.textContent = "error: " + error.message;
  }
}
async function toggleRecording() {
  if (state.recorder) { state.recorder.stop(); return; }
  try {
    const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    const recorder = new MediaRecorder(stream);
    const parts = [];
    recorder.ondataavailable = (e) => parts.push(e.data);
    recorder.onstop = () => {
      stream.getTracks().forEach((t) => t.stop());
      state.recorded = new Blob(parts, { type: recorder.mimeType });
      state.recorder = null;
      $("#audio-record").textContent = "Record";
      $("#audio-out").textContent = `recorded ${(state.recorded.size / 1024).toFixed(0)} KB: press Transcribe`;
    };
    recorder.start();
    state.recorder = recorder;
    $("#audio-record").textContent = "Stop recording";
  } catch (error) {
    $("#audio-out").textContent = "cannot record: " + error.message;
  }
}
async function transcribe() {
  const file = $("#audio-file").files[0] || state.recorded;
  if (!file) { $("#audio-out").textContent = "choose or record a file first"; return; }
  const form = new FormData();
  form.append("file", file, file.name || "recording.webm");
  form.append("model", $("#pg-model").value);
  $("#audio-out").textContent = "";
  try {
    form.append("stream", "true");
    const response = await api("/v1/audio/transcriptions", { method: "POST", body: form });
    await readSSE(response, (event) => {
      if (event === "[DONE]") return;
      if (event.type === "transcript.text.delta") $("#audio-out").textContent += event.delta;
      if (event.type === "transcript.text.done") $("#audio-out").textContent = event.text;
    });
  } catch (error) {
    $("#audio-out").textContent = "error: " + error.message;
  }
}
async function generateImage() {
  const steps = Number($("#img-steps").value) || 4;
  $("#img-progress").textContent = "waiting for the model…";
  $("#img-bar").style.width = "0";
  try {
    const response = await api("/v1/images/generations", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ model: $("#pg-model").value, prompt: $("#img-prompt").value,
                             size: $("#img-size").value, steps, stream: true, partial_images: 1 }),
    });
    await readSSE(response, (event) => {
      if (event === "[DONE]" || !event.b64_json) return;
      $("#img-out").src = "data:image/png;base64," + event.b64_json;
      $("#img-out").hidden = false;
      if (event.type.endsWith("completed")) { $("#img-progress").textContent = "done"; $("#img-bar").style.width = "100%"; }
    }, (comment) => {
      const m = comment.match(/step (\d+)\/(\d+)/);
      if (m) {
        $("#img-progress").textContent = comment;
        $("#img-bar").style.width = (100 * Number(m[1])) / Number(m[2]) + "%";
      }
    });
  } catch (error) {
    $("#img-progress").textContent = "error: " + error.message;
  }
}

async function listVoices(model) {
  // The voices of loaded models only: listing never starts a model.
  try {
    const body = await (await api("/v1/audio/voices")).json();
    const names = body.data.filter((v) => v.model === model.id).map((v) => v.id);
    $("#speak-voices").replaceChildren(...names.map((name) => new Option(name, name)));
  } catch (error) { /* the list is a convenience: any name can be typed */ }
}
async function speak() {
  const format = $("#speak-format").value;
  $("#speak-state").textContent = "synthesizing…";
  $("#speak-audio").hidden = true;
  const started = performance.now();
  try {
    const response = await api("/v1/audio/speech", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ model: $("#pg-model").value, input: $("#speak-input").value,
                             voice: $("#speak-voice").value || "default", response_format: format }),
    });
    const audio = await response.blob();
    const player = $("#speak-audio");
    if (player.src) URL.revokeObjectURL(player.src);
    player.src = URL.createObjectURL(audio);
    player.hidden = false;
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    $("#speak-state").textContent = `${(audio.size / 1024).toFixed(0)} KB of ${format} in ${seconds} s`;
    listVoices(state.models.find((m) => m.id === $("#pg-model").value) || { id: "" });
  } catch (error) {
    $("#speak-state").textContent = "error: " + error.message;
  }
}

// ------------------------------------------------------------------ wiring
$("#key").value = key();
$("#key").addEventListener("change", () => { localStorage.setItem("mlx-gateway-key", $("#key").value); notice("", $("#notice").dataset.source); refresh(); if (!$("#view-logs").hidden) startLogs(); });
for (const tab of document.querySelectorAll("nav button")) tab.addEventListener("click", () => show(tab.dataset.view));
$("#models tbody").addEventListener("click", (event) => {
  const button = event.target.closest("button[data-action]");
  if (!button) return;
  const name = button.closest("tr").dataset.model;
  const model = state.models.find((m) => m.id === name);
  modelAction(name, button.dataset.action, model?.pinned);
});
$("#requests tbody").addEventListener("click", (event) => {
  const button = event.target.closest("button[data-action=cancel]");
  if (button) cancelRequest(button.closest("tr").dataset.request);
});
$("#log-model").addEventListener("change", startLogs);
$("#log-clear").addEventListener("click", () => { $("#log-lines").textContent = ""; });
$("#pg-model").addEventListener("change", choosePlayground);
$("#chat-form").addEventListener("submit", sendChat);
function dropOnChat(event) {
  // A vision model's chat takes a dropped image or video as its next message's file.
  if ($("#chat-image-label").hidden) return;
  event.preventDefault();
  const file = event.dataTransfer?.files?.[0];
  $("#pg-chat").style.outline = event.type === "dragover" ? "2px dashed currentColor" : "";
  if (event.type !== "drop" || !file) return;
  if (!/^(image|video)\//.test(file.type)) return;
  const picked = new DataTransfer();
  picked.items.add(file);
  $("#chat-image").files = picked.files;
}
for (const type of ["dragover", "dragleave", "drop"]) $("#pg-chat").addEventListener(type, dropOnChat);
$("#chat-stop").addEventListener("click", () => state.chatAbort?.abort());
$("#emb-run").addEventListener("click", compareEmbeddings);
$("#emb-nearest").addEventListener("click", () => nearestText());
$("#emb-image").addEventListener("change", () => nearestText());
$("#pg-embeddings").addEventListener("dragover", (e) => e.preventDefault());
$("#pg-embeddings").addEventListener("drop", (e) => {
  const file = [...e.dataTransfer.files].find((f) => f.type.startsWith("image/"));
  if (!file) return;
  e.preventDefault();
  nearestText(file);
});
$("#pull-form").addEventListener("submit", pullModel);
$("#audio-record").addEventListener("click", toggleRecording);
$("#audio-run").addEventListener("click", transcribe);
$("#img-run").addEventListener("click", generateImage);
$("#speak-run").addEventListener("click", speak);
refresh();
setInterval(refresh, 2000);
const VIEWS = ["models", "logs", "playground", "talk", "usage"];
const wanted = (location.hash || "").slice(1);
show(VIEWS.includes(wanted) ? wanted : "models");

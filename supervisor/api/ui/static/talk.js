// The talk view: a voice conversation over the gateway's Realtime API (/v1/realtime).
// The microphone is resampled to 24 kHz pcm16 and streamed as input_audio_buffer.append;
// the server's VAD finds the turns; transcripts and answers are shown as they stream and
// the answer's audio is played as it arrives. Uses $, key, api, state from app.js.
"use strict";

const RATE = 24000;
const talk = { ws: null, ctx: null, stream: null, node: null, pending: [], sources: [], playAt: 0, rest: null, pos: 0 };
// The capture worklet: hands each 128-frame block of the first channel to the page.
const CAPTURE = `registerProcessor("capture", class extends AudioWorkletProcessor {
  process(inputs) { if (inputs[0][0]) this.port.postMessage(inputs[0][0].slice(0)); return true; }
});`;

function fillTalk() {
  const lms = state.models.filter((m) => ["lm", "vlm"].includes(kindOf(m))).map((m) => m.id);
  const select = $("#talk-model");
  if ([...select.options].map((o) => o.value).join("\n") !== lms.join("\n")) {
    const value = select.value;
    select.replaceChildren(...lms.map((id) => new Option(id, id)));
    if (lms.includes(value)) select.value = value;
  }
  const tts = state.models.filter((m) => m.model_type === "tts").map((m) => m.id);
  $("#talk-voice-label").hidden = !tts.length;
  if (tts.length && !$("#talk-voices").options.length) {
    // The voices of loaded tts models (listing never starts a model); any name can be typed.
    api("/v1/audio/voices").then((r) => r.json()).then((body) => $("#talk-voices").replaceChildren(
      ...body.data.filter((v) => tts.includes(v.model)).map((v) => new Option(v.id, v.id)))).catch(() => {});
  }
  $("#talk-start").disabled = !lms.length || !!talk.ws;
}
function talkState(text) {
  $("#talk-state").textContent = text;
  $("#view-talk").dataset.state = text;
}
function talkStats() {
  const s = $("#talk-stats");
  s.textContent = `audio out: ${s.dataset.chunks} chunks, ${(s.dataset.receivedMs / 1000).toFixed(1)} s received, ` +
    `${(s.dataset.playedMs / 1000).toFixed(1)} s played` +
    (Number(s.dataset.bargeIns) ? ` · ${s.dataset.bargeIns} barge-in(s)` : "");
}
function count(field, by) {
  const s = $("#talk-stats");
  s.dataset[field] = Number(s.dataset[field] || 0) + by;
  talkStats();
}
// One message per conversation item, appended to as its deltas come.
function talkMessage(id, role) {
  let el = document.querySelector(`#talk-log [data-item="${CSS.escape(id)}"]`);
  if (!el) {
    el = document.createElement("div");
    el.className = "msg " + role;
    el.dataset.item = id;
    $("#talk-log").appendChild(el);
  }
  return el;
}

// The microphone's float samples at the context's rate → pcm16 at 24 kHz (linear).
function resample(input) {
  const samples = talk.rest ? Float32Array.of(talk.rest, ...input) : input;
  const step = talk.ctx.sampleRate / RATE;
  const out = new Int16Array(Math.max(0, Math.ceil((samples.length - 1 - talk.pos) / step)));
  let i = 0;
  for (; talk.pos < samples.length - 1; talk.pos += step, i++) {
    const at = Math.floor(talk.pos), frac = talk.pos - at;
    const v = samples[at] + (samples[at + 1] - samples[at]) * frac;
    out[i] = Math.max(-1, Math.min(1, v)) * 32767;
  }
  talk.pos -= samples.length - 1;
  talk.rest = samples[samples.length - 1];
  return out.subarray(0, i);
}
function sendAudio(block) {
  talk.pending.push(resample(block));
  const total = talk.pending.reduce((n, a) => n + a.length, 0);
  if (total < RATE / 10 || talk.ws?.readyState !== WebSocket.OPEN) return; // ~100 ms per event
  const pcm = new Int16Array(total);
  let at = 0;
  for (const a of talk.pending) { pcm.set(a, at); at += a.length; }
  talk.pending = [];
  let binary = "";
  const bytes = new Uint8Array(pcm.buffer);
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  talk.ws.send(JSON.stringify({ type: "input_audio_buffer.append", audio: btoa(binary) }));
}

// Each audio delta is scheduled right after the previous one.
function play(b64) {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const pcm = new Int16Array(bytes.buffer, 0, bytes.length >> 1);
  if (!pcm.length) return;
  const buffer = talk.ctx.createBuffer(1, pcm.length, RATE);
  buffer.getChannelData(0).set(Float32Array.from(pcm, (v) => v / 32768));
  const source = talk.ctx.createBufferSource();
  source.buffer = buffer;
  source.connect(talk.ctx.destination);
  talk.playAt = Math.max(talk.playAt, talk.ctx.currentTime);
  source.start(talk.playAt);
  source.at = talk.playAt;
  talk.playAt += buffer.duration;
  talk.sources.push(source);
  source.onended = () => {
    talk.sources = talk.sources.filter((s) => s !== source);
    if (!source.stopped) count("playedMs", Math.round(buffer.duration * 1000));
  };
  count("chunks", 1);
  count("receivedMs", Math.round(buffer.duration * 1000));
}
// Barge-in or Stop: what is playing stops, what is scheduled never plays.
function stopPlayback() {
  const now = talk.ctx?.currentTime || 0;
  for (const source of talk.sources) {
    source.stopped = true;
    source.stop();
    if (now > source.at) count("playedMs", Math.round(Math.min(source.buffer.duration, now - source.at) * 1000));
  }
  talk.sources = [];
  talk.playAt = 0;
}

function onTalkEvent(event) {
  switch (event.type) {
    case "session.updated": talkState("listening"); break;
    case "input_audio_buffer.speech_started":
      if (talk.sources.length) { stopPlayback(); count("bargeIns", 1); } // barge-in
      talkState("hearing you");
      break;
    case "input_audio_buffer.committed": talkMessage(event.item_id, "user").textContent = "…"; break;
    case "conversation.item.input_audio_transcription.delta": {
      const el = talkMessage(event.item_id, "user");
      el.textContent = (el.textContent === "…" ? "" : el.textContent) + event.delta;
      break;
    }
    case "conversation.item.input_audio_transcription.completed":
      talkMessage(event.item_id, "user").textContent = event.transcript;
      break;
    case "response.created": talkState("answering"); break;
    case "response.output_text.delta":
    case "response.output_audio_transcript.delta":
      talkMessage(event.item_id, "assistant").textContent += event.delta;
      break;
    case "response.output_audio.delta": play(event.delta); break;
    case "response.done": talkState("listening"); break;
    case "error": notice("talk: " + event.error.message, "talk"); break;
  }
}

async function startTalk() {
  const model = $("#talk-model").value;
  if (!model || talk.ws) return;
  notice("", "talk");
  $("#talk-start").disabled = true;
  $("#talk-stop").disabled = false;
  talkState("connecting");
  try {
    if (!navigator.mediaDevices) throw new Error("the microphone needs https or localhost");
    talk.stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: true } });
    talk.ctx = new AudioContext();
    await talk.ctx.audioWorklet.addModule(URL.createObjectURL(new Blob([CAPTURE], { type: "text/javascript" })));
    talk.node = new AudioWorkletNode(talk.ctx, "capture");
    talk.node.port.onmessage = (message) => sendAudio(message.data);
    talk.ctx.createMediaStreamSource(talk.stream).connect(talk.node);
  } catch (error) {
    notice("talk: " + error.message, "talk");
    return stopTalk();
  }
  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  const protocols = ["realtime", ...(key() ? ["openai-insecure-api-key." + key()] : [])];
  const ws = new WebSocket(`${scheme}${location.host}/v1/realtime?model=${encodeURIComponent(model)}`, protocols);
  talk.ws = ws;
  ws.onopen = () => {
    const voice = $("#talk-voice").value.trim();
    const tts = !$("#talk-voice-label").hidden;
    const format = { type: "audio/pcm", rate: RATE };
    ws.send(JSON.stringify({ type: "session.update", session: {
      type: "realtime", output_modalities: [tts ? "audio" : "text"],
      audio: { input: { format, transcription: {}, turn_detection: { type: "server_vad" } },
               output: { format, ...(voice ? { voice } : {}) } },
    } }));
  };
  ws.onmessage = (message) => onTalkEvent(JSON.parse(message.data));
  ws.onclose = (close) => {
    if (talk.ws !== ws) return;
    if (close.code !== 1000 && close.code !== 1005) notice(`talk: the session closed (${close.code}${close.reason ? " " + close.reason : ""})`, "talk");
    stopTalk();
  };
}
function stopTalk() {
  const ws = talk.ws;
  talk.ws = null;
  if (ws && ws.readyState <= WebSocket.OPEN) ws.close(1000);
  stopPlayback();
  talk.stream?.getTracks().forEach((t) => t.stop());
  talk.ctx?.close();
  Object.assign(talk, { ctx: null, stream: null, node: null, pending: [], rest: null, pos: 0 });
  $("#talk-stop").disabled = true;
  talkState("stopped");
  fillTalk();
}

$("#talk-start").addEventListener("click", startTalk);
$("#talk-stop").addEventListener("click", stopTalk);

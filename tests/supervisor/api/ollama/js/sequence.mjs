// Runs the official `ollama` npm client, unmodified, against the gateway.
// argv[2]: the gateway's URL; argv[3]: a JSON object of model names. Prints one
// JSON object of what the client returned, for the Python test to check.
import { Ollama } from "ollama";

const host = process.argv[2];
const names = JSON.parse(process.argv[3]);
const ollama = new Ollama({ host });
const out = {};

async function collect(stream) {
  const parts = [];
  for await (const part of stream) parts.push(part);
  return parts;
}

if (names.tools) {
  // A tool-call round trip on a model whose (fake) output is scripted.
  const tools = [{
    type: "function",
    function: {
      name: "get_weather",
      description: "The weather in a city",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
  }];
  const messages = [{ role: "user", content: names.callPrompt }];
  const first = await ollama.chat({ model: names.tools, messages, tools });
  out.call = first.message.tool_calls;
  messages.push(first.message);
  messages.push({ role: "tool", tool_name: "get_weather", content: names.answerPrompt });
  const second = await ollama.chat({ model: names.tools, messages, tools });
  out.answer = second.message.content;
  const streamed = await collect(await ollama.chat({ model: names.tools, messages: [messages[0]], tools, stream: true }));
  out.streamedCalls = streamed.flatMap((p) => p.message.tool_calls ?? []);
  try {
    await ollama.chat({ model: "no-such-model", messages });
  } catch (error) {
    out.missing = { status: error.status_code, error: error.error };
  }
} else {
  out.list = (await ollama.list()).models.map((m) => m.name);
  const shown = await ollama.show({ model: names.chat });
  out.show = { capabilities: shown.capabilities, model_info: shown.model_info };
  const reply = await ollama.chat({
    model: names.chat,
    messages: [{ role: "user", content: "Hello" }],
    options: { num_predict: 5 },
  });
  out.chat = { done: reply.done, done_reason: reply.done_reason, eval_count: reply.eval_count, role: reply.message.role };
  const parts = await collect(await ollama.chat({
    model: names.chat,
    messages: [{ role: "user", content: "Hello" }],
    stream: true,
    options: { num_predict: 5 },
  }));
  out.chatStream = { parts: parts.length, last: parts[parts.length - 1] };
  const generated = await ollama.generate({ model: names.chat, prompt: "Once", options: { num_predict: 4 } });
  out.generate = { done: generated.done, eval_count: generated.eval_count };
  const embedded = await ollama.embed({ model: names.embed, input: ["one", "two"] });
  out.embed = embedded.embeddings.map((v) => v.length);
  out.ps = (await ollama.ps()).models.map((m) => ({ name: m.name, size_vram: m.size_vram, expires_at: m.expires_at }));
  const pulled = await collect(await ollama.pull({ model: names.pull, stream: true }));
  out.pull = pulled.map((p) => p.status);
  out.listAfterPull = (await ollama.list()).models.map((m) => m.name);
  out.copy = (await ollama.copy({ source: names.pull, destination: "my-copy" })).status;
  out.listAfterCopy = (await ollama.list()).models.map((m) => m.name);
  const copied = await ollama.chat({
    model: "my-copy:latest",
    messages: [{ role: "user", content: "hi" }],
    options: { num_predict: 2 },
    keep_alive: 0,
  });
  out.copyChat = copied.done;
  out.delete = (await ollama.delete({ model: names.pull })).status;
  out.listAfterDelete = (await ollama.list()).models.map((m) => m.name);
}
console.log(JSON.stringify(out));

// Sends chat requests through the official OpenAI Node SDK and prints what came
// back, one JSON line per request (driven by tests/integration/skills.py, which
// makes the requests and judges the answers).
//   node skills.mjs BASE_URL MODEL_ID [--stream] < requests.jsonl
// Each input line: {"id": ..., "messages": [...], "tools": [...]?,
// "enable_thinking": true|false|null}. Each output line: {"id", "content",
// "reasoning", "tool_calls": [{"name", "arguments"}], "finish_reason",
// "completion_tokens"} or {"id", "error"}. Greedy (temperature 0), one request at a
// time, max_tokens 160 unless the line sets "max_tokens" (null: none sent, the
// pack's default applies).
import OpenAI from 'openai';
import { createInterface } from 'node:readline';

const [baseURL, model, ...flags] = process.argv.slice(2);
const stream = flags.includes('--stream');
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120000 });

async function ask(req) {
  const body = { model, messages: req.messages, temperature: 0 };
  if (req.max_tokens !== null) body.max_tokens = req.max_tokens ?? 160;
  if (req.tools) body.tools = req.tools;
  if (req.enable_thinking !== null && req.enable_thinking !== undefined)
    body.chat_template_kwargs = { enable_thinking: req.enable_thinking };
  if (!stream) {
    const r = await client.chat.completions.create(body);
    const m = r.choices[0].message;
    return {
      content: m.content ?? '',
      reasoning: m.reasoning_content ?? '',
      tool_calls: (m.tool_calls ?? []).map((c) => ({
        name: c.function.name, arguments: c.function.arguments })),
      finish_reason: r.choices[0].finish_reason,
      completion_tokens: r.usage?.completion_tokens ?? null,
    };
  }
  // Streamed: the deltas put together as a client does (tool calls by index).
  let content = '', reasoning = '', finish = null, used = null;
  const calls = [];
  const opts = { ...body, stream: true, stream_options: { include_usage: true } };
  for await (const ch of await client.chat.completions.create(opts)) {
    if (ch.usage) used = ch.usage.completion_tokens;
    const c = ch.choices[0];
    if (!c) continue;
    content += c.delta?.content ?? '';
    reasoning += c.delta?.reasoning_content ?? '';
    for (const t of c.delta?.tool_calls ?? []) {
      calls[t.index] ??= { name: '', arguments: '' };
      calls[t.index].name += t.function?.name ?? '';
      calls[t.index].arguments += t.function?.arguments ?? '';
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { content, reasoning, tool_calls: calls.filter(Boolean), finish_reason: finish,
    completion_tokens: used };
}

for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  const req = JSON.parse(line);
  let out;
  try {
    out = { id: req.id, ...(await ask(req)) };
  } catch (e) {
    out = { id: req.id, error: `${e.constructor.name}: ${e.message}` };
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}

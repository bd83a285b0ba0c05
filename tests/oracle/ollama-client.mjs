// The official `ollama` npm client (pinned in package-lock.json) against minicpmd's
// Ollama API (driven by tests/integration/test_surfaces.py).
//   node ollama-client.mjs SCENARIO HOST API_KEY MODEL_ID
// Objects are checked field by field against the client's own types
// (node_modules/ollama/dist/browser.d.ts: ListResponse, ModelResponse, ModelDetails,
// ShowResponse, ChatResponse, GenerateResponse, Message, ToolCall). Exits 0 when
// every check holds.
import { Ollama } from 'ollama';

const [scenario, host, apiKey, model] = process.argv.slice(2);
const ollama = new Ollama({ host, headers: { Authorization: `Bearer ${apiKey}` } });
const J = (v) => JSON.stringify(v);
function check(cond, what) {
  if (!cond) {
    console.error('FAIL: ' + what);
    process.exit(1);
  }
}
const isInt = (x) => Number.isInteger(x) && x >= 0;
const isDate = (s) => typeof s === 'string' && !Number.isNaN(Date.parse(s));
// The tiny pack's stop ids and the ids its tokenizer has no text for: banned
// (through options: Ollama has no logit_bias, so temperature 0 and a budget).
const OPTS = { temperature: 0, num_predict: 6 };

function checkDetails(d, what) {
  check(d && ['parent_model', 'format', 'family', 'parameter_size', 'quantization_level']
    .every((k) => typeof d[k] === 'string') && Array.isArray(d.families), `${what}: details ${J(d)}`);
}

function checkStats(r, what) {
  check(r.done === true && ['stop', 'length'].includes(r.done_reason), `${what}: done ${J(r)}`);
  for (const k of ['total_duration', 'load_duration', 'prompt_eval_count', 'prompt_eval_duration',
                   'eval_count', 'eval_duration'])
    check(isInt(r[k]), `${what}: ${k} ${r[k]}`);
  check(isDate(r.created_at) && r.model === model, `${what}: model/created_at ${J(r)}`);
}

function checkMessage(m, what) {
  check(m && m.role === 'assistant' && typeof m.content === 'string', `${what}: message ${J(m)}`);
  if (m.thinking !== undefined) check(typeof m.thinking === 'string', `${what}: thinking`);
  if (m.tool_calls !== undefined)
    check(Array.isArray(m.tool_calls) && m.tool_calls.every((c) => typeof c.function?.name === 'string' &&
          c.function.arguments && typeof c.function.arguments === 'object'), `${what}: tool_calls ${J(m.tool_calls)}`);
}

const HI = [{ role: 'user', content: 'Hello there' }];
const TOOLS = [{ type: 'function', function: { name: 'get_weather', description: 'Weather for a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];

if (scenario === 'list_show') {
  const v = await ollama.version();
  check(typeof v.version === 'string', `version ${J(v)}`);
  const l = await ollama.list();
  check(Array.isArray(l.models) && l.models.length === 1, `list ${J(l)}`);
  const m = l.models[0];
  check(m.name === model && m.model === model && isInt(m.size) && /^[0-9a-f]{64}$/.test(m.digest) &&
        isDate(m.modified_at), `list model ${J(m)}`);
  checkDetails(m.details, 'list');
  const ps = await ollama.ps();
  check(ps.models.length === 1 && isDate(ps.models[0].expires_at) && isInt(ps.models[0].size_vram), `ps ${J(ps)}`);
  const s = await ollama.show({ model });
  check(typeof s.modelfile === 'string' && typeof s.template === 'string' && typeof s.parameters === 'string' &&
        Array.isArray(s.capabilities) && s.capabilities.includes('completion') && isDate(s.modified_at) &&
        typeof s.model_info === 'object', `show ${J(s)}`);
  checkDetails(s.details, 'show');
  const s2 = await ollama.show({ model: model + ':latest' });
  check(s2.details.family === s.details.family, 'show with :latest');
  let err;
  try { await ollama.show({ model: 'nope' }); } catch (e) { err = e; }
  check(err && err.status_code === 404 && /not found/.test(err.error), `show unknown: ${err} ${err?.status_code}`);
  console.log('ok: version, list, ps, show, 404 in Ollama\'s shape');
} else if (scenario === 'chat') {
  const r = await ollama.chat({ model, messages: HI, stream: false, options: OPTS, keep_alive: '5m' });
  checkStats(r, 'chat');
  checkMessage(r.message, 'chat');
  check(r.eval_count === 6 && r.done_reason === 'length', `num_predict: ${J(r)}`);
  const parts = [];
  let last;
  for await (const ch of await ollama.chat({ model, messages: HI, stream: true, options: OPTS })) {
    check(isDate(ch.created_at) && ch.model === model, `chunk ${J(ch)}`);
    checkMessage(ch.message, 'chunk');
    parts.push(ch.message.content);
    last = ch;
  }
  checkStats(last, 'stream end');
  check(parts.join('') === r.message.content, `stream ${J(parts.join(''))} vs ${J(r.message.content)}`);
  const t = await ollama.chat({ model, messages: HI, stream: false, options: OPTS, think: false });
  checkMessage(t.message, 'think false');
  check(!t.message.thinking, 'think false: no thinking');
  console.log('ok: chat, stream and not, options.num_predict, think, keep_alive');
} else if (scenario === 'tools') {
  const r = await ollama.chat({ model, messages: HI, tools: TOOLS, stream: false, options: OPTS });
  checkStats(r, 'tools');
  checkMessage(r.message, 'tools');
  // A round trip: the assistant's call (object arguments) and the tool's answer.
  const conv = [...HI, { role: 'assistant', content: '', tool_calls: [{ function: { name: 'get_weather', arguments: { city: 'Paris' } } }] },
                { role: 'tool', content: '{"temp": 21}', tool_name: 'get_weather' }];
  const r2 = await ollama.chat({ model, messages: conv, tools: TOOLS, stream: false, options: OPTS });
  checkMessage(r2.message, 'round trip');
  let n = 0;
  for await (const ch of await ollama.chat({ model, messages: conv, tools: TOOLS, stream: true, options: OPTS })) {
    checkMessage(ch.message, 'tools stream');
    n++;
  }
  check(n >= 1, 'tools stream: lines');
  console.log('ok: tools, a tool round trip, streamed');
} else if (scenario === 'generate') {
  const r = await ollama.generate({ model, prompt: 'Once upon a time', stream: false, options: OPTS, system: 'Be brief.' });
  checkStats(r, 'generate');
  check(typeof r.response === 'string' && r.eval_count === 6, `generate ${J(r)}`);
  const parts = [];
  for await (const ch of await ollama.generate({ model, prompt: 'Once upon a time', options: OPTS, system: 'Be brief.', stream: true }))
    parts.push(ch.response);
  check(parts.join('') === r.response, `generate stream ${J(parts.join(''))} vs ${J(r.response)}`);
  const raw = await ollama.generate({ model, prompt: 'Once upon a time', raw: true, stream: false, options: OPTS });
  checkStats(raw, 'raw');
  check(raw.prompt_eval_count < r.prompt_eval_count, `raw skips the template: ${raw.prompt_eval_count} vs ${r.prompt_eval_count}`);
  const load = await ollama.generate({ model, prompt: '', stream: false });
  check(load.done === true && load.done_reason === 'load', `preload ${J(load)}`);
  const j = await ollama.generate({ model, prompt: 'x', format: 'json', stream: false, options: OPTS });
  checkStats(j, 'format json');
  let err;
  try { await ollama.generate({ model, prompt: 'x', images: ['aGVsbG8='], stream: false }); } catch (e) { err = e; }
  check(err && err.status_code === 400 && /images/.test(err.error), `images refused: ${err}`);
  // A refused option is named as the client sent it, not by the OpenAI field it
  // maps to (repetition_penalty, max_tokens).
  for (const [opts, name] of [[{ repeat_penalty: -1 }, 'options.repeat_penalty'],
                              [{ num_predict: 'x' }, 'options.num_predict'],
                              [{ stop: [1] }, 'options.stop[0]']]) {
    err = undefined;
    try { await ollama.generate({ model, prompt: 'x', stream: false, options: opts }); } catch (e) { err = e; }
    check(err && err.status_code === 400 && err.error.includes(`'${name}'`) &&
          !/repetition_penalty|max_tokens|'stop/.test(err.error), `${J(opts)} refused: ${err?.error}`);
  }
  console.log('ok: generate, streamed, system, raw, preload, format json, images and bad options refused');
} else {
  console.error('unknown scenario ' + scenario);
  process.exit(2);
}

// The official OpenAI Node SDK's chat.completions against a running minicpmd (driven
// by tests/integration/test_sdk.py, one scenario per meson test).
//   node sdk-chat.mjs SCENARIO BASE_URL API_KEY MODEL_ID
// BASE_URL ends in /v1; /metrics is read from its origin. Exits 0 when every check
// of the scenario holds; prints the first failure and exits 1 otherwise. Lines
// starting with "measured:" are numbers for the log, never asserted tightly.
//
// The served model has random weights: its text means nothing, so the checks are
// about the protocol as the SDK sees it (shapes, finish reasons, determinism,
// errors, cancellation), never about what the text says.
import OpenAI from 'openai';

const [scenario, baseURL, apiKey, model] = process.argv.slice(2);
const origin = baseURL.replace(/\/v1\/?$/, '');
// Generous: other builds share the machine's two cores.
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 45000 });

const HELLO = [{ role: 'user', content: 'Hello there' }];
// The tiny pack's stop ids: banned, generation runs to its token budget.
const NO_STOP = { '1': -100, '1023': -100 };

function check(cond, what) {
  if (!cond) {
    console.error('FAIL: ' + what);
    process.exit(1);
  }
}

const J = (v) => JSON.stringify(v);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function expectError(fn, Cls, { status, code, type, param }, what) {
  let err;
  try {
    await fn();
  } catch (e) {
    err = e;
  }
  check(err !== undefined, `${what}: no error`);
  check(err instanceof Cls, `${what}: ${err.constructor.name} is not ${Cls.name} (${err.message})`);
  check(err instanceof OpenAI.APIError, `${what}: not an APIError`);
  if (status !== undefined) check(err.status === status, `${what}: status ${err.status}, want ${status}`);
  if (code !== undefined) check(err.code === code, `${what}: code ${err.code}, want ${code}`);
  if (type !== undefined) check(err.type === type, `${what}: type ${err.type}, want ${type}`);
  if (param !== undefined) check(err.param === param, `${what}: param ${err.param}, want ${param}`);
  check(typeof err.error?.message === 'string' && err.error.message.length > 0,
        `${what}: no error.message (${J(err.error)})`);
  return err;
}

// A non-streaming ChatCompletion as the SDK hands it over.
function checkCompletion(r, what, maxTokens) {
  check(typeof r.id === 'string' && r.id.startsWith('chatcmpl-'), `${what}: id ${r.id}`);
  check(r.object === 'chat.completion', `${what}: object ${r.object}`);
  check(r.model === model, `${what}: model ${r.model}`);
  check(Number.isInteger(r.created) && r.created > 1.6e9, `${what}: created ${r.created}`);
  check(typeof r.system_fingerprint === 'string', `${what}: system_fingerprint`);
  check(Array.isArray(r.choices) && r.choices.length === 1, `${what}: choices ${J(r.choices)}`);
  const c = r.choices[0];
  check(c.index === 0, `${what}: index ${c.index}`);
  check(c.message && c.message.role === 'assistant', `${what}: message ${J(c.message)}`);
  check(typeof c.message.content === 'string' || c.message.content === null,
        `${what}: content ${J(c.message.content)}`);
  check(['stop', 'length', 'tool_calls'].includes(c.finish_reason),
        `${what}: finish_reason ${c.finish_reason}`);
  const u = r.usage;
  check(u && u.prompt_tokens > 0 && u.completion_tokens >= 1, `${what}: usage ${J(u)}`);
  check(u.total_tokens === u.prompt_tokens + u.completion_tokens, `${what}: total ${J(u)}`);
  check(typeof u.completion_tokens_details?.reasoning_tokens === 'number',
        `${what}: reasoning_tokens ${J(u)}`);
  if (maxTokens !== undefined)
    check(u.completion_tokens <= maxTokens, `${what}: ${u.completion_tokens} > ${maxTokens} tokens`);
  return c;
}

// Reads a stream with `for await` and checks it is well formed: the first delta is
// the role, one id, chat.completion.chunk objects, exactly one finish_reason (on
// the last choice chunk), at most one usage chunk (choices: []) after it.
async function readStream(stream, what) {
  check(typeof stream[Symbol.asyncIterator] === 'function', `${what}: not async-iterable`);
  const chunks = [];
  for await (const ch of stream) chunks.push(ch);
  check(chunks.length >= 2, `${what}: ${chunks.length} chunks`);
  const ids = new Set(chunks.map((c) => c.id));
  check(ids.size === 1, `${what}: ${ids.size} ids: ${J([...ids])}`);
  check(chunks[0].id.startsWith('chatcmpl-'), `${what}: id ${chunks[0].id}`);
  for (const c of chunks) {
    check(c.object === 'chat.completion.chunk', `${what}: object ${c.object}`);
    check(c.model === model, `${what}: chunk model ${c.model}`);
    check(Number.isInteger(c.created), `${what}: created ${c.created}`);
  }
  const first = chunks[0].choices[0];
  check(first && first.delta.role === 'assistant' && first.delta.content === '',
        `${what}: first delta ${J(chunks[0].choices)}`);
  let usage = null;
  let last = chunks.length - 1;
  if (chunks[last].choices.length === 0) {
    usage = chunks[last].usage;
    check(usage && typeof usage.prompt_tokens === 'number', `${what}: usage chunk ${J(chunks[last])}`);
    last--;
  }
  let text = '';
  let finish = null;
  for (let i = 0; i <= last; i++) {
    const cs = chunks[i].choices;
    check(cs.length === 1 && cs[0].index === 0, `${what}: chunk ${i} choices ${J(cs)}`);
    if (i > 0) check(cs[0].delta.role === undefined, `${what}: role again in chunk ${i}`);
    if (typeof cs[0].delta.content === 'string') text += cs[0].delta.content;
    if (cs[0].finish_reason != null) {
      check(i === last, `${what}: finish_reason in chunk ${i} of ${last + 1}`);
      finish = cs[0].finish_reason;
    }
    if (i < last) check(!chunks[i].usage, `${what}: usage on chunk ${i}`);
  }
  check(['stop', 'length', 'tool_calls'].includes(finish), `${what}: final finish_reason ${finish}`);
  return { chunks, text, finish, usage };
}

async function metrics() {
  const r = await fetch(origin + '/metrics', { headers: { Authorization: 'Bearer ' + apiKey } });
  check(r.status === 200, `/metrics status ${r.status}`);
  return r.text();
}

function metric(text, name) {
  for (const line of text.split('\n')) {
    if (line.startsWith(name + ' ')) return Number(line.slice(name.length + 1));
  }
  check(false, `no ${name} in /metrics`);
}

const CANCELLED = 'minicpmd_generation_requests_total{outcome="cancelled"}';

// Waits until the worker is idle, nothing is queued and the cancelled counter is
// above `before`; returns the milliseconds it took.
async function waitIdleCancelled(before, what) {
  const t0 = performance.now();
  let m = '';
  while (performance.now() - t0 < 15000) {
    m = await metrics();
    if (metric(m, 'minicpmd_worker_busy') === 0 && metric(m, CANCELLED) > before &&
        metric(m, 'minicpmd_queue_depth') === 0)
      return performance.now() - t0;
    await sleep(10);
  }
  check(false, `${what}: after 15 s busy=${metric(m, 'minicpmd_worker_busy')} ` +
               `cancelled=${metric(m, CANCELLED)} (before ${before}) ` +
               `queue_depth=${metric(m, 'minicpmd_queue_depth')}`);
}

// A stop string that certainly occurs in `text`, first after some text: two printable
// ASCII characters (one when there are no two in a row).
function pickStop(text) {
  const ok = (ch) => ch >= '!' && ch <= '~';
  const from = Math.max(1, Math.floor(text.length / 3));  // leave some text before it
  for (let i = from; i + 1 < text.length; i++)
    if (ok(text[i]) && ok(text[i + 1]) && !text.slice(0, i).includes(text.slice(i, i + 2)))
      return text.slice(i, i + 2);
  for (let i = 1; i < text.length; i++)
    if (ok(text[i]) && !text.slice(0, i).includes(text[i])) return text[i];
  return null;
}

const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather of a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' } },
      required: ['city'],
    },
  },
};

function checkToolMessage(r, what) {
  const c = checkCompletion(r, what);
  for (const tc of c.message.tool_calls ?? []) {
    check(typeof tc.id === 'string' && tc.id.length > 0, `${what}: tool call id ${J(tc)}`);
    check(tc.type === 'function' && tc.function.name === 'get_weather', `${what}: ${J(tc)}`);
    let args;
    try {
      args = JSON.parse(tc.function.arguments);
    } catch {
      check(false, `${what}: arguments are not JSON: ${J(tc.function.arguments)}`);
    }
    check(args && typeof args === 'object', `${what}: arguments ${J(args)}`);
  }
  if (c.finish_reason === 'tool_calls')
    check(c.message.tool_calls?.length >= 1, `${what}: finish tool_calls without calls`);
  return c;
}

const scenarios = {
  // Plain create(): the SDK's ChatCompletion, content parts, system/developer roles.
  async nonstream() {
    const { data: r, response } = await client.chat.completions
      .create({ model, messages: HELLO, max_completion_tokens: 8, temperature: 0 })
      .withResponse();
    check(response.status === 200, `status ${response.status}`);
    check((response.headers.get('content-type') ?? '').startsWith('application/json'),
          `content-type ${response.headers.get('content-type')}`);
    checkCompletion(r, 'create', 8);
    console.log(`measured: ${r.usage.completion_tokens} tokens, finish ${r.choices[0].finish_reason}`);
    const parts = await client.chat.completions.create({
      model,
      max_completion_tokens: 4,
      temperature: 0,
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'developer', content: [{ type: 'text', text: 'Answer briefly.' }] },
        { role: 'user', content: [{ type: 'text', text: 'Hello' }, { type: 'text', text: ' there' }] },
      ],
    });
    checkCompletion(parts, 'text parts, system, developer', 4);
    // The same conversation as a plain string gives the same prompt.
    const plain = await client.chat.completions.create({
      model,
      max_completion_tokens: 4,
      temperature: 0,
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'developer', content: 'Answer briefly.' },
        { role: 'user', content: 'Hello there' },
      ],
    });
    check(plain.usage.prompt_tokens === parts.usage.prompt_tokens,
          `text parts prompt ${parts.usage.prompt_tokens} vs string ${plain.usage.prompt_tokens}`);
    check(plain.choices[0].message.content === parts.choices[0].message.content,
          'text parts and string content answer differently (greedy)');
  },

  // stream: true read with `for await`, then the SDK's stream() helper.
  async stream() {
    const stream = await client.chat.completions.create({
      model, messages: HELLO, max_completion_tokens: 8, temperature: 0, stream: true,
    });
    const s = await readStream(stream, 'for await');
    check(s.usage === null, `usage chunk without include_usage: ${J(s.usage)}`);
    console.log(`measured: ${s.chunks.length} chunks, finish ${s.finish}`);
    // The helper accumulates the deltas into a ChatCompletion.
    const runner = client.chat.completions.stream({
      model, messages: HELLO, max_completion_tokens: 8, temperature: 0,
    });
    let deltas = '';
    runner.on('content', (d) => { deltas += d; });
    const fin = await runner.finalChatCompletion();
    check(fin.choices[0].message.role === 'assistant', `helper message ${J(fin.choices[0])}`);
    check(fin.choices[0].message.content === s.text,
          `helper content ${J(fin.choices[0].message.content)} vs for await ${J(s.text)}`);
    check(deltas === s.text, `helper content events ${J(deltas)} vs ${J(s.text)}`);
    check(fin.choices[0].finish_reason === s.finish, `helper finish ${fin.choices[0].finish_reason}`);
  },

  // stream_options.include_usage: one last chunk with choices [] and the usage.
  async include_usage() {
    const ref = await client.chat.completions.create({
      model, messages: HELLO, max_completion_tokens: 6, temperature: 0, logit_bias: NO_STOP,
    });
    for (const include of [true, false]) {
      const s = await readStream(await client.chat.completions.create({
        model, messages: HELLO, max_completion_tokens: 6, temperature: 0, logit_bias: NO_STOP,
        stream: true, stream_options: { include_usage: include },
      }), `include_usage ${include}`);
      if (!include) {
        check(s.usage === null, `usage chunk with include_usage false: ${J(s.usage)}`);
        continue;
      }
      check(s.usage !== null, 'no usage chunk with include_usage');
      const u = s.usage;
      check(u.completion_tokens === 6, `usage completion_tokens ${u.completion_tokens}, want 6`);
      check(u.prompt_tokens === ref.usage.prompt_tokens,
            `stream prompt_tokens ${u.prompt_tokens} vs non-stream ${ref.usage.prompt_tokens}`);
      check(u.total_tokens === u.prompt_tokens + u.completion_tokens, `total ${J(u)}`);
      check(s.finish === 'length', `finish ${s.finish}`);
      console.log(`measured: usage ${J(u)}`);
    }
  },

  // stop: a string taken from a first greedy run, so it certainly occurs.
  async stop() {
    const full = (await client.chat.completions.create({
      model, messages: HELLO, max_completion_tokens: 24, temperature: 0, logit_bias: NO_STOP,
    })).choices[0].message.content;
    const stop = pickStop(full);
    check(stop !== null, `no ASCII character to stop on in ${J(full)}`);
    const want = full.slice(0, full.indexOf(stop));
    console.log(`measured: full ${J(full)}, stop ${J(stop)}, expect ${J(want)}`);
    for (const st of [stop, ['never-in-this-text-#1', stop]]) {
      const r = await client.chat.completions.create({
        model, messages: HELLO, max_completion_tokens: 24, temperature: 0, logit_bias: NO_STOP,
        stop: st,
      });
      const c = checkCompletion(r, `stop ${J(st)}`, 24);
      check(c.finish_reason === 'stop', `stop ${J(st)}: finish_reason ${c.finish_reason}`);
      check(c.message.content === want,
            `stop ${J(st)}: content ${J(c.message.content)}, want ${J(want)}`);
      check(!c.message.content.includes(stop), `stop ${J(st)}: the stop string is in the text`);
      const s = await readStream(await client.chat.completions.create({
        model, messages: HELLO, max_completion_tokens: 24, temperature: 0, logit_bias: NO_STOP,
        stop: st, stream: true,
      }), `stream stop ${J(st)}`);
      check(s.finish === 'stop', `stream stop ${J(st)}: finish ${s.finish}`);
      check(s.text === want, `stream stop ${J(st)}: text ${J(s.text)}, want ${J(want)}`);
    }
  },

  // max_completion_tokens (and the older max_tokens) -> finish_reason "length".
  async max_tokens_length() {
    for (const field of ['max_completion_tokens', 'max_tokens']) {
      const r = await client.chat.completions.create({
        model, messages: HELLO, temperature: 0, logit_bias: NO_STOP, [field]: 5,
      });
      const c = checkCompletion(r, field, 5);
      check(c.finish_reason === 'length', `${field}: finish_reason ${c.finish_reason}`);
      check(r.usage.completion_tokens === 5, `${field}: ${r.usage.completion_tokens} tokens`);
      const s = await readStream(await client.chat.completions.create({
        model, messages: HELLO, temperature: 0, logit_bias: NO_STOP, [field]: 5, stream: true,
        stream_options: { include_usage: true },
      }), `stream ${field}`);
      check(s.finish === 'length', `stream ${field}: finish ${s.finish}`);
      check(s.usage.completion_tokens === 5, `stream ${field}: ${s.usage.completion_tokens} tokens`);
      check(s.text === c.message.content, `stream ${field}: ${J(s.text)} vs ${J(c.message.content)}`);
    }
  },

  // seed: the same seed at temperature 1 gives the same text, streamed or not. The
  // tiny pack samples ids its tokenizer has no bytes for, so the chosen tokens'
  // logprobs are compared too (they tell the sampled ids apart when the text is empty).
  async seed() {
    const req = {
      model, messages: HELLO, max_completion_tokens: 12, temperature: 1, seed: 1234,
      logit_bias: NO_STOP, logprobs: true,
    };
    const lps = (r) => r.choices[0].logprobs.content.map((t) => t.logprob);
    const ra = await client.chat.completions.create(req);
    const rb = await client.chat.completions.create(req);
    const a = ra.choices[0].message.content;
    const b = rb.choices[0].message.content;
    check(a === b, `same seed, different text: ${J(a)} vs ${J(b)}`);
    check(lps(ra).length === 12 && J(lps(ra)) === J(lps(rb)),
          `same seed, different tokens: ${J(lps(ra))} vs ${J(lps(rb))}`);
    const s = await readStream(await client.chat.completions.create({ ...req, stream: true }),
                               'seeded stream');
    check(s.text === a, `seeded stream ${J(s.text)} vs non-stream ${J(a)}`);
    const streamed = s.chunks.flatMap((c) => c.choices[0]?.logprobs?.content ?? []).map((t) => t.logprob);
    check(J(streamed) === J(lps(ra)), `seeded stream tokens ${J(streamed)} vs ${J(lps(ra))}`);
    const other = await client.chat.completions.create({ ...req, seed: 4321 });
    console.log(`measured: seed 1234 ${J(a)}; seed 4321 ${J(other.choices[0].message.content)}; ` +
                `same tokens: ${J(lps(other)) === J(lps(ra))}`);
  },

  // logprobs, streamed: every sampled token has its entry, as in the non-streamed
  // answer, also the ones whose text is empty (the tiny pack samples ids its
  // tokenizer has no bytes for) or held back by the output parser.
  async stream_logprobs() {
    let empty = 0;
    for (const seed of [1234, 4321, 7]) {
      const req = {
        model, messages: HELLO, max_completion_tokens: 12, temperature: 1, seed,
        logit_bias: NO_STOP, logprobs: true, top_logprobs: 2,
      };
      const r = await client.chat.completions.create(req);
      const want = r.choices[0].logprobs?.content ?? [];
      check(want.length === 12, `seed ${seed}: ${want.length} logprobs entries, want 12`);
      empty += want.filter((t) => t.token === '').length;
      const s = await readStream(await client.chat.completions.create({ ...req, stream: true }),
                                 `stream seed ${seed}`);
      const got = s.chunks.flatMap((c) => c.choices[0]?.logprobs?.content ?? []);
      const key = (t) => J([t.token, t.logprob, t.top_logprobs.map((x) => [x.token, x.logprob])]);
      check(J(got.map(key)) === J(want.map(key)),
            `seed ${seed}: streamed logprobs (${got.length} entries) differ from the ` +
            `non-streamed ones (${want.length}; text ${J(r.choices[0].message.content)}): ` +
            `${J(got.map((t) => t.logprob))} vs ${J(want.map((t) => t.logprob))}`);
    }
    console.log(`measured: ${empty} of 36 sampled tokens have no text`);
  },

  // Greedy: the streamed text (and token count) equals the non-streamed one.
  async stream_equals_nonstream() {
    for (const bias of [undefined, NO_STOP]) {
      const req = { model, messages: HELLO, max_completion_tokens: 16, temperature: 0 };
      if (bias) req.logit_bias = bias;
      const r = await client.chat.completions.create(req);
      const s = await readStream(await client.chat.completions.create({
        ...req, stream: true, stream_options: { include_usage: true },
      }), 'greedy stream');
      const c = r.choices[0];
      check(s.text === c.message.content, `stream ${J(s.text)} vs non-stream ${J(c.message.content)}`);
      check(s.finish === c.finish_reason, `finish ${s.finish} vs ${c.finish_reason}`);
      check(s.usage.completion_tokens === r.usage.completion_tokens,
            `tokens ${s.usage.completion_tokens} vs ${r.usage.completion_tokens}`);
    }
  },

  // Typed errors (the daemon runs with --api-key and a small --ctx-size).
  async errors() {
    const bad = new OpenAI({ baseURL, apiKey: 'wrong-' + apiKey, maxRetries: 0, timeout: 45000 });
    await expectError(() => client.chat.completions.create({ model, messages: HELLO, temperature: 5 }),
                      OpenAI.BadRequestError,
                      { status: 400, type: 'invalid_request_error', param: 'temperature' },
                      'temperature 5');
    await expectError(() => client.chat.completions.create({
      model, messages: HELLO, temperature: 5, stream: true,
    }), OpenAI.BadRequestError, { status: 400, param: 'temperature' }, 'temperature 5, stream');
    await expectError(() => client.chat.completions.create({ model, messages: HELLO, n: 9 }),
                      OpenAI.BadRequestError, { status: 400, param: 'n' }, 'n 9 (8 at most)');
    await expectError(() => client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'word '.repeat(400) }],
    }), OpenAI.BadRequestError, { status: 400, code: 'context_length_exceeded' }, 'long prompt');
    await expectError(() => client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'word '.repeat(400) }], stream: true,
    }), OpenAI.BadRequestError, { status: 400, code: 'context_length_exceeded' },
    'long prompt, stream');
    for (const stream of [false, true]) {
      await expectError(() => client.chat.completions.create({
        model: 'no-such-model', messages: HELLO, stream,
      }), OpenAI.NotFoundError, { status: 404, code: 'model_not_found' },
      `unknown model (stream ${stream})`);
      await expectError(() => bad.chat.completions.create({ model, messages: HELLO, stream }),
                        OpenAI.AuthenticationError, { status: 401, code: 'invalid_api_key' },
                        `wrong API key (stream ${stream})`);
    }
    // And the right key still works.
    checkCompletion(await client.chat.completions.create({
      model, messages: HELLO, max_completion_tokens: 2,
    }), 'after the errors', 2);
  },

  // A device fault (sim: a monolithic runlist hangs): InternalServerError with the
  // structured device error, 503 + Retry-After when the device was reset and serves
  // again (500 when it could not be brought back); while streaming, the SDK's
  // APIError from the error event.
  async device_error() {
    const e = await expectError(() => client.chat.completions.create({
      model, messages: HELLO, max_completion_tokens: 4, temperature: 0,
    }), OpenAI.InternalServerError, { type: 'device_error', code: 'ert_cmd_state_timeout' },
    'device fault');
    check(e.status === 500 || e.status === 503, `device fault: status ${e.status}`);
    if (e.status === 503)
      check(/^\d+$/.test(e.headers.get('retry-after') ?? ''),
            `503 device fault: Retry-After ${e.headers.get('retry-after')}`);
    check(e.error.phase === 'prefill' && e.error.layer_first === 0 && e.error.layer_last === 41,
          `device error fields ${J(e.error)}`);
    console.log(`measured: status ${e.status}, Retry-After ${e.headers.get('retry-after')}`);
    // With retries, the SDK honours Retry-After and tries again; the daemon takes
    // every attempt and still answers with the typed error.
    const failed = 'minicpmd_generation_requests_total{outcome="failed"}';
    const before = metric(await metrics(), failed);
    const retrying = new OpenAI({ baseURL, apiKey, maxRetries: 1, timeout: 45000 });
    const t0 = performance.now();
    await expectError(() => retrying.chat.completions.create({
      model, messages: HELLO, max_completion_tokens: 4, temperature: 0,
    }), OpenAI.InternalServerError, { code: 'ert_cmd_state_timeout' }, 'device fault, maxRetries 1');
    const attempts = metric(await metrics(), failed) - before;
    check(attempts === (e.status === 503 ? 2 : 1),
          `maxRetries 1 on a ${e.status}: ${attempts} failed generation(s) in /metrics`);
    console.log(`measured: maxRetries 1 -> ${attempts} attempts in ${(performance.now() - t0).toFixed(0)} ms`);
    const stream = await client.chat.completions.create({
      model, messages: HELLO, max_completion_tokens: 4, temperature: 0, stream: true,
    });
    let got = 0;
    let err;
    try {
      for await (const ch of stream) got++;
    } catch (x) {
      err = x;
    }
    check(err instanceof OpenAI.APIError, `stream: ${err?.constructor?.name} (${err?.message}) ` +
                                          `after ${got} chunks, want an APIError`);
    check(err.code === 'ert_cmd_state_timeout' && err.type === 'device_error',
          `stream error ${J(err.error)}`);
    console.log(`measured: stream error after ${got} chunk(s): ${err.message}`);
  },

  // controller.abort() mid-stream: the daemon cancels the request and frees the worker.
  async abort_stream() {
    const before = metric(await metrics(), CANCELLED);
    const controller = new AbortController();
    const stream = await client.chat.completions.create({
      // A fixed seed: the text is the same on every run. Reasoning counts as text
      // too: with a random-weight pack the output may open <think> and never close it.
      model, messages: HELLO, max_completion_tokens: 4000, logit_bias: NO_STOP, stream: true,
      seed: 7,
    }, { signal: controller.signal });
    let content = 0;
    let t0 = 0;
    let thrown = null;
    try {
      for await (const ch of stream) {
        const d = ch.choices[0]?.delta;
        if (d?.content || d?.reasoning_content) content++;
        check(ch.choices[0]?.finish_reason == null, 'the stream finished before the abort');
        if (content === 3 && !t0) {
          t0 = performance.now();
          controller.abort();
        }
      }
    } catch (e) {
      thrown = e;
    }
    check(t0 > 0, `aborted after ${content} text chunks`);
    check(thrown === null || thrown instanceof OpenAI.APIUserAbortError ||
          thrown.name === 'AbortError', `abort threw ${thrown?.constructor?.name}: ${thrown?.message}`);
    const sdkMs = performance.now() - t0;
    const idleMs = await waitIdleCancelled(before, 'after abort()');
    console.log(`measured: abort -> worker idle and cancelled counted in ${(sdkMs + idleMs).toFixed(0)} ms ` +
                `(${sdkMs.toFixed(0)} ms in the SDK, then ${idleMs.toFixed(0)} ms polling /metrics)`);
    const t1 = performance.now();
    checkCompletion(await client.chat.completions.create({
      model, messages: HELLO, max_completion_tokens: 2, temperature: 0,
    }), 'the next request', 2);
    console.log(`measured: next request took ${(performance.now() - t1).toFixed(0)} ms`);
  },

  // controller.abort() on a non-streaming request while it generates.
  async abort_nonstream() {
    const before = metric(await metrics(), CANCELLED);
    const controller = new AbortController();
    const p = client.chat.completions.create({
      model, messages: HELLO, max_completion_tokens: 4000, logit_bias: NO_STOP,
    }, { signal: controller.signal });
    // Wait until it runs (busy), then a little more so it is decoding.
    const t = performance.now();
    while (metric(await metrics(), 'minicpmd_worker_busy') !== 1) {
      check(performance.now() - t < 15000, 'the request never ran');
      await sleep(10);
    }
    await sleep(300);
    const t0 = performance.now();
    controller.abort();
    let err;
    try {
      await p;
    } catch (e) {
      err = e;
    }
    check(err instanceof OpenAI.APIUserAbortError, `abort: ${err?.constructor?.name} ${err?.message}`);
    const idleMs = await waitIdleCancelled(before, 'after abort() of a non-streaming request');
    console.log(`measured: abort -> worker idle and cancelled counted in ` +
                `${(performance.now() - t0).toFixed(0)} ms (${idleMs.toFixed(0)} ms polling)`);
    checkCompletion(await client.chat.completions.create({
      model, messages: HELLO, max_completion_tokens: 2, temperature: 0,
    }), 'the next request', 2);
  },

  // Abort a stream that waits in the queue behind a running one, then the running one.
  async abort_queued() {
    const before = metric(await metrics(), CANCELLED);
    const long = { model, messages: HELLO, max_completion_tokens: 4000, logit_bias: NO_STOP, stream: true };
    const c1 = new AbortController();
    const c2 = new AbortController();
    const s1 = await client.chat.completions.create(long, { signal: c1.signal });
    const it1 = s1[Symbol.asyncIterator]();
    check(!(await it1.next()).done, 'first stream: no first chunk');
    const s2 = await client.chat.completions.create(long, { signal: c2.signal });
    const it2 = s2[Symbol.asyncIterator]();
    const first2 = await it2.next();   // the role chunk comes before the worker runs it
    check(!first2.done && first2.value.choices[0].delta.role === 'assistant',
          `queued stream first chunk ${J(first2.value)}`);
    const t = performance.now();
    while (metric(await metrics(), 'minicpmd_queue_depth') !== 1) {
      check(performance.now() - t < 15000, 'the second stream never showed in the queue');
      await sleep(10);
    }
    const t0 = performance.now();
    c2.abort();
    await it2.next().catch(() => {});
    let m;
    while (true) {
      m = await metrics();
      if (metric(m, 'minicpmd_queue_depth') === 0 && metric(m, CANCELLED) > before) break;
      check(performance.now() - t0 < 15000, `queued abort not counted: ${CANCELLED} ` +
            `${metric(m, CANCELLED)} queue_depth ${metric(m, 'minicpmd_queue_depth')}`);
      await sleep(10);
    }
    console.log(`measured: queued abort counted in ${(performance.now() - t0).toFixed(0)} ms`);
    check(metric(m, 'minicpmd_worker_busy') === 1, 'the running request stopped too');
    const mid = metric(m, CANCELLED);
    c1.abort();
    await it1.next().catch(() => {});
    const idleMs = await waitIdleCancelled(mid, 'after aborting the running stream');
    console.log(`measured: running abort -> idle in ${idleMs.toFixed(0)} ms`);
  },

  // tools: accepted, answered with a well-formed message (the random model does
  // not call the tool; the XML parser has unit tests). The tool block makes the
  // prompt ~900 tokens: one request per scenario keeps it quick on a slow CPU.
  async tools_request() {
    const r = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: [WEATHER],
      tool_choice: 'auto', max_completion_tokens: 6, temperature: 0,
    });
    checkToolMessage(r, 'tools, tool_choice auto');
    console.log(`measured: prompt ${r.usage.prompt_tokens} tokens, finish ${r.choices[0].finish_reason}`);
  },

  // The same, streamed, with a named tool_choice.
  async tools_stream() {
    const s = await readStream(await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: [WEATHER],
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      max_completion_tokens: 6, temperature: 0, stream: true,
    }), 'tools, stream');
    for (const ch of s.chunks) {
      for (const tc of ch.choices[0]?.delta?.tool_calls ?? []) {
        check(Number.isInteger(tc.index), `stream tool call delta ${J(tc)}`);
      }
    }
    console.log(`measured: ${s.chunks.length} chunks, finish ${s.finish}`);
  },

  // n: 3 choices at temperature 1: indexes 0..2, different seeds per choice (so
  // different tokens), reproducible with `seed` (choice 0 is the n = 1 answer of
  // the same seed), usage summed as OpenAI counts it (the prompt once); streamed,
  // each index's chunks give the text the non-streamed choice has.
  async n_choices() {
    const req = {
      model, messages: HELLO, max_completion_tokens: 8, temperature: 1, seed: 42,
      logit_bias: NO_STOP, logprobs: true, n: 3,
    };
    const lps = (c) => J(c.logprobs.content.map((t) => t.logprob));
    const ra = await client.chat.completions.create(req);
    check(ra.choices.length === 3, `n 3: ${ra.choices.length} choices`);
    ra.choices.forEach((c, i) => {
      check(c.index === i, `choice ${i} has index ${c.index}`);
      check(c.finish_reason === 'length', `choice ${i}: finish ${c.finish_reason}`);
      check(c.logprobs.content.length === 8, `choice ${i}: ${c.logprobs.content.length} tokens`);
    });
    check(new Set(ra.choices.map(lps)).size === 3,
          `the choices share tokens: ${J(ra.choices.map(lps))}`);
    check(ra.usage.completion_tokens === 24, `usage ${J(ra.usage)}`);
    check(ra.usage.total_tokens === ra.usage.prompt_tokens + 24, `usage ${J(ra.usage)}`);
    const rb = await client.chat.completions.create(req);
    check(J(rb.choices.map(lps)) === J(ra.choices.map(lps)),
          `the same seed gave other choices: ${J(rb.choices.map(lps))}`);
    const one = await client.chat.completions.create({ ...req, n: 1 });
    check(lps(one.choices[0]) === lps(ra.choices[0]), 'choice 0 is not the n = 1 answer');

    const chunks = [];
    for await (const ch of await client.chat.completions.create({
      ...req, stream: true, stream_options: { include_usage: true },
    })) chunks.push(ch);
    const usage = chunks.pop().usage;
    check(usage && usage.completion_tokens === 24 &&
          usage.prompt_tokens === ra.usage.prompt_tokens, `stream usage ${J(usage)}`);
    const text = ['', '', ''], finish = [null, null, null], roles = [0, 0, 0];
    for (const ch of chunks) {
      check(ch.choices.length === 1, `chunk choices ${J(ch.choices)}`);
      const c = ch.choices[0];
      check(c.index >= 0 && c.index < 3, `chunk index ${c.index}`);
      check(finish[c.index] === null, `choice ${c.index}: a chunk after its finish`);
      if (c.delta.role) roles[c.index]++;
      text[c.index] += c.delta.content ?? '';
      finish[c.index] = c.finish_reason ?? null;
    }
    check(J(roles) === '[1,1,1]', `role chunks per choice ${J(roles)}`);
    check(J(finish) === '["length","length","length"]', `stream finishes ${J(finish)}`);
    ra.choices.forEach((c, i) => check(text[i] === c.message.content,
                                       `stream choice ${i}: ${J(text[i])} vs ${J(c.message.content)}`));
    console.log(`measured: 3 choices, prompt ${ra.usage.prompt_tokens} tokens, ` +
                `${chunks.length} stream chunks`);
  },

  // A conversation that already holds an assistant tool call and its result.
  async tools_conversation() {
    const r = await client.chat.completions.create({
      model,
      tools: [WEATHER],
      max_completion_tokens: 6,
      temperature: 0,
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{
            id: 'call_abc123', type: 'function',
            function: { name: 'get_weather', arguments: '{"city":"Paris"}' },
          }],
        },
        { role: 'tool', tool_call_id: 'call_abc123', content: '{"temp_c": 21, "sky": "clear"}' },
      ],
    });
    checkToolMessage(r, 'tool round trip');
    console.log(`measured: prompt ${r.usage.prompt_tokens} tokens`);
  },
};

const fn = scenarios[scenario];
check(fn !== undefined, `unknown scenario ${scenario} (have ${Object.keys(scenarios).join(', ')})`);
try {
  await fn();
} catch (e) {
  console.error(`FAIL: ${scenario}: unexpected ${e?.constructor?.name}: ${e?.message}\n${e?.stack}`);
  process.exit(1);
}
console.log(`ok: ${scenario}`);

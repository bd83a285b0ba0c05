// The official OpenAI Node SDK's completions.create (legacy text completions)
// against a running minicpmd (driven by tests/integration/test_surfaces.py).
//   node sdk-completions.mjs SCENARIO BASE_URL API_KEY MODEL_ID
// Every object is checked field by field against the SDK's own types
// (node_modules/openai/resources/completions.d.ts: Completion, CompletionChoice,
// CompletionChoice.Logprobs, CompletionUsage). Exits 0 when every check holds.
import OpenAI from 'openai';

const [scenario, baseURL, apiKey, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 45000 });
// The tiny pack's stop ids, its special tokens and the ids its tokenizer has no text
// for: banned, so generation runs to its budget and every token has text.
const NO_STOP = {};
for (const i of [1, 300, 301, 302, 304]) NO_STOP[String(i)] = -100;
for (let i = 307; i < 1024; i++) NO_STOP[String(i)] = -100;

const J = (v) => JSON.stringify(v);
function check(cond, what) {
  if (!cond) {
    console.error('FAIL: ' + what);
    process.exit(1);
  }
}
const isNum = (x) => typeof x === 'number' && Number.isFinite(x);

// CompletionChoice.Logprobs: parallel arrays, one entry per token.
function checkLogprobs(lp, n, k, what) {
  check(lp && typeof lp === 'object', `${what}: logprobs ${J(lp)}`);
  for (const key of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'])
    check(Array.isArray(lp[key]) && lp[key].length === n, `${what}: ${key} length ${J(lp[key])}, want ${n}`);
  check(lp.tokens.every((t) => typeof t === 'string'), `${what}: tokens`);
  check(lp.token_logprobs.every((x) => isNum(x) && x <= 0), `${what}: token_logprobs`);
  check(lp.text_offset.every((x, i) => Number.isInteger(x) && (i === 0 || x >= lp.text_offset[i - 1])),
        `${what}: text_offset ${J(lp.text_offset)}`);
  check(lp.top_logprobs.every((m) => m && typeof m === 'object' && Object.values(m).every(isNum) &&
                                     Object.keys(m).length <= k),
        `${what}: top_logprobs ${J(lp.top_logprobs)}`);
}

// Completion (non-streamed), as the SDK hands it over.
function checkCompletion(r, what) {
  check(typeof r.id === 'string' && r.id.startsWith('cmpl-'), `${what}: id ${r.id}`);
  check(r.object === 'text_completion', `${what}: object ${r.object}`);
  check(r.model === model && Number.isInteger(r.created), `${what}: model/created`);
  check(Array.isArray(r.choices) && r.choices.length === 1, `${what}: choices`);
  const c = r.choices[0];
  check(c.index === 0 && typeof c.text === 'string', `${what}: choice ${J(c)}`);
  check(['stop', 'length', 'content_filter'].includes(c.finish_reason), `${what}: finish_reason ${c.finish_reason}`);
  const u = r.usage;
  check(u && Number.isInteger(u.prompt_tokens) && Number.isInteger(u.completion_tokens) &&
        u.total_tokens === u.prompt_tokens + u.completion_tokens, `${what}: usage ${J(u)}`);
  return c;
}

async function collect(params) {
  const stream = await client.completions.create({ ...params, stream: true });
  const chunks = [];
  for await (const ch of stream) chunks.push(ch);
  return chunks;
}

const base = { model, prompt: 'Once upon a time', temperature: 0, logit_bias: NO_STOP };

if (scenario === 'nonstream') {
  const r = await client.completions.create({ ...base, max_tokens: 6 });
  const c = checkCompletion(r, 'create');
  check(c.finish_reason === 'length' && r.usage.completion_tokens === 6, `length: ${J(r)}`);
  check(c.logprobs === null, 'logprobs null when not asked');
  // Token ids as the prompt, and an array of one string: the same prompt tokens.
  const ids = await fetch(baseURL.replace(/\/v1\/?$/, '') + '/tokenize', {
    method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
    body: J({ content: 'Once upon a time', add_special: true }) }).then((x) => x.json());
  const r2 = await client.completions.create({ ...base, prompt: ids.tokens, max_tokens: 6 });
  check(r2.choices[0].text === c.text, `token-id prompt gives the same text: ${J(r2.choices[0].text)} vs ${J(c.text)}`);
  check(r2.usage.prompt_tokens === r.usage.prompt_tokens, 'token-id prompt: prompt_tokens');
  const r3 = await client.completions.create({ ...base, prompt: ['Once upon a time'], max_tokens: 6 });
  check(r3.choices[0].text === c.text, 'array-of-one prompt');
  // echo: the prompt first.
  const r4 = await client.completions.create({ ...base, max_tokens: 6, echo: true });
  check(r4.choices[0].text === 'Once upon a time' + c.text, `echo: ${J(r4.choices[0].text)}`);
  // stop, and max_tokens -1 (until the stop)
  const cut = c.text.slice(2, 4);
  const r5 = await client.completions.create({ ...base, max_tokens: -1, stop: [cut] });
  check(r5.choices[0].finish_reason === 'stop' && r5.choices[0].text === c.text.slice(0, c.text.indexOf(cut)),
        `stop: ${J(r5.choices[0])}`);
  console.log('ok: completions.create, token ids, echo, stop, max_tokens -1');
} else if (scenario === 'logprobs') {
  const r = await client.completions.create({ ...base, max_tokens: 5, logprobs: 3 });
  const c = checkCompletion(r, 'logprobs');
  checkLogprobs(c.logprobs, 5, 3, 'logprobs');
  // A token that is part of a character shows as U+FFFD (its bytes are not text).
  if (!c.logprobs.tokens.some((t) => t.includes('\uFFFD')))
    check(c.logprobs.tokens.join('') === c.text, `tokens join to the text: ${J(c.logprobs.tokens)} vs ${J(c.text)}`);
  check(c.logprobs.text_offset[0] === 0, 'first text_offset 0');
  const chunks = await collect({ ...base, max_tokens: 5, logprobs: 3 });
  const toks = chunks.flatMap((ch) => ch.choices.flatMap((x) => x.logprobs?.tokens ?? []));
  const lps = chunks.flatMap((ch) => ch.choices.flatMap((x) => x.logprobs?.token_logprobs ?? []));
  check(J(toks) === J(c.logprobs.tokens), `streamed tokens ${J(toks)} vs ${J(c.logprobs.tokens)}`);
  check(lps.every((x, i) => Math.abs(x - c.logprobs.token_logprobs[i]) < 1e-4), 'streamed logprobs');
  console.log('ok: legacy logprobs, streamed and not');
} else if (scenario === 'stream') {
  const full = await client.completions.create({ ...base, max_tokens: 8 });
  const chunks = await collect({ ...base, max_tokens: 8, stream_options: { include_usage: true }, echo: true });
  for (const ch of chunks) {
    check(ch.object === 'text_completion' && ch.id === chunks[0].id && ch.id.startsWith('cmpl-'), `chunk head ${J(ch)}`);
  }
  const last = chunks[chunks.length - 1];
  check(last.choices.length === 0 && last.usage?.completion_tokens === 8, `usage chunk ${J(last)}`);
  const text = chunks.flatMap((ch) => ch.choices.map((x) => x.text)).join('');
  check(text === 'Once upon a time' + full.choices[0].text, `streamed text ${J(text)}`);
  const fin = chunks.flatMap((ch) => ch.choices).filter((x) => x.finish_reason);
  check(fin.length === 1 && fin[0].finish_reason === 'length', `one finish_reason: ${J(fin)}`);
  console.log('ok: stream with echo and include_usage');
} else if (scenario === 'errors') {
  for (const [params, param] of [[{ suffix: 'x' }, 'suffix'],
                                 [{ prompt: Array(9).fill('a') }, 'prompt'],
                                 [{ prompt: ['a', 'b'], stream: true }, 'stream'], [{ n: 2 }, 'n'],
                                 [{ logprobs: 6 }, 'logprobs'], [{ max_tokens: 0 }, 'max_tokens']]) {
    let err;
    try {
      await client.completions.create({ ...base, ...params });
    } catch (e) {
      err = e;
    }
    check(err instanceof OpenAI.BadRequestError && err.param === param,
          `${J(params)}: ${err?.constructor?.name} param ${err?.param}`);
  }
  let err;
  try {
    await client.completions.create({ ...base, model: 'nope' });
  } catch (e) {
    err = e;
  }
  check(err instanceof OpenAI.NotFoundError, `unknown model: ${err?.constructor?.name}`);
  console.log('ok: BadRequestError for suffix, 9 prompts, several prompts streamed, n, logprobs, max_tokens 0 without echo; NotFoundError');
} else if (scenario === 'echo') {
  // The prompt's own logprobs: its tokens first (the first one's logprob and top
  // alternatives null), then the completion's; streamed and not the same.
  const ids = await fetch(baseURL.replace(/\/v1\/?$/, '') + '/tokenize', {
    method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
    body: J({ content: 'abc', add_special: true }) }).then((x) => x.json());
  const n = ids.tokens.length;
  const p = { ...base, prompt: 'abc', max_tokens: 3, logprobs: 2, echo: true };
  const r = await client.completions.create(p);
  const c = checkCompletion(r, 'echo+logprobs');
  const lp = c.logprobs;
  check(r.usage.prompt_tokens === n && r.usage.completion_tokens === 3, `usage ${J(r.usage)}`);
  for (const key of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'])
    check(lp[key].length === n + 3, `${key}: ${J(lp[key])}, want ${n} + 3 entries`);
  check(lp.token_logprobs[0] === null && lp.top_logprobs[0] === null, `first token: ${J(lp)}`);
  check(lp.token_logprobs.slice(1).every((x) => isNum(x) && x <= 0), `token_logprobs ${J(lp.token_logprobs)}`);
  check(lp.top_logprobs.slice(1).every((m) => Object.keys(m).length >= 1 && Object.keys(m).length <= 2 &&
                                              Object.values(m).every(isNum)), `top_logprobs ${J(lp.top_logprobs)}`);
  check(c.text.startsWith('abc') && lp.text_offset[0] === 0, `text ${J(c.text)} offsets ${J(lp.text_offset)}`);
  // the generated part is what the same request without echo generates, numbers included
  const plain = (await client.completions.create({ ...p, echo: false })).choices[0];
  check(c.text === 'abc' + plain.text, `echo text ${J(c.text)} vs ${J(plain.text)}`);
  check(plain.logprobs.token_logprobs.every((x, i) => Math.abs(x - lp.token_logprobs[n + i]) < 1e-4),
        `completion logprobs ${J(plain.logprobs.token_logprobs)} vs ${J(lp.token_logprobs.slice(n))}`);
  const chunks = await collect(p);
  const lps = chunks.flatMap((ch) => ch.choices.flatMap((x) => x.logprobs?.token_logprobs ?? []));
  check(lps.length === n + 3 && lps[0] === null &&
        lps.slice(1).every((x, i) => Math.abs(x - lp.token_logprobs[i + 1]) < 1e-4), `streamed ${J(lps)}`);
  // max_tokens 0: the prompt alone
  const z = (await client.completions.create({ ...p, max_tokens: 0 })).choices[0];
  check(z.text === 'abc' && z.finish_reason === 'length' && z.logprobs.tokens.length === n &&
        z.logprobs.token_logprobs.every((x, i) => x === lp.token_logprobs[i]), `max_tokens 0: ${J(z)}`);
  // a list of prompts: one choice each, in order
  const prompts = ['a', 'bb', 'abc', 'cab', 'ba', 'c', 'aab', 'bca'];
  const many = await client.completions.create({ ...p, prompt: prompts, max_tokens: 2 });
  check(many.choices.length === 8 && many.choices.every((x, i) => x.index === i && x.text.startsWith(prompts[i])),
        `8 prompts: ${J(many.choices.map((x) => [x.index, x.text]))}`);
  const one = (await client.completions.create({ ...p, prompt: 'cab', max_tokens: 2 })).choices[0];
  check(J(one.logprobs.token_logprobs) === J(many.choices[3].logprobs.token_logprobs) && one.text === many.choices[3].text,
        `choice 3 is prompt 3 alone: ${J(one)} vs ${J(many.choices[3])}`);
  console.log('ok: echo with logprobs (prompt first, null first), streamed the same, max_tokens 0, 8 prompts in order');
} else {
  console.error('unknown scenario ' + scenario);
  process.exit(2);
}

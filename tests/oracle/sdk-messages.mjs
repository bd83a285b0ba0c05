// The official Anthropic TypeScript SDK (@anthropic-ai/sdk) against a running
// minicpmd serving the demo model (driven by tests/integration/test_anthropic.py).
//   node sdk-messages.mjs SCENARIO BASE_URL API_KEY MODEL_ID [JSON]
// Objects are checked field by field against the SDK's own types
// (node_modules/@anthropic-ai/sdk/resources/messages/messages.d.ts: Message,
// TextBlock, ThinkingBlock, ToolUseBlock, Usage, the RawMessageStreamEvent union,
// MessageTokensCount) and its error classes. JSON: the scenario's instances from
// tests/integration/skills.py (held-out prompts the demo model was trained for).
import Anthropic from '@anthropic-ai/sdk';

const [scenario, baseURL, apiKey, model, arg] = process.argv.slice(2);
const data = arg ? JSON.parse(arg) : {};
const client = new Anthropic({ baseURL, apiKey, maxRetries: 0, timeout: 45000 });
const J = (v) => JSON.stringify(v);
function check(cond, what) {
  if (!cond) {
    console.error('FAIL: ' + what);
    process.exit(1);
  }
}
const isInt = (x) => Number.isInteger(x) && x >= 0;
const ints = (s) => (s.match(/-?\d+/g) ?? []).map(Number);
const STOPS = ['end_turn', 'max_tokens', 'stop_sequence', 'tool_use', 'model_context_window_exceeded'];

function checkMessage(m, what) {
  check(typeof m.id === 'string' && m.id.startsWith('msg_') && m.type === 'message' && m.role === 'assistant',
        `${what}: id/type/role ${J(m)}`);
  check(m.model === model, `${what}: model ${m.model}`);
  check(STOPS.includes(m.stop_reason), `${what}: stop_reason ${m.stop_reason}`);
  check(m.stop_sequence === null || typeof m.stop_sequence === 'string', `${what}: stop_sequence`);
  check(Array.isArray(m.content), `${what}: content`);
  for (const b of m.content) {
    if (b.type === 'text') check(typeof b.text === 'string' && !b.text.includes('<function') &&
                                 !b.text.includes('<think>') && !b.text.includes('</think>'),
                                 `${what}: text block ${J(b)}`);
    else if (b.type === 'thinking') check(typeof b.thinking === 'string' && typeof b.signature === 'string',
                                          `${what}: thinking block ${J(b)}`);
    else if (b.type === 'tool_use') check(b.id.startsWith('toolu_') && typeof b.name === 'string' &&
                                          b.input !== null && typeof b.input === 'object',
                                          `${what}: tool_use block ${J(b)}`);
    else check(false, `${what}: unknown block ${J(b)}`);
  }
  const u = m.usage;
  check(u && isInt(u.input_tokens) && isInt(u.output_tokens) && u.output_tokens > 0 &&
        isInt(u.cache_read_input_tokens) && isInt(u.cache_creation_input_tokens),
        `${what}: usage ${J(u)}`);
}

const text = (m) => m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
const thinking = (m) => m.content.filter((b) => b.type === 'thinking').map((b) => b.thinking).join('');
const toolUses = (m) => m.content.filter((b) => b.type === 'tool_use');
// What a block holds, for comparing a streamed message with a whole one.
const same = (a, b) => J(a.content.map((c) => ({ ...c, id: undefined }))) ===
                       J(b.content.map((c) => ({ ...c, id: undefined }))) && a.stop_reason === b.stop_reason;

// The raw events of one stream, checked against the documented order.
async function rawEvents(body) {
  const events = [];
  for await (const ev of await client.messages.create({ ...body, stream: true })) events.push(ev);
  const types = events.map((e) => e.type);
  check(types[0] === 'message_start' && types.at(-1) === 'message_stop' && types.at(-2) === 'message_delta',
        `event order ${J(types)}`);
  const start = events[0].message;
  check(start.content.length === 0 && start.stop_reason === null && isInt(start.usage.input_tokens),
        `message_start ${J(start)}`);
  let open = -1, next = 0;
  for (const e of events.slice(1, -2)) {
    if (e.type === 'content_block_start') {
      check(open === -1 && e.index === next, `block start ${J(e)} while ${open} open`);
      open = e.index;
      next++;
    } else if (e.type === 'content_block_delta') {
      check(e.index === open && ['text_delta', 'thinking_delta', 'input_json_delta'].includes(e.delta.type),
            `delta ${J(e)}`);
    } else if (e.type === 'content_block_stop') {
      check(e.index === open, `block stop ${J(e)}`);
      open = -1;
    } else {
      check(false, `unexpected event ${J(e)}`);
    }
  }
  check(open === -1, 'a block left open');
  const md = events.at(-2);
  check(STOPS.includes(md.delta.stop_reason) && isInt(md.usage.output_tokens), `message_delta ${J(md)}`);
  return events;
}

const base = { model, temperature: 0, max_tokens: 160 };
const WEATHER = { name: 'get_weather', input_schema: { type: 'object', properties: { city: { type: 'string' } },
                                                       required: ['city'] } };

if (scenario === 'create_stream') {
  // Plain answers: echo (the demo repeats the words), whole and streamed.
  for (const inst of data.echo) {
    const body = { ...base, messages: [{ role: 'user', content: inst.ask }],
                   thinking: { type: 'disabled' } };
    const m = await client.messages.create(body);
    checkMessage(m, 'create');
    check(m.stop_reason === 'end_turn' && text(m) === inst.expect, `echo: ${J(text(m))} for ${J(inst.expect)}`);
    // The SDK's stream helper accumulates the events into the same Message.
    const s = client.messages.stream(body);
    let deltas = '';
    s.on('text', (t) => { deltas += t; });
    const fm = await s.finalMessage();
    checkMessage(fm, 'finalMessage');
    check(same(fm, m) && deltas === text(m), `stream ${J(fm.content)} vs ${J(m.content)}`);
    check(fm.usage.output_tokens === m.usage.output_tokens &&
          fm.usage.input_tokens + fm.usage.cache_read_input_tokens ===
          m.usage.input_tokens + m.usage.cache_read_input_tokens, `stream usage ${J(fm.usage)} vs ${J(m.usage)}`);
    await rawEvents(body);
  }
  // system as a string and as text blocks, content as text blocks: the same prompt.
  const ask = data.echo[0].ask;
  const a = await client.messages.create({ ...base, system: 'You are a helpful assistant.',
                                           messages: [{ role: 'user', content: ask }] });
  const b = await client.messages.create({ ...base, system: [{ type: 'text', text: 'You are a helpful assistant.' }],
                                           messages: [{ role: 'user', content: [{ type: 'text', text: ask }] }] });
  checkMessage(a, 'system string');
  check(same(a, b) && a.usage.input_tokens + a.usage.cache_read_input_tokens ===
        b.usage.input_tokens + b.usage.cache_read_input_tokens, `system blocks ${J(b)} vs ${J(a)}`);
  // max_tokens cuts: stop_reason max_tokens, output_tokens exactly it.
  const cut = await client.messages.create({ ...base, max_tokens: 2, messages: [{ role: 'user', content: ask }] });
  checkMessage(cut, 'max_tokens');
  check(cut.stop_reason === 'max_tokens' && cut.usage.output_tokens === 2, `max_tokens ${J(cut)}`);
  // stop_sequences: a word of the greedy answer stops it there and is named.
  const full = text(a);
  const word = full.split(' ').find((w, i) => i > 0 && w.length >= 3);
  check(word, `a word to stop at in ${J(full)}`);
  const st = await client.messages.create({ ...base, system: 'You are a helpful assistant.', stop_sequences: ['zzzq', word],
                                            messages: [{ role: 'user', content: ask }] });
  check(st.stop_reason === 'stop_sequence' && st.stop_sequence === word &&
        full.startsWith(text(st)) && !text(st).includes(word), `stop_sequences ${J(st)}`);
  const ss = await client.messages.stream({ ...base, system: 'You are a helpful assistant.', stop_sequences: [word],
                                            messages: [{ role: 'user', content: ask }] }).finalMessage();
  check(ss.stop_reason === 'stop_sequence' && ss.stop_sequence === word && text(ss) === text(st), `streamed stop ${J(ss)}`);
  console.log(`ok: create, stream (finalMessage, raw events), system blocks, max_tokens, stop_sequences (${data.echo.length} echo)`);
} else if (scenario === 'tools') {
  // Each call judged on its city; each round trip (the call as the model made it,
  // given back with its result) on the temperature in the answer.
  let calls_ok = 0, answers_ok = 0;
  for (const inst of data.weather) {
    const body = { ...base, tools: [WEATHER], messages: [{ role: 'user', content: inst.ask }] };
    const m = await client.messages.create(body);
    checkMessage(m, 'tool call');
    const calls = toolUses(m);
    if (m.stop_reason === 'max_tokens') {
      // The model looped inside the city (a miss, as a wrong city is): the call was
      // cut, so no markup and no input reach the client, and chat completions runs
      // to its length on the same question.
      const oc = await (await fetch(`${baseURL}/v1/chat/completions`, { method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
        body: J({ model, temperature: 0, max_tokens: base.max_tokens, messages: [{ role: 'user', content: inst.ask }],
                  tools: [{ type: 'function', function: { name: WEATHER.name, parameters: WEATHER.input_schema } }] }) })).json();
      check(!text(m).includes('<function') && oc.choices?.[0]?.finish_reason === 'length',
            `a cut call: ${J(m)}; chat completions: ${J(oc.choices?.[0])}`);
      const fm = await client.messages.stream(body).finalMessage();
      check(same(fm, m), `streamed cut call ${J(fm.content)} vs ${J(m.content)}`);
      console.log(`cut call for ${J(inst.ask)} (the model ran to max_tokens, as through chat completions)`);
      continue;
    }
    check(m.stop_reason === 'tool_use' && calls.length === 1 && calls[0].name === 'get_weather' &&
          typeof calls[0].input.city === 'string', `a get_weather call: ${J(m)}`);
    const ok = J(calls[0].input) === J({ city: inst.expect });
    // The same question through /v1/chat/completions: the translation gives the
    // model the same prompt, so it makes the same call (a miss is the model's).
    const oc = await (await fetch(`${baseURL}/v1/chat/completions`, { method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
      body: J({ model, temperature: 0, max_tokens: 160, messages: [{ role: 'user', content: inst.ask }],
                tools: [{ type: 'function', function: { name: WEATHER.name, parameters: WEATHER.input_schema } }] }) })).json();
    const ocall = oc.choices?.[0]?.message?.tool_calls?.[0]?.function;
    check(ocall && ocall.name === 'get_weather' && J(JSON.parse(ocall.arguments)) === J(calls[0].input) &&
          oc.usage.prompt_tokens === m.usage.input_tokens + m.usage.cache_read_input_tokens,
          `chat completions answered ${J(oc)} to the same question, messages ${J(m)}`);
    calls_ok += ok;
    if (!ok) console.log(`wrong city for ${J(inst.ask)}: ${J(calls[0].input)} (the same through chat completions)`);
    const fm = await client.messages.stream(body).finalMessage();
    check(same(fm, m), `streamed call ${J(fm.content)} vs ${J(m.content)}`);
    const round = { ...base, tools: [WEATHER], messages: [
      { role: 'user', content: inst.ask },
      { role: 'assistant', content: m.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: calls[0].id,
                                  content: J({ city: calls[0].input.city, temp_c: inst.temp, sky: inst.sky }) }] }] };
    const r = await client.messages.create(round);
    checkMessage(r, 'tool result answer');
    const good = ints(text(r)).includes(inst.temp);
    answers_ok += good;
    if (!good) console.log(`wrong answer for ${inst.expect} ${inst.temp}: ${J(r.content)}`);
    const rs = await client.messages.stream(round).finalMessage();
    check(same(rs, r), `streamed answer ${J(rs.content)} vs ${J(r.content)}`);
  }
  const n = data.weather.length;
  check(calls_ok >= n - 1 && answers_ok >= n - 1, `tool round trips: ${calls_ok} calls and ${answers_ok} answers right of ${n}`);
  // tool_choice: any and tool ask for a call (the grammar forces one; the cut
  // scenario forces them where the model would not call), none shows no tools.
  const ask = data.weather[0].ask;
  for (const tc of [{ type: 'any' }, { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true }]) {
    const m = await client.messages.create({ ...base, tools: [WEATHER], tool_choice: tc,
                                             messages: [{ role: 'user', content: ask }] });
    check(m.stop_reason === 'tool_use' && toolUses(m).length >= 1 && toolUses(m)[0].name === 'get_weather' &&
          (tc.type !== 'tool' || toolUses(m).length === 1), `tool_choice ${J(tc)}: ${J(m.content)}`);
  }
  const none = await client.messages.create({ ...base, tools: [WEATHER], tool_choice: { type: 'none' },
                                              messages: [{ role: 'user', content: ask }] });
  check(toolUses(none).length === 0 && none.stop_reason !== 'tool_use', `tool_choice none: ${J(none.content)}`);
  console.log(`ok: tool round trips: ${calls_ok}/${n} calls, ${answers_ok}/${n} answers right, streamed the same; tool_choice any, tool, none`);
} else if (scenario === 'thinking') {
  let right = 0;
  for (const inst of data.arith) {
    const on = await client.messages.create({ ...base, max_tokens: 2048, messages: [{ role: 'user', content: inst.ask }],
                                              thinking: { type: 'enabled', budget_tokens: 1024 } });
    checkMessage(on, 'thinking on');
    check(on.content[0]?.type === 'thinking', `thinking first: ${J(on.content)}`);
    const okOn = thinking(on).trim() !== '' && ints(text(on)).at(-1) === inst.expect;
    const fm = await client.messages.stream({ ...base, max_tokens: 2048, messages: [{ role: 'user', content: inst.ask }],
                                              thinking: { type: 'enabled', budget_tokens: 1024 } }).finalMessage();
    check(same(fm, on), `streamed thinking ${J(fm.content)} vs ${J(on.content)}`);
    const off = await client.messages.create({ ...base, messages: [{ role: 'user', content: inst.ask }],
                                               thinking: { type: 'disabled' } });
    checkMessage(off, 'thinking off');
    const okOff = thinking(off) === '' && ints(text(off)).at(-1) === inst.expect;
    right += okOn + okOff;
    if (!okOn || !okOff) console.log(`wrong: ${J(inst)} on ${J(on.content)} off ${J(off.content)}`);
  }
  const asked = data.arith.length * 2;
  check(right >= asked - 1, `thinking: ${right} of ${asked} right`);
  // A thinking block given back in a conversation is accepted.
  const m = await client.messages.create({ ...base, messages: [
    { role: 'user', content: data.arith[0].ask },
    { role: 'assistant', content: [{ type: 'thinking', thinking: 'Add them.', signature: '' }, { type: 'text', text: 'Done.' }] },
    { role: 'user', content: 'Thanks' }] });
  checkMessage(m, 'thinking given back');
  console.log(`ok: thinking enabled/disabled ${right}/${asked} right, streamed the same`);
} else if (scenario === 'count_tokens') {
  const bodies = [
    { messages: [{ role: 'user', content: data.ask }] },
    { system: 'Be brief.', messages: [{ role: 'user', content: [{ type: 'text', text: data.ask }] }] },
    { tools: [WEATHER], messages: [{ role: 'user', content: data.ask }] },
    { thinking: { type: 'enabled', budget_tokens: 1024 }, messages: [{ role: 'user', content: data.ask }] },
  ];
  for (const b of bodies) {
    const c = await client.messages.countTokens({ model, ...b });
    check(isInt(c.input_tokens) && c.input_tokens > 0 && Object.keys(c).length === 1, `count ${J(c)}`);
    const m = await client.messages.create({ ...base, max_tokens: b.thinking ? 1025 : 1, ...b });
    check(m.usage.input_tokens + m.usage.cache_read_input_tokens === c.input_tokens,
          `count_tokens ${c.input_tokens} vs usage ${J(m.usage)} for ${J(b)}`);
  }
  console.log('ok: count_tokens equals the input tokens create reports (4 bodies)');
} else if (scenario === 'errors') {
  async function fails(p, cls, type, what) {
    try {
      await p;
    } catch (e) {
      check(e instanceof cls, `${what}: ${e.constructor.name} ${e.message}`);
      check(e.error?.type === 'error' && e.error?.error?.type === type && typeof e.error?.error?.message === 'string',
            `${what}: body ${J(e.error)}`);
      return e;
    }
    check(false, `${what}: no error`);
  }
  const msgs = [{ role: 'user', content: 'Hi' }];
  const e1 = await fails(client.messages.create({ ...base, messages: [{ role: 'user', content: [
    { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }] }] }),
  Anthropic.BadRequestError, 'invalid_request_error', 'image block');
  check(e1.error.error.message.includes('messages.0.content.0.type'), `image message ${e1.error.error.message}`);
  await fails(client.messages.create({ model, messages: msgs }), Anthropic.BadRequestError, 'invalid_request_error',
              'max_tokens missing');
  await fails(client.messages.create({ ...base, thinking: { type: 'enabled', budget_tokens: 100 }, messages: msgs }),
              Anthropic.BadRequestError, 'invalid_request_error', 'budget too small');
  await fails(client.messages.create({ ...base, tools: [{ type: 'web_search_20250305', name: 'web_search' }], messages: msgs }),
              Anthropic.BadRequestError, 'invalid_request_error', 'server tool');
  await fails(client.messages.create({ ...base, model: 'no-such-model', messages: msgs }),
              Anthropic.NotFoundError, 'not_found_error', 'unknown model');
  await fails(client.messages.countTokens({ model, messages: [] }), Anthropic.BadRequestError,
              'invalid_request_error', 'count_tokens without messages');
  const bad = new Anthropic({ baseURL, apiKey: 'wrong-key', maxRetries: 0 });
  await fails(bad.messages.create({ ...base, messages: msgs }), Anthropic.AuthenticationError,
              'authentication_error', 'wrong x-api-key');
  // A stream refused before it began is a plain error too.
  await fails(client.messages.create({ ...base, stream: true, messages: [{ role: 'user', content: [{ type: 'document' }] }] }),
              Anthropic.BadRequestError, 'invalid_request_error', 'streamed refusal');
  // The key as Authorization: Bearer works as well as x-api-key (the SDK's default).
  const bearer = new Anthropic({ baseURL, authToken: apiKey, apiKey: null, maxRetries: 0 });
  checkMessage(await bearer.messages.create({ ...base, max_tokens: 4, messages: msgs }), 'Bearer key');
  checkMessage(await client.messages.create({ ...base, max_tokens: 4, messages: msgs }), 'x-api-key');
  console.log('ok: BadRequestError, NotFoundError, AuthenticationError in Anthropic\'s shape; x-api-key and Bearer');
} else if (scenario === 'cut') {
  // A forced call cut by max_tokens: no markup in any text block, streamed or not;
  // the cut call is a tool_use block with the input as far as it was whole.
  let cut = 0, kept = 0;
  for (let n = 4; n <= 24; n += 4) {
    const body = { ...base, max_tokens: n, tools: [WEATHER], tool_choice: { type: 'tool', name: 'get_weather' },
                   messages: [{ role: 'user', content: data.ask }] };
    const m = await client.messages.create(body);
    checkMessage(m, `max_tokens ${n}`);
    const fm = await client.messages.stream(body).finalMessage();
    checkMessage(fm, `streamed max_tokens ${n}`);
    check(same(fm, m), `max_tokens ${n}: streamed ${J(fm.content)} vs ${J(m.content)}`);
    if (m.stop_reason === 'max_tokens') {
      cut++;
      kept += toolUses(m).length > 0;
    }
  }
  check(cut >= 4, `only ${cut} answers were cut`);
  console.log(`ok: ${cut} forced calls cut by max_tokens (${kept} kept as a tool_use block), no markup in text, streamed the same`);
} else if (scenario === 'device_error') {
  // A device fault (the sim's runlists time out): api_error with the fault's fields,
  // whole (InternalServerError) or as the stream's error event (APIError).
  const msgs = [{ role: 'user', content: 'Hello' }];
  let e;
  try {
    await client.messages.create({ ...base, max_tokens: 4, messages: msgs });
  } catch (x) {
    e = x;
  }
  check(e instanceof Anthropic.InternalServerError && (e.status === 500 || e.status === 503),
        `device fault: ${e?.constructor?.name} ${e?.status} ${e?.message}`);
  const err = e.error?.error;
  check(e.error?.type === 'error' && err?.type === 'api_error' && err.phase === 'prefill' &&
        err.ert_state === 8 && err.layer_first === 0 && typeof err.message === 'string',
        `device error body ${J(e.error)}`);
  let got = 0, se;
  try {
    for await (const ev of await client.messages.create({ ...base, max_tokens: 4, messages: msgs, stream: true })) got++;
  } catch (x) {
    se = x;
  }
  check(se instanceof Anthropic.APIError && se.error?.error?.type === 'api_error' && se.error.error.ert_state === 8,
        `stream: ${se?.constructor?.name} ${J(se?.error)} after ${got} events`);
  console.log(`ok: device fault: ${e.status} api_error with ert_state ${err.ert_state}; streamed: an error event after ${got} event(s)`);
} else {
  check(false, `unknown scenario ${scenario}`);
}

// The official OpenAI Node SDK's responses.create / responses.stream against a
// running minicpmd (driven by tests/integration/test_surfaces.py).
//   node sdk-responses.mjs SCENARIO BASE_URL API_KEY MODEL_ID
// Objects are checked field by field against the SDK's own types
// (node_modules/openai/resources/responses/responses.d.ts: Response,
// ResponseOutputMessage, ResponseOutputText, ResponseReasoningItem,
// ResponseFunctionToolCall, ResponseUsage and the stream event interfaces).
import OpenAI from 'openai';

const [scenario, baseURL, apiKey, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 45000 });
const J = (v) => JSON.stringify(v);
function check(cond, what) {
  if (!cond) {
    console.error('FAIL: ' + what);
    process.exit(1);
  }
}
const isInt = (x) => Number.isInteger(x) && x >= 0;

function checkItem(it, what) {
  check(typeof it.id === 'string', `${what}: item id ${J(it)}`);
  if (it.type === 'message') {
    check(it.id.startsWith('msg_') && it.role === 'assistant' && ['completed', 'incomplete', 'in_progress'].includes(it.status) &&
          Array.isArray(it.content) && it.content.every((c) => c.type === 'output_text' && typeof c.text === 'string' &&
          Array.isArray(c.annotations)), `${what}: message ${J(it)}`);
  } else if (it.type === 'reasoning') {
    check(it.id.startsWith('rs_') && Array.isArray(it.summary) &&
          (it.content === undefined || it.content.every((c) => c.type === 'reasoning_text' && typeof c.text === 'string')),
          `${what}: reasoning ${J(it)}`);
  } else if (it.type === 'function_call') {
    check(typeof it.call_id === 'string' && typeof it.name === 'string' && typeof it.arguments === 'string',
          `${what}: function_call ${J(it)}`);
  } else {
    check(false, `${what}: unknown item type ${it.type}`);
  }
}

function checkResponse(r, what, fromEvent = false) {
  check(typeof r.id === 'string' && r.id.startsWith('resp_') && r.object === 'response', `${what}: id/object ${r.id}`);
  check(isInt(r.created_at) && r.model === model, `${what}: created_at/model`);
  check(['completed', 'incomplete'].includes(r.status), `${what}: status ${r.status}`);
  check(r.error === null && (r.status !== 'incomplete' || r.incomplete_details?.reason === 'max_output_tokens'),
        `${what}: error/incomplete_details ${J(r.incomplete_details)}`);
  check(Array.isArray(r.output) && Array.isArray(r.tools) && typeof r.parallel_tool_calls === 'boolean' &&
        'temperature' in r && 'top_p' in r && 'tool_choice' in r && 'instructions' in r && 'metadata' in r,
        `${what}: required fields ${J(Object.keys(r))}`);
  check(r.store === false, `${what}: store ${r.store}`);
  r.output.forEach((it, i) => checkItem(it, `${what}: output[${i}]`));
  const u = r.usage;
  check(u && isInt(u.input_tokens) && isInt(u.output_tokens) && u.total_tokens === u.input_tokens + u.output_tokens &&
        isInt(u.input_tokens_details?.cached_tokens) && isInt(u.output_tokens_details?.reasoning_tokens),
        `${what}: usage ${J(u)}`);
  // output_text is the SDK's own sum of the text (create and finalResponse), not on events.
  if (!fromEvent) check(typeof r.output_text === 'string', `${what}: the SDK's output_text`);
}

const base = { model, temperature: 0, max_output_tokens: 8 };
const TOOLS = [{ type: 'function', name: 'get_weather', description: 'Weather for a city', strict: false,
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];

if (scenario === 'nonstream') {
  const r = await client.responses.create({ ...base, input: 'Hello there', instructions: 'Be brief.',
                                            reasoning: { effort: 'none' } });
  checkResponse(r, 'create');
  check(r.instructions === 'Be brief.' && r.max_output_tokens === 8, `echoed fields ${J(r)}`);
  check(r.status === 'incomplete' && r.usage.output_tokens === 8, `max_output_tokens: ${r.status} ${J(r.usage)}`);
  check(!r.output.some((it) => it.type === 'reasoning'), `effort none: no reasoning item ${J(r.output)}`);
  const r2 = await client.responses.create({ ...base, input: [
    { role: 'developer', content: 'Be brief.' },
    { role: 'user', content: [{ type: 'input_text', text: 'Hello' }, { type: 'input_text', text: ' there' }] }] });
  checkResponse(r2, 'message list');
  const r3 = await client.responses.create({ ...base, input: 'Hi', reasoning: { effort: 'high' } });
  checkResponse(r3, 'effort high');
  check(r3.output.length >= 1 && r3.output[0].type === 'reasoning', `effort high starts in reasoning: ${J(r3.output)}`);
  console.log('ok: responses.create: Response, items, usage, instructions, reasoning.effort');
} else if (scenario === 'stream') {
  const full = await client.responses.create({ ...base, input: 'Hello there', reasoning: { effort: 'none' } });
  const stream = await client.responses.create({ ...base, input: 'Hello there', reasoning: { effort: 'none' }, stream: true });
  const types = [];
  let text = '';
  let last;
  let seq = -1;
  for await (const ev of stream) {
    types.push(ev.type);
    check(ev.sequence_number === seq + 1, `sequence_number ${ev.sequence_number} after ${seq}`);
    seq = ev.sequence_number;
    if (ev.type === 'response.output_text.delta') {
      check(typeof ev.item_id === 'string' && isInt(ev.output_index) && ev.content_index === 0 && Array.isArray(ev.logprobs),
            `delta event ${J(ev)}`);
      text += ev.delta;
    }
    last = ev;
  }
  const want = ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added'];
  check(J(types.slice(0, 4)) === J(want), `first events ${J(types.slice(0, 5))}`);
  const tail = ['response.output_text.done', 'response.content_part.done', 'response.output_item.done'];
  check(J(types.slice(-4, -1)) === J(tail), `last events ${J(types.slice(-5))}`);
  check(['response.completed', 'response.incomplete'].includes(last.type), `final event ${last.type}`);
  checkResponse(last.response, 'final event', true);
  check(text === full.output_text && last.response.output_text === undefined, `streamed text ${J(text)} vs ${J(full.output_text)}`);
  // The SDK's stream helper accumulates the events into the final Response.
  const helper = client.responses.stream({ ...base, input: 'Hello there', reasoning: { effort: 'none' } });
  let deltas = '';
  helper.on('response.output_text.delta', (e) => { deltas += e.delta; });
  const final = await helper.finalResponse();
  checkResponse(final, 'stream helper');
  check(final.output_text === full.output_text && deltas === full.output_text, `helper text ${J(final.output_text)}`);
  console.log(`ok: stream events (${types.length}) in the documented order, the stream helper's finalResponse`);
} else if (scenario === 'tools') {
  // A function tool round trip: the call and its output go back in `input`.
  const r = await client.responses.create({ ...base, input: 'Weather in Paris?', tools: TOOLS, tool_choice: 'auto' });
  checkResponse(r, 'tools');
  check(J(r.tools) === J(TOOLS), `tools echoed: ${J(r.tools)}`);
  const input = [
    { role: 'user', content: 'Weather in Paris?' },
    { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
    { type: 'function_call_output', call_id: 'call_1', output: '{"temp":21}' },
  ];
  const r2 = await client.responses.create({ ...base, input, tools: TOOLS });
  checkResponse(r2, 'round trip');
  const r3 = await client.responses.create({ ...base, input, tools: TOOLS, stream: true,
                                             tool_choice: { type: 'function', name: 'get_weather' } });
  let done = false;
  for await (const ev of r3) if (ev.type === 'response.completed' || ev.type === 'response.incomplete') {
    checkResponse(ev.response, 'round trip stream', true);
    done = true;
  }
  check(done, 'round trip stream ended');
  console.log('ok: function tools, a function_call / function_call_output round trip, streamed');
} else if (scenario === 'errors') {
  for (const [params, param] of [[{ previous_response_id: 'resp_x' }, 'previous_response_id'],
                                 [{ tools: [{ type: 'web_search' }] }, 'tools[0].type'],
                                 [{ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] }, 'input[0].content[0].type'],
                                 [{ text: { format: { type: 'xml' } } }, 'text.format.type'],
                                 // refused by the chat checks, named as the client sent them
                                 [{ max_output_tokens: 0 }, 'max_output_tokens'],
                                 [{ reasoning: { effort: 'extreme' } }, 'reasoning.effort']]) {
    let err;
    try {
      await client.responses.create({ ...base, input: 'hi', ...params });
    } catch (e) {
      err = e;
    }
    check(err instanceof OpenAI.BadRequestError && err.param === param, `${J(params)}: ${err?.constructor?.name} ${err?.param}`);
    if (param === 'previous_response_id') check(/stateless/.test(err.message), `says so: ${err.message}`);
    check(!/max_completion_tokens|reasoning_effort/.test(err?.message), `named as sent: ${err?.message}`);
  }
  console.log('ok: previous_response_id, other tool types, images, unknown formats: BadRequestError');
} else {
  console.error('unknown scenario ' + scenario);
  process.exit(2);
}

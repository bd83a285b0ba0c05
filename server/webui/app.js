// minicpmd's page: the daemon's status (GET /v1/status, every 2 s) and a chat that
// streams from /v1/chat/completions. Plain DOM, no framework; text goes in through
// textContent only, never as HTML.
'use strict';

const KEY_ITEM = 'minicpmd-api-key';   // sessionStorage: this tab only
const REFRESH_MS = 2000;
const WEATHER_TOOL = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Get the current weather in a city',
    parameters: {type: 'object', properties: {city: {type: 'string'}}, required: ['city']},
  },
};

const $ = (id) => document.getElementById(id);
let apiKey = sessionStorage.getItem(KEY_ITEM) || '';
let modelId = null;
let history = [];           // the conversation sent with each request
let busy = null;            // the AbortController of the running request
let refreshTimer = null;

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
}

function headers(json) {
  const h = {};
  if (json) h['Content-Type'] = 'application/json';
  if (apiKey) h['Authorization'] = 'Bearer ' + apiKey;
  return h;
}

function setConn(text, bad) {
  const c = $('conn');
  c.textContent = text;
  c.classList.toggle('bad', !!bad);
}

// ---- the API key ----------------------------------------------------------------

function askForKey(why) {
  $('key-why').textContent = why;
  $('key-panel').hidden = false;
  $('main').hidden = true;
  $('key-input').focus();
}

$('key-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  apiKey = $('key-input').value.trim();
  $('key-input').value = '';
  sessionStorage.setItem(KEY_ITEM, apiKey);
  refresh();
});

// ---- status ---------------------------------------------------------------------

const fmt = (x, d = 1) => (typeof x === 'number' && isFinite(x) ? x.toFixed(d) : '–');
const clock = (ms) => new Date(ms).toLocaleTimeString([], {hour12: false});

function setText(id, text) {
  $(id).textContent = text;
}

function renderStatus(s) {
  modelId = s.model && s.model.id;
  const model = $('st-model');
  model.textContent = modelId || 'none';
  if (s.model && s.model.demo) model.append(el('span', {class: 'badge', text: 'demo'}));
  setText('st-state', s.state + (s.model && s.model.n_ctx ? ', context ' + s.model.n_ctx + ' tokens' : ''));
  const dev = $('st-device');
  dev.textContent = s.device.name || '–';
  if (s.device_down) dev.append(el('span', {class: 'badge bad', text: 'down'}));
  setText('st-kernels', s.device.description || '–');
  const k = s.k;
  setText('st-k', k.current == null ? '–'
    : `${k.current} of ${k.n_layers} (${k.mode}; halved ${k.halvings}×, probed ${k.probes}×)`);
  if (s.slots) {
    setText('st-slots', `${s.slots.in_use} of ${s.slots.total} in use`);
    setText('st-queue', `${s.queue.depth} waiting (at most ${s.queue.size})` +
            (s.queue.busy ? ', worker busy' : ', worker idle'));
    const r = s.requests;
    setText('st-requests', `${r.stop} stop, ${r.length} length, ${r.cancelled} cancelled, ` +
            `${r.failed} failed, ${r.rejected} rejected`);
    setText('st-resets', String(s.device_resets));
  }

  const ert = $('ert').tBodies[0];
  ert.replaceChildren();
  for (const [name, n] of Object.entries(s.runlists || {})) {
    const tr = el('tr', {'data-state': name}, el('td', {text: name}),
                  el('td', {class: 'num', text: String(n)}));
    if (n > 0 && name !== 'ERT_CMD_STATE_COMPLETED') tr.className = 'fault';
    ert.append(tr);
  }

  const le = $('last-error');
  le.replaceChildren(s.last_device_error
    ? errorBox(s.last_device_error, 'at ' + clock(s.last_device_error.t_ms))
    : el('p', {class: 'muted', text: 'none'}));

  const recent = $('recent').tBodies[0];
  recent.replaceChildren();
  for (const r of (s.recent || []).slice().reverse()) {
    recent.append(el('tr', {},
      el('td', {text: clock(r.t_ms)}), el('td', {text: r.outcome}),
      el('td', {class: 'num', text: String(r.prompt_tokens)}),
      el('td', {class: 'num', text: fmt(r.prompt_tps, 0)}),
      el('td', {class: 'num', text: String(r.completion_tokens)}),
      el('td', {class: 'num', text: fmt(r.decode_tps)}),
      el('td', {class: 'num', text: String(r.k)})));
  }

  const kh = $('k-history');
  kh.replaceChildren();
  for (const c of k.history || []) kh.append(el('li', {text: `${clock(c.t_ms)}: K ${c.k}`}));
  if (!(k.history || []).length) kh.append(el('li', {class: 'muted', text: 'no request yet'}));
}

async function refresh() {
  clearTimeout(refreshTimer);
  try {
    const r = await fetch('/v1/status', {headers: headers(false), cache: 'no-store'});
    if (r.status === 401) {
      askForKey(apiKey ? 'That key was refused. Enter the daemon\'s API key; it is kept in this tab only.'
                       : 'This daemon requires an API key. It is kept in this tab only (until the tab closes).');
      setConn('API key required', true);
      return;   // no polling until a key is given
    }
    if (!r.ok) throw new Error('HTTP ' + r.status);
    const s = await r.json();
    $('key-panel').hidden = true;
    $('main').hidden = false;
    renderStatus(s);
    setConn(`${s.state} · ${s.model.id || 'no model'} on ${s.device.name || '–'} · ` +
            `updated ${clock(Date.now())}`, s.state !== 'ready');
  } catch (e) {
    setConn('cannot reach the daemon: ' + e.message, true);
  }
  refreshTimer = setTimeout(refresh, REFRESH_MS);
}

// ---- chat -----------------------------------------------------------------------

// An OpenAI error object, a device error's fields spelled out.
function errorBox(err, when) {
  const box = el('div', {class: 'error', role: 'alert'});
  if (err.code) box.dataset.code = err.code;
  box.append(el('strong', {text: (err.type || 'error') + (err.code ? ': ' + err.code : '')}));
  if (when) box.append(' ', el('span', {class: 'muted', text: when}));
  box.append(el('div', {text: err.message || ''}));
  const fields = ['ert_state', 'phase', 'chunk_index', 'chunk_count', 'runlist', 'layer_first',
                  'layer_last', 'token_pos', 'elapsed_ms', 'device', 'attempts', 'param'];
  const dl = el('dl');
  for (const f of fields)
    if (err[f] !== undefined && err[f] !== null)
      dl.append(el('dt', {text: f}), el('dd', {text: String(err[f])}));
  if (dl.childElementCount) box.append(dl);
  return box;
}

function timingsLine(t, finish) {
  const parts = [];
  if (t) {
    parts.push(`prompt ${t.prompt_n} tokens (${t.cache_n} cached) at ${fmt(t.prompt_per_second, 0)} tok/s`);
    parts.push(`${t.predicted_n} tokens at ${fmt(t.predicted_per_second)} tok/s`);
  }
  if (finish) parts.push('finish: ' + finish);
  return el('div', {class: 'timings', text: parts.join(' · ')});
}

// One assistant turn as it streams in.
class Turn {
  constructor() {
    this.box = el('div', {class: 'msg assistant'});
    this.content = el('div', {class: 'content'});
    this.box.append(this.content);
    this.text = '';
    this.reasoning = '';
    this.calls = [];
    $('log').append(this.box);
  }
  think(s) {
    if (!this.thinkEl) {
      this.thinkEl = el('div', {class: 'reasoning'});
      const d = el('details', {}, el('summary', {text: 'Thinking'}), this.thinkEl);
      this.box.insertBefore(d, this.content);
    }
    this.reasoning += s;
    this.thinkEl.textContent = this.reasoning;
  }
  say(s) {
    this.text += s;
    this.content.textContent = this.text;
  }
  call(tc) {
    const i = tc.index || 0;
    let c = this.calls[i];
    if (!c) {
      c = this.calls[i] = {id: tc.id, type: 'function', function: {name: '', arguments: ''},
                           el: el('code')};
      if (!this.callsEl) {
        this.callsEl = el('div', {class: 'tool-calls'});
        this.box.insertBefore(this.callsEl, this.content.nextSibling);
      }
      this.callsEl.append(el('div', {class: 'tool-call'}, 'call ', c.el));
    }
    if (tc.id) c.id = tc.id;
    if (tc.function && tc.function.name) c.function.name += tc.function.name;
    if (tc.function && tc.function.arguments) c.function.arguments += tc.function.arguments;
    c.el.textContent = `${c.function.name}(${c.function.arguments})`;
  }
  end(node) {
    this.box.append(node);
    this.box.scrollIntoView({block: 'end'});
  }
  message() {
    const m = {role: 'assistant', content: this.text};
    if (this.calls.length)
      m.tool_calls = this.calls.map(({id, type, function: f}) => ({id, type, function: f}));
    return m;
  }
}

// Server-sent events from a fetch body: yields each event's data.
async function* sseData(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buf += value;
    let i;
    while ((i = buf.search(/\r?\n\r?\n/)) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i).replace(/^\r?\n\r?\n/, '');
      const data = block.split(/\r?\n/).filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).replace(/^ /, '')).join('\n');
      if (data) yield data;   // comments (": ping") carry no data
    }
  }
}

function setBusy(ctrl) {
  busy = ctrl;
  $('log').setAttribute('aria-busy', ctrl ? 'true' : 'false');   // announce turns, not tokens
  $('send').disabled = !!ctrl;
  $('stop').disabled = !ctrl;
}

async function send(text) {
  if (!modelId) {
    $('log').append(errorBox({type: 'page', message: 'no model is ready yet'}));
    return;
  }
  history.push({role: 'user', content: text});
  $('log').append(el('div', {class: 'msg user', text}));
  const turn = new Turn();
  const ctrl = new AbortController();
  setBusy(ctrl);
  const body = {model: modelId, messages: history, stream: true,
                chat_template_kwargs: {enable_thinking: $('opt-think').checked}};
  const max = parseInt($('opt-max').value, 10);
  if (max > 0) body.max_tokens = max;
  if ($('opt-tools').checked) body.tools = [WEATHER_TOOL];
  let finish = null, timings = null, failed = false;
  try {
    const r = await fetch('/v1/chat/completions', {method: 'POST', headers: headers(true),
                                                   body: JSON.stringify(body), signal: ctrl.signal});
    if (r.status === 401) { askForKey('The API key was refused.'); throw new Error('unauthorized'); }
    if (!r.ok) {
      let err = {type: 'http', message: 'HTTP ' + r.status};
      try { err = (await r.json()).error || err; } catch (e) { /* not JSON */ }
      turn.end(errorBox(err));
      failed = true;
    } else {
      for await (const data of sseData(r.body)) {
        if (data === '[DONE]') break;
        const chunk = JSON.parse(data);
        if (chunk.error) { turn.end(errorBox(chunk.error)); failed = true; continue; }
        if (chunk.timings) timings = chunk.timings;
        for (const ch of chunk.choices || []) {
          const d = ch.delta || {};
          if (d.reasoning_content) turn.think(d.reasoning_content);
          if (d.content) turn.say(d.content);
          for (const tc of d.tool_calls || []) turn.call(tc);
          if (ch.finish_reason) finish = ch.finish_reason;
        }
      }
      if (finish || timings) turn.end(timingsLine(timings, finish));
    }
  } catch (e) {
    if (ctrl.signal.aborted) {
      turn.end(el('div', {class: 'stopped', text: 'stopped'}));
      turn.box.dataset.stopped = '1';
    } else if (e.message !== 'unauthorized') {
      turn.end(errorBox({type: 'page', message: String(e.message || e)}));
      failed = true;
    }
  }
  if (!failed && (turn.text || turn.calls.length)) history.push(turn.message());
  else history.pop();    // no answer to keep: the question is not sent again
  turn.box.dataset.done = '1';
  setBusy(null);
  refresh();
}

$('send-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const text = $('prompt').value.trim();
  if (!text || busy) return;
  $('prompt').value = '';
  send(text);
});

$('prompt').addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    $('send-form').requestSubmit();
  }
});

$('stop').addEventListener('click', () => { if (busy) busy.abort(); });

$('clear').addEventListener('click', () => {
  if (busy) busy.abort();
  history = [];
  $('log').replaceChildren();
  $('prompt').focus();
});

refresh();

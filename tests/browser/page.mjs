// Drives Debian's chromium (headless, through puppeteer-core) against the daemon's
// page, one scenario per run; tests/integration/test_browser.py starts the daemon
// for each and judges the exit code.
//   node page.mjs SCENARIO BASE_URL OUT_DIR [API_KEY]
// Every wait is for a DOM condition, with a generous deadline; nothing sleeps. A
// screenshot of each state goes to OUT_DIR/<scenario>-<state>.png.
import {mkdirSync} from 'node:fs';
import {join} from 'node:path';
import puppeteer from 'puppeteer-core';

const [scenario, base, outDir, apiKey] = process.argv.slice(2);
const WAIT = {timeout: 40000, polling: 50};
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
mkdirSync(outDir, {recursive: true});

function fail(msg) {
  throw new Error(msg);
}

// A problem the page reports: console errors, uncaught exceptions, CSP violations,
// failed requests. `allow` lists what a scenario provokes on purpose.
function watch(page, allow) {
  const problems = [];
  const allowed = (s) => allow.some((re) => re.test(s));
  page.on('console', (m) => {
    if ((m.type() === 'error' || m.type() === 'warn') && !allowed(m.text()))
      problems.push(`console ${m.type()}: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push('uncaught: ' + e.message));
  page.on('requestfailed', (r) => {
    const s = `request failed: ${r.method()} ${r.url()} ${r.failure() && r.failure().errorText}`;
    if (!allowed(s)) problems.push(s);
  });
  page.on('response', (r) => {
    const s = `HTTP ${r.status()} ${r.request().method()} ${r.url()}`;
    if (r.status() >= 400 && !allowed(s)) problems.push(s);
  });
  return problems;
}

async function open(browser, allow = [], width = 1440) {
  const page = await browser.newPage();
  await page.setViewport({width, height: 900});
  const problems = watch(page, allow);
  // CSP violations also reach the console, but this catches them whatever the wording.
  await page.evaluateOnNewDocument(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation',
                              (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
  return {page, problems};
}

async function clean(page, problems, what) {
  const csp = await page.evaluate(() => window.__csp);
  if (csp.length) fail(`${what}: CSP violations: ${csp.join('; ')}`);
  if (problems.length) fail(`${what}: ${problems.join('\n')}`);
}

async function shot(page, state) {
  const path = join(outDir, `${scenario}-${state}.png`);
  await page.screenshot({path, fullPage: true});
  console.log('screenshot', path);
}

const text = (page, sel) => page.$eval(sel, (e) => e.textContent);

async function statusLoaded(page) {
  await page.waitForFunction(() => document.getElementById('st-model').textContent !== '–', WAIT);
}

// Type into the message box and press Enter, as a person at a keyboard would.
async function ask(page, prompt) {
  await page.focus('#prompt');
  await page.keyboard.type(prompt);
  await page.keyboard.press('Enter');
}

const lastTurn = '#log .msg.assistant:last-of-type';

const scenarios = {
  // The page and its status at 1440 and 360 px, light and dark; /ui/ too; Tab
  // reaches every control.
  async load(browser) {
    const {page, problems} = await open(browser);
    const resp = await page.goto(base + '/', {waitUntil: 'load'});
    const csp = resp.headers()['content-security-policy'] || '';
    if (!/default-src 'self'/.test(csp) || /unsafe-inline/.test(csp))
      fail('Content-Security-Policy: ' + csp);
    await statusLoaded(page);
    const model = await text(page, '#st-model');
    const device = await text(page, '#st-device');
    const kernels = await text(page, '#st-kernels');
    console.log(JSON.stringify({model, device, kernels}));
    if (!model.includes(process.env.WANT_MODEL || '')) fail('model shown: ' + model);
    if (device !== (process.env.WANT_DEVICE || 'cpu')) fail('device shown: ' + device);
    if (!kernels.startsWith(device)) fail('kernels shown: ' + kernels);
    await page.waitForFunction(() => document.querySelectorAll('#ert tbody tr').length === 11, WAIT);
    for (const width of [1440, 360]) {
      await page.setViewport({width, height: width > 400 ? 900 : 740});
      const over = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      if (over > 0) fail(`${over} px of horizontal scroll at ${width} px`);
      await shot(page, `${width}`);
    }
    await page.setViewport({width: 1440, height: 900});
    const bg = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    await page.emulateMediaFeatures([{name: 'prefers-color-scheme', value: 'light'}]);
    const light = await bg();
    await page.emulateMediaFeatures([{name: 'prefers-color-scheme', value: 'dark'}]);
    const dark = await bg();
    if (light === dark) fail('the same background in light and dark: ' + light);
    await shot(page, 'dark');
    await page.emulateMediaFeatures([{name: 'prefers-color-scheme', value: 'light'}]);
    // Keyboard: Tab from the top reaches the message box and the buttons.
    const seen = new Set();
    await page.focus('body');
    for (let i = 0; i < 30; i++) {
      await page.keyboard.press('Tab');
      seen.add(await page.evaluate(() => document.activeElement.id));
    }
    for (const id of ['prompt', 'opt-think', 'opt-tools', 'opt-max', 'send', 'clear'])
      if (!seen.has(id)) fail(`Tab never reaches #${id} (reached: ${[...seen].join(', ')})`);
    await page.goto(base + '/ui/', {waitUntil: 'load'});
    await statusLoaded(page);
    await clean(page, problems, 'load');
  },

  // A question answered in full: tokens stream into the page (the content grows
  // delta by delta), thinking collapsed, the timings; then a tool call as a call.
  async chat(browser) {
    const {page, problems} = await open(browser);
    await page.goto(base + '/', {waitUntil: 'load'});
    await statusLoaded(page);
    await page.click('#opt-think');
    await page.evaluate(() => {
      window.__updates = 0;
      new MutationObserver((recs) => {
        for (const r of recs)
          if (r.target.closest && r.target.closest('.msg.assistant .content')) window.__updates++;
      }).observe(document.getElementById('log'), {childList: true, subtree: true, characterData: true});
    });
    await ask(page, 'What is 12 + 30?');
    await page.waitForSelector(lastTurn + '[data-done]', WAIT);
    const r = await page.$eval(lastTurn, (t) => ({
      content: t.querySelector('.content').textContent,
      thinking: t.querySelector('details .reasoning') && t.querySelector('details .reasoning').textContent,
      open: t.querySelector('details') && t.querySelector('details').open,
      timings: t.querySelector('.timings') && t.querySelector('.timings').textContent,
      errors: t.querySelectorAll('.error').length,
    }));
    const updates = await page.evaluate(() => window.__updates);
    console.log(JSON.stringify({...r, updates}));
    if (r.errors) fail('the answer has an error');
    if (!r.content.includes('42')) fail('answer: ' + r.content);
    if (!r.thinking) fail('no thinking shown');
    if (r.open) fail('thinking is not collapsed');
    if (!/tok\/s/.test(r.timings || '') || !/finish: stop/.test(r.timings)) fail('timings: ' + r.timings);
    if (updates < 2) fail(`the answer arrived in ${updates} update(s), not streamed`);
    await shot(page, 'answer');
    await page.click('#opt-think');
    await page.click('#opt-tools');
    await ask(page, 'What is the weather in Paris?');
    await page.waitForFunction((sel) => {
      const t = document.querySelectorAll('#log .msg.assistant');
      return t.length === 2 && t[1].dataset.done;
    }, WAIT, lastTurn);
    const call = await page.$eval(lastTurn, (t) => ({
      call: t.querySelector('.tool-call code') && t.querySelector('.tool-call code').textContent,
      timings: t.querySelector('.timings') && t.querySelector('.timings').textContent,
    }));
    console.log(JSON.stringify(call));
    if (!/^get_weather\(\{.*"city".*Paris.*\}\)$/.test(call.call || '')) fail('tool call: ' + call.call);
    if (!/finish: tool_calls/.test(call.timings || '')) fail('timings: ' + call.timings);
    // The status panel counted both and shows their speed and K.
    await page.waitForFunction(() => document.querySelectorAll('#recent tbody tr').length === 2, WAIT);
    await page.waitForFunction(() => /^K \d+$/.test(
      (document.querySelector('#k-history li') || {}).textContent.split(': ')[1] || ''), WAIT);
    await shot(page, 'tool-call');
    await clean(page, problems, 'chat');
  },

  // A long answer: tokens are on the page while the request still runs; Stop
  // aborts the fetch and the daemon cancels the generation (counted cancelled).
  async stop(browser) {
    const {page, problems} = await open(browser, [/net::ERR_ABORTED/]);
    await page.goto(base + '/', {waitUntil: 'load'});
    await statusLoaded(page);
    await ask(page, process.env.LONG_PROMPT);
    await page.waitForFunction((sel) => {
      const t = document.querySelector(sel);
      return t && t.querySelector('.content').textContent.length > 0 && !t.dataset.done;
    }, WAIT, lastTurn);
    const before = await page.evaluate(() => ({
      stop: !document.getElementById('stop').disabled,
      send: document.getElementById('send').disabled,
    }));
    if (!before.stop || !before.send) fail('while streaming: ' + JSON.stringify(before));
    await shot(page, 'streaming');
    await page.click('#stop');
    await page.waitForSelector(lastTurn + '[data-stopped]', WAIT);
    const after = await page.evaluate(() => ({
      stop: document.getElementById('stop').disabled,
      send: document.getElementById('send').disabled,
    }));
    if (!after.stop || after.send) fail('after stop: ' + JSON.stringify(after));
    // The daemon saw the disconnect and ended the generation as cancelled.
    await page.waitForFunction(() => /\b1 cancelled\b/.test(
      document.getElementById('st-requests').textContent), WAIT);
    await page.waitForFunction(() => /worker idle/.test(document.getElementById('st-queue').textContent), WAIT);
    await shot(page, 'stopped');
    await clean(page, problems, 'stop');
  },

  // A device fault in the sim: the turn shows the structured device error and the
  // status panel its ERT state, the count, and the error in full.
  async fault(browser) {
    const {page, problems} = await open(browser);
    await page.goto(base + '/', {waitUntil: 'load'});
    await statusLoaded(page);
    await ask(page, 'What is 12 + 30?');
    const errSel = lastTurn + ' .error[data-code="ert_cmd_state_error"]';
    await page.waitForSelector(errSel, WAIT);
    const box = await text(page, errSel);
    console.log(JSON.stringify({box}));
    for (const want of ['device_error', 'ert_state5', 'phasedecode', 'devicesim'])
      if (!box.replace(/\s+/g, '').includes(want)) fail(`error box lacks ${want}: ${box}`);
    await page.waitForFunction(() => {
      const row = document.querySelector('#ert tr[data-state="ERT_CMD_STATE_ERROR"]');
      return row && row.className === 'fault' && row.cells[1].textContent === '1';
    }, WAIT);
    await page.waitForSelector('#last-error .error[data-code="ert_cmd_state_error"]', WAIT);
    const last = await text(page, '#last-error');
    if (!/decode/.test(last) || !/attempts/.test(last)) fail('last device error: ' + last);
    await page.waitForFunction(() => /1 failed/.test(document.getElementById('st-requests').textContent), WAIT);
    await shot(page, 'device-error');
    await clean(page, problems, 'fault');
  },

  // With --api-key: the page asks for the key (a wrong one again), keeps it in the
  // tab (sessionStorage) and never in the URL or localStorage.
  async apikey(browser) {
    const {page, problems} = await open(browser, [/HTTP 401 GET .*\/v1\/status/,
                                                  /status of 401/]);
    await page.goto(base + '/', {waitUntil: 'load'});
    await page.waitForSelector('#key-panel', {...WAIT, visible: true});
    const shown = (sel) => page.$eval(sel, (e) => getComputedStyle(e).display !== 'none');
    if (await shown('#main')) fail('the status and chat show without a key');
    if (await page.evaluate(() => document.activeElement.id) !== 'key-input')
      fail('the key field does not have the focus');
    await shot(page, 'asked');
    await page.keyboard.type('not-the-key');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => /refused/.test(document.getElementById('key-why').textContent), WAIT);
    await page.keyboard.type(apiKey);
    await page.keyboard.press('Enter');
    await statusLoaded(page);
    if (await shown('#key-panel') || !(await shown('#main'))) fail('still asking after the key');
    const where = await page.evaluate(() => ({
      url: location.href, session: sessionStorage.getItem('minicpmd-api-key'),
      local: localStorage.length, cookie: document.cookie,
    }));
    if (where.url.includes(apiKey) || where.local || where.cookie || where.session !== apiKey)
      fail('where the key is: ' + JSON.stringify(where));
    await ask(page, 'What is 12 + 30?');
    await page.waitForSelector(lastTurn + '[data-done]', WAIT);
    if (!(await text(page, lastTurn + ' .content')).includes('42')) fail('no answer with the key');
    await shot(page, 'unlocked');
    // A new tab of the same browser starts without it.
    const other = await browser.newPage();
    await other.goto(base + '/', {waitUntil: 'load'});
    await other.waitForSelector('#key-panel', {...WAIT, visible: true});
    await clean(page, problems, 'apikey');
  },
};

const browser = await puppeteer.launch({
  executablePath: CHROMIUM,
  headless: true,
  // As root (CI containers) chromium refuses to start without --no-sandbox.
  args: ['--no-sandbox', '--disable-dev-shm-usage', '--no-first-run', '--disable-gpu'],
});
let code = 0;
try {
  if (!scenarios[scenario]) fail('no scenario ' + scenario);
  await scenarios[scenario](browser);
  console.log('ok', scenario);
} catch (e) {
  console.error(`FAIL ${scenario}: ${e.stack || e}`);
  for (const p of await browser.pages()) {
    try { await p.screenshot({path: join(outDir, `${scenario}-failed.png`), fullPage: true}); } catch (_) { /* closed */ }
  }
  code = 1;
} finally {
  await browser.close();
}
process.exit(code);

// The official OpenAI Node SDK against a running minicpmd: does the SDK read our
// answers the way it reads OpenAI's? Usage: node sdk-check.mjs BASE_URL API_KEY MODEL_ID
// Exits 0 when every check holds; prints the first failure and exits 1 otherwise.
import OpenAI from 'openai';

const [baseURL, apiKey, modelId] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 5000 });
const bad = new OpenAI({ baseURL, apiKey: 'wrong-' + apiKey, maxRetries: 0, timeout: 5000 });

function check(cond, what) {
  if (!cond) {
    console.error('FAIL: ' + what);
    process.exit(1);
  }
}

async function expectError(fn, Cls, status, code, what) {
  try {
    await fn();
  } catch (e) {
    check(e instanceof Cls, `${what}: ${e.constructor.name} is not ${Cls.name} (${e.message})`);
    check(e.status === status, `${what}: status ${e.status}, want ${status}`);
    if (code !== undefined) check(e.code === code, `${what}: code ${e.code}, want ${code}`);
    check(typeof e.error?.message === 'string' && e.error.message.length > 0,
          `${what}: no error.message`);
    return;
  }
  check(false, `${what}: no error`);
}

// models.list: an async-iterable page of Model objects
const ids = [];
for await (const m of client.models.list()) {
  check(m.object === 'model' && typeof m.created === 'number' && typeof m.owned_by === 'string',
        `models.list item shape: ${JSON.stringify(m)}`);
  ids.push(m.id);
}
check(ids.length === 1 && ids[0] === modelId, `models.list ids ${JSON.stringify(ids)}`);

// models.retrieve, including an id with ':' in it
const m = await client.models.retrieve(modelId);
check(m.id === modelId && m.object === 'model', `models.retrieve: ${JSON.stringify(m)}`);

await expectError(() => client.models.retrieve('no-such-model'), OpenAI.NotFoundError, 404,
                  'model_not_found', 'retrieve unknown model');
await expectError(() => bad.models.list(), OpenAI.AuthenticationError, 401, 'invalid_api_key',
                  'wrong API key');
console.log('ok: models.list, models.retrieve, NotFoundError, AuthenticationError');

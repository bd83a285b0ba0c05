// hf-encode.mjs ORACLE_DIR TOKENIZER_JSON STRINGS_JSON: encodes each string of the
// JSON array with Hugging Face's tokenizers.js (installed in ORACLE_DIR, i.e.
// tests/oracle/node_modules) and prints a JSON array of id arrays, special tokens
// matched, no BOS added. packgen.py compares it with our tokenizer.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const [oracleDir, tokPath, stringsPath] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(oracleDir), "package.json"));
const mod = await import(pathToFileURL(require.resolve("@huggingface/tokenizers")).href);
const Tokenizer = mod.Tokenizer ?? mod.default.Tokenizer;  // require.resolve finds the CJS build
const json = JSON.parse(fs.readFileSync(tokPath, "utf8"));
const tok = new Tokenizer(json, { clean_up_tokenization_spaces: false });
const out = JSON.parse(fs.readFileSync(stringsPath, "utf8")).map(
  (s) => tok.encode(s, { add_special_tokens: false }).ids);
process.stdout.write(JSON.stringify(out));

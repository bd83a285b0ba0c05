// A MiniCPM5-style tokenizer.json derived from the real Qwen3 one: Qwen3's vocab and
// merges, with MiniCPM5's pre-tokenizer (docs/model-minicpm5.md §2.1: 1-3 digit
// isolation, then the GPT-4-style regex, ByteLevel without its own regex), no
// normalizer, ignore_merges, and MiniCPM5's added tokens (§2.2) appended after the
// vocab. The ids differ from the real model's; the rules are the same.
//
//   node minicpm5-variant.mjs QWEN3_TOKENIZER.json OUT.json
import fs from "node:fs";

const MINICPM5_REGEX =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// [content, special]; <think> and </think> are not special in MiniCPM5.
const ADDED = [
  ["<s>", true], ["</s>", true], ["<tool_call>", true], ["</tool_call>", true], ["<|im_sep|>", true],
  ["<|fim_prefix|>", true], ["<|fim_middle|>", true], ["<|fim_suffix|>", true],
  ["<think>", false], ["</think>", false], ["<tool_response>", true], ["</tool_response>", true],
  ["<tools>", true], ["</tools>", true], ["<arguments>", true], ["</arguments>", true],
  ["<parameters>", true], ["</parameters>", true], ["<function", true], ["</function>", true],
  ["<param", true], ["</param>", true], ["<|im_start|>", true], ["<|im_end|>", true], ["<unk>", true],
  ["<|thought_begin|>", true], ["<|thought_end|>", true], ["<|tool_call|>", true],
  ["<|execute_start|>", true], ["<|execute_end|>", true], ["/think", true], ["/no_think", true],
];

export function minicpm5Variant(qwen) {
  const t = structuredClone(qwen);
  t.normalizer = null;
  t.pre_tokenizer = {
    type: "Sequence",
    pretokenizers: [
      { type: "Split", pattern: { Regex: "\\p{N}{1,3}" }, behavior: "Isolated", invert: false },
      { type: "Split", pattern: { Regex: MINICPM5_REGEX }, behavior: "Isolated", invert: false },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
    ],
  };
  t.model.ignore_merges = true;
  let next = Object.values(t.model.vocab).reduce((a, b) => Math.max(a, b), 0) + 1;
  t.added_tokens = ADDED.map(([content, special]) => ({
    id: next++, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special,
  }));
  return t;
}

if (process.argv[1] && process.argv[1].endsWith("minicpm5-variant.mjs")) {
  const [src, dst] = process.argv.slice(2);
  fs.writeFileSync(dst, JSON.stringify(minicpm5Variant(JSON.parse(fs.readFileSync(src, "utf8")))));
}

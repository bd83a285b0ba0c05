// llama.cpp's CPU backend through node-llama-cpp (the prebuilt binaries of the
// version pinned in package.json; build "never": nothing is compiled here), timed
// the way minicpmd-bench times minicpmd (tools/bench/bench.c): after a warm-up,
// per repetition a fresh sequence, prefill of a --prompt-token prompt of random
// ids (fixed seed) in one evaluation, then --gen greedy decode steps one token at
// a time; medians over --reps. One JSON line on stdout.
//
//   node llama-bench.mjs MODEL.gguf [--threads 2] [--prompt 512] [--gen 128] [--reps 3]
//   node llama-bench.mjs --version    the node-llama-cpp version and binary in use
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import {readFileSync} from "node:fs";

// The installed node-llama-cpp's version (its package.json is not an export).
function version() {
    const p = new URL("./node_modules/node-llama-cpp/package.json", import.meta.url);
    return JSON.parse(readFileSync(p, "utf8")).version;
}

const args = process.argv.slice(2);
const opt = {threads: 2, prompt: 512, gen: 128, reps: 3};
let model = null;
for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === "--version") {
        console.log(JSON.stringify({"node-llama-cpp": version()}));
        process.exit(0);
    }
    if (a.startsWith("--") && a.slice(2) in opt) {
        const v = Number(args[++i]);
        if (!Number.isInteger(v) || v < 1) {
            console.error(`llama-bench: ${a} wants a positive integer`);
            process.exit(2);
        }
        opt[a.slice(2)] = v;
    } else if (!model) {
        model = a;
    } else {
        console.error(`llama-bench: unexpected argument '${a}'`);
        process.exit(2);
    }
}
if (!model) {
    console.error("usage: node llama-bench.mjs MODEL.gguf [--threads N] [--prompt N] [--gen N] [--reps N]");
    process.exit(2);
}

// mulberry32: the prompt's ids, the same every run.
function rng(seed) {
    return () => {
        seed = (seed + 0x6D2B79F5) | 0;
        let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
        t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
}

const median = (v) => {
    const s = [...v].sort((x, y) => x - y);
    return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

const llama = await getLlama({gpu: false, build: "never", maxThreads: opt.threads,
                              logLevel: LlamaLogLevel.error});
const m = await llama.loadModel({modelPath: model, gpuLayers: 0});
const nVocab = Number(m.fileInfo.tensorInfo.find((t) => t.name === "token_embd.weight").dimensions[1]);
const ctx = await m.createContext({contextSize: opt.prompt + opt.gen + 16, batchSize: opt.prompt,
                                   threads: opt.threads, sequences: 1});
const seq = ctx.getSequence();
const r = rng(1);
const prompt = Array.from({length: opt.prompt}, () => Math.floor(r() * nVocab));

async function once(nPrompt, nGen) {
    await seq.clearHistory();
    const t0 = performance.now();
    await seq.evaluateWithoutGeneratingNewTokens(prompt.slice(0, nPrompt));
    const t1 = performance.now();
    let n = 0;
    if (nGen > 0) {
        // Greedy; EOG tokens are yielded and decoding goes on (random weights).
        for await (const tok of seq.evaluate([prompt[nPrompt - 1]], {temperature: 0,
                                                                     yieldEogToken: true})) {
            void tok;
            if (++n >= nGen)
                break;
        }
    }
    const t2 = performance.now();
    return {prefill_s: (t1 - t0) / 1000, decode_s: (t2 - t1) / 1000, decoded: n};
}

await once(8, 4);  // warm-up: every weight page touched once
const runs = [];
for (let i = 0; i < opt.reps; i++)
    runs.push(await once(opt.prompt, opt.gen));
console.log(JSON.stringify({
    engine: "llama.cpp", "node-llama-cpp": version(),
    model, threads: opt.threads, prompt_tokens: opt.prompt, gen_tokens: opt.gen, reps: opt.reps,
    prefill_tok_s: median(runs.map((x) => opt.prompt / x.prefill_s)),
    decode_tok_s: median(runs.map((x) => x.decoded / x.decode_s)),
    runs,
}));
await ctx.dispose();
await m.dispose();
await llama.dispose();

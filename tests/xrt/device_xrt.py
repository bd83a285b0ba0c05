#!/usr/bin/env python3
"""`minicpmd --device xrt` and `--npu-probe` on a machine without an NPU.

    device_xrt.py MINICPMD MINICPMD_PACK MKKSET WORKDIR [npu|model]

Each way `--device xrt` can be unusable must end before the daemon listens, with
exit code 2 and exactly one line on stderr that says what is wrong:
no kernel set, a kernel set that does not match the model, a kernel set missing a
file it names, and (with a good kernel set) no XRT in the build or no NPU device
node. `--npu-probe` without an NPU says so in one line and exits 1. `--device auto`
never picks the NPU here. --check is used so a run that got past the checks ends
on its own rather than serving.

In a -Dxrt_model=true build (`model`), a good kernel set is enough: `--device xrt`
runs on the functional model and says so, `--npu-probe` prints its table with the
single-run row, and `--device auto` still never picks it.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request


def main(argv):
    exe, packgen, mkkset, work = argv[1:5]
    model = len(argv) > 5 and argv[5] == "model"
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    pack = os.path.join(work, "tiny")
    subprocess.run([packgen, "gen", "--preset", "tiny", "--seed", "3", "--out", pack], check=True,
                   stdout=subprocess.DEVNULL)
    env = dict(os.environ)
    env["HOME"] = work          # no stray config or state from the user running the tests
    env.pop("MINICPMD_CONFIG", None)
    failures = []
    ran = 0

    def kset(name, *args):
        d = os.path.join(work, "kset-" + name)
        subprocess.run([sys.executable, "-B", mkkset, pack, d] + list(args), check=True)
        return d

    def case(title, args, code, pattern):
        nonlocal ran
        ran += 1
        p = subprocess.run([exe, "--model", pack, "--port", "0", "--state-dir",
                            os.path.join(work, "state")] + args,
                           env=env, capture_output=True, text=True, timeout=60)
        lines = [l for l in p.stderr.splitlines() if l.strip()]
        ok = p.returncode == code and len(lines) == 1 and re.search(pattern, lines[0])
        print(("ok     " if ok else "FAILED ") + title)
        print("       exit %d, stderr: %s" % (p.returncode, " | ".join(lines) or "(empty)"))
        if not ok:
            failures.append(title)

    case("--device xrt without a kernel set", ["--device", "xrt", "--check"], 2,
         r"^minicpmd: --device xrt: no NPU kernel set for this model: .*/tiny/open_kernels/"
         r"manifest\.json does not exist")
    case("--device xrt with a mismatched kernel set",
         ["--device", "xrt", "--check", "--npu-kernels",
          kset("heads", "--set", "spec.num_heads=16")], 2,
         r"^minicpmd: --device xrt: kernel set .* does not match the model: num_heads is 16 in "
         r"the kernel set, 4 in the model$")
    case("--device xrt with a kernel set built for 42 layers",
         ["--device", "xrt", "--check", "--npu-kernels",
          kset("layers", "--set", "spec.num_layers=42", "--set",
               "layers=" + str(["dense"] * 42).replace("'", '"'))], 2,
         r"num_layers is 42 in the kernel set, 4 in the model$")
    case("--device xrt with a file missing from the kernel set",
         ["--device", "xrt", "--check", "--npu-kernels",
          kset("missing", "--drop", "lm_head_q4/final.xclbin")], 2,
         r"^minicpmd: --device xrt: kernel set .* is incomplete: lm_head_q4/final\.xclbin "
         r"\(named in manifest\.json\) does not exist$")
    good = kset("good")
    if model:
        for title, args, want in (
                ("--device xrt on the functional model",
                 ["--device", "xrt", "--check", "--ctx-size", "1024", "--npu-kernels", good],
                 r"device xrt: functional model, not an NPU"),
                ("--npu-probe on the functional model",
                 ["--npu-probe", "--ctx-size", "1024", "--npu-kernels", good],
                 r"functional model, not an NPU(.|\n)*\| run \| 5 \| COMPLETED \| 8/8 \|")):
            ran += 1
            p = subprocess.run([exe, "--model", pack, "--port", "0", "--state-dir",
                                os.path.join(work, "state")] + args,
                               env=env, capture_output=True, text=True, timeout=120)
            ok = p.returncode == 0 and re.search(want, p.stdout)
            print(("ok     " if ok else "FAILED ") + title)
            print("       exit %d, stdout: %s" % (p.returncode, p.stdout.strip()[:300]))
            if not ok:
                failures.append(title)
        # --runlist-layers auto when every runlist fails: K halves to 1, then the
        # device falls back to one run per dispatch, and the answer is the clean one.
        def chat(extra_env, submit="auto"):
            chat.n = getattr(chat, "n", 0) + 1     # a fresh state dir: no remembered K
            ekv = dict(env)
            ekv.update(extra_env)
            d = subprocess.Popen([exe, "--model", pack, "--device", "xrt", "--port", "0",
                                  "--ctx-size", "1024", "--npu-kernels", good,
                                  "--runlist-layers", "auto", "--npu-submit", submit,
                                  "--state-dir", os.path.join(work, "state-chat%d" % chat.n)],
                                 env=ekv,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            try:
                port = None
                for line in d.stderr:
                    m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
                    if m:
                        port = int(m.group(1))
                        break
                for _ in range(600):        # loading: 503 until ready
                    try:
                        urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5)
                        break
                    except urllib.error.HTTPError:
                        time.sleep(0.1)
                body = json.dumps({"model": "tiny", "max_tokens": 8, "temperature": 0,
                                   "messages": [{"role": "user", "content": "hi"}]}).encode()
                req = urllib.request.Request("http://127.0.0.1:%d/v1/chat/completions" % port,
                                             body, {"content-type": "application/json"})
                j = json.load(urllib.request.urlopen(req, timeout=120))
                h = json.load(urllib.request.urlopen("http://127.0.0.1:%d/health" % port,
                                                     timeout=10))
                return j["choices"][0]["message"]["content"], h.get("device_description", "")
            finally:
                d.terminate()
                chat.log = d.communicate(timeout=30)[1]
        ran += 1
        clean, _ = chat({})
        fell, desc = chat({"XRT_MODEL_FAULT": "runlists"})
        ok = fell == clean and "one run per dispatch" in desc and "functional model" in desc
        print(("ok     " if ok else "FAILED ") + "auto reaches single runs when every runlist "
              "fails")
        print("       clean %r, with every runlist failing %r; /health: %s" % (clean, fell, desc))
        if not ok:
            failures.append("auto ladder")
        # A hang in the middle of a runlist (run 64: 15 prompt tokens of 4 layer runs and
        # one ln + lm are runs 0-61, so it is layer 2 of the first decode), an abort, a
        # NEW state: the worker resets, replays, and the answer is the clean one; the
        # same with one run per dispatch.
        for submit in ("auto", "run"):
            clean, _ = chat({}, submit)
            for fault in ("hang@64", "abort@64", "new@64"):
                ran += 1
                got, _ = chat({"XRT_MODEL_FAULT": fault}, submit)
                hit = "ERT_CMD_STATE_" in chat.log and "replaying" in chat.log
                ok = got == clean and hit
                title = "%s with --npu-submit %s: the replay gives the clean answer" % (fault,
                                                                                       submit)
                print(("ok     " if ok else "FAILED ") + title)
                print("       %r vs clean %r; fault seen and replayed: %s (%s)" % (got, clean, hit, (re.findall(r"failing layer \d+", chat.log) or ["-"])[0]))
                if not ok:
                    failures.append(title)
        # --npu-prefill cpu: the CPU prefills, the NPU decodes. Two turns (the second
        # reusing the first's KV, the CPU reading back what the NPU decoded) give the
        # answers of --npu-prefill npu; a hang in the first NPU decode step after the
        # CPU prefill (run 0: the prefill submits nothing to the NPU) and one in a later
        # step (run 16: the ln of step 2, 4 layer runs + ln + lm a step) end in the clean
        # answers, the worker replaying: the prompt's rows come back from the CPU's
        # copy of the KV (no second prefill), the decoded tokens run again on the NPU;
        # auto logs its choice. f32 activations: the
        # CPU KV the model agrees with (test-xrt-model.c).
        def turns(prefill, extra_env=None):
            turns.n = getattr(turns, "n", 0) + 1
            ekv = dict(env)
            ekv.update(extra_env or {})
            d = subprocess.Popen([exe, "--model", pack, "--device", "xrt", "--port", "0",
                                  "--ctx-size", "1024", "--npu-kernels", good,
                                  "--npu-prefill", prefill, "--npu-submit", "run",
                                  "--precision", "f32",
                                  "--state-dir", os.path.join(work, "state-turns%d" % turns.n)],
                                 env=ekv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True)
            out = []
            try:
                port = None
                for line in d.stderr:
                    m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
                    if m:
                        port = int(m.group(1))
                        break
                for _ in range(600):
                    try:
                        urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5)
                        break
                    except urllib.error.HTTPError:
                        time.sleep(0.1)
                msgs = [{"role": "user", "content": "Tell me about the sea and the sky, "
                         "in a long and winding sentence with many words in it."}]
                for t in range(2):
                    body = json.dumps({"model": "tiny", "max_tokens": 8, "temperature": 0,
                                       "messages": msgs}).encode()
                    req = urllib.request.Request(
                        "http://127.0.0.1:%d/v1/chat/completions" % port, body,
                        {"content-type": "application/json"})
                    j = json.load(urllib.request.urlopen(req, timeout=120))
                    c = j["choices"][0]["message"]["content"]
                    out.append((c, j["usage"]["prompt_tokens_details"]["cached_tokens"]))
                    msgs += [{"role": "assistant", "content": c},
                             {"role": "user", "content": "and then?"}]
                mt = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                            timeout=10).read().decode()
                turns.split = {k: float(v) for k, v in re.findall(
                    r'minicpmd_prefill_seconds_total\{ran_on="(\w+)"\} ([0-9.]+)', mt)}
                return out
            finally:
                d.terminate()
                turns.log = d.communicate(timeout=30)[1]
        ref = turns("npu")
        ran += 1
        ok = turns.split.get("device", 0) > 0 and turns.split.get("host_cpu") == 0
        print(("ok     " if ok else "FAILED ") + "/metrics: npu prefill time on the device")
        print("       %r" % turns.split)
        if not ok:
            failures.append("npu prefill metrics")
        for title, prefill, fault in (
                ("--npu-prefill cpu: two turns as with npu prefill", "cpu", None),
                ("--npu-prefill cpu, hang in the first NPU decode step", "cpu", "hang@0"),
                ("--npu-prefill cpu, hang in a later decode step", "cpu", "hang@16"),
                ("--npu-prefill auto logs its choice", "auto", None)):
            ran += 1
            got = turns(prefill, {"XRT_MODEL_FAULT": fault} if fault else None)
            same = [g[0] for g in got] == [r[0] for r in ref]
            cached = got[1][1] > 0 and ref[1][1] > 0
            # the replay takes the prompt's rows back from the CPU's copy of the KV
            hit = not fault or ("ERT_CMD_STATE_" in turns.log and "replaying" in turns.log and
                                "taken from the CPU's copy of the KV" in turns.log)
            why = re.findall(r"--npu-prefill auto: [^\n]*", turns.log)
            split = turns.split.get("host_cpu", 0) > 0 and (fault or prefill == "auto" or
                                                             turns.split.get("device") == 0)
            ok = same and cached and hit and split and (prefill != "auto" or why)
            print(("ok     " if ok else "FAILED ") + title)
            seen = re.findall(r"[^\n]*ERT_CMD_STATE_[^\n]*", turns.log) if fault else []
            print("       %r vs npu prefill %r; prefill seconds %r; fault seen and replayed: "
                  "%s%s%s" % (got, ref, turns.split, hit, ("; " + why[0]) if why else "",
                   ("; " + seen[0][:240]) if seen else ""))
            if not ok:
                failures.append(title)
        # --parallel 2, the prompt on the CPU: a second request's prompt is computed
        # on the CPU while the NPU decodes the first (the worker starts it in the
        # background and runs the first's decode steps meanwhile: the log line
        # counts them), and both answers are the ones each gets alone. Each run of
        # the model also takes 2 ms of wall time, the host waiting as for an NPU;
        # wall times are printed, not judged.
        def serve(tag):
            penv = dict(env)
            penv["XRT_MODEL_RUN_US"] = "2000"
            d = subprocess.Popen([exe, "--model", pack, "--device", "xrt", "--port", "0",
                                  "--ctx-size", "1024", "--npu-kernels", good,
                                  "--npu-prefill", "cpu", "--npu-submit", "run",
                                  "--precision", "f32", "--parallel", "2",
                                  "--state-dir", os.path.join(work, "state-par-" + tag)],
                                 env=penv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True)
            for line in d.stderr:
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
                if m:
                    break
            else:
                raise RuntimeError("the daemon did not listen")
            port = int(m.group(1))
            for _ in range(600):   # 503 while the model loads
                try:
                    urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5)
                    return d, port
                except urllib.error.HTTPError:
                    time.sleep(0.1)
            raise RuntimeError("the model did not load")

        def ask(port, content, n, stream=False, first=None):
            body = json.dumps({"model": "tiny", "max_tokens": n, "temperature": 0,
                               "stream": stream,
                               "messages": [{"role": "user", "content": content}]}).encode()
            req = urllib.request.Request("http://127.0.0.1:%d/v1/chat/completions" % port,
                                         body, {"content-type": "application/json"})
            r = urllib.request.urlopen(req, timeout=300)
            if not stream:
                return json.load(r)["choices"][0]["message"]["content"]
            text = ""
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                ch = json.loads(line[6:])["choices"]
                if ch and ch[0]["delta"].get("content"):
                    text += ch[0]["delta"]["content"]
                    if first is not None:
                        first.set()
            return text

        import threading
        qa = "Count slowly: one, two, three, four, five."
        qb = " ".join("word%d" % i for i in range(160)) + " -- repeat the last word."
        ran += 1
        d, port = serve("serial")
        try:
            t0 = time.time()
            ref_a = ask(port, qa, 24)
            t_a = time.time() - t0
            t0 = time.time()
            ref_b = ask(port, qb, 8)
            t_b = time.time() - t0
        finally:
            d.terminate()
            d.communicate(timeout=30)
        d, port = serve("both")
        got = {}
        try:
            first = threading.Event()
            th = threading.Thread(target=lambda: got.update(a=ask(port, qa, 24, True, first)))
            t0 = time.time()
            th.start()
            first.wait(300)
            got["b"] = ask(port, qb, 8)
            th.join(300)
            wall = time.time() - t0
        finally:
            d.terminate()
            log = d.communicate(timeout=30)[1]
        side = [int(m) for m in re.findall(r"computed on the host in \d+ ms and handed to the "
                                           r"device \d+ ms after the start; (\d+) piece", log)]
        title = "--parallel 2: a prompt on the CPU while the NPU decodes another"
        ok = got.get("a") == ref_a and got.get("b") == ref_b and side and max(side) >= 1
        print(("ok     " if ok else "FAILED ") + title)
        print("       answers %r / %r vs alone %r / %r; pieces decoded beside each host "
              "prefill chunk %r; wall %.1f s both at once, %.1f + %.1f s one after the other"
              % (got.get("a"), got.get("b"), ref_a, ref_b, side, wall, t_a, t_b))
        if not ok:
            failures.append(title)
    else:
        case("--device xrt with a good kernel set and no NPU",
             ["--device", "xrt", "--check", "--ctx-size", "1024", "--npu-kernels", good], 2,
             r"^minicpmd: --device xrt: (this build has no XRT device|no NPU: "
             r"/dev/accel/accel0 does not exist)")
        case("--npu-probe without an NPU", ["--npu-probe", "--npu-kernels", good], 1,
             r"^minicpmd: --npu-probe: no NPU")
    # auto: the CPU, and --check says so on stdout
    ran += 1
    p = subprocess.run([exe, "--model", pack, "--check", "--npu-kernels", good], env=env,
                       capture_output=True, text=True, timeout=120)
    ok = p.returncode == 0 and "device cpu" in p.stdout
    print(("ok     " if ok else "FAILED ") + "--device auto picks the CPU without an NPU")
    print("       exit %d, stdout: %s" % (p.returncode, p.stdout.strip()[:200]))
    if not ok:
        failures.append("auto")
    print("%d passed, %d failed" % (ran - len(failures), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Packs for the integration tests: packs generated with minicpmd-pack gen (one
per preset, seed and options per test), minimal fake packs, and the load gate that
holds the daemon's loader back."""

import errno
import json
import os
import shutil
import subprocess
import tempfile
import time

from harness_base import _CLEANUP, Failure, binary


TINY_TOKENIZER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                              "tiny-tokenizer.json")


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


def pack_binary():
    b = os.environ.get("MINICPMD_PACK_BIN")
    if not b:
        b = os.path.join(os.path.dirname(binary()), "minicpmd-pack")
    if not os.access(b, os.X_OK):
        raise Failure("set MINICPMD_PACK_BIN to the minicpmd-pack binary (tried %r)" % b)
    return b


_GENERATED = {}


def generated_pack(preset="tiny", seed=1, extra=()):
    """A pack `minicpmd-pack gen` wrote (once per process and arguments), shared:
    copy it before changing anything in it."""
    key = (preset, seed, tuple(extra))
    if key not in _GENERATED:
        out = os.path.join(tempfile.mkdtemp(prefix="minicpmd-pack-"), preset)
        _CLEANUP.append(os.path.dirname(out))
        subprocess.run([pack_binary(), "gen", "--preset", preset, "--seed", str(seed),
                        "--out", out] + list(extra),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _GENERATED[key] = out
    return _GENERATED[key]


def tiny_config_text():
    with open(os.path.join(generated_pack(), "config.json")) as f:
        return f.read()


def make_pack(parent, name="MiniCPM5-2B", config=True, fifo=False):
    """A small real pack directory (the `tiny` preset's random weights) with the unit
    tests' byte-level BPE tokenizer.json fixture. fifo=True makes config.json a FIFO
    (which the daemon must refuse at once)."""
    d = os.path.join(parent, name)
    shutil.copytree(generated_pack(), d, dirs_exist_ok=True)
    cfg = os.path.join(d, "config.json")
    os.remove(cfg)
    if fifo:
        os.mkfifo(cfg)
    elif config:
        with open(cfg, "w") as f:
            f.write(tiny_config_text())
    shutil.copyfile(TINY_TOKENIZER, os.path.join(d, "tokenizer.json"))
    return d


class LoadGate:
    """Holds the daemon's model loader back: the daemon waits before loading while
    the gate file (MINICPMD_TEST_LOAD_GATE) exists; release() removes it. A FIFO
    config.json used to do this, but the daemon now refuses FIFOs at once (a FIFO
    without a writer would block the loader). release() is idempotent: safe to
    call from finally."""

    def __init__(self, directory):
        self.path = os.path.join(directory, "load-gate")
        with open(self.path, "w"):
            pass
        self.released = False

    def env(self):
        return {"MINICPMD_TEST_LOAD_GATE": self.path}

    def reader_waiting(self):
        """True while the gate is shut: the loader cannot be past it."""
        return os.path.exists(self.path)

    def release(self):
        if not self.released:
            try:
                os.remove(self.path)
            except FileNotFoundError:
                pass
            self.released = True
        return True

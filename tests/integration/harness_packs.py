"""Packs for the integration tests: packs generated with minicpmd-pack gen (one
per preset, seed and options per test), minimal fake packs, and a config.json that
is a FIFO, to hold the daemon's loader back."""

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
    so the loader blocks until FifoConfig.release() writes it."""
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


class FifoConfig:
    """Holds a pack's config.json FIFO; release() feeds it so loading finishes.
    release() is idempotent and bounded: safe to call from finally."""

    def __init__(self, path, content=None):
        self.path = path
        self.content = (tiny_config_text() if content is None else content).encode()
        self.released = False

    def reader_waiting(self):
        """True once a reader has the FIFO open (the loader is blocked on it)."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno == errno.ENXIO:
                return False
            raise
        # A reader is there. Keep the fd: release() writes through it.
        if getattr(self, "_fd", None) is not None:
            os.close(fd)
        else:
            self._fd = fd
        return True

    def release(self, timeout=5.0):
        if self.released:
            return True
        deadline = time.monotonic() + timeout
        fd = getattr(self, "_fd", None)
        while fd is None:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
                if time.monotonic() >= deadline:
                    return False  # nobody is reading: nothing blocks on us
                time.sleep(0.02)
        try:
            os.set_blocking(fd, True)
            os.write(fd, self.content)
        finally:
            os.close(fd)
            self._fd = None
        self.released = True
        return True

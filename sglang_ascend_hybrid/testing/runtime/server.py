"""SGLang's real HTTP server on the emulated Ascend device, in a child process.

:func:`start` launches the installed release's server command (``sglang serve`` where the release
has it, else ``python -m sglang.launch_server``) in an environment from
:func:`sglang_ascend_hybrid.testing.emulated_npu.runtime_env.environment`, waits until ``/health``
answers, and returns a :class:`Server`: its address, its log, the device records.
:meth:`Server.stop` sends SIGTERM and waits for the server and every process it started to exit.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Optional, Sequence

from sglang_ascend_hybrid.testing.emulated_npu import runtime_env
from sglang_ascend_hybrid.testing.runtime.session import RuntimeRunError, kernel_tree_dir

_SERVE = "import sys; from sglang.cli.main import main; sys.exit(main())"


def launch_command() -> list[str]:
    """The installed release's server command: ``sglang serve`` (``sglang.cli.main``) where it
    exists, else the module entry ``sglang.launch_server`` every release has."""
    if importlib.util.find_spec("sglang.cli.serve") is not None:
        return [sys.executable, "-c", _SERVE, "serve"]
    return [sys.executable, "-m", "sglang.launch_server"]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Server:
    """A running server process; ``url(path)`` is an address on it."""

    def __init__(self, proc: subprocess.Popen, host: str, port: int, workdir: tempfile.TemporaryDirectory,
                 argv: list[str]):
        self.proc, self.host, self.port, self.argv = proc, host, port, argv
        self._workdir = workdir
        self.log_path = os.path.join(workdir.name, "server.log")
        self.records_path = os.path.join(workdir.name, "records.jsonl")
        self.startup_s: Optional[float] = None
        self.children_pids: list[int] = []  # every descendant seen while it served
        self.exit_code: Optional[int] = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def model_name(self) -> str:
        """The served model's name, as ``/v1/models`` lists it."""
        with urllib.request.urlopen(self.url("/v1/models"), timeout=10) as resp:
            return json.load(resp)["data"][0]["id"]

    def log(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                return fh.read()
        except FileNotFoundError:
            return ""

    def records(self) -> list[dict]:
        if not os.path.exists(self.records_path):
            return []
        with open(self.records_path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]

    def rungs(self) -> set[tuple[str, str]]:
        return {(r["name"], r["rung"]) for r in self.records() if r["kind"] == "rung"}

    def device_ops(self) -> set[str]:
        return {r["name"] for r in self.records() if r["kind"] == "device-op" and not r.get("probe")}

    def descendants(self) -> list[int]:
        import psutil

        try:
            return [p.pid for p in psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def _fail(self, what: str) -> RuntimeRunError:
        return RuntimeRunError(f"SGLang's server on the emulated device: {what}; its log ends:\n{self.log()[-6000:]}")

    def wait_healthy(self, timeout: float, path: str = "/health") -> None:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout:
            if self.proc.poll() is not None:
                raise self._fail(f"exited with {self.proc.returncode} before {path} answered")
            try:
                with urllib.request.urlopen(self.url(path), timeout=5) as resp:
                    if resp.status == 200:
                        self.startup_s = time.perf_counter() - t0
                        self.children_pids = self.descendants()
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.5)
        raise self._fail(f"{path} did not answer 200 within {timeout:.0f} s")

    def stop(self, timeout: float = 60.0) -> dict:
        """SIGTERM the server, wait for it and for every process it started; kill what outlives
        ``timeout``.  Returns ``{"exit_code", "terminated_cleanly", "leftover": [pids still alive
        after the server exited, before any kill]}``."""
        import psutil

        tracked = {pid for pid in self.children_pids + self.descendants()}
        procs = []
        for pid in tracked:
            try:
                procs.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass
        clean = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                clean = False
        _gone, alive = psutil.wait_procs(procs, timeout=max(1.0, timeout / 4)) if procs else ([], [])
        leftover = [p.pid for p in alive]
        if not clean or alive:
            self._kill_group()
            for p in alive:
                try:
                    p.kill()
                except psutil.NoSuchProcess:
                    pass
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(timeout=30)
        self.exit_code = self.proc.returncode
        return {"exit_code": self.exit_code, "terminated_cleanly": clean, "leftover": leftover}

    def _kill_group(self) -> None:
        try:  # the server leads its own session (start_new_session=True): its group is ours to end
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.stop(timeout=30)
        self._workdir.cleanup()


def start(model_path: str, *, args: Sequence[str] = (), env_extra: Optional[dict] = None,
          host: str = "127.0.0.1", port: Optional[int] = None, startup_timeout: float = 240.0) -> Server:
    """Start SGLang's server for ``model_path`` on the emulated device with the plugin's backend;
    ``args`` are further server flags.  Returns once ``/health`` answers 200; a server that exits
    or does not answer in time is stopped and raises :class:`RuntimeRunError` with its log."""
    port = port or free_port(host)
    workdir = tempfile.TemporaryDirectory(prefix="sglang-server-")
    records = os.path.join(workdir.name, "records.jsonl")
    env = runtime_env.environment(kernel_tree_dir(), records=records)
    env.update(env_extra or {})
    argv = launch_command() + ["--model-path", model_path, "--device", "npu", "--attention-backend", "ascend_hybrid",
                               "--host", host, "--port", str(port), *args]
    log = open(os.path.join(workdir.name, "server.log"), "w", encoding="utf-8")  # noqa: SIM115
    try:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    finally:
        log.close()
    server = Server(proc, host, port, workdir, argv)
    try:
        server.wait_healthy(startup_timeout)
    except BaseException:
        server.stop(timeout=10)
        server._workdir.cleanup()
        raise
    return server


def write_word_level_tokenizer(model_dir: str, vocab_size: int, *, bos: int, eos: int, pad: int,
                               named: dict[int, str] | None = None) -> None:
    """A tokenizer for a tiny checkpoint, written offline into ``model_dir``: word ``<i>`` is token
    ``i`` (a ``tokenizers`` WordLevel model split on whitespace), so a text prompt ``"<3> <4>"`` is
    ``[3, 4]`` and SGLang's routes that need a tokenizer (``/v1/completions``) can run.  ``named``
    gives some ids another word (a multimodal processor looks its placeholder up by name, e.g.
    ``{150: "<image>"}``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    name = [f"<{i}>" for i in range(vocab_size)]
    for i, word in (named or {}).items():
        if not 0 <= i < vocab_size:
            raise ValueError(f"named: token id {i} ({word!r}) is outside the vocabulary of {vocab_size}")
        name[i] = word
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(name)}, unk_token=name[pad]))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with single spaces
    tok.save(os.path.join(model_dir, "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": name[bos], "eos_token": name[eos],
              "pad_token": name[pad], "unk_token": name[pad], "model_max_length": 4096,
              "add_bos_token": False, "add_eos_token": False}
    with open(os.path.join(model_dir, "tokenizer_config.json"), "w", encoding="utf-8") as fh:
        json.dump(config, fh, indent=1)

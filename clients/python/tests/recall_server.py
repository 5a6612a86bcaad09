"""A real `recall serve` for the client tests: the binary is $RECALL_BIN
(default target/debug/recall), on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
# Generous bounds: each is a ceiling for CI, not an expected duration.
SERVER_START_SECS = 20.0
SHUTDOWN_SECS = 45.0  # above the server's 30 s shutdown grace


@dataclass
class RecallServer:
    base_url: str
    process: subprocess.Popen[bytes]
    stderr_path: Path

    def stderr_tail(self, lines: int = 30) -> str:
        text = self.stderr_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def recall_binary() -> Path:
    binary = Path(os.environ.get("RECALL_BIN") or REPO_ROOT / "target" / "debug" / "recall")
    if not binary.is_file():
        pytest.fail(f"recall binary not found at {binary}; run `cargo build --bin recall` first")
    return binary


@contextmanager
def serve_recall(workdir: Path, settings: Mapping[str, str]) -> Iterator[RecallServer]:
    """A `recall serve` on a free loopback port with its data in ``workdir``,
    stopped with SIGTERM when the block ends, which it must exit 0 from.

    Settings come from RECALL_<SECTION>__<KEY> variables: any the caller has
    set (a token, say) are dropped, so the server is the default one plus
    ``settings``.
    """
    binary = recall_binary()
    stdout_path, stderr_path = workdir / "stdout.log", workdir / "stderr.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALL_")}
    env.update(settings)

    port = _free_port()
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        process = subprocess.Popen(
            [str(binary), "serve", "--addr", f"127.0.0.1:{port}", "--data", str(workdir / "data")],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=workdir,
        )
    server = RecallServer(f"http://127.0.0.1:{port}", process, stderr_path)

    try:
        deadline = time.monotonic() + SERVER_START_SECS
        while "recall listening on" not in stdout_path.read_text(errors="replace"):
            if process.poll() is not None:
                pytest.fail(
                    f"recall serve exited with {process.returncode} before listening:\n"
                    f"{server.stderr_tail()}"
                )
            if time.monotonic() > deadline:
                pytest.fail(f"recall serve did not listen within {SERVER_START_SECS}s")
            time.sleep(0.05)

        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=SHUTDOWN_SECS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    assert process.returncode == 0, (
        f"recall serve exited with {process.returncode} on SIGTERM:\n{server.stderr_tail()}"
    )

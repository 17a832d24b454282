"""``sweep --cluster`` with something other than a Dask scheduler at the address (issue 29, items
10 and 14): one line, exit 2, nothing written, within the README's 5 s, and no traceback from Dask's
client afterwards. Run as real processes: Dask's ``Client.__del__`` speaks at interpreter exit."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sweep_helpers import SMALL_SWEEP

#: The README's promise (5 s) plus the interpreter's and the CLI's start-up on a slow machine.
LIMIT_S = 5 + 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sweep(tmp_path: Path, address: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, float]:
    f = tmp_path / "s.toml"
    f.write_text(SMALL_SWEEP)
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "cctestbed", "sweep", str(f), "-o", str(tmp_path / "out"), "--cluster", address],
        capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})}, cwd=tmp_path,
    )
    return r, time.monotonic() - t0


def _one_clean_line(r: subprocess.CompletedProcess, tmp_path: Path) -> str:
    text = r.stdout + r.stderr
    assert r.returncode == 2, text
    assert "Traceback" not in text and "Exception ignored" not in text and "MemoryError" not in text, text
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "nothing was written" in lines[0], text
    assert not (tmp_path / "out").exists()
    return lines[0]


@pytest.mark.parametrize("scheme,says", [("tls", "TLS settings"), ("ucx", "distributed-ucxx")])
def test_tls_and_ucx_end_in_one_line_at_once(tmp_path, scheme, says):
    r, took = _sweep(tmp_path, f"{scheme}://127.0.0.1:{_free_port()}")
    line = _one_clean_line(r, tmp_path)
    assert says in line, line
    assert took < LIMIT_S, f"{took:.1f} s"


@pytest.fixture
def http_proxy():
    """A listener that answers anything it is sent with an HTTP error, as a proxy does."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.2)
    stop = threading.Event()

    def answer(c: socket.socket) -> None:
        with c:
            try:
                c.settimeout(30)
                if c.recv(65536):
                    c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            except OSError:
                pass

    def serve() -> None:
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            threading.Thread(target=answer, args=(c,), daemon=True).start()

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    yield srv.getsockname()[1]
    stop.set()
    th.join()
    srv.close()


def test_an_http_proxy_at_the_address_is_refused_in_one_line(tmp_path, http_proxy):
    proxy = f"http://127.0.0.1:{http_proxy}"
    env = {"HTTP_PROXY": proxy, "http_proxy": proxy, "HTTPS_PROXY": proxy, "https_proxy": proxy}
    r, took = _sweep(tmp_path, f"tcp://127.0.0.1:{http_proxy}", env)
    line = _one_clean_line(r, tmp_path)
    assert "cannot reach the Dask scheduler" in line and "no Dask handshake" in line, line
    assert took < LIMIT_S, f"{took:.1f} s"


def test_an_http_server_at_the_address_gives_exit_2_within_5_s(tmp_path):
    port = _free_port()
    srv = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        for _ in range(100):  # until it listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        r, took = _sweep(tmp_path, f"tcp://127.0.0.1:{port}")
    finally:
        srv.terminate()
        srv.wait(timeout=10)
    line = _one_clean_line(r, tmp_path)
    assert "cannot reach the Dask scheduler" in line, line
    assert took < LIMIT_S, f"{took:.1f} s"


def test_an_http_answer_is_named(tmp_path):
    """A peer that speaks HTTP first (its status line read as a frame length is 3.07 EiB)."""
    from cctestbed.sweep.execute import probe_scheduler

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def answer() -> None:
        c, _ = srv.accept()
        with c:
            c.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            time.sleep(0.5)

    th = threading.Thread(target=answer, daemon=True)
    th.start()
    with pytest.raises(RuntimeError, match="an HTTP server answers there"):
        probe_scheduler(f"tcp://127.0.0.1:{srv.getsockname()[1]}", 5)
    th.join()
    srv.close()

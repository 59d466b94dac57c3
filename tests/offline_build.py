"""Running a build step in a subprocess that cannot reach any network: every socket connect and name
lookup raises, and the Hugging Face libraries and proxies are told to stay offline. Used by the engine
tests (the ONNX export) to prove a fresh clone builds its model with no network and no torch."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path


def build_offline(module: str, function: str, directory: Path, *, timeout: float = 600) -> None:
    """`memory_admin.<module>.<function>(directory)` under the guard; asserts it succeeded and that
    torch was never imported."""
    script = textwrap.dedent(f"""
        import socket, sys
        from pathlib import Path

        def refuse(*args, **kwargs):
            raise RuntimeError("network access attempted: %r" % (args,))

        socket.socket.connect = refuse
        socket.socket.connect_ex = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse

        import memory_admin.{module} as built
        path = built.{function}(Path({str(directory)!r}))
        print("built", path)
        print("torch loaded:", "torch" in sys.modules)
    """)
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "NO_PROXY": "*",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
    }
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "torch loaded: False" in done.stdout  # the build needs neither torch nor an exporter

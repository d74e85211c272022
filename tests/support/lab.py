"""Helpers for the server-extension and browser tests: waiting, cleaning up, a real ``jupyter lab``."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from support import wait_until

REPO = Path(__file__).resolve().parents[2]
LABEXTENSION = REPO / "nbburst" / "labextension"
SERVER_CONFIG = REPO / "jupyter-config" / "server-config" / "nbburst.json"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def labextension_name() -> str:
    return json.loads((REPO / "labextension" / "package.json").read_text())["name"]


class LabServer:
    """``jupyter lab`` on 127.0.0.1 in a subprocess, with private Jupyter folders.

    The nbburst server extension is enabled and the prebuilt lab extension is
    made findable the way an installed wheel does it (shared-data): the enable
    file goes to ``jupyter_server_config.d`` and the built extension to
    ``labextensions/<name>`` in the temporary config and data folders.
    """

    def __init__(self, base: Path, env: dict[str, str] | None = None):
        self.base = base
        self.root_dir = base / "notebooks"
        self.config_dir, self.data_dir, self.runtime_dir = base / "config", base / "data", base / "runtime"
        self.token = secrets.token_hex(16)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = base / "jupyter-lab.log"

    def _prepare(self) -> None:
        for folder in (self.root_dir, self.config_dir, self.data_dir, self.runtime_dir):
            folder.mkdir(parents=True, exist_ok=True)
        conf_d = self.config_dir / "jupyter_server_config.d"
        conf_d.mkdir(exist_ok=True)
        shutil.copy(SERVER_CONFIG, conf_d / "nbburst.json")
        # Not under test, and it scans the machine for language servers at startup.
        no_lsp = {"ServerApp": {"jpserver_extensions": {"jupyter_lsp": False}}}
        (conf_d / "zz-tests.json").write_text(json.dumps(no_lsp))
        target = self.data_dir / "labextensions" / labextension_name()
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(LABEXTENSION, target_is_directory=True)
        # No news or update checks (they would also pop up in screenshots).
        settings = self.config_dir / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
        settings.mkdir(parents=True, exist_ok=True)
        (settings / "notification.jupyterlab-settings").write_text(
            json.dumps({"checkForUpdates": False, "fetchNews": "false"})
        )

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "NBBURST_", "PYTEST_"))}
        env.update(
            {
                "JUPYTER_CONFIG_DIR": str(self.config_dir),
                "JUPYTER_DATA_DIR": str(self.data_dir),
                "JUPYTER_RUNTIME_DIR": str(self.runtime_dir),
                "JUPYTER_PLATFORM_DIRS": "1",
                # In a virtualenv Jupyter looks in the environment's folders first, where `pip install` put a copy of
                # the extension as it was then; the test's folders (the repository's build) must win.
                "JUPYTER_PREFER_ENV_PATH": "0",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.pop("JUPYTERLAB_SETTINGS_DIR", None)
        env.pop("JUPYTERLAB_WORKSPACES_DIR", None)
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = 60) -> LabServer:
        self._prepare()
        cmd = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--allow-root",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root_dir}",
        ]
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            cmd,
            env=self.env(),
            cwd=self.root_dir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        wait_until(self._ready, timeout, step=0.25, what=f"jupyter lab to answer (log: {self.log_path})")
        return self

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log()}")
        try:
            self.api("api/status")
            return True
        except (urllib.error.URLError, ConnectionError, OSError):
            return False

    def api(self, path: str, method: str = "GET") -> Any:
        req = urllib.request.Request(
            f"{self.url}/{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read() or b"null")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        """Stop the server, its kernels and everything they started (agents too)."""
        if self.proc is None:
            return
        try:
            family = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            family = []
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: the server shuts its kernels down and exits
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                pass
        for proc in family:  # whatever outlived it (agents live in sessions of their own)
            try:
                if proc.is_running():
                    proc.kill()
            except psutil.Error:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait(10)
        psutil.wait_procs(family, timeout=5)
        self.proc = None

    def __enter__(self) -> LabServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

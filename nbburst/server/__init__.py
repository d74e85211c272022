"""The Jupyter server extension: a REST API for the "Burst jobs" sidebar, and the supervision loop.

Enabled by ``jupyter-config/server-config/nbburst.json`` (installed into
``etc/jupyter/jupyter_server_config.d``). Settings are nbburst's own
(``c.NBBurst.*`` in the server's config, ``NBBURST_*`` variables, see
:mod:`nbburst.config`) plus those of the server extension itself::

    c.NBBurstServer.supervise = True          # relaunch preempted detached jobs
    c.NBBurstServer.supervise_interval = 5.0  # seconds between passes
    c.NBBurstServer.threads = 4               # threads for the REST API's Store calls
"""

from __future__ import annotations

import atexit
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from traitlets import Bool, Float, Int
from traitlets.config import Configurable


class NBBurstServer(Configurable):
    """Settings of the nbburst Jupyter server extension."""

    supervise = Bool(True, help="Relaunch preempted jobs that no kernel is waiting for.").tag(config=True)
    supervise_interval = Float(5.0, help="Seconds between two rounds of the supervision loop.").tag(config=True)
    threads = Int(4, help="Threads for Store calls made by the REST API.").tag(config=True)


class Extension:
    """What the extension owns: the jobs manager, its thread pool and the supervision loop's thread."""

    def __init__(self, serverapp: Any):
        from .. import config
        from ..client.burst import Burst
        from .manager import JobsManager
        from .supervision import SupervisionThread

        self.serverapp = serverapp
        self.log = serverapp.log
        self.options = NBBurstServer(config=serverapp.config)
        self.executor = ThreadPoolExecutor(max_workers=max(1, self.options.threads), thread_name_prefix="nbburst-api")
        self.manager: JobsManager | None = None
        self.problem = ""
        self.where = ""
        self.supervision: SupervisionThread | None = None
        try:
            settings = config.load(serverapp.config)
            self.where = config.store_url(settings)
            self.manager = JobsManager(Burst(settings), log=self.log)
        except Exception as exc:  # a bad setting must not take the server down: the API reports it
            self.problem = str(exc)
            self.log.error("nbburst: cannot configure the server extension: %s", exc)
        if self.manager is not None and self.options.supervise:
            self.supervision = SupervisionThread(
                self.manager, self.options.supervise_interval, alive=self._server_alive, log=self.log
            )
        self.stopped = False

    def _server_alive(self) -> bool:
        """False once the server stops (its event loop is closed) even if no stop hook ran."""
        if self.stopped or getattr(self.serverapp, "_stopping", False):
            return False
        loop = getattr(getattr(self.serverapp, "io_loop", None), "asyncio_loop", None)
        return loop is None or not loop.is_closed()

    def start(self) -> None:
        if self.supervision is not None:
            self.supervision.start()
        atexit.register(self.stop)

    def stop(self) -> None:
        """Stop the supervision loop (after the job in hand) and the thread pool; idempotent."""
        if self.stopped:
            return
        self.stopped = True
        if self.supervision is not None:
            self.supervision.stop()
        self.executor.shutdown(wait=False, cancel_futures=True)
        atexit.unregister(self.stop)


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from .handlers import SETTINGS_KEY, handlers

    web_app = serverapp.web_app
    previous = web_app.settings.get(SETTINGS_KEY)
    if previous is not None:
        previous.stop()
    extension = Extension(serverapp)
    web_app.settings[SETTINGS_KEY] = extension
    web_app.add_handlers(".*$", handlers(web_app.settings["base_url"]))
    extension.start()
    serverapp.log.info(
        "nbburst: REST API at /nbburst/api/, jobs in %s, supervision loop %s",
        extension.where or "(not configured)",
        "on" if extension.supervision else "off",
    )


def stop(serverapp: Any) -> None:
    """Stop the extension of ``serverapp`` (embedders and tests; a server that exits stops it itself)."""
    from .handlers import SETTINGS_KEY

    extension = serverapp.web_app.settings.get(SETTINGS_KEY)
    if extension is not None:
        extension.stop()

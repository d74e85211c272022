"""REST handlers under ``/nbburst/api/``: jobs, one job, its logs, cancel, warm sessions and their stop,
configuration; and under
``/nbburst/dask/<job>/`` a thin proxy of a ``--workers`` job's Dask dashboard (GET only, and only to the
address the job's verified cluster record names), so that the sidebar's link works where the browser cannot
reach the scheduler's machine; when the server cannot reach it either, it redirects to the direct address.

Every handler requires an authenticated (and authorized) user. Store calls
block, so they run in the extension's thread pool and the server stays
responsive. Errors are JSON: ``{"message": ...}``, mapped from nbburst's errors in one place
(:meth:`BurstHandler.run`).

The routes, their parameters, answers and errors are specified in docs/rest-api.md, which the sidebar's
types (labextension/src/wire.ts) follow and the handler tests check: a route added here goes there too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import httpclient, web
from tornado.ioloop import IOLoop

from ..client.session.manager import SessionGone
from ..errors import BurstError, JobNotFound, UsageError
from ..protocol.signing import SignatureError
from .manager import JobsManager

API = "nbburst/api"
DASK = "nbburst/dask"
#: How long the proxy waits for the Dask dashboard.
DASHBOARD_TIMEOUT_S = 10.0
SETTINGS_KEY = "nbburst"


class ApiError(web.HTTPError):
    """An error answered as ``{"message": ...}`` with ``status``."""

    def __init__(self, status: int, message: str):
        super().__init__(status)
        self.message = message


class BurstHandler(APIHandler):
    auth_resource = "nbburst"

    @property
    def nbburst(self) -> Any:
        return self.settings[SETTINGS_KEY]

    @property
    def manager(self) -> JobsManager:
        manager = self.nbburst.manager
        if manager is None:
            raise ApiError(500, f"nbburst is not configured: {self.nbburst.problem}")
        return manager

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the thread pool, with nbburst's errors mapped to HTTP statuses."""
        executor: Executor = self.nbburst.executor
        try:
            return await IOLoop.current().run_in_executor(executor, fn, *args)
        except (JobNotFound, SessionGone) as exc:
            raise ApiError(404, str(exc)) from None
        except SignatureError as exc:  # no key for the job here, or a forged object in its folder
            raise ApiError(403, f"cannot verify: {exc}") from None
        except UsageError as exc:
            raise ApiError(400, str(exc)) from None
        except BurstError as exc:
            raise ApiError(500, str(exc)) from None
        except RuntimeError as exc:
            if "shutdown" in str(exc):  # the executor is closed: the server is stopping
                raise ApiError(503, "the server is shutting down") from None
            raise

    def reply(self, data: Any) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(data))

    def int_arg(self, name: str, default: int | None, minimum: int) -> int | None:
        raw = self.get_query_argument(name, None)
        if raw is None or raw == "":
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ApiError(400, f"{name} must be an integer, not {raw!r}") from None
        if value < minimum:
            raise ApiError(400, f"{name} must be at least {minimum}, not {value}")
        return value

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = (kwargs.get("exc_info") or (None, None, None))[1]
        if isinstance(exc, ApiError):
            self.reply({"message": exc.message})
        elif exc is None or isinstance(exc, web.HTTPError):
            super().write_error(status_code, **kwargs)  # {"message": "Forbidden", ...}
        else:  # already logged with its traceback by tornado
            self.reply({"message": f"{type(exc).__name__}: {exc}"})


class JobsHandler(BurstHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        state = self.get_query_argument("state", "all")
        if state not in ("all", "running"):
            raise ApiError(400, f"state must be 'running' or 'all', not {state!r}")
        self.reply({"jobs": await self.run(self.manager.list, state)})


class JobHandler(BurstHandler):
    @web.authenticated
    @authorized
    async def get(self, ref: str) -> None:
        self.reply(await self.run(self.manager.detail, ref))

    @web.authenticated
    @authorized
    async def delete(self, ref: str) -> None:
        self.reply(await self.run(self.manager.cancel, ref))


class LogsHandler(BurstHandler):
    @web.authenticated
    @authorized
    async def get(self, ref: str) -> None:
        attempt = self.int_arg("attempt", None, 1)
        offset = self.int_arg("offset", 0, 0)
        self.reply(await self.run(self.manager.logs, ref, attempt, offset))


class SessionsHandler(BurstHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.reply({"sessions": await self.run(self.manager.sessions)})


class SessionStopHandler(BurstHandler):
    """POST ``sessions/<name>/stop``: end the session and its machine."""

    @web.authenticated
    @authorized
    async def post(self, name: str) -> None:
        self.reply(await self.run(self.manager.stop_session, name))


class ConfigHandler(BurstHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.reply({"values": await self.run(self.manager.config_values)})


class DashboardHandler(BurstHandler):
    """GET ``/nbburst/dask/<job>/<path>``: the job's Dask dashboard page ``<path>``, fetched by the server."""

    @web.authenticated
    @authorized
    async def get(self, ref: str, path: str) -> None:
        base = await self.run(self.manager.dashboard, ref)
        if base is None:
            raise ApiError(404, f"job {ref} has no Dask dashboard")
        query = self.request.query
        target = f"{base}/{path}" + (f"?{query}" if query else "")
        try:
            answer = await httpclient.AsyncHTTPClient().fetch(
                target, follow_redirects=False, raise_error=False, request_timeout=DASHBOARD_TIMEOUT_S
            )
        except OSError:  # the scheduler's machine is not reachable from here: the browser may reach it
            self.redirect(target)
            return
        if answer.code == 599:  # tornado's "no answer" (timeout, refused)
            self.redirect(target)
            return
        self.set_status(answer.code)
        for name in ("Content-Type", "Cache-Control"):
            if name in answer.headers:
                self.set_header(name, answer.headers[name])
        location = answer.headers.get("Location", "")
        if location.startswith("/"):  # the dashboard's own redirect (/ -> /status): kept behind the proxy
            self.set_header("Location", url_path_join(self.base_url, DASK, ref, location))
        self.finish(answer.body or b"")


def handlers(base_url: str) -> list[tuple[str, type[BurstHandler]]]:
    root = url_path_join(base_url, API)
    return [
        (url_path_join(base_url, DASK, r"(?P<ref>[^/]+)") + r"/?(?P<path>.*)", DashboardHandler),
        (url_path_join(root, "jobs") + "/?", JobsHandler),
        (url_path_join(root, "jobs", r"(?P<ref>[^/]+)", "logs") + "/?", LogsHandler),
        (url_path_join(root, "jobs", r"(?P<ref>[^/]+)") + "/?", JobHandler),
        (url_path_join(root, "sessions") + "/?", SessionsHandler),
        (url_path_join(root, "sessions", r"(?P<name>[^/]+)", "stop") + "/?", SessionStopHandler),
        (url_path_join(root, "config") + "/?", ConfigHandler),
    ]

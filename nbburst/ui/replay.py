"""Replay in the notebook's kernel what the machine's IPython published, as this kernel would have.

The machine's shell (agent/attempt/shell.py) sends what ipykernel sends to the frontend; here each record
goes out through the kernel's own machinery, so the frontend gets the same messages as for a plain
cell: display_data and its updates by display id, clear_output, the execute_result with this cell's
execution count, the pager payload of ``obj?``, and the comm messages of widgets: a widget made on
the machine is a real widget here, and an Output widget captures under this cell's request.
"""

from __future__ import annotations

import base64
from typing import Any

from IPython import get_ipython

from ..protocol.job import CELL_MSG_ID

#: comm id -> this kernel's comm that mirrors a widget of the machine
_COMMS: dict[str, Any] = {}


def show(record: dict[str, Any]) -> None:
    """Publish one shell record (see :data:`nbburst.protocol.job.SHELL_RECORDS`) from this kernel."""
    _SHOW[record["s"]](record)


def _display(record: dict[str, Any]) -> None:
    from IPython.display import publish_display_data

    publish_display_data(
        record.get("data") or {},
        record.get("metadata") or {},
        transient=record.get("transient"),
        update=bool(record.get("update")),
    )


def _clear(record: dict[str, Any]) -> None:
    from IPython.display import clear_output

    clear_output(wait=bool(record.get("wait")))


def _result(record: dict[str, Any]) -> None:
    """``Out[n]`` of this cell, through the kernel's displayhook, where the machine displayed it."""
    hook = get_ipython().displayhook
    data = record.get("data") or {}
    hook.start_displayhook()
    hook.write_output_prompt()
    hook.write_format_data(data, record.get("metadata") or {})
    hook.log_output(data)
    hook.finish_displayhook()


def _page(record: dict[str, Any]) -> None:
    """The pager's text, as the kernel pages it (in a notebook: the ``page`` payload of this request)."""
    from IPython.core import page
    from IPython.core.error import TryNext

    data, start = record.get("data") or {}, int(record.get("start") or 0)
    try:
        get_ipython().hooks.show_in_pager(data, start=start, screen_lines=0)
    except TryNext:
        page.page(data, start)


def _comm(record: dict[str, Any]) -> None:
    import comm

    kind, comm_id = record.get("msg_type"), record["comm_id"]
    data, metadata = _under_this_request(record.get("data") or {}), record.get("metadata") or {}
    buffers = [base64.b64decode(b) for b in record.get("buffers") or []]
    if kind == "comm_open":
        _COMMS[comm_id] = comm.create_comm(
            target_name=record.get("target_name") or "comm",
            target_module=record.get("target_module"),
            data=data,
            metadata=metadata,
            buffers=buffers,
            comm_id=comm_id,
        )
    elif kind == "comm_msg" and comm_id in _COMMS:
        _COMMS[comm_id].send(data, metadata, buffers)
    elif kind == "comm_close" and comm_id in _COMMS:
        _COMMS.pop(comm_id).close(data, metadata, buffers)


def _under_this_request(data: dict[str, Any]) -> dict[str, Any]:
    """An Output widget capturing on the machine captures here under the request of the running cell."""
    state = data.get("state")
    if not isinstance(state, dict) or state.get("msg_id") != CELL_MSG_ID:
        return data
    parent = get_ipython().get_parent() if hasattr(get_ipython(), "get_parent") else {}
    msg_id = (parent or {}).get("header", {}).get("msg_id", "")
    return {**data, "state": {**state, "msg_id": msg_id}}


_SHOW = {"display": _display, "clear": _clear, "result": _result, "page": _page, "comm": _comm}

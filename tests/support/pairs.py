"""Run cells plainly and under %%burst side by side in one real kernel (nbclient, local backend), and compare
what a person sees of each: the fidelity tests' common harness for small cells."""

from __future__ import annotations

import re

import nbformat

from support.nbrun import client, execute

LOAD = "%load_ext nbburst"
SESSION = "%burst session start --idle 5m --timeout 30m"
WIDGET = "application/vnd.jupyter.widget-view+json"
_TIMES = re.compile(r"\b\d+(\.\d+)?(e[+-]\d+)?\s?(s|ms|[µμu]s|ns)\b")  # %%time's figures ("1e+03 ns" too)


def run_pairs(
    cells: list[str], cwd, then: tuple[str, ...] = (), session: bool = False
) -> tuple[list[tuple[dict, dict]], list[dict]]:
    """Run each cell plainly and then under %%burst (on a warm session: ``session``), then the cells ``then``
    as they are: (plain, burst) observations of each cell, and the observations of ``then``."""
    head = [LOAD, SESSION] if session else [LOAD]
    sources = list(head)
    for cell in cells:
        sources += [cell, "%%burst\n" + cell]
    sources += then
    if session:
        sources.append("%burst session stop")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    payloads: dict[int, list] = {}

    def on_executed(cell, cell_index, execute_reply):
        payloads[cell_index] = execute_reply["content"].get("payload", [])

    execute(lambda: client(nb, cwd, on_cell_executed=on_executed))
    seen = [observe(cell.outputs, payloads.get(i, [])) for i, cell in enumerate(nb.cells)]
    first, pairs = len(head), 2 * len(cells)
    return [(seen[i], seen[i + 1]) for i in range(first, first + pairs, 2)], seen[first + pairs :][: len(then)]


def observe(outputs: list[dict], payload: list[dict]) -> dict:
    """What a person sees of a cell, in order: (kind, MIME types or stream, text); the job view left out."""
    shown = []
    for o in outputs:
        kind = o["output_type"]
        if kind == "stream":
            text = "".join(line for line in o["text"].splitlines(True) if not line.startswith("nbburst:"))
            if shown and shown[-1][:2] == ("stream", o["name"]):  # one stream however it was chunked
                shown[-1] = ("stream", o["name"], shown[-1][2] + text)
            elif text:
                shown.append(("stream", o["name"], text))
        elif kind == "error":
            shown.append(("error", o["ename"], o["evalue"]))
        elif o["data"].get("text/plain", "").startswith("nbburst job") or "nbburst" in o.get("metadata", {}):
            continue  # the job view: its widget and its static summary
        else:
            text = o["data"].get("text/html") or o["data"].get("text/plain", "")
            shown.append((kind, tuple(sorted(o["data"])), text if WIDGET not in o["data"] else ""))
    shown = [(k, m, _TIMES.sub("<time>", t)) for k, m, t in shown]
    pages = [p["data"]["text/plain"] for p in payload if p.get("source") == "page"]
    return {"outputs": shown, "pages": pages}


def assert_same(pairs: list[tuple[dict, dict]], cells: list[str]) -> None:
    for (plain, burst), cell in zip(pairs, cells, strict=True):
        assert burst == plain, f"cell {cell!r}:\n plain {plain}\n burst {burst}"

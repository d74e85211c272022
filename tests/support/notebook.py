"""Job views as a notebook saved them: run cells in a real kernel, then read each view's widget state."""

from __future__ import annotations

import nbformat

from support import nbrun

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def run_notebook(cells: list[str], timeout: int = 120) -> nbformat.NotebookNode:
    """Run ``cells`` in a fresh kernel (it inherits os.environ: NBBURST_ROOT/STATE_DIR of the test)."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    return nbrun.run(nb, timeout)


def views(nb: nbformat.NotebookNode) -> list[dict[str, dict]]:
    """Each job view in the notebook's saved widget state: {"summary": state, "tail": state, ...}."""
    models = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    by_id = {mid: m["state"] for mid, m in models.items()}
    found = []
    for state in by_id.values():
        if "nbburst-view" not in state.get("_dom_classes", ()):
            continue
        parts: dict[str, dict] = {}
        todo = list(state["children"])
        while todo:
            child = by_id.get(todo.pop().removeprefix("IPY_MODEL_"), {})
            for cls in child.get("_dom_classes", ()):
                if cls.startswith("nbburst-view-"):
                    parts[cls.removeprefix("nbburst-view-")] = child
            todo.extend(child.get("children", ()))
        found.append(parts)
    return found


def stream(cell: dict, name: str = "stdout") -> str:
    return nbrun.stream(cell.outputs, name)


def errors(nb: nbformat.NotebookNode) -> list[str]:
    return [f"{o['ename']}: {o['evalue']}" for c in nb.cells for o in c.outputs if o["output_type"] == "error"]

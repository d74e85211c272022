"""A cell as the kernel compiles it: its syntax errors, and the Python its magics run.

A kernel cell is compiled with top-level ``await`` allowed (IPython's autoawait) and
``return`` or ``yield`` outside a function refused, so a cell is checked the same way
before anything is launched. IPython turns magics into calls that carry code in strings
(``%%time`` makes the whole cell ``get_ipython().run_cell_magic('time', '', '...')``):
the names that code reads and binds are part of the cell's inputs and outputs. Shell lines
(``!cmd``, ``%%bash``) become calls too: the files their words name are inputs, and the exit
status a ``!`` line leaves in ``_exit_code`` is an output.
"""

from __future__ import annotations

import ast
import shlex
from dataclasses import dataclass
from typing import Any

from ..errors import CellSyntaxError

#: Magics that run their code in the user namespace, and the options that take a value.
PYTHON_MAGICS = {"time": "", "timeit": "nrp", "prun": "lrsTD", "capture": "", "debug": ""}
#: Magics that bind a name given on their line: %%capture NAME.
_BINDING_MAGICS = {"capture"}
#: Calls through which a cell binds names no syntax tree shows.
_DYNAMIC_CALLS = {"exec", "eval", "globals", "vars", "locals"}
#: What a ``!cmd`` line binds in the user namespace (IPython's ``system``): the command's exit status.
EXIT_CODE = "_exit_code"
#: IPython's aliases of shell commands (``%cat``, ``%ls``, ``%rm``...): run as ``!`` runs its line.
_SHELL_ALIASES = {"cat", "cp", "ldir", "lf", "lk", "ll", "ls", "lx", "mkdir", "mv", "rm", "rmdir"}
#: Magics whose text is a shell's: ``%sx``/``%system`` lines, the aliases, ``%%bash``/``%%sh``/``%%script`` cells.
_SHELL_LINE_MAGICS = {"sx", "system", *_SHELL_ALIASES}
_SHELL_CELL_MAGICS = {"bash", "sh", "script"}


def check_syntax(code: str, where: str = "the cell", first_line: int = 1) -> None:
    """Refuse ``code`` as the kernel would: a :class:`CellSyntaxError` naming the line, counted from
    ``first_line`` (2 when the cell's first line is ``%%burst``)."""
    try:
        compile(code, "<cell>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    except SyntaxError as exc:
        lines = code.splitlines()
        text = exc.text or (lines[exc.lineno - 1] if exc.lineno and exc.lineno <= len(lines) else "")
        lineno = (exc.lineno or 1) + first_line - 1
        raise CellSyntaxError(exc.msg, where, lineno, text.rstrip("\n"), exc.offset or 0) from None


def compile_as_kernel(shell: Any, raw: str) -> None:
    """Compile ``raw``, a cell as the notebook sent it, as ``shell`` compiles a cell it runs: transformed, under
    the name the kernel gives that cell (ipykernel's ``/tmp/ipykernel_<pid>/<hash>.py``), its lines its own.
    Raises the very SyntaxError (or IndentationError) the kernel raises for it, its lines cached for the
    traceback as the kernel caches a cell's."""
    transformed = shell.transform_cell(raw)
    name = shell.compile.get_code_name(raw, transformed, shell.execution_count)
    flags = shell.compile.flags | (ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if shell.autoawait else 0)
    try:  # as IPython's run_cell: parse with its compiler's flags ("incomplete input"), then compile the tree
        compile(shell.compile.ast_parse(transformed, filename=name), name, "exec", flags=flags, dont_inherit=True)
    except SyntaxError:
        shell.compile.cache(transformed, shell.execution_count, raw_code=raw)  # "Cell In[n], line k" as it shows
        raise


@dataclass
class Embedded:
    """Code that a magic in the cell runs, and the names the magic itself binds."""

    code: list[str]
    binds: list[str]


def _magic_call(node: ast.AST) -> tuple[str, list[str]] | None:
    """(magic name, its string arguments) of ``get_ipython().run_line_magic/run_cell_magic(...)``."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    owner = node.func.value
    if node.func.attr not in ("run_line_magic", "run_cell_magic") or not (
        isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "get_ipython"
    ):
        return None
    args = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return (args[0], args[1:]) if len(args) == len(node.args) and args else None


def embedded(tree: ast.AST) -> Embedded:
    """The Python the cell's magics run in the user namespace, and the names they bind."""
    found = Embedded([], [])
    for node in ast.walk(tree):
        call = _magic_call(node)
        if call is None or call[0] not in PYTHON_MAGICS:
            continue
        name, (line, *body) = call
        code = body[0] if body else _python_after_options(line, PYTHON_MAGICS[name])
        if code.strip():
            found.code.append(_transformed(code))
        if name in _BINDING_MAGICS:
            found.binds += [w for w in line.split() if not w.startswith("-")][:1]
    if any(_shell_method(node) == "system" or _magic_name(node) in _SHELL_ALIASES for node in ast.walk(tree)):
        found.binds.append(EXIT_CODE)
    return found


def _magic_name(node: ast.AST) -> str:
    call = _magic_call(node)
    return call[0] if call is not None else ""


def _shell_method(node: ast.AST) -> str | None:
    """``system`` or ``getoutput`` for ``get_ipython().system('...')`` (``!cmd``) and ``.getoutput`` (``x = !cmd``)."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("system", "getoutput")
        and isinstance(node.func.value, ast.Call)
        and isinstance(node.func.value.func, ast.Name)
        and node.func.value.func.id == "get_ipython"
    ):
        return node.func.attr
    return None


def shell_words(tree: ast.AST) -> list[str]:
    """The words of the shell commands the cell runs (``!cmd``, ``x = !cmd``, ``%sx``, ``%cat``, ``%%bash``/``%%sh``
    cells), split as a shell splits them, and what follows ``=`` in an option (``--input=data.csv``): the
    files they name are the cell's inputs as much as the paths its Python writes."""
    commands = []
    for node in ast.walk(tree):
        call = _magic_call(node)
        if call is not None and call[0] in _SHELL_LINE_MAGICS and call[1]:
            commands.append(call[1][0])
        elif call is not None and call[0] in _SHELL_CELL_MAGICS and len(call[1]) > 1:
            commands.append(call[1][1])
        elif _shell_method(node) and isinstance(node, ast.Call) and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                commands.append(arg.value)
    words: dict[str, None] = {}
    for command in commands:
        for word in _split_shell(command):
            words.setdefault(word)
            if word.startswith("-") and "=" in word:
                words.setdefault(word.partition("=")[2])
    return list(words)


def _split_shell(command: str) -> list[str]:
    """Words, with redirections and pipes apart (``wc -l<data.txt|sort``); unbalanced quotes: by spaces."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:
        return command.split()


def written_files(tree: ast.AST) -> set[str]:
    """Files the cell's ``%%writefile`` (or ``%%file``) magics write."""
    found = set()
    for node in ast.walk(tree):
        call = _magic_call(node)
        if call is not None and call[0] in ("writefile", "file") and call[1]:  # %%file: IPython's alias of it
            found |= {w for w in call[1][0].split() if not w.startswith("-")}
    return found


#: Magics whose line names extensions (modules) to load: ``%load_ext csvmagic``.
_EXTENSION_MAGICS = {"load_ext", "reload_ext"}


def magics_used(tree: ast.AST) -> set[str]:
    """The names of the magics the cell runs (``%hello``, ``%%csv``)."""
    return {call[0] for node in ast.walk(tree) if (call := _magic_call(node)) is not None}


def extensions_named(tree: ast.AST) -> set[str]:
    """The modules the cell loads as extensions: ``%load_ext x``, ``%reload_ext x`` and
    ``get_ipython().extension_manager.load_extension("x")`` (a module beside the notebook must be on the machine
    as much as one the cell imports)."""
    found = set()
    for node in ast.walk(tree):
        call = _magic_call(node)
        if call is not None and call[0] in _EXTENSION_MAGICS and call[1]:
            found |= {w for w in call[1][0].split() if w.isidentifier() or "." in w}
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("load_extension", "reload_extension")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add(node.args[0].value)
    return found


def dynamic(tree: ast.AST) -> bool:
    """Whether the cell may bind names its syntax does not show (star imports, exec, other magics)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _DYNAMIC_CALLS:
            return True
        call = _magic_call(node)
        if call is not None and call[0] not in PYTHON_MAGICS:
            return True
    return False


def _python_after_options(line: str, valued: str) -> str:
    """The statement of a line magic such as ``%timeit -n 10 f(x)``: what follows its options."""
    rest = line.strip()
    while rest.startswith("-"):
        option, _, rest = rest.partition(" ")
        if len(option) == 2 and option[1] in valued:
            _, _, rest = rest.lstrip().partition(" ")
        rest = rest.lstrip()
    return rest


def _transformed(code: str) -> str:
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(code)

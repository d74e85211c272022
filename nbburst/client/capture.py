"""What a cell reads and what it assigns, from its syntax tree.

Inputs are the names the cell may read before it assigns them and that exist
in the user namespace; outputs are the names it binds at top level. Files are
inputs too: a relative path the cell (or a notebook function it uses) writes
as a string, naming a file in the kernel's working folder, is placed at the
same relative path in the cell's working folder on the machine (as ``--files``
would), so ``read_csv("data.csv")`` beside the notebook reads the same file. The rule
for inputs errs on the side of sending a value: a name assigned only in a
branch, or read inside a function body, still counts as read. Sending a value
too many costs an upload; sending one too few would make the remote cell fail
or, worse, silently read a stale value.
"""

from __future__ import annotations

import ast
import dataclasses
import dis
import glob
import importlib
import posixpath
import re
import symtable
import sys
import types
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..options import Options, file_destination
from ..protocol import handles, history, modulestate, sources, workfiles
from ..protocol.dist import imported_names
from ..protocol.imports import loaded_submodules
from ..protocol.transfer import is_shell, names_in
from .cellcode import check_syntax, dynamic, embedded, extensions_named, magics_used, shell_words, written_files
from .replay import definitions

#: What a SQLAlchemy URL of a SQLite database file has before the file's path.
_SQLITE_URL = re.compile(r"^sqlite(\+\w+)?:///(?=[^/])")
#: A file the cell names is placed on the machine up to this size; a bigger one needs ``--files``.
NAMED_FILE_LIMIT = 1 << 30
#: A shell line's glob stages at most this many of the files it matches.
GLOB_LIMIT = 256


@dataclass
class CellAnalysis:
    reads: list[str]
    assigns: list[str]
    deletes: list[str]
    last_expr: bool
    dynamic: bool = False  # may bind names its syntax does not show (star import, exec, magics)


def analyse(code: str) -> CellAnalysis:
    """Names read before assignment, names bound, names deleted (in source order); the code that
    magics run counts as the cell's own."""
    check_syntax(code)
    tree = ast.parse(code)
    reads: dict[str, None] = {}
    _scan(tree.body, set(), reads)
    table = symtable.symtable(code, "<cell>", "exec")
    for name in _nested_global_reads(table):
        reads.setdefault(name)
    assigns: dict[str, None] = {}
    for sym in table.get_symbols():
        if sym.is_assigned() or sym.is_imported():
            assigns.setdefault(sym.get_name())
    for child in _walk_tables(table):
        for sym in child.get_symbols():
            if sym.is_declared_global() and sym.is_assigned():
                assigns.setdefault(sym.get_name())
    ordered = [n for n in _names_in_order(tree) if n in assigns]
    magics = embedded(tree)
    for inner in map(analyse, magics.code):
        reads.update((n, None) for n in inner.reads)
        ordered += [n for n in inner.assigns if n not in ordered]
    ordered += [n for n in magics.binds if n not in ordered]
    deletes = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Del)]
    deletes += _caught_names(tree.body)
    last_expr = bool(tree.body) and isinstance(tree.body[-1], ast.Expr)
    return CellAnalysis(list(reads), ordered, sorted(set(deletes)), last_expr, dynamic(tree))


_SCOPES = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Lambda,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
)


def _loads(node: ast.AST | None, bound: set[str], reads: dict[str, None]) -> None:
    """Loads evaluated in the cell's own scope; nested scopes are left to symtable."""
    if node is None:
        return
    if isinstance(node, ast.Name):
        if isinstance(node.ctx, (ast.Load, ast.Del)) and node.id not in bound:
            reads.setdefault(node.id)
        return
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        _loads(node.generators[0].iter, bound, reads)  # evaluated in the enclosing scope
        return
    if isinstance(node, ast.Lambda):
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d]:
            _loads(default, bound, reads)
        return
    for child in ast.iter_child_nodes(node):
        _loads(child, bound, reads)


def _caught_names(body: list[ast.stmt]) -> list[str]:
    """Names of the cell's own ``except ... as name``: Python unbinds them when the handler ends, so a name the
    kernel held (``e`` of ``from math import *``) is gone after the cell, as after a plain run."""
    found = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue  # their handlers unbind their own locals
        if isinstance(node, ast.ExceptHandler) and node.name:
            found.append(node.name)
        found += _caught_names([c for c in ast.iter_child_nodes(node) if isinstance(c, (ast.stmt, ast.ExceptHandler))])
    return found


def _targets(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _scan(body: list[ast.stmt], bound: set[str], reads: dict[str, None]) -> None:
    """Walk statements in order; only straight-line bindings count as definite."""
    for stmt in body:
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            _loads(stmt.iter, bound, reads)
            _scan(stmt.body, bound | _targets(stmt.target), reads)
            _scan(stmt.orelse, set(bound), reads)
        elif isinstance(stmt, (ast.While, ast.If)):
            _loads(stmt.test, bound, reads)
            _scan(stmt.body, set(bound), reads)
            _scan(stmt.orelse, set(bound), reads)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                _loads(item.context_expr, bound, reads)
                if item.optional_vars is not None:
                    bound |= _targets(item.optional_vars)
            _scan(stmt.body, bound, reads)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            _scan(stmt.body, set(bound), reads)
            for handler in stmt.handlers:
                _loads(handler.type, bound, reads)
                _scan(handler.body, bound | ({handler.name} if handler.name else set()), reads)
            _scan(stmt.orelse, set(bound), reads)
            _scan(stmt.finalbody, set(bound), reads)
        elif isinstance(stmt, ast.Match):
            _loads(stmt.subject, bound, reads)
            for case in stmt.cases:
                _loads(case.guard, bound, reads)
                _scan(case.body, set(bound), reads)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for node in stmt.decorator_list:
                _loads(node, bound, reads)
            if isinstance(stmt, ast.ClassDef):
                for node in stmt.bases + [k.value for k in stmt.keywords]:
                    _loads(node, bound, reads)
            else:
                for node in stmt.args.defaults + [d for d in stmt.args.kw_defaults if d]:
                    _loads(node, bound, reads)
            bound.add(stmt.name)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in stmt.names}
        elif isinstance(stmt, ast.AugAssign):
            if isinstance(stmt.target, ast.Name) and stmt.target.id not in bound:
                reads.setdefault(stmt.target.id)
            _loads(stmt.value, bound, reads)
            _loads(stmt.target, bound, reads)
            bound |= _targets(stmt.target)
        else:
            _loads(stmt, bound, reads)
            bound |= _targets(stmt)


def _walk_tables(table: symtable.SymbolTable):
    for child in table.get_children():
        yield child
        yield from _walk_tables(child)


def _nested_global_reads(table: symtable.SymbolTable) -> list[str]:
    """Free names read inside functions, lambdas, classes and comprehensions."""
    names = []
    for child in _walk_tables(table):
        in_class = child.get_type() == "class"
        for sym in child.get_symbols():
            if not sym.is_referenced():
                continue
            free_global = (sym.is_global() or sym.is_declared_global()) and not sym.is_local()
            if free_global or (in_class and not sym.is_assigned()):
                names.append(sym.get_name())
    return names


def _names_in_order(tree: ast.AST) -> list[str]:
    seen: dict[str, None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            seen.setdefault(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            seen.setdefault(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                seen.setdefault((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.Global):
            for name in node.names:
                seen.setdefault(name)
    return list(seen)


@dataclass
class Capture:
    """What will be sent: modules by reference, everything else by value."""

    modules: dict[str, str] = field(default_factory=dict)  # name -> module name
    values: dict[str, Any] = field(default_factory=dict)  # name -> object
    outputs: list[str] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    submodules: list[str] = field(default_factory=list)  # loaded here under the packages the cell uses
    returns: list[str] | None = None  # inputs whose in-place changes may come back (None: all)
    namespace: dict[str, Any] | None = None  # where the values come back to
    optional: frozenset[str] = frozenset()  # values only named in strings: sent if they can be pickled
    files: list[str] = field(default_factory=list)  # files the cell names, relative to the kernel's folder
    history: list[str] = field(default_factory=list)  # the kernel's history names the cell reads (among values)
    count: int | None = None  # the kernel's execution count of the cell, the machine's too
    code_name: str = ""  # the kernel's name for the cell's code, the machine's too (warnings, tracebacks name it)
    imports: list[str] = field(default_factory=list)  # modules the cell, its notebook functions and inputs need
    replayable: dict[str, list[ast.stmt]] = field(default_factory=dict)  # run again in the kernel if they stay behind

    def staged(self, options: Options) -> Options:
        """``options`` with the files the cell names added to ``--files`` (unless one lands there already)."""
        taken = {file_destination(raw) for raw in options.files}
        named = [rel for rel in self.files if file_destination(rel) not in taken]
        return dataclasses.replace(options, files=[*options.files, *named]) if named else options


def capture(
    code: str, namespace: dict[str, Any], out: list[str] | None = None, hidden: Mapping[str, Any] | None = None
) -> Capture:
    """Pick the inputs of ``code`` from ``namespace`` and the outputs to bring back.

    ``hidden`` is what IPython put in the namespace (``shell.user_ns_hidden``):
    a name is left out only while it still holds IPython's object.
    """
    analysis = analyse(code)
    hidden = hidden or {}
    result = Capture(namespace=namespace, returns=None if out is None else list(out))
    tree = ast.parse(code)
    # names in strings, and those an except clause unbinds (sent, so that the machine tells whether it did)
    mentioned = {*_named_in_strings(tree), *_caught_names(tree.body)} - set(analysis.reads)
    result.optional = frozenset(mentioned)  # with the history the cell reads, below
    for name in [*analysis.reads, *sorted(mentioned)]:
        if name not in namespace:
            continue
        value = namespace[name]
        if history.NAMES.match(name) or (name in history.LISTS and hidden.get(name) is value):
            if name in analysis.reads:
                result.history.append(name)
                result.values[name] = value
            continue
        if name in hidden and hidden[name] is value:
            continue
        if isinstance(value, types.ModuleType):
            result.modules[name] = value.__name__
        else:
            result.values[name] = value
    result.optional |= frozenset(result.history)  # an Out that cannot be pickled stays: the cell may not need it
    rebound, unbound, imported = _reached_by_functions(result.values.values(), namespace)
    outputs = [n for n in [*analysis.assigns, *rebound, *_star_imported(tree)] if not history.NAMES.match(n)]
    outputs = list(dict.fromkeys(outputs))
    if out is not None:
        unknown = [n for n in out if n not in analysis.assigns and n not in analysis.reads and n not in rebound]
        if unknown and not analysis.dynamic:
            raise UsageError(
                f"--out: the cell never assigns {', '.join(map(repr, unknown))}; "
                f"it assigns {', '.join(outputs) or 'nothing'}. Nothing was launched."
            )
        result.outputs = list(out)
    else:
        result.outputs = outputs
    result.deletes = sorted({*analysis.deletes, *unbound})  # the machine reports which are really gone
    result.imports = [*imported_names(code), *imported, *result.modules.values(), *_magic_modules(tree)]
    # the variables of the notebook's own modules the cell uses: inputs too (their functions read them), before
    # the files and submodules the inputs need are looked for
    own = sources.own_modules([*result.imports, *_modules_held(result.values.values())])
    variables = {n: v for n, v in modulestate.variables(own).items() if n not in result.values}
    result.values.update(variables)
    result.optional |= frozenset(variables)  # a variable that cannot be pickled stays, as it is, in its module
    result.submodules = loaded_submodules(_packages(tree, result))
    result.replayable = {} if analysis.dynamic else definitions(tree)
    held = [rel for value in result.values.values() for rel in handles.files_of(value)]  # reopened there on them
    result.files = list(dict.fromkeys([*_files_named(tree, result.values.values()), *held]))
    return result


def _modules_held(values: Iterable[Any]) -> set[str]:
    """The modules the values' classes come from, and those of the values that are functions or classes. Not the
    shell's: it lands as the shell of the machine (importing the kernel's, ipykernel, would start a debugger)."""
    held = set()
    for value in values:
        if is_shell(type(value)):
            continue
        held.add(type(value).__module__)
        try:
            held.add(value.__module__)  # a function's or class's own module
        except Exception:
            continue
    return {name for name in held if isinstance(name, str)}


def _magic_modules(tree: ast.AST) -> list[str]:
    """The modules the cell's magics need on the machine: those it loads as extensions (``%load_ext csvmagic``),
    and those the kernel's magics it runs come from (``%%csv``, registered by ``csvmagic``)."""
    found = sorted(extensions_named(tree))
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return found
    table = shell.magics_manager.magics
    for name in sorted(magics_used(tree)):
        magic = table["cell"].get(name) or table["line"].get(name)
        home = getattr(magic, "__self__", magic)  # a Magics method's class, or the function itself
        module = getattr(home if isinstance(home, types.FunctionType) else type(home), "__module__", None)
        if isinstance(module, str) and module != "__main__":
            found.append(module)
    return found


def _star_imported(tree: ast.AST) -> list[str]:
    """The names the cell's ``from module import *`` bind, as the kernel's import of the module says (the kernel
    imports it anyway, as it would had it run the cell): no syntax shows them, yet the cell binds them."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level and node.names[0].name == "*":
            try:
                module = importlib.import_module(node.module)
            except Exception:  # the machine meets the same failure, as the cell's own
                continue
            public = getattr(module, "__all__", None)
            names += list(public) if public is not None else [n for n in vars(module) if not n.startswith("_")]
    return names


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _functions_of(value: Any) -> list[types.FunctionType]:
    """The notebook functions ``value`` is or holds as code: itself, a bound method's, a notebook class's."""
    if isinstance(value, types.MethodType):
        value = value.__func__
    if isinstance(value, types.FunctionType):
        return [value] if value.__module__ == "__main__" else []
    cls = value if isinstance(value, type) else type(value)
    if cls.__module__ != "__main__":
        return []
    found = []
    for klass in cls.__mro__:
        for attr in vars(klass).values():
            attr = getattr(attr, "__func__", attr)  # staticmethod, classmethod
            found += [attr.fget, attr.fset, attr.fdel] if isinstance(attr, property) else [attr]
    return [f for f in found if isinstance(f, types.FunctionType) and f.__module__ == "__main__"]


def _reached_by_functions(values: Any, namespace: Mapping[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """(names assigned, names deleted through ``global``, modules imported) by the notebook functions the cell
    may call: the ones it reads, and those these read, at any depth. Run in the kernel, ``bump()`` rebinds
    ``counter`` there; the cell's syntax never shows it, so these names come back as outputs (or are deleted)
    as the cell's own; and the modules they import must be there on the machine."""
    assigned: dict[str, None] = {}
    deleted: dict[str, None] = {}
    imported: dict[str, None] = {}
    seen: set[int] = set()
    pending = [f for v in values for f in _functions_of(v)]
    while pending:
        function = pending.pop()
        if id(function) in seen:
            continue
        seen.add(id(function))
        closure = [c.cell_contents for c in function.__closure__ or () if _filled(c)]
        pending += [f for v in closure for f in _functions_of(v)]
        for code in _code_objects(function.__code__):
            for instruction in dis.get_instructions(code):
                if instruction.opname == "STORE_GLOBAL":
                    assigned.setdefault(instruction.argval)
                elif instruction.opname == "DELETE_GLOBAL":
                    deleted.setdefault(instruction.argval)
                elif instruction.opname == "IMPORT_NAME":
                    imported.setdefault(instruction.argval)
                elif instruction.opname == "LOAD_GLOBAL" and instruction.argval in namespace:
                    pending += _functions_of(namespace[instruction.argval])
    return list(assigned), list(deleted), list(imported)


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True


def _strings(tree: ast.AST, values: Any) -> Iterator[str]:
    """The cell's string constants, and those of the notebook functions it uses (a default path...)."""
    yield from (n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str))
    functions = [v for v in values if isinstance(v, types.FunctionType) and v.__module__ == "__main__"]
    for f in functions:
        yield from (d for d in (*(f.__defaults__ or ()), *(f.__kwdefaults__ or {}).values()) if isinstance(d, str))
    codes = [f.__code__ for f in functions]
    while codes:
        consts = codes.pop().co_consts
        yield from (c for c in consts if isinstance(c, str))
        codes += [c for c in consts if isinstance(c, types.CodeType)]


def _files_named(tree: ast.AST, values: Any) -> list[str]:
    """Relative paths, among the strings the cell may use, the words of its shell lines and the files its
    ``%%writefile`` magics write (``Overwriting``, ``-a`` appends to the kernel's), of files in or near the
    kernel's working folder (``../data/x.csv`` too); a shell line's glob (``ls scripts/*.py``), the files it
    matches here."""
    found: dict[str, None] = {}
    words = shell_words(tree)
    globbed = [match for word in words if glob.has_magic(word) for match in sorted(glob.glob(word))[:GLOB_LIMIT]]
    for text in [*_strings(tree, values), *words, *globbed, *sorted(written_files(tree))]:
        text = _SQLITE_URL.sub("", text)  # a database URL names its file: sqlite:///mydata.sqlite
        if not text.strip() or len(text) > 1024 or "\n" in text or text.startswith("~"):
            continue
        path = Path(text)
        if path.is_absolute() or workfiles.levels_up(posixpath.normpath(text)) > workfiles.UP_LIMIT:
            continue  # an absolute path is the same on this computer; elsewhere, --files says where it goes
        try:
            if path.is_file() and path.stat().st_size <= NAMED_FILE_LIMIT:
                found.setdefault(text)
        except (OSError, ValueError):  # a name too long, a NUL byte
            continue
    return list(found)


def _named_in_strings(tree: ast.AST) -> list[str]:
    """Names written in the cell's strings: formulas (``"y ~ np.log(x)"``), ``df.query("a > @lim")``
    and ``eval`` look them up in the notebook's namespace, so they travel when they exist there."""
    texts = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return [name for text in texts for name in names_in(text)]


def _packages(tree: ast.AST, cap: Capture) -> set[str]:
    """Top-level packages the cell uses: the ones it imports, its modules' and its values' own."""
    found = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    found |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level}
    found |= set(cap.modules.values())
    found |= _modules_held(cap.values.values())
    return {name.partition(".")[0] for name in found if isinstance(name, str)} - {"builtins", "__main__"}


def describe_type(value: Any) -> str:
    t = type(value)
    return t.__qualname__ if t.__module__ in ("builtins", "__main__") else f"{t.__module__}.{t.__qualname__}"


_FIXES = {
    "lock": "create the lock inside the cell",
    "TextIOWrapper": "open the file inside the cell, or send its path (and --files PATH) instead",
    "BufferedReader": "open the file inside the cell, or send its path (and --files PATH) instead",
    "BufferedWriter": "open the file inside the cell, or send its path (and --files PATH) instead",
    "generator": "turn it into a list (list(gen)) before the cell, or create the generator inside the cell",
    "Connection": "open the connection inside the cell (a connection cannot move between machines)",
    "socket": "open the socket inside the cell",
}


def unpicklable_message(name: str, value: Any, exc: BaseException) -> str:
    kind = describe_type(value)
    fix = next((hint for key, hint in _FIXES.items() if key.lower() in kind.lower()), None)
    fix = fix or "create it inside the cell, or make it picklable"
    return f"variable {name!r} ({kind}) cannot be sent to the machine: {exc}. Fix: {fix}. Nothing was launched."

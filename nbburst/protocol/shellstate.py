"""The IPython shell's own state, as process state: its magics, its extensions and how it shows values.

A cell that registers a magic (``@register_line_magic``, ``@register_cell_magic``,
``get_ipython().register_magic_function``, a ``Magics`` class) or loads an extension
(``%load_ext``) changes the shell, not the namespace: in the kernel the next cell's ``%hello``
finds it. And a cell expects the kernel's shell wherever it runs: ipykernel's own magics
(``%autosave``, ``%connect_info``), those of the extensions the kernel loaded (storemagic's
``%store``), so that ``%lsmagic`` lists the same and each of them runs. So the shell's table of
magics and its loaded extensions travel with every cell as any process state does
(:mod:`.processstate`), and what a cell adds comes back to the kernel's shell.

A magic the notebook defines (a notebook function, or a method of a notebook class) travels by
value, as the notebook's functions do. One of a module (an installed package's, a module beside
the notebook) travels by its name and is imported where it is first called (:class:`Lazy`): a
shell that only lists it pays no import (ipykernel's shell module costs a cell half a second).
An extension is loaded where it can be; where it cannot (a module beside the notebook that this
cell does not use), it is only marked loaded, its magics coming by name. IPython's own
magics are in every shell and stay out, and so do nbburst's: a machine runs no burst of its own.

How the shell shows a cell's ``Out`` as text is the shell's too: ``%precision 3`` (its float precision) and
``%pprint`` (pretty printing on or off) in one cell decide how the next cell's ``Out`` reads, wherever it runs.
So are the printers a notebook or a library registers by type on the shell's display formatters
(``formatters["text/html"].for_type(Fraction, f)``, ``for_type_by_name``; ``sympy.init_printing()`` so gives
its expressions a LaTeX form): the next cell's ``Out`` of that type has their forms wherever it runs. They
travel by their type's module and name, as ``for_type_by_name`` takes them, so that a class the notebook
defined matches the one each side has. The shell's own printers stay (IPython's; the inline backend's Figure
formats travel of their own, :mod:`.figureformats`).
"""

from __future__ import annotations

import functools
import importlib
import sys
import types
from dataclasses import dataclass
from typing import Any

#: Modules whose magics every shell has (IPython's) or that only the kernel's may have (nbburst's).
_STAY = ("IPython.core.", "nbburst")
_KINDS = ("line", "cell")
#: The text formatter's settings the shell's magics change (``%precision``, ``%pprint``).
_SHOWN = ("float_precision", "pprint")
#: Modules whose printers every shell registers itself (or, the inline backend's, :mod:`.figureformats` carries).
_OWN_PRINTERS = ("IPython.", "matplotlib_inline", "ipykernel", "nbburst")


@dataclass(frozen=True)
class Named:
    """A magic of a module, by name: a function (``attr`` empty) or the method ``attr`` of a Magics class."""

    module: str
    qualname: str
    attr: str = ""

    def resolve(self, shell: Any, kind: str, name: str) -> Any:
        """The magic itself, imported (its class registered in ``shell`` first, for a method)."""
        owner: Any = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            owner = getattr(owner, part)
        if not self.attr:
            return owner
        manager = shell.magics_manager
        if not isinstance(manager.registry.get(owner.__name__), owner):
            manager.register(owner(shell=shell))
        return manager.magics[kind][name]


@dataclass(frozen=True)
class Alias:
    """``%alias_magic``'s (and ipykernel's ``%ed``): another magic under a second name."""

    target: str
    kind: str
    params: str | None


@dataclass(frozen=True)
class Method:
    """A method of a notebook's ``Magics`` class: the class travels by value (its instance holds the shell)."""

    owner: type
    attr: str

    def register(self, shell: Any) -> None:
        shell.magics_manager.register(self.owner(shell=shell))


class Lazy:
    """A magic known by name: it lists as the magic does, and imports it when first called."""

    def __init__(self, shell: Any, kind: str, name: str, named: Named):
        self.shell, self.kind, self.name, self.named = shell, kind, name, named
        # What %lsmagic's JSON form reads of a method: its instance's class name.
        self.__self__ = type(named.qualname.rpartition(".")[2] if named.attr else "Other", (), {})()
        self.__doc__ = f"{named.module}.{named.qualname}{'.' + named.attr if named.attr else ''}"

    def _real(self) -> Any:
        real = self.named.resolve(self.shell, self.kind, self.name)
        self.shell.magics_manager.magics[self.kind][self.name] = real
        return real

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._real()(*args, **kwargs)

    def __getattr__(self, attr: str) -> Any:  # what IPython asks of a magic before it calls it (needs_local_scope...)
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(self._real(), attr)


def _describe(magic: Any) -> Any:
    """The magic as it travels: itself when the notebook defines it, else by name; None: it stays."""
    if isinstance(magic, Lazy):
        return magic.named
    if isinstance(magic, types.MethodType):
        cls = type(magic.__self__)
        if cls.__module__ == "__main__":
            return Method(cls, magic.__func__.__name__)
        named = Named(cls.__module__, cls.__qualname__, magic.__func__.__name__)
    elif isinstance(magic, types.FunctionType):
        if magic.__module__ == "__main__":
            return magic
        named = Named(magic.__module__, magic.__qualname__)
    elif isinstance(magic, _magic_alias()):
        return Alias(magic.magic_name, magic.magic_kind, magic.magic_params)
    else:
        return None
    return None if named.module.startswith(_STAY) or "<locals>" in named.qualname else named


def _magic_alias() -> type:
    from IPython.core.magic import MagicAlias

    return MagicAlias


def _shell() -> Any:
    from IPython.core.getipython import get_ipython

    return get_ipython()


def current() -> dict[str, Any]:
    """The shell's magics that travel, by kind and name, and its loaded extensions."""
    shell = _shell()
    if shell is None:
        return {"magics": {}, "extensions": [], "text": {}}
    magics = {}
    for kind in _KINDS:
        table = {name: _describe(magic) for name, magic in shell.magics_manager.magics[kind].items()}
        magics[kind] = {name: shown for name, shown in sorted(table.items()) if shown is not None}
    extensions = sorted(e for e in shell.extension_manager.loaded if not e.startswith(_STAY))
    text = shell.display_formatter.formatters["text/plain"]
    return {
        "magics": magics,
        "extensions": extensions,
        "text": {name: getattr(text, name) for name in _SHOWN},
        "printers": {mime: _printers(formatter) for mime, formatter in shell.display_formatter.formatters.items()},
    }


def _printers(formatter: Any) -> dict[tuple[str, str], Any]:
    """The printers of ``formatter`` registered by the notebook or a library, by their type's module and name."""
    found = {_key(cls): printer for cls, printer in formatter.type_printers.items()}
    found.update(formatter.deferred_printers)
    return {key: printer for key, printer in found.items() if not _own(printer)}


def _own(printer: Any) -> bool:
    """Whether the shell registers ``printer`` itself: a function of its modules, or one given arguments
    (``functools.partial``, as the inline backend registers ``print_figure`` for Figures)."""
    while isinstance(printer, functools.partial):
        printer = printer.func
    module = getattr(printer, "__module__", None) or type(printer).__module__
    return not isinstance(module, str) or module.startswith(_OWN_PRINTERS)


def _set_printers(formatter: Any, printers: dict[tuple[str, str], Any]) -> None:
    """Give ``formatter`` the other side's printers: those it lacks or has otherwise, and none of the others it
    had (a cell popped them). A type this process has loaded gets its printer now; any other, by name (a class
    the notebook defined, an unimported library's), where the formatter looks it up when it meets one."""
    here = _printers(formatter)
    for key in here.keys() - printers.keys():
        _forget(formatter, key)
    for key, printer in printers.items():
        if key in here and _same(here[key], printer):
            continue
        cls = getattr(sys.modules.get(key[0]), key[1], None) if key[0] != "__main__" else None
        if isinstance(cls, type):
            formatter.for_type(cls, printer)
        else:
            _forget(formatter, key)  # a class of the same name an earlier cell made
            formatter.for_type_by_name(key[0], key[1], printer)


def _key(cls: type) -> tuple[str, str]:
    """A type as ``for_type_by_name`` names it."""
    return cls.__module__, cls.__name__


def _forget(formatter: Any, key: tuple[str, str]) -> None:
    """Drop ``formatter``'s printer of the type named ``key``, registered by type or by name."""
    formatter.deferred_printers.pop(key, None)
    for cls in [cls for cls in formatter.type_printers if _key(cls) == key]:
        del formatter.type_printers[cls]


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    from .codepickle import dumps

    try:
        return dumps(a) == dumps(b)
    except Exception:
        return False


def apply(state: dict[str, Any]) -> None:
    """Give this process's shell the extensions and magics of ``state`` that it lacks (or has otherwise)."""
    shell = _shell()
    if shell is None:
        return
    text = shell.display_formatter.formatters["text/plain"]
    for name, value in state["text"].items():
        if getattr(text, name) != value:
            setattr(text, name, value)  # traits: the float format follows the precision, as with %precision
    for mime, printers in state.get("printers", {}).items():
        if mime in shell.display_formatter.formatters:
            _set_printers(shell.display_formatter.formatters[mime], printers)
    manager = shell.extension_manager
    for extension in state["extensions"]:
        if extension in manager.loaded:
            continue
        try:
            manager.load_extension(extension)
        except Exception:  # not importable here (a module beside the notebook this cell does not use), or failing
            manager.loaded.add(extension)  # as the kernel has it: its magics come by name, imported where called
    table = shell.magics_manager.magics
    for kind, magics in state["magics"].items():
        for name, shown in magics.items():
            here = table[kind].get(name)
            if isinstance(shown, Alias):
                if here is None:
                    shell.magics_manager.register_alias(name, shown.target, shown.kind, shown.params)
            elif isinstance(shown, Named):
                if here is None:
                    table[kind][name] = Lazy(shell, kind, name, shown)
            elif not _same(_describe(here), shown):
                if isinstance(shown, Method):
                    shown.register(shell)
                else:
                    shell.magics_manager.register_function(shown, kind, name)

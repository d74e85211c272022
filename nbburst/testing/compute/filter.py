"""The `filter` expressions of Compute Engine list calls, evaluated on resource JSON.

Supported: `field = value`, `!=`, `>`, `>=`, `<`, `<=`, `field:value` / `field:*` (has),
`field eq regex` / `field ne regex`, nested fields (`labels.team`, `scheduling.preemptible`),
`*` wildcards in values, quoted values, parentheses, NOT / `-`, and terms joined by
whitespace or AND (and binding tighter than OR). As in Compute Engine, several expressions
must each be in parentheses: `(a = 1) (b = 2)`; `a = 1 b = 2` is refused.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable

Predicate = Callable[[dict], bool]

_OPS = ("!=", ">=", "<=", "=", ">", "<", ":")


class FilterError(ValueError):
    pass


def compile_filter(text: str | None) -> Predicate:
    """A predicate over resource dicts; an empty filter matches everything."""
    if not text or not text.strip():
        return lambda _r: True
    parser = _Parser(text)
    pred = parser.expr()
    parser.skip_ws()
    if parser.pos != len(text):
        raise FilterError(f"Invalid list filter expression: unexpected {text[parser.pos :]!r}")
    return pred


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0
        self.bare = False  # the last term parsed was a comparison without parentheses

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek_word(self) -> str:
        self.skip_ws()
        m = re.compile(r"[A-Za-z]+\b").match(self.text, self.pos)
        return m.group(0) if m else ""

    def at_end(self) -> bool:
        self.skip_ws()
        return self.pos >= len(self.text) or self.text[self.pos] == ")"

    def expr(self) -> Predicate:
        terms = [self.and_expr()]
        bare = self.bare
        while self.peek_word() == "OR":
            self.pos += 2
            terms.append(self.and_expr())
            bare = bare or self.bare
        self._refuse_bare(len(terms), bare)
        return terms[0] if len(terms) == 1 else (lambda r: any(t(r) for t in terms))

    def and_expr(self) -> Predicate:
        terms = [self.unary()]
        bare = self.bare
        while not self.at_end() and self.peek_word() != "OR":
            if self.peek_word() == "AND":
                self.pos += 3
            terms.append(self.unary())
            bare = bare or self.bare
        self._refuse_bare(len(terms), bare)
        self.bare = bare and len(terms) == 1
        return terms[0] if len(terms) == 1 else (lambda r: all(t(r) for t in terms))

    @staticmethod
    def _refuse_bare(count: int, bare: bool) -> None:
        if count > 1 and bare:
            raise FilterError(
                "Invalid list filter expression: with several expressions, put each in parentheses, "
                'e.g. (labels.team = "a") (status = RUNNING)'
            )

    def unary(self) -> Predicate:
        self.skip_ws()
        negate = False
        if self.peek_word() == "NOT":
            self.pos += 3
            negate = True
        elif self.text.startswith("-", self.pos):
            self.pos += 1
            negate = True
        self.skip_ws()
        paren = self.text.startswith("(", self.pos)
        if paren:
            self.pos += 1
            inner = self.expr()
            self.skip_ws()
            if not self.text.startswith(")", self.pos):
                raise FilterError("Invalid list filter expression: missing ')'")
            self.pos += 1
        else:
            inner = self.comparison()
        self.bare = not paren
        return (lambda r: not inner(r)) if negate else inner

    def comparison(self) -> Predicate:
        self.skip_ws()
        m = re.compile(r"[A-Za-z_][\w.\-]*").match(self.text, self.pos)
        if not m:
            raise FilterError(f"Invalid list filter expression at {self.text[self.pos :]!r}")
        field = m.group(0)
        self.pos = m.end()
        self.skip_ws()
        op = next((o for o in _OPS if self.text.startswith(o, self.pos)), None)
        if op is None:
            word = self.peek_word()
            if word not in ("eq", "ne"):
                raise FilterError(f"Invalid list filter expression: no operator after {field!r}")
            op = word
        self.pos += len(op)
        value = self.value()
        return _comparison(field, op, value)

    def value(self) -> str:
        self.skip_ws()
        if self.pos < len(self.text) and self.text[self.pos] in "\"'":
            quote = self.text[self.pos]
            end = self.pos + 1
            out = []
            while end < len(self.text) and self.text[end] != quote:
                if self.text[end] == "\\" and end + 1 < len(self.text):
                    end += 1
                out.append(self.text[end])
                end += 1
            if end >= len(self.text):
                raise FilterError("Invalid list filter expression: unterminated string")
            self.pos = end + 1
            return "".join(out)
        m = re.compile(r"[^\s()]+").match(self.text, self.pos)
        if not m:
            raise FilterError("Invalid list filter expression: missing value")
        self.pos = m.end()
        return m.group(0)


def _lookup(resource, field: str) -> list:
    """All values at a dotted path (lists fan out: `disks.boot`)."""
    values = [resource]
    for part in field.split("."):
        nxt = []
        for v in values:
            v_items = v if isinstance(v, list) else [v]
            for item in v_items:
                if isinstance(item, dict) and part in item:
                    nxt.append(item[part])
        values = nxt
    flat = []
    for v in values:
        flat.extend(v if isinstance(v, list) else [v])
    return flat


def _text(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _equals(v, value: str) -> bool:
    s = _text(v)
    if "*" in value:
        return fnmatch.fnmatchcase(s, value)
    if isinstance(v, bool):
        return s == value.lower()
    a, b = _num(v), _num(value)
    if a is not None and b is not None and not isinstance(v, str):
        return a == b
    return s == value


def _comparison(field: str, op: str, value: str) -> Predicate:
    def pred(resource: dict) -> bool:
        values = _lookup(resource, field)
        if op == ":" and value == "*":
            return any(v not in (None, "", [], {}) for v in values)
        if op == ":":
            return any(value in v if isinstance(v, dict) else _equals(v, value) for v in values)
        if op == "=":
            return any(_equals(v, value) for v in values)
        if op == "!=":
            return not any(_equals(v, value) for v in values)
        if op in ("eq", "ne"):
            hit = any(re.fullmatch(value, _text(v)) for v in values)
            return hit if op == "eq" else not hit
        for v in values:
            a, b = _num(v), _num(value)
            if a is None or b is None:
                a, b = _text(v), value
            if {">": a > b, ">=": a >= b, "<": a < b, "<=": a <= b}[op]:
                return True
        return False

    return pred

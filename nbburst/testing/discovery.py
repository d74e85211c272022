"""Requests checked against Google's own description of the Compute Engine API.

The emulator answers what nbburst sends, but a request it accepts may still be one Compute Engine
refuses: a field name the API does not have, an enum value it does not know, a malformed list
filter. Google publishes the API's discovery document (``compute.v1.json``, shipped inside
google-api-python-client): every method with its HTTP method, path template and parameters
(location, type, enum, pattern, bounds) and the schema of its request body. :class:`Discovery`
maps each request the emulator recorded (see :mod:`nbburst.testing.compute.http`) to its method
and reports everything in it the document does not allow:

* a path no method has, or an HTTP method the path does not take;
* path parameters that do not match their pattern; query parameters the method does not take;
  values of the wrong type, out of bounds or outside their enum; required parameters missing;
* a list ``filter`` with several expressions not each in parentheses (the rule the parameter's
  own description states);
* in the JSON body, recursively through ``$ref``: fields the schema does not have, values of the
  wrong type, enum values outside the enum, strings that do not match their pattern, fields the
  schema marks as required by this method missing; a body sent to a method that takes none.

Check a log written with $NBBURST_COMPUTE_REQUEST_LOG (exit status 1 when a request does not conform)::

    python -m nbburst.testing.discovery requests.jsonl [--google-clients]
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Discovery", "Method", "api_requests", "conformance_problems", "filter_problem"]

_ENUM_SHOWN = 12


@dataclass(frozen=True)
class Method:
    """One method of the API, as the discovery document describes it."""

    id: str
    http_method: str
    template: str
    spec: dict[str, Any]
    pattern: re.Pattern[str]

    @property
    def literal_length(self) -> int:
        """Characters of the template outside its ``{parameters}``: the more, the more specific."""
        return len(re.sub(r"\{[^}]*\}", "", self.template))


class Discovery:
    """A discovery document, ready to check requests against."""

    def __init__(self, document: dict[str, Any]):
        self.document = document
        self.base_path: str = document["basePath"]
        self.schemas: dict[str, Any] = document.get("schemas", {})
        self.global_parameters: dict[str, Any] = document.get("parameters", {})
        self.methods = sorted(_methods(document.get("resources", {})), key=lambda m: -m.literal_length)

    @classmethod
    @functools.cache
    def load(cls, name: str = "compute.v1") -> Discovery:
        """The document google-api-python-client ships (``compute.v1``, ``storage.v1``...)."""
        try:
            import googleapiclient
        except ImportError as e:
            raise RuntimeError(
                "checking requests against Google's discovery documents needs google-api-python-client "
                "(pip install google-api-python-client)"
            ) from e
        path = Path(googleapiclient.__file__).parent / "discovery_cache" / "documents" / f"{name}.json"
        return cls(json.loads(path.read_text(encoding="utf-8")))

    def enum(self, schema: str, field: str) -> list[str]:
        """The values the document allows for ``schema.field`` (e.g. ``Quota``, ``metric``)."""
        return list(self._resolve(self.schemas[schema]["properties"][field]).get("enum", []))

    # -- finding the method -------------------------------------------------------------------

    def method_for(self, http_method: str, path: str) -> tuple[Method, dict[str, str]] | None:
        """The method a request calls and its path parameters; None when no method has this path and verb."""
        if not path.startswith(self.base_path):
            return None
        relative = path[len(self.base_path) :]
        for method in self.methods:
            match = method.pattern.fullmatch(relative)
            if match and method.http_method == http_method:
                return method, match.groupdict()
        return None

    # -- checking -----------------------------------------------------------------------------

    def check(self, request: Mapping[str, Any]) -> list[str]:
        """Problems of one recorded request (``method``, ``path``, ``query``, ``body``); empty when it conforms."""
        http_method, path = request["method"], request["path"]
        query: Mapping[str, str] = request.get("query") or {}
        body = request.get("body")
        found = self.method_for(http_method, path)
        if found is None:
            return [f"{http_method} {path}: {self._no_method(http_method, path)}"]
        method, path_values = found
        parameters: dict[str, Any] = method.spec.get("parameters", {})
        problems: list[str] = []
        for name, value in path_values.items():
            problems += _parameter_problems(f"path parameter {name}", value, parameters.get(name, {}))
        problems += self._query_problems(method, query)
        request_schema = method.spec.get("request")
        if request_schema is None:
            if body not in (None, {}, ""):
                problems.append(f"body: {method.id} takes no request body")
        else:
            problems += self._value_problems(body, request_schema, "body", method.id)
        return [f"{http_method} {path} ({method.id}): {p}" for p in problems]

    def _query_problems(self, method: Method, query: Mapping[str, str]) -> list[str]:
        parameters: dict[str, Any] = method.spec.get("parameters", {})
        problems: list[str] = []
        for name, value in query.items():
            spec = parameters.get(name) or self.global_parameters.get(name)
            if spec is None or spec.get("location") != "query":
                problems.append(f"query parameter {name}: {method.id} takes no such parameter")
                continue
            problems += _parameter_problems(f"query parameter {name}", value, spec)
            problem = filter_problem(value) if name == "filter" else None
            if problem:
                problems.append(f"query parameter filter {value!r}: {problem}")
        for name, spec in parameters.items():
            if spec.get("required") and spec.get("location") == "query" and name not in query:
                problems.append(f"query parameter {name}: required, missing")
        return problems

    def check_all(self, requests: Iterable[Mapping[str, Any]]) -> list[str]:
        """Problems of every request, in order."""
        return [problem for request in requests for problem in self.check(request)]

    def _no_method(self, http_method: str, path: str) -> str:
        relative = path[len(self.base_path) :] if path.startswith(self.base_path) else None
        verbs = sorted({m.http_method for m in self.methods if relative and m.pattern.fullmatch(relative)})
        if verbs:
            return f"the API takes {', '.join(verbs)} on this path, not {http_method}"
        return f"no method of the API has this path (under {self.base_path})"

    def _resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            schema = self.schemas[schema["$ref"]]
        return schema

    def _value_problems(self, value: Any, schema: dict[str, Any], where: str, method_id: str) -> list[str]:
        if value is None:  # JSON null: the field's default, accepted for every type
            return []
        name = schema.get("$ref")
        schema = self._resolve(schema)
        kind = schema.get("type")
        if kind == "object" or "properties" in schema or "additionalProperties" in schema:
            if not isinstance(value, dict):
                return [f"{where}: expected an object ({name or 'object'}), got {_json_type(value)}"]
            return self._object_problems(value, schema, name, where, method_id)
        if kind == "array":
            if not isinstance(value, list):
                return [f"{where}: expected an array, got {_json_type(value)}"]
            items = schema.get("items", {})
            return [
                problem
                for i, item in enumerate(value)
                for problem in self._value_problems(item, items, f"{where}[{i}]", method_id)
            ]
        return _scalar_problems(value, schema, where)

    def _object_problems(
        self, value: dict[str, Any], schema: dict[str, Any], name: str | None, where: str, method_id: str
    ) -> list[str]:
        """Fields of an object: known ones checked, unknown ones refused, the ones ``method_id`` requires present."""
        properties: dict[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        problems: list[str] = []
        for key, item in value.items():
            if key in properties:
                problems += self._value_problems(item, properties[key], f"{where}.{key}", method_id)
            elif extra is not None:
                problems += self._value_problems(item, extra, f"{where}.{key}", method_id)
            else:
                problems.append(f"{where}.{key}: unknown field" + (f" ({name} has no such field)" if name else ""))
        for key, spec in properties.items():
            if method_id in spec.get("annotations", {}).get("required", ()) and value.get(key) is None:
                problems.append(f"{where}.{key}: required by {method_id}, missing")
        return problems


def _methods(resources: dict[str, Any]) -> Iterator[Method]:
    for resource in resources.values():
        for spec in resource.get("methods", {}).values():
            template = spec.get("flatPath") or spec["path"]
            yield Method(spec["id"], spec["httpMethod"], template, spec, _template_pattern(template))
        yield from _methods(resource.get("resources", {}))


def _template_pattern(template: str) -> re.Pattern[str]:
    """``projects/{project}/zones/{zone}`` -> a pattern with one named group per parameter."""
    out, pos = [], 0
    for match in re.finditer(r"\{(\+?)([^}]+)\}", template):
        out.append(re.escape(template[pos : match.start()]))
        group = re.sub(r"\W", "_", match[2])
        out.append(f"(?P<{group}>.+)" if match[1] else f"(?P<{group}>[^/]+)")
        pos = match.end()
    out.append(re.escape(template[pos:]))
    return re.compile("".join(out))


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, dict) else type(value).__name__


def _enum_problem(value: Any, schema: dict[str, Any]) -> str | None:
    allowed = schema.get("enum")
    if allowed is None or value in allowed:
        return None
    shown = ", ".join(allowed[:_ENUM_SHOWN]) + (f" ... ({len(allowed)} values)" if len(allowed) > _ENUM_SHOWN else "")
    return f"{value!r} is not one of {shown}"


def _bounds_problem(number: float, schema: dict[str, Any]) -> str | None:
    low, high = schema.get("minimum"), schema.get("maximum")
    if str(schema.get("format", "")).startswith("uint") and number < 0:
        return f"{number:g} is negative (an unsigned {schema['format']})"
    if low is not None and number < float(low):
        return f"{number:g} is below the minimum {low}"
    if high is not None and number > float(high):
        return f"{number:g} is above the maximum {high}"
    return None


_INTEGER = re.compile(r"-?\d+")


def _scalar_problems(value: Any, schema: dict[str, Any], where: str) -> list[str]:
    """A JSON scalar against a scalar schema; 64-bit and 32-bit integers may come as decimal strings (proto3 JSON)."""
    kind, fmt = schema.get("type"), schema.get("format", "")
    problem: str | None = None
    if kind == "any":
        return []
    if kind == "boolean":
        problem = None if isinstance(value, bool) else f"expected a boolean, got {_json_type(value)}"
    elif kind == "integer" or (kind == "string" and fmt in ("int64", "uint64")):
        is_int = isinstance(value, int) and not isinstance(value, bool)
        if not (is_int or (isinstance(value, str) and _INTEGER.fullmatch(value))):
            problem = f"expected an integer ({fmt or kind}), got {_json_type(value)} {value!r}"
        else:
            problem = _bounds_problem(int(value), schema)
    elif kind == "number":
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        problem = None if is_number else f"expected a number, got {_json_type(value)}"
    elif kind == "string":
        problem = _string_problem(value, schema) if isinstance(value, str) else f"expected a string, got {value!r}"
    return [f"{where}: {problem}"] if problem else []


def _string_problem(value: str, schema: dict[str, Any]) -> str | None:
    """A string against the enum or pattern the document gives for it."""
    problem = _enum_problem(value, schema)
    pattern = schema.get("pattern")
    if problem is None and pattern and not re.fullmatch(pattern, value):
        problem = f"{value!r} does not match the pattern {pattern}"
    return problem


def _parameter_problems(where: str, value: str, spec: dict[str, Any]) -> list[str]:
    """A path or query parameter (always text in the URL) against its description."""
    kind = spec.get("type", "string")
    problem: str | None = None
    if kind == "boolean":
        problem = None if value in ("true", "false") else f"{value!r} is not a boolean (true or false)"
    elif kind == "integer":
        problem = _bounds_problem(int(value), spec) if _INTEGER.fullmatch(value) else f"{value!r} is not an integer"
    elif kind == "number":
        try:
            float(value)
        except ValueError:
            problem = f"{value!r} is not a number"
    else:
        problem = _string_problem(value, spec)
    return [f"{where}: {problem}"] if problem else []


# -- list filters ------------------------------------------------------------------------------

_FIELD = r"[A-Za-z_][\w.\-]*"
_QUOTED = r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\''
#: One comparison: ``field op value`` (AIP-160) or ``field eq|ne literal`` (a regular expression, may hold spaces).
_COMPARISON = re.compile(
    rf"\s*(?:{_FIELD}\s*(?:!=|>=|<=|=|>|<|:)\s*(?:{_QUOTED}|[^\s()\"']+)|{_FIELD}\s+(?:eq|ne)\s+(?:{_QUOTED}|.+?))\s*"
)


def filter_problem(text: str) -> str | None:
    """Why a Compute list ``filter`` is malformed, per the parameter's description; None when it is well formed.

    One comparison may stand alone; several must each be in parentheses, joined by spaces
    (AND), ``AND`` or ``OR``: ``(labels.a = "1") (labels.b = "2")``.
    """
    if not text.strip() or _COMPARISON.fullmatch(text):
        return None
    groups, problem = _groups(text)
    for group in groups:
        inner = filter_problem(group) if group.strip() else "nothing in the parentheses"
        if inner:
            return f"({group.strip()}): {inner}"
    return problem


def _groups(text: str) -> tuple[list[str], str | None]:
    """Contents of the top-level parenthesised groups of ``text``, and what else is wrong around them."""
    groups: list[str] = []
    joined = True  # the next thing must be a group (at the start, after AND or OR)
    i, n = 0, len(text)
    while i < n:
        if text[i].isspace():
            i += 1
            continue
        word = re.match(r"(?:AND|OR)\b", text[i:])
        if word and groups and not joined:
            i, joined = i + len(word[0]), True
            continue
        if text[i] != "(":
            return groups, 'several expressions must each be in parentheses, e.g. (labels.a = "1") (labels.b = "2")'
        end = _closing(text, i)
        if end is None:
            return groups, "unbalanced parentheses"
        groups.append(text[i + 1 : end])
        i, joined = end + 1, False
    return groups, ("ends with AND or OR" if joined else None)


def _closing(text: str, start: int) -> int | None:
    """Index of the parenthesis closing the one at ``start`` (quotes respected), or None."""
    depth, quote, i = 0, "", start
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


# -- recorded requests ---------------------------------------------------------------------------


def api_requests(records: Iterable[Mapping[str, Any]], *, google_clients: bool = False) -> list[Mapping[str, Any]]:
    """The Compute API requests among recorded ones (not the emulator's own controls).

    With ``google_clients``, only those Google's client libraries sent (they set ``x-goog-api-client``).
    """
    return [
        r
        for r in records
        if r["path"].startswith("/compute/") and (not google_clients or "gapic/" in r.get("client", ""))
    ]


def conformance_problems(records: Iterable[Mapping[str, Any]], *, google_clients: bool = False) -> list[str]:
    """What in the recorded Compute API requests the discovery document does not allow."""
    return Discovery.load().check_all(api_requests(records, google_clients=google_clients))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nbburst.testing.discovery",
        description="Check requests recorded by the Compute emulator against Compute Engine's discovery document.",
    )
    parser.add_argument("logs", nargs="+", type=Path, help="files written with $NBBURST_COMPUTE_REQUEST_LOG")
    parser.add_argument("--google-clients", action="store_true", help="only requests of Google's client libraries")
    args = parser.parse_args(argv)
    records = [json.loads(line) for path in args.logs for line in path.read_text().splitlines() if line.strip()]
    checked = api_requests(records, google_clients=args.google_clients)
    problems = Discovery.load().check_all(checked)
    for problem in problems:
        print(problem)
    print(f"{len(checked)} requests checked, {len(problems)} problems", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

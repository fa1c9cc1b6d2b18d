"""Java .properties text (broker.conf, namesrv.conf, controller.conf): one parser for every config reader.

`parse_properties` gives (line number, key, value) triples in file order; `coerce_value` turns a value into a
config field's type with a one-line ConfigError. No file access here.
"""

from __future__ import annotations

import os
from typing import Any

from orbitmq.base.errors import ConfigError

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_BLANK = " \t\f"


def unescape(s: str) -> str:
    """Java escapes: \\t \\n \\r \\f, \\uXXXX; any other escaped character stands for itself."""
    if "\\" not in s:
        return s
    out: list[str] = []
    i = 0
    while i < len(s):
        ch = s[i]
        if ch == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            if nxt == "u" and len(s) >= i + 6:
                try:
                    out.append(chr(int(s[i + 2 : i + 6], 16)))
                    i += 6
                    continue
                except ValueError:
                    pass
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    """The key ends at the first unescaped '=', ':' or blank; one '=' or ':' after blanks is the separator."""
    i, n = 0, len(line)
    while i < n:
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=:" or ch in _BLANK:
            break
        i += 1
    rest = line[i:].lstrip(_BLANK)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_BLANK)
    return unescape(line[:i]), rest


def _continues(line: str) -> bool:
    """An odd number of trailing backslashes continues the line."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def parse_properties(text: str) -> list[tuple[int, str, str]]:
    """'#'/'!' comments, blank lines, '\\' continuations; values unescaped and trimmed at the end."""
    out: list[tuple[int, str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        lineno, line = i + 1, lines[i].lstrip(_BLANK)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip(_BLANK)
            i += 1
        if _continues(line):
            line = line[:-1]
        key, value = _split_key_value(line)
        if key:
            out.append((lineno, key, unescape(value).rstrip()))
    return out


def coerce_value(source: str, key: str, value: str, type_name: Any) -> Any:
    """A config value as the field's type ("int", "bool", else the string); ConfigError names file and key."""
    t = type_name if isinstance(type_name, str) else getattr(type_name, "__name__", str(type_name))
    if t == "int":
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"{source}: {key}: {value!r} is not an integer") from None
    if t == "bool":
        low = value.lower()
        if low in ("true", "false"):
            return low == "true"
        raise ConfigError(f"{source}: {key}: {value!r} is not a boolean (true/false)")
    return value


def read_properties_file(path: str, what: str) -> list[tuple[int, str, str]]:
    """The triples of a config file; an unreadable file is a one-line ConfigError naming `what` (e.g. "broker")."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read {what} config {path}: {e.strerror or e}") from None
    return parse_properties(text)


def resolve_path(value: str, base_dir: str | None) -> str:
    """A path from a config file: `~` expanded; a relative one is taken relative to `base_dir` (the config file's
    folder), or the current directory when there is no file. Absolute paths stay as they are."""
    path = os.path.expanduser(str(value).strip())
    if not os.path.isabs(path):
        path = os.path.join(base_dir or os.getcwd(), path)
    return os.path.normpath(path)


def conf_dir(path: str | os.PathLike[str]) -> str:
    """The folder relative paths of the config file `path` are resolved against."""
    return os.path.dirname(os.path.abspath(os.fspath(path)))


def field_values(props: list[tuple[int, str, str]], keys: dict[str, str], field_types: dict[str, Any], source: str,
                 *, ignored: frozenset[str] = frozenset(), path_fields: frozenset[str] = frozenset(),
                 base_dir: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """(line, key, value) triples -> ({field name: typed value}, warnings). `keys` maps config keys to field names;
    keys outside it (and outside `ignored`) are warned about; fields in `path_fields` get `~` expanded and, given
    `base_dir` (the file's folder), a relative path resolved against it."""
    values: dict[str, Any] = {}
    warnings: list[str] = []
    for lineno, key, value in props:
        name = keys.get(key)
        if name is None:
            if key not in ignored:
                warnings.append(f"{source}:{lineno}: unknown key {key!r} ignored")
            continue
        coerced = coerce_value(source, key, value, field_types[name])
        if name in path_fields and coerced:
            coerced = resolve_path(coerced, base_dir) if base_dir is not None else os.path.expanduser(coerced)
        values[name] = coerced
    return values, warnings

"""The configuration files as one dictionary: ``configs/defaults.json`` merged with a
setting's override file and dotted overrides.

A setting is ``quick`` (the embedded default), ``smoke`` (it shrunk to under a minute),
``banking77`` or ``clinc150`` (the published data sets, scaled to this CPU),
``roberta`` or ``llama`` (the paper's), or
the path of a JSON file with the same shape; command-line flags override single keys
(``--set train.lr=1e-3`` for any of them). :func:`merged` reads the files, merges them key
by key (``dataset`` and ``variants`` replaced whole) and applies the overrides
(:func:`apply_overrides`); every error names the key and the value. It checks the keys'
names, not their values: :class:`fraq.federated.config.Config` checks those, and is the
only reader of what this returns (:func:`fraq.federated.config.load_config`).
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

__all__ = ["CONFIG_DIR", "INT_LIMIT", "MAX_DEPTH", "SETTINGS", "apply_overrides", "check_plain", "defaults_comments",
           "loads", "merged", "parse_value"]

CONFIG_DIR = Path(__file__).with_name("configs")
SETTINGS = ("quick", "smoke", "banking77", "clinc150", "roberta", "llama")


_WHOLE = ("dataset", "variants")
"""Sections an override replaces whole instead of key by key."""


def _merge(base: dict, over: dict, where: str = "") -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if k.startswith("_"):
            continue
        if k not in out:
            raise ValueError(f"unknown config key {where + k!r}; known: {sorted(x for x in out if not x.startswith('_'))}")
        if isinstance(out[k], dict):
            if not isinstance(v, dict):
                raise ValueError(f"config key {where + k!r}(={v!r}) is a section: give an object, or set one of "
                                 f"its keys, e.g. {where + k}.{next(iter(out[k]), 'key')}=...")
            out[k] = _merge(out[k], v, f"{where}{k}.")
        else:
            out[k] = copy.deepcopy(v)
    return out


MAX_DEPTH = 16
"""The deepest nesting a configuration value may have. The deepest a setting needs is four
levels (a file's ``variants``, a variant, its key, a list of ranks); a value nested
thousands deep would exhaust Python's recursion limit in the first copy, comparison or
message that reads it, so it is refused where it is parsed, naming the file or the key."""

INT_LIMIT = 2 ** 63 - 1
"""The largest integer a configuration holds: seeds, sizes and counts end up in torch and
numpy as int64. Checking the digits before converting them also keeps Python's own
4300-digit limit on ``int(str)`` (a message naming neither file nor key) out of reach."""


class _Huge(Exception):
    """An integer of ``digits`` digits, met while parsing (before converting it)."""

    def __init__(self, digits: int):
        self.digits = digits


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > len(str(INT_LIMIT)):
        raise _Huge(digits)
    return int(text)


def check_plain(where: str, value) -> None:
    """Refuse a ``value`` nested more than :data:`MAX_DEPTH` deep or holding an int beyond
    :data:`INT_LIMIT` in magnitude; ValueError naming ``where`` (a file or a key) and the
    place inside it. Walks without recursion, so any depth is measured."""
    todo = [(value, "", 0)]
    while todo:
        v, at, depth = todo.pop()
        place = f"{where} at {at!r}" if at else where
        if depth > MAX_DEPTH:
            raise ValueError(f"{place} is nested deeper than {MAX_DEPTH} levels; a configuration needs at most four")
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) > INT_LIMIT:
            raise ValueError(f"{place} holds an integer of {len(str(abs(v)))} digits, beyond 2**63 - 1 in magnitude")
        if isinstance(v, dict):
            todo.extend((x, f"{at}.{k}" if at else str(k), depth + 1) for k, x in v.items())
        elif isinstance(v, (list, tuple)):
            todo.extend((x, f"{at}[{i}]", depth + 1) for i, x in enumerate(v))


def loads(where: str, text: str):
    """``text`` parsed as JSON, checked by :func:`check_plain`: ValueError naming ``where``
    for a value too deep or an integer too large; json.JSONDecodeError for text that is not
    JSON (a caller may take it as a plain string)."""
    try:
        value = json.loads(text, parse_int=_int)
    except _Huge as e:
        raise ValueError(f"{where} holds an integer of {e.digits} digits, beyond 2**63 - 1 in magnitude") from None
    except RecursionError:
        raise ValueError(f"{where} is nested deeper than {MAX_DEPTH} levels; a configuration needs at most four") \
            from None
    check_plain(where, value)
    return value


def parse_value(key: str, text: str):
    """A dotted override's ``text`` (``--set key=text``): JSON (numbers, ``true``, ``null``,
    ``[4,8]``), else the text itself as a string; ValueError naming ``key`` where it is too
    deep or too large (:func:`loads`)."""
    try:
        return loads(f"config key {key!r}", text)
    except json.JSONDecodeError:
        return text


def _read(path: Path) -> dict:
    try:
        data = loads(f"config file {str(path)!r}", path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"config file {str(path)!r} is not valid JSON: {e}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"config file {str(path)!r} is not valid JSON: {e}") from None
    except OSError as e:
        raise ValueError(f"config file {str(path)!r} cannot be read: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"config file {str(path)!r} must hold a JSON object, got {type(data).__name__}")
    return data


def _set_key(cfg: dict, dotted: str, value) -> None:
    """Set ``cfg["a"]["b"] = value`` for ``dotted = "a.b"``; the key must exist (``dataset.*`` may be new)."""
    parts = dotted.split(".")
    node = cfg
    for i, p in enumerate(parts[:-1]):
        if not isinstance(node.get(p), dict):
            raise ValueError(f"config key {'.'.join(parts[:i + 1])!r} (from {dotted!r}) is not a section")
        node = node[p]
    if parts[-1] not in node and parts[0] != "dataset":
        raise ValueError(f"unknown config key {dotted!r}")
    prefix = "".join(p + "." for p in parts[:-1])
    if isinstance(node.get(parts[-1]), dict) and dotted not in _WHOLE:  # a section: merged key by key
        node[parts[-1]] = _merge({parts[-1]: node[parts[-1]]}, {parts[-1]: value}, prefix)[parts[-1]]
    else:
        node[parts[-1]] = value


def apply_overrides(cfg: dict, overrides: dict) -> None:
    """Apply dotted ``overrides`` to the dictionary ``cfg`` in place; ``dataset`` or
    ``variants`` given as an object replaces the section whole."""
    for key, value in overrides.items():
        check_plain(f"config key {key!r}", value)
        if key in _WHOLE and isinstance(value, dict):
            cfg[key] = copy.deepcopy(value)
        else:
            _set_key(cfg, key, value)


def merged(setting: str, overrides: dict | None = None) -> dict:
    """``configs/defaults.json`` merged with ``setting``'s file (one of :data:`SETTINGS`, or a
    path to a JSON file of overrides) and ``overrides`` (dotted keys), ``setting`` recorded
    under its key. Raises ValueError naming the key and its value before anything is loaded.
    """
    if not isinstance(setting, str) or not setting:
        raise ValueError(f"config(={setting!r}) must be one of {list(SETTINGS)} or a JSON file path")
    base = _read(CONFIG_DIR / "defaults.json")
    path = CONFIG_DIR / f"{setting}.json" if setting in SETTINGS else Path(setting)
    if not path.is_file():
        raise ValueError(f"config(={setting!r}) is neither one of {list(SETTINGS)} nor an existing JSON file")
    over = _read(path)
    cfg = _merge(base, {k: v for k, v in over.items() if k not in _WHOLE})
    for key in _WHOLE:  # a data set or the variants replace the default ones whole
        if key in over:
            if not isinstance(over[key], dict):
                raise ValueError(f"config key {key!r} must be an object, got {over[key]!r}")
            cfg[key] = copy.deepcopy(over[key])
    cfg["setting"] = setting
    apply_overrides(cfg, overrides or {})
    return cfg


@functools.cache
def defaults_comments() -> dict:
    """The comments (``_`` keys) of ``configs/defaults.json``: a record carries them, as the
    merged dictionary it is written from begins with them."""
    return {k: v for k, v in _read(CONFIG_DIR / "defaults.json").items() if k.startswith("_")}

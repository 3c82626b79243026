"""Strict JSON reading for every input file (config.json, device and cluster files)."""

from __future__ import annotations

import json
import sys
from typing import Any

from .errors import ConfigError


def _show(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def loads_strict(text: str, where: str) -> Any:
    """Parse JSON strictly: no NaN/Infinity, no key twice in one object.

    Args:
        text: the JSON text.
        where: the file (or field) name used in error messages.

    Raises:
        ConfigError: on any syntax error (naming ``where`` and the line/column), a NaN or
            Infinity constant, a duplicated key, nesting deeper than Python's recursion limit
            (about 1000 levels; real configs nest fewer than 10), an integer of more than
            Python's 4300 digits (``sys.get_int_max_str_digits``), or a string holding an
            unpaired UTF-16 surrogate escape such as ``"\\ud800"`` (not text: it cannot be
            printed or written as UTF-8).
    """

    def bad_constant(name: str) -> Any:
        raise ConfigError(f"{where}: {name} is not allowed; write a finite number")

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise ConfigError(f"{where}: key {_show(key)} appears twice; keep one")
            out[key] = value
        return out

    try:
        data = json.loads(text, parse_constant=bad_constant, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{where}: invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except RecursionError:
        raise ConfigError(f"{where}: JSON nested too deeply; a config is a flat object of "
                          f"fields, nested a few levels at most") from None
    except ValueError:              # an integer literal longer than Python converts
        raise ConfigError(f"{where}: a number has more than {sys.get_int_max_str_digits()} "
                          f"digits; write a realistic value") from None
    _check_text(data, where)
    return data


def _check_text(data: Any, where: str) -> None:
    """Refuse strings (keys included) that are not valid Unicode text (unpaired surrogates).

    Walks the parsed value with an explicit stack, so its depth is not limited by recursion.

    Raises:
        ConfigError: naming ``where`` and the bad string.
    """
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ConfigError(f"{where}: string {_show(value)} holds an unpaired surrogate "
                                  f"escape (\\ud800-\\udfff); write the character itself "
                                  f"or a valid pair") from None

"""Strict JSON reading for every input file (config.json, device and cluster files)."""

from __future__ import annotations

import json
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
            Infinity constant, or a duplicated key.
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
        return json.loads(text, parse_constant=bad_constant, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{where}: invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None

"""The engines' own flag definitions, from pinned snapshots, and a check of an argument list.

Each ``data/<engine>_flags.json`` lists every option string of the engine's server parser at
the pinned version (``version``, ``source``, ``commit``), with its ``dest``, whether it takes a
value, its ``choices`` and whether the engine marks it deprecated. ``scripts/engine_flags.py``
regenerates them: vLLM and SGLang from the engine's live parser in a scratch environment,
TensorRT-LLM from its source (click options of ``trtllm-serve`` and the ``LlmArgs`` pydantic
fields of its ``--config`` YAML).

The check is exact membership: argparse accepts unambiguous abbreviations (``allow_abbrev``),
so "it parses" is not enough; every flag must be one of the engine's option strings verbatim.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from ..errors import ConfigError


@dataclass(frozen=True)
class FlagSnapshot:
    """One engine's pinned flag definitions.

    Attributes:
        engine: ``vllm``, ``sglang`` or ``trtllm``.
        version: the engine release the snapshot was taken from.
        source: repository / wheel (and commit where known).
        flags: option string -> ``{"dest", "takes_value", "choices", "deprecated"}``.
        yaml_fields: TensorRT-LLM only: pydantic model name -> field names the ``--config``
            YAML may use (``TorchLlmArgs`` top level, ``KvCacheConfig`` under
            ``kv_cache_config``, ``MoeConfig`` under ``moe_config``); empty for the others.
        yaml_choices: TensorRT-LLM only: ``Model.field`` -> the values its ``Literal``
            allows, for the fields the exporter writes with a choice.
    """

    engine: str
    version: str
    source: str
    flags: dict[str, dict[str, Any]]
    yaml_fields: dict[str, list[str]]
    yaml_choices: dict[str, list[str]]


@cache
def load_snapshot(engine: str) -> FlagSnapshot:
    """The pinned snapshot of ``engine`` (shipped as package data).

    Raises:
        ConfigError: no snapshot for that engine.
    """
    try:
        text = resources.files(__package__).joinpath("data", f"{engine}_flags.json").read_text()
    except FileNotFoundError:
        raise ConfigError(f"no flag snapshot for engine {engine!r}") from None
    d = json.loads(text)
    return FlagSnapshot(engine=engine, version=str(d["version"]), source=str(d["source"]),
                        flags=d["flags"], yaml_fields=d.get("yaml_fields", {}),
                        yaml_choices=d.get("yaml_choices", {}))


def check_args(engine: str, argv: list[str]) -> list[str]:
    """Problems of a server argument list against the engine's own definitions.

    Args:
        engine: ``vllm``, ``sglang`` or ``trtllm``.
        argv: the arguments after the launcher and the model (``["--tp-size", "8", ...]``);
            ``--flag=value`` is accepted.

    Returns:
        One line per problem (empty when every flag is an exact, non-deprecated option
        string, takes a value exactly when given one, and the value is among its choices).
    """
    snap = load_snapshot(engine)
    out: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if not tok.startswith("-"):
            out.append(f"{engine}: stray value {tok!r} (no flag takes it)")
            continue
        name, eq, inline = tok.partition("=")
        spec = snap.flags.get(name)
        if spec is None:
            out.append(f"{engine} {snap.version}: {name} is not one of its option strings")
            continue
        if spec.get("deprecated"):
            out.append(f"{engine} {snap.version}: {name} is deprecated")
        value: str | None = inline if eq else None
        if spec["takes_value"] and value is None:
            if i >= len(argv) or argv[i].startswith("--"):
                out.append(f"{engine}: {name} needs a value")
                continue
            value = argv[i]
            i += 1
        elif not spec["takes_value"] and value is not None:
            out.append(f"{engine}: {name} takes no value, got {value!r}")
        choices = spec.get("choices")
        if value is not None and choices is not None and value not in choices:
            out.append(f"{engine}: {name} {value!r} is not among {', '.join(choices)}")
    return out


#: ``--config`` sections whose keys the snapshot lists: section key -> pydantic model.
_YAML_SECTIONS = {"kv_cache_config": "KvCacheConfig", "moe_config": "MoeConfig"}


def check_yaml_keys(config: dict[str, Any]) -> list[str]:
    """Problems of a TensorRT-LLM ``--config`` mapping: keys that are not ``TorchLlmArgs``
    fields (or, under ``kv_cache_config`` / ``moe_config``, ``KvCacheConfig`` /
    ``MoeConfig`` fields) in the snapshot, and values outside a field's recorded choices
    (``yaml_choices``, e.g. ``MoeConfig.backend``)."""
    snap = load_snapshot("trtllm")
    top = set(snap.yaml_fields.get("TorchLlmArgs", []))
    out = [f"trtllm {snap.version}: YAML key {k!r} is not a TorchLlmArgs field"
           for k in config if k not in top]
    for section, model in _YAML_SECTIONS.items():
        fields = set(snap.yaml_fields.get(model, []))
        sub = config.get(section) or {}
        out += [f"trtllm {snap.version}: YAML key {section}.{k} is not a {model} field"
                for k in sub if k not in fields]
        for k, v in sub.items():
            choices = snap.yaml_choices.get(f"{model}.{k}")
            if choices is not None and str(v) not in choices:
                out.append(f"trtllm {snap.version}: YAML {section}.{k} {v!r} is not among "
                           f"{', '.join(choices)}")
    return out

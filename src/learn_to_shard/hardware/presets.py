"""Device presets and cluster descriptions read from JSON files.

Shipped presets live in ``learn_to_shard/data/devices/<name>.json`` (see the ``README.md``
there for the table of values and their sources). A custom accelerator uses the same schema.
Every number is in SI base units: FLOP/s, bytes, bytes/s, seconds.

Device JSON schema (one object; ``load_device_file``, or the ``"device"`` value of a cluster
file)::

    {
      "name": "h100-sxm",                    # str, non-empty: preset key / label
      "display_name": "NVIDIA H100 SXM5 80GB",  # str, non-empty
      "peak_bf16_flops_per_s": 989.4e12,     # number > 0, dense (no 2:4 sparsity), FLOP/s
      "peak_fp8_flops_per_s": 1978.9e12,     # number > 0 or null (no FP8 math), FLOP/s
      "hbm_bytes": 80e9,                     # number > 0, bytes
      "hbm_bytes_per_s": 3.35e12,            # number > 0, bytes/s
      "scale_up_domain": 8,                  # integer >= 1, devices per NVLink/xGMI domain
      "scale_up_bytes_per_s": 450e9,         # number > 0, per device, ONE direction, bytes/s
      "scale_out_bytes_per_s": 50e9,         # number > 0, per device (IB/EFA NIC), bytes/s
      "scale_up_latency_s": 2e-6,            # number > 0, per collective step, seconds
      "scale_out_latency_s": 5e-6,           # number > 0, per collective step, seconds
      "sources": {"hbm_bytes": "datasheet ..."},  # optional: field -> citation string
      "notes": "free text"                   # optional, ignored
    }

Three more numeric fields are optional (absent = null): ``peak_fp4_flops_per_s`` (dense FP4
peak, FLOP/s; null = no FP4 math), ``w4a16_expert_flops_efficiency`` (a fraction in 0.01 .. 1:
the rate of dequantising 4-bit expert GEMMs relative to 16-bit ones, measured; null = 1) and
``devices_per_host`` (an integer >= 1: devices per host where a host holds fewer than the
scale-up domain, e.g. 4 on GB200 NVL72; null = the domain); one string field is, too:
``compute_capability`` (CUDA ``"major.minor"``, e.g. ``"8.9"`` for an L4 or an RTX 6000 Ada;
null = the preset's, or unknown for a custom device), which engine rules that depend on the
chip generation read.
All other fields except ``sources`` and ``notes`` are required; unknown keys are rejected (to catch
typos). Each number must lie in a physically sane range (``_RANGES``: e.g. links 1e6 .. 1e15
bytes/s, latencies 1e-9 .. 1 s; ``scale_up_domain`` at most ``MAX_DEVICES``).
Shipped presets additionally cite a source for every numeric field.

Cluster JSON schema (``parse_cluster("path/to/cluster.json")``)::

    {
      "device": "h100-sxm",       # preset name (aliases allowed), a device object as
                                  # above, or a path ending in .json to a device file
                                  # (relative paths resolve against the cluster file)
      "num_devices": 64,          # integer >= 1
      "overrides": {              # optional: replace DeviceSpec fields, e.g. a PCIe box
        "scale_up_domain": 4,
        "scale_up_bytes_per_s": 32e9
      },
      "name": "pcie-lab",         # optional report label; default "<device name>:<count>"
      "notes": "free text"        # optional, ignored
    }

Overridden fields are re-validated and their ``sources`` entry becomes
``"override in <cluster file>"``.

Bad input raises :class:`~learn_to_shard.errors.ConfigError` with a one-line message that
names the file and field and says what would be valid.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..jsonio import loads_strict
from .spec import ClusterSpec, DeviceSpec

__all__ = ["device_names", "load_device", "load_device_file", "parse_cluster"]

#: Short names accepted by :func:`load_device` in addition to the preset file names.
ALIASES: dict[str, str] = {"h100": "h100-sxm", "a100": "a100-80gb"}

_STR_FIELDS = ("name", "display_name")
_POSITIVE_FIELDS = (
    "peak_bf16_flops_per_s",
    "hbm_bytes",
    "hbm_bytes_per_s",
    "scale_up_bytes_per_s",
    "scale_out_bytes_per_s",
    "scale_up_latency_s",
    "scale_out_latency_s",
)
_OPTIONAL_POSITIVE_FIELDS = ("peak_fp8_flops_per_s", "peak_fp4_flops_per_s",
                             "w4a16_expert_flops_efficiency")
#: Fields a device file may leave out (they default to null).
_DEFAULTED_FIELDS = ("peak_fp4_flops_per_s", "w4a16_expert_flops_efficiency",
                     "devices_per_host", "compute_capability")
#: String fields that may be null, each with the pattern a value must match and what it means.
_OPTIONAL_STR_FIELDS: dict[str, tuple[re.Pattern[str], str]] = {
    "compute_capability": (re.compile(r"^[1-9][0-9]?\.[0-9]$"),
                           "a CUDA compute capability \"major.minor\" such as \"8.9\"")}
_INT_FIELDS = ("scale_up_domain", "devices_per_host")
#: Integer fields that may be null.
_OPTIONAL_INT_FIELDS = ("devices_per_host",)
#: DeviceSpec fields in declaration order, minus ``sources``.
_SPEC_FIELDS = tuple(f for f in DeviceSpec.__dataclass_fields__ if f != "sources")
_NUMERIC_FIELDS = tuple(f for f in _SPEC_FIELDS
                        if f not in _STR_FIELDS and f not in _OPTIONAL_STR_FIELDS)
_DEVICE_KEYS = (*_SPEC_FIELDS, "sources", "notes")
_CLUSTER_KEYS = ("device", "num_devices", "overrides", "name", "notes")
_UNITS = {
    "peak_bf16_flops_per_s": "FLOP/s",
    "peak_fp8_flops_per_s": "FLOP/s",
    "peak_fp4_flops_per_s": "FLOP/s",
    "hbm_bytes": "bytes",
    "hbm_bytes_per_s": "bytes/s",
    "scale_up_bytes_per_s": "bytes/s",
    "scale_out_bytes_per_s": "bytes/s",
    "scale_up_latency_s": "seconds",
    "scale_out_latency_s": "seconds",
    "w4a16_expert_flops_efficiency": "",
}
_COUNT_RE = re.compile(r"^[0-9]+$")

#: Accepted range of each numeric device field (SI units), inclusive. Wide enough for every
#: accelerator built or announced, narrow enough that the cost model's times, sizes and ratios
#: stay finite: the 1e-300 B/s link that once reached it overflowed a time to inf and an
#: objective to NaN. Bounds:
#:
#: * FLOP/s: 1e9 (a 1990s CPU core) .. 1e18 (1 EFLOP/s, ~200x B200's 4.5e15 dense FP8 peak);
#: * ``hbm_bytes``: 1e6 (1 MB) .. 1e15 (1 PB, ~5000x B200's 192 GB);
#: * bytes/s: 1e6 (1 MB/s, below 10 Mbit Ethernet) .. 1e15 (1 PB/s, ~100x B200's 8 TB/s HBM);
#: * latencies: 1e-9 s (one clock) .. 1 s (far beyond any network round trip);
#: * ``w4a16_expert_flops_efficiency``: a fraction, 0.01 .. 1;
#:
#: (the B200 figures are this package's ``data/devices/b200.json``, which cites NVIDIA's
#: datasheet).
_RANGES: dict[str, tuple[float, float]] = {
    "peak_bf16_flops_per_s": (1e9, 1e18),
    "peak_fp8_flops_per_s": (1e9, 1e18),
    "peak_fp4_flops_per_s": (1e9, 1e18),
    "hbm_bytes": (1e6, 1e15),
    "hbm_bytes_per_s": (1e6, 1e15),
    "scale_up_bytes_per_s": (1e6, 1e15),
    "scale_out_bytes_per_s": (1e6, 1e15),
    "scale_up_latency_s": (1e-9, 1.0),
    "scale_out_latency_s": (1e-9, 1.0),
    "w4a16_expert_flops_efficiency": (0.01, 1.0),
}


def _devices_dir() -> Any:
    """The packaged ``data/devices`` directory as an importlib Traversable."""
    return resources.files("learn_to_shard") / "data" / "devices"


def _show(value: Any, limit: int = 60) -> str:
    """A short single-line rendering of a bad value for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_file(path: Path) -> bool:
    """``path.is_file()`` that treats unusable names (too long, NUL bytes) as absent."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _exists(path: Path) -> bool:
    """``path.exists()`` that treats unusable names (too long, NUL bytes) as absent."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def _read_json_file(path: Path, what: str, hint: str = "") -> Any:
    """Read and parse a JSON file, turning I/O and syntax problems into ConfigError."""
    shown = _show(str(path), limit=300)
    if not _is_file(path):
        if _exists(path):
            raise ConfigError(f"{what} {shown}: not a regular file")
        raise ConfigError(f"{what} {shown}: file not found{hint}")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"{what} {shown}: cannot read file ({reason})") from None
    return loads_strict(text, str(path))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_keys(data: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = [k for k in data if k not in allowed]
    if unknown:
        raise ConfigError(
            f"{where}: unknown field {_show(unknown[0])}; valid fields: {', '.join(allowed)}"
        )


def _check_field(field: str, value: Any, where: str) -> float | int | str | None:
    """Validate one DeviceSpec field value and return it in its stored type.

    Raises:
        ConfigError: if the value has the wrong type or is not positive/finite.
    """
    if field in _OPTIONAL_STR_FIELDS:
        pattern, what = _OPTIONAL_STR_FIELDS[field]
        if value is None:
            return None
        if not isinstance(value, str) or not pattern.match(value.strip()):
            raise ConfigError(f"{where}: field {field!r} must be {what}, or null; got "
                              f"{_show(value)}")
        return value.strip()
    if field in _STR_FIELDS:
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(
                f"{where}: field {field!r} must be a non-empty string, got {_show(value)}"
            )
        return value.strip()
    if field in _INT_FIELDS:
        if value is None and field in _OPTIONAL_INT_FIELDS:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_DEVICES:
            what = "devices per scale-up domain" if field == "scale_up_domain" else \
                "devices per host, or null"
            raise ConfigError(
                f"{where}: field {field!r} must be an integer >= 1 and <= {MAX_DEVICES} "
                f"({what}), got {_show(value)}"
            )
        return value
    if value is None and field in _OPTIONAL_POSITIVE_FIELDS:
        return None
    low, high = _RANGES[field]
    if not _is_number(value) or not low <= value <= high:     # NaN fails the comparison
        nullable = " or null" if field in _OPTIONAL_POSITIVE_FIELDS else ""
        what = f"a fraction between {low:g} and {high:g}" if not _UNITS[field] else \
            f"a positive number in {_UNITS[field]} between {low:g} and {high:g}"
        raise ConfigError(f"{where}: field {field!r} must be {what}{nullable}, got {_show(value)}")
    return float(value)


def _device_from_mapping(data: Any, where: str) -> DeviceSpec:
    """Build a DeviceSpec from a parsed device JSON object.

    Args:
        data: the parsed JSON value (must be an object).
        where: file / field label for error messages, e.g. ``"my.json"``.

    Raises:
        ConfigError: on a non-object, unknown/missing field, wrong type or non-positive value.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{where}: a device must be a JSON object with fields "
            f"{', '.join(_SPEC_FIELDS)}; got {type(data).__name__}"
        )
    _check_keys(data, _DEVICE_KEYS, where)
    missing = [f for f in _SPEC_FIELDS if f not in data and f not in _DEFAULTED_FIELDS]
    if missing:
        optional = [f for f in _SPEC_FIELDS if f in _DEFAULTED_FIELDS]
        raise ConfigError(
            f"{where}: missing field(s) {', '.join(missing)}; a device needs "
            f"{', '.join(f for f in _SPEC_FIELDS if f not in _DEFAULTED_FIELDS)}"
            + (f" (optional: {', '.join(optional)})" if optional else "")
        )
    values = {f: _check_field(f, data.get(f), where) for f in _SPEC_FIELDS}
    host, domain = values["devices_per_host"], values["scale_up_domain"]
    if host is not None and isinstance(domain, int) and int(host) > domain:
        raise ConfigError(f"{where}: field 'devices_per_host' must be at most "
                          f"scale_up_domain {domain} (a host inside one scale-up domain), "
                          f"got {host}")

    raw_sources = data.get("sources", {})
    if not isinstance(raw_sources, Mapping):
        raise ConfigError(
            f"{where}: field 'sources' must be an object mapping field name to "
            f"citation string, got {_show(raw_sources)}"
        )
    for key, cite in raw_sources.items():
        if key not in _SPEC_FIELDS:
            raise ConfigError(
                f"{where}: sources key {_show(key)} is not a device field; valid: "
                f"{', '.join(_SPEC_FIELDS)}"
            )
        if not isinstance(cite, str) or not cite.strip():
            raise ConfigError(
                f"{where}: sources[{key!r}] must be a non-empty citation string, got {_show(cite)}"
            )
    if "notes" in data and not isinstance(data["notes"], str):
        raise ConfigError(f"{where}: field 'notes' must be a string, got {_show(data['notes'])}")
    sources = tuple((f, raw_sources[f].strip()) for f in _SPEC_FIELDS if f in raw_sources)
    return DeviceSpec(**values, sources=sources)  # type: ignore[arg-type]


def _device_to_mapping(device: DeviceSpec) -> dict[str, Any]:
    """The JSON-schema mapping of a DeviceSpec (inverse of :func:`_device_from_mapping`)."""
    out: dict[str, Any] = {f: getattr(device, f) for f in _SPEC_FIELDS}
    out["sources"] = dict(device.sources)
    return out


def device_names() -> list[str]:
    """Names of the shipped device presets, sorted.

    Returns:
        Preset keys such as ``["a100-80gb", "b200", "h100-sxm", ...]`` (aliases not included;
        see :data:`ALIASES`).
    """
    return sorted(
        entry.name[: -len(".json")]
        for entry in _devices_dir().iterdir()
        if entry.name.endswith(".json") and entry.is_file()
    )


def _presets_hint() -> str:
    aliases = ", ".join(f"{a}->{t}" for a, t in sorted(ALIASES.items()))
    return f"valid presets: {', '.join(device_names())} (aliases: {aliases})"


@cache
def _load_preset(key: str) -> DeviceSpec:
    where = f"device preset {key}.json"
    text = _devices_dir().joinpath(f"{key}.json").read_text(encoding="utf-8")
    device = _device_from_mapping(loads_strict(text, where), where)
    if device.name != key:
        raise ConfigError(
            f"{where}: field 'name' is {device.name!r} but must equal the file name {key!r}"
        )
    return device


def _resolve_preset_name(name: str, where: str) -> str:
    if not isinstance(name, str):
        raise ConfigError(f"{where}: device preset must be a string; {_presets_hint()}")
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in device_names():
        raise ConfigError(f"{where}: unknown device preset {_show(name)}; {_presets_hint()}")
    return key


def load_device(name: str) -> DeviceSpec:
    """Load a shipped device preset by name.

    Args:
        name: preset key, case-insensitive, surrounding spaces ignored; one of
            :func:`device_names` or an alias (``"h100"`` -> ``"h100-sxm"``,
            ``"a100"`` -> ``"a100-80gb"``).

    Returns:
        The :class:`DeviceSpec` (SI units: FLOP/s, bytes, bytes/s, seconds). Its ``sources``
        cite a datasheet (compiled in the project's reference ``measurements.md``, section 4)
        for every numeric field, or state the assumption made (link latencies, some
        scale-out NICs).

    Raises:
        ConfigError: if the name is not a preset; the message lists the valid presets.
    """
    return _load_preset(_resolve_preset_name(name, "device"))


def load_device_file(path: str | os.PathLike[str]) -> DeviceSpec:
    """Load a custom accelerator description from a JSON file.

    The schema is the preset schema given in this module's docstring; ``sources`` is optional.

    Args:
        path: path to the device JSON file.

    Returns:
        The :class:`DeviceSpec` (SI units: FLOP/s, bytes, bytes/s, seconds).

    Raises:
        ConfigError: if the file is missing/unreadable, is not valid JSON, or a field is
            missing, unknown, of the wrong type or not positive; the message names the file
            and field.
    """
    p = Path(path)
    return _device_from_mapping(_read_json_file(p, "device file"), str(p))


#: Most devices a cluster may have (2**20): 40× the paper's largest setting (24,576), and the
#: strategy space stays small enough to enumerate its degrees.
MAX_DEVICES = 2**20


def _parse_count(text: str, where: str) -> int:
    text = text.strip()
    if not _COUNT_RE.match(text) or int(text) < 1:
        raise ConfigError(f"{where}: device count must be a positive integer, got {_show(text)}")
    if int(text) > MAX_DEVICES:
        raise ConfigError(f"{where}: device count must be at most {MAX_DEVICES:,}, "
                          f"got {_show(text)}")
    return int(text)


def _load_cluster_file(path: Path) -> ClusterSpec:
    where = str(path)
    data = _read_json_file(
        path,
        "cluster file",
        "; give an existing JSON cluster file or PRESET:COUNT (e.g. h100-sxm:64)",
    )
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{where}: a cluster file must be a JSON object with fields "
            f"'device' and 'num_devices'; got {type(data).__name__}"
        )
    _check_keys(data, _CLUSTER_KEYS, where)
    for required in ("device", "num_devices"):
        if required not in data:
            raise ConfigError(
                f"{where}: missing field {required!r}; a cluster file needs "
                f"'device' (preset name or device object) and 'num_devices'"
            )

    raw_device = data["device"]
    if isinstance(raw_device, str) and raw_device.strip().lower().endswith(".json"):
        device_path = Path(raw_device.strip())
        if not device_path.is_absolute():
            device_path = path.parent / device_path
        try:
            device = load_device_file(device_path)
        except ConfigError as exc:            # which cluster file's field named it
            raise ConfigError(f"{path}: field 'device' ({raw_device.strip()!r}): {exc}") \
                from None
    elif isinstance(raw_device, str):
        device = _load_preset(_resolve_preset_name(raw_device, f"{where}: field 'device'"))
    elif isinstance(raw_device, Mapping):
        device = _device_from_mapping(raw_device, f"{where}: field 'device'")
    else:
        raise ConfigError(
            f"{where}: field 'device' must be a preset name, a path to a device "
            f"JSON file or a device object, got {_show(raw_device)}; "
            f"{_presets_hint()}"
        )

    num = data["num_devices"]
    if not isinstance(num, int) or isinstance(num, bool) or not 1 <= num <= MAX_DEVICES:
        raise ConfigError(
            f"{where}: field 'num_devices' must be a positive integer of at most "
            f"{MAX_DEVICES:,}, got {_show(num)}"
        )

    overrides = data.get("overrides", {})
    if not isinstance(overrides, Mapping):
        raise ConfigError(
            f"{where}: field 'overrides' must be an object of device fields "
            f"({', '.join(_SPEC_FIELDS)}), got {_show(overrides)}"
        )
    if overrides:
        bad = [k for k in overrides if k not in _SPEC_FIELDS]
        if bad:
            raise ConfigError(
                f"{where}: overrides: unknown field {_show(bad[0])}; valid fields: "
                f"{', '.join(_SPEC_FIELDS)}"
            )
        merged = _device_to_mapping(device)
        merged.update(overrides)
        merged["sources"].update({k: f"override in {path.name}" for k in overrides})
        device = _device_from_mapping(merged, f"{where}: overrides")

    name = data.get("name", f"{device.name}:{num}")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{where}: field 'name' must be a non-empty string, got {_show(name)}")
    if "notes" in data and not isinstance(data["notes"], str):
        raise ConfigError(f"{where}: field 'notes' must be a string, got {_show(data['notes'])}")
    return ClusterSpec(device=device, num_devices=num, name=name.strip())


def parse_cluster(text: str) -> ClusterSpec:
    """Parse a cluster description from the command line.

    Args:
        text: either ``"PRESET:COUNT"`` (e.g. ``"h100-sxm:64"``, preset case-insensitive,
            aliases allowed) or a path to a JSON cluster file (schema in this module's
            docstring). An existing file always wins; a value ending in ``.json`` is always
            read as a path.

    Returns:
        A :class:`ClusterSpec`; its ``name`` is ``"<preset>:<count>"`` with the canonical
        preset name, or the cluster file's ``name`` field (default ``"<device>:<count>"``).

    Raises:
        ConfigError: unknown preset (the message lists the valid ones), a count that is not a
            positive integer, a missing/unreadable/malformed file, or a missing, unknown,
            wrong-typed or non-positive field.
    """
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(
            f"cluster: expected PRESET:COUNT (e.g. h100-sxm:64) or a path to a "
            f"JSON cluster file, got {_show(text)}"
        )
    text = text.strip()
    path = Path(text)
    if path.suffix.lower() == ".json" or _is_file(path):
        return _load_cluster_file(path)
    if ":" not in text:
        key = ALIASES.get(text.lower(), text.lower())
        hint = f"add a device count, e.g. {key}:8" if key in device_names() else _presets_hint()
        raise ConfigError(
            f"cluster {_show(text, 200)}: expected PRESET:COUNT (e.g. h100-sxm:64) or a "
            f"path to a JSON cluster file; {hint}"
        )
    preset, _, count = text.rpartition(":")
    device = _load_preset(_resolve_preset_name(preset, f"cluster {_show(text, 200)}"))
    num = _parse_count(count, f"cluster {_show(text, 200)}")
    return ClusterSpec(device=device, num_devices=num, name=f"{device.name}:{num}")

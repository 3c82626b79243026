"""Tests for device presets, custom device files and cluster parsing."""

from __future__ import annotations

import json
import math
from dataclasses import fields
from pathlib import Path

import pytest

from learn_to_shard.errors import ConfigError
from learn_to_shard.hardware import (
    ClusterSpec,
    DeviceSpec,
    device_names,
    load_device,
    load_device_file,
    parse_cluster,
)

PRESETS = ["a100-80gb", "b200", "b300", "gb200-nvl72", "h100-sxm", "h20", "h200", "l40s",
           "mi300x", "mi325x", "mi355x", "rtx-4090", "rtx-pro-6000", "trainium2"]
NUMERIC_FIELDS = [
    f.name for f in fields(DeviceSpec)
    if f.name not in ("name", "display_name", "sources", "compute_capability")
]

# Datasheet numbers (reference measurements.md section 4), SI units.
EXPECTED = {
    "h100-sxm": dict(
        peak_bf16_flops_per_s=989.4e12,
        peak_fp8_flops_per_s=1978.9e12,
        hbm_bytes=81559 * 2**20,
        hbm_bytes_per_s=3.35e12,
        scale_up_domain=8,
        scale_up_bytes_per_s=450e9,
        scale_out_bytes_per_s=50e9,
    ),
    "h200": dict(
        peak_bf16_flops_per_s=989e12,
        peak_fp8_flops_per_s=1979e12,
        hbm_bytes=143771 * 2**20,
        hbm_bytes_per_s=4.8e12,
        scale_up_domain=8,
        scale_up_bytes_per_s=450e9,
        scale_out_bytes_per_s=50e9,
    ),
    "b200": dict(
        peak_bf16_flops_per_s=2250e12,
        peak_fp8_flops_per_s=4500e12,
        hbm_bytes=183359 * 2**20,
        hbm_bytes_per_s=8e12,
        scale_up_domain=8,
        scale_up_bytes_per_s=900e9,
        scale_out_bytes_per_s=50e9,
    ),
    "a100-80gb": dict(
        peak_bf16_flops_per_s=312e12,
        peak_fp8_flops_per_s=None,
        hbm_bytes=80 * 2**30,
        hbm_bytes_per_s=2.039e12,
        scale_up_domain=8,
        scale_up_bytes_per_s=300e9,
        scale_out_bytes_per_s=25e9,
    ),
    "mi300x": dict(
        peak_bf16_flops_per_s=1307.4e12,
        peak_fp8_flops_per_s=2614.9e12,
        hbm_bytes=192 * 2**30,
        hbm_bytes_per_s=5.3e12,
        scale_up_domain=8,
        scale_up_bytes_per_s=448e9,
        scale_out_bytes_per_s=50e9,
    ),
    "trainium2": dict(
        peak_bf16_flops_per_s=667e12,
        peak_fp8_flops_per_s=1299e12,
        hbm_bytes=96 * 2**30,
        hbm_bytes_per_s=2.9e12,
        scale_up_domain=16,
        scale_up_bytes_per_s=512 * 2**30,
        scale_out_bytes_per_s=25e9,
    ),
    # Serving accelerators added with the FP4 field (each file's `sources` cites the figures).
    "h20": dict(peak_bf16_flops_per_s=148e12, peak_fp8_flops_per_s=296e12,
                peak_fp4_flops_per_s=None, hbm_bytes=97871 * 2**20, hbm_bytes_per_s=4.0e12,
                scale_up_domain=8, scale_up_bytes_per_s=450e9),
    "l40s": dict(peak_bf16_flops_per_s=362.05e12, peak_fp8_flops_per_s=733e12,
                 peak_fp4_flops_per_s=None, hbm_bytes=46068 * 2**20, hbm_bytes_per_s=864e9,
                 scale_up_bytes_per_s=32e9),
    "rtx-4090": dict(peak_bf16_flops_per_s=165.15e12, peak_fp8_flops_per_s=330.3e12,
                     hbm_bytes=24564 * 2**20, hbm_bytes_per_s=1008e9, scale_up_bytes_per_s=32e9),
    "rtx-pro-6000": dict(peak_fp4_flops_per_s=2000e12, hbm_bytes=97887 * 2**20,
                         hbm_bytes_per_s=1792e9, scale_up_bytes_per_s=64e9),
    "gb200-nvl72": dict(peak_bf16_flops_per_s=2.5e15, peak_fp8_flops_per_s=5e15,
                        peak_fp4_flops_per_s=10e15, hbm_bytes_per_s=8e12,
                        scale_up_domain=72, scale_up_bytes_per_s=900e9),
    "b300": dict(peak_bf16_flops_per_s=2.25e15, peak_fp8_flops_per_s=4.5e15,
                 peak_fp4_flops_per_s=14e15, hbm_bytes=270 * 2**30, scale_up_domain=8),
    "mi325x": dict(peak_bf16_flops_per_s=1307.4e12, peak_fp8_flops_per_s=2614.9e12,
                   peak_fp4_flops_per_s=None, hbm_bytes=256 * 2**30, hbm_bytes_per_s=6e12),
    "mi355x": dict(peak_bf16_flops_per_s=2.5e15, peak_fp8_flops_per_s=5e15,
                   peak_fp4_flops_per_s=10e15, hbm_bytes=288 * 2**30, hbm_bytes_per_s=8e12),
}
EXPECTED["b200"]["peak_fp4_flops_per_s"] = 9e15
for _name in ("h100-sxm", "h200", "a100-80gb", "mi300x", "trainium2"):
    EXPECTED[_name]["peak_fp4_flops_per_s"] = None


_DROP = object()


def _custom_device(**changes: object) -> dict[str, object]:
    device: dict[str, object] = {
        "name": "my-accel",
        "display_name": "My Accelerator",
        "peak_bf16_flops_per_s": 500e12,
        "peak_fp8_flops_per_s": None,
        "hbm_bytes": 64e9,
        "hbm_bytes_per_s": 2e12,
        "scale_up_domain": 4,
        "scale_up_bytes_per_s": 100e9,
        "scale_out_bytes_per_s": 12.5e9,
        "scale_up_latency_s": 3e-6,
        "scale_out_latency_s": 8e-6,
    }
    device.update(changes)
    return {k: v for k, v in device.items() if v is not _DROP}


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data) if not isinstance(data, str) else data, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- presets


def test_device_names_lists_shipped_presets() -> None:
    assert device_names() == PRESETS


@pytest.mark.parametrize("name", PRESETS)
def test_preset_matches_datasheet(name: str) -> None:
    device = load_device(name)
    assert device.name == name
    assert device.display_name
    for field, expected in EXPECTED[name].items():
        value = getattr(device, field)
        if expected is None:
            assert value is None, field
        else:
            assert value == pytest.approx(expected, rel=1e-12), field


@pytest.mark.parametrize("name", PRESETS)
def test_preset_values_are_si_and_sane(name: str) -> None:
    d = load_device(name)
    assert isinstance(d.scale_up_domain, int)
    # Sanity ranges catch unit slips (TFLOP/s vs FLOP/s, GB vs bytes, us vs s).
    assert 1e14 < d.peak_bf16_flops_per_s < 1e16
    if d.peak_fp8_flops_per_s is not None:
        assert d.peak_fp8_flops_per_s == pytest.approx(2 * d.peak_bf16_flops_per_s, rel=0.05)
    assert 1e10 < d.hbm_bytes < 1e12
    assert 5e11 < d.hbm_bytes_per_s < 1e14     # GDDR cards (L40S 864 GB/s) are below 1e12
    if d.peak_fp4_flops_per_s is not None:
        assert d.peak_fp8_flops_per_s is not None
        assert d.peak_fp8_flops_per_s < d.peak_fp4_flops_per_s <= 4 * d.peak_fp8_flops_per_s
    assert d.scale_out_bytes_per_s < d.scale_up_bytes_per_s < d.hbm_bytes_per_s
    assert 1e-7 < d.scale_up_latency_s <= d.scale_out_latency_s < 1e-3
    for field in NUMERIC_FIELDS:
        value = getattr(d, field)
        assert value is None or (math.isfinite(value) and value > 0), field


@pytest.mark.parametrize("name", PRESETS)
def test_preset_cites_every_numeric_field(name: str) -> None:
    d = load_device(name)
    sources = dict(d.sources)
    assert set(sources) == set(NUMERIC_FIELDS)
    assert all(isinstance(s, str) and s.strip() for s in sources.values())
    # Latencies are not in any datasheet: they must be flagged as assumptions.
    assert "assumption" in sources["scale_up_latency_s"]
    assert "assumption" in sources["scale_out_latency_s"]


def test_pcie_cards_have_no_nvlink_domain_bandwidth() -> None:
    """L40S / RTX 4090 / RTX PRO 6000 talk over PCIe (Gen4 32 GB/s, Gen5 64 GB/s per
    direction), GB200 NVL72 is one 72-GPU NVLink domain."""
    for name in ("l40s", "rtx-4090", "rtx-pro-6000"):
        d = load_device(name)
        assert d.scale_up_bytes_per_s <= 64e9
        assert "PCIe" in dict(d.sources)["scale_up_bytes_per_s"]
    assert load_device("gb200-nvl72").scale_up_domain == 72


def test_device_file_may_omit_fp4(tmp_path: Path) -> None:
    """peak_fp4_flops_per_s is optional in a device file (null: no FP4 math)."""
    path = _write(tmp_path / "dev.json", _custom_device())
    assert load_device_file(path).peak_fp4_flops_per_s is None


def test_a100_has_no_fp8_and_typical_scale_out_is_flagged() -> None:
    a100 = load_device("a100-80gb")
    assert a100.peak_fp8_flops_per_s is None
    assert "assumption" in dict(a100.sources)["scale_out_bytes_per_s"]


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("h100", "h100-sxm"),
        ("H100", "h100-sxm"),
        ("a100", "a100-80gb"),
        (" A100-80GB ", "a100-80gb"),
        ("MI300X", "mi300x"),
        ("Trainium2", "trainium2"),
    ],
)
def test_load_device_aliases_and_case(alias: str, name: str) -> None:
    assert load_device(alias) == load_device(name)


def test_load_device_unknown_lists_presets() -> None:
    with pytest.raises(ConfigError) as err:
        load_device("tpu-v5p")
    msg = str(err.value)
    assert "tpu-v5p" in msg
    assert "\n" not in msg
    for name in PRESETS:
        assert name in msg


# --------------------------------------------------------------------------- device files


def test_load_device_file_round_trip(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "mine.json",
        _custom_device(sources={"hbm_bytes": "my datasheet"}, notes="lab card"),
    )
    d = load_device_file(path)
    assert d.name == "my-accel"
    assert d.peak_fp8_flops_per_s is None
    assert d.hbm_bytes == 64e9
    assert d.scale_up_domain == 4
    assert dict(d.sources) == {"hbm_bytes": "my datasheet"}
    assert load_device_file(str(path)) == d


def test_load_device_file_accepts_preset_file_copy(tmp_path: Path) -> None:
    h100 = load_device("h100-sxm")
    data = {f.name: getattr(h100, f.name) for f in fields(DeviceSpec) if f.name != "sources"}
    data["sources"] = dict(h100.sources)
    assert load_device_file(_write(tmp_path / "copy.json", data)) == h100


@pytest.mark.parametrize(
    ("changes", "expected_bits"),
    [
        ({"hbm_bytes": _DROP}, ["missing", "hbm_bytes"]),
        ({"hbm_bytes": "80 GB"}, ["hbm_bytes", "positive number", "bytes"]),
        ({"hbm_bytes": 0}, ["hbm_bytes", "positive number"]),
        ({"scale_up_latency_s": -1e-6}, ["scale_up_latency_s", "seconds"]),
        ({"peak_bf16_flops_per_s": True}, ["peak_bf16_flops_per_s", "FLOP/s"]),
        ({"peak_bf16_flops_per_s": None}, ["peak_bf16_flops_per_s", "positive number"]),
        ({"peak_fp8_flops_per_s": "none"}, ["peak_fp8_flops_per_s", "or null"]),
        ({"scale_up_domain": 8.0}, ["scale_up_domain", "integer"]),
        ({"scale_up_domain": 0}, ["scale_up_domain", "integer >= 1"]),
        ({"name": ""}, ["'name'", "non-empty string"]),
        ({"hbm_gb": 80}, ["unknown field", "hbm_gb", "hbm_bytes"]),
        ({"sources": ["x"]}, ["sources", "object"]),
        ({"sources": {"hbm": "x"}}, ["sources key", "'hbm'"]),
    ],
)
def test_load_device_file_field_errors(
    tmp_path: Path, changes: dict[str, object], expected_bits: list[str]
) -> None:
    path = _write(tmp_path / "bad.json", _custom_device(**changes))
    with pytest.raises(ConfigError) as err:
        load_device_file(path)
    msg = str(err.value)
    assert "\n" not in msg
    assert str(path) in msg
    for bit in expected_bits:
        assert bit in msg


@pytest.mark.parametrize(
    ("text", "expected_bits"),
    [
        ('{"name": "x",', ["invalid JSON", "line 1"]),
        ("[1, 2]", ["JSON object", "list"]),
        ('{"hbm_bytes": NaN}', ["NaN", "finite"]),
        ('{"name": "a", "name": "b"}', ["twice", "'name'"]),
    ],
)
def test_load_device_file_malformed(tmp_path: Path, text: str, expected_bits: list[str]) -> None:
    path = _write(tmp_path / "bad.json", text)
    with pytest.raises(ConfigError) as err:
        load_device_file(path)
    msg = str(err.value)
    assert "\n" not in msg
    assert "bad.json" in msg
    for bit in expected_bits:
        assert bit in msg


def test_load_device_file_missing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_device_file(tmp_path / "nope.json")
    with pytest.raises(ConfigError, match="not a regular file"):
        load_device_file(tmp_path)


# --------------------------------------------------------------------------- clusters


def test_parse_cluster_preset() -> None:
    cluster = parse_cluster("h100-sxm:64")
    assert isinstance(cluster, ClusterSpec)
    assert cluster.device == load_device("h100-sxm")
    assert cluster.num_devices == 64
    assert cluster.name == "h100-sxm:64"
    assert cluster.devices_per_node == 8


def test_parse_cluster_alias_gets_canonical_name() -> None:
    cluster = parse_cluster(" H100:16 ")
    assert cluster.device.name == "h100-sxm"
    assert cluster.name == "h100-sxm:16"


@pytest.mark.parametrize(
    ("text", "domain", "per_node"),
    [("h100-sxm:4", 8, 4), ("h100-sxm:1", 8, 1), ("trainium2:8", 16, 8), ("trainium2:32", 16, 16)],
)
def test_devices_per_node_is_capped_by_cluster_size(text: str, domain: int, per_node: int) -> None:
    cluster = parse_cluster(text)
    assert cluster.device.scale_up_domain == domain
    assert cluster.devices_per_node == per_node


@pytest.mark.parametrize(
    ("text", "expected_bits"),
    [
        ("tpu:8", ["unknown device preset", "'tpu'", "h100-sxm", "mi300x", "trainium2"]),
        ("h100-sxm:0", ["positive integer", "'0'"]),
        ("h100-sxm:-8", ["positive integer"]),
        ("h100-sxm:1.5", ["positive integer", "'1.5'"]),
        ("h100-sxm:many", ["positive integer", "'many'"]),
        ("h100-sxm:", ["positive integer"]),
        ("h100-sxm", ["PRESET:COUNT", "h100-sxm:8"]),
        ("h100", ["PRESET:COUNT", "h100-sxm:8"]),
        ("gpu", ["PRESET:COUNT", "a100-80gb"]),
        ("", ["PRESET:COUNT"]),
        ("missing-cluster.json", ["file not found", "PRESET:COUNT"]),
    ],
)
def test_parse_cluster_errors(text: str, expected_bits: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        parse_cluster(text)
    msg = str(err.value)
    assert "\n" not in msg
    for bit in expected_bits:
        assert bit in msg


def test_parse_cluster_file_with_preset_and_overrides(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "pcie.json",
        {
            "device": "H100",
            "num_devices": 16,
            "overrides": {
                "scale_up_domain": 4,
                "scale_up_bytes_per_s": 32e9,
                "display_name": "NVIDIA H100 PCIe box",
            },
            "notes": "no NVLink",
        },
    )
    cluster = parse_cluster(str(path))
    base = load_device("h100-sxm")
    d = cluster.device
    assert cluster.num_devices == 16
    assert cluster.name == "h100-sxm:16"
    assert cluster.devices_per_node == 4
    assert d.scale_up_domain == 4
    assert d.scale_up_bytes_per_s == 32e9
    assert d.display_name == "NVIDIA H100 PCIe box"
    assert d.peak_bf16_flops_per_s == base.peak_bf16_flops_per_s
    sources = dict(d.sources)
    assert sources["scale_up_domain"] == "override in pcie.json"
    assert sources["hbm_bytes"] == dict(base.sources)["hbm_bytes"]
    # The cached preset itself is untouched.
    assert load_device("h100-sxm").scale_up_domain == 8


def test_parse_cluster_file_with_device_object(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "custom.json", {"device": _custom_device(), "num_devices": 2, "name": "lab"}
    )
    cluster = parse_cluster(str(path))
    assert cluster.name == "lab"
    assert cluster.device.name == "my-accel"
    assert cluster.devices_per_node == 2


def test_parse_cluster_file_with_relative_device_path(tmp_path: Path) -> None:
    (tmp_path / "devs").mkdir()
    _write(tmp_path / "devs" / "mine.json", _custom_device())
    path = _write(tmp_path / "cluster.json", {"device": "devs/mine.json", "num_devices": 8})
    cluster = parse_cluster(str(path))
    assert cluster.device.name == "my-accel"
    assert cluster.name == "my-accel:8"
    assert cluster.devices_per_node == 4


@pytest.mark.parametrize(
    ("data", "expected_bits"),
    [
        ({"num_devices": 8}, ["missing field", "'device'"]),
        ({"device": "h100-sxm"}, ["missing field", "'num_devices'"]),
        ({"device": "h100-sxm", "num_devices": 0}, ["num_devices", "positive integer"]),
        ({"device": "h100-sxm", "num_devices": "8"}, ["num_devices", "positive integer"]),
        ({"device": "h100-sxm", "num_devices": 8.0}, ["num_devices", "positive integer"]),
        ({"device": "h100-sxm", "num_devices": True}, ["num_devices", "positive integer"]),
        ({"device": "tpu", "num_devices": 8}, ["'device'", "unknown device preset", "h200"]),
        ({"device": 3, "num_devices": 8}, ["'device'", "preset name", "b200"]),
        ({"device": {"name": "x"}, "num_devices": 8}, ["'device'", "missing field"]),
        (
            {"device": "h100-sxm", "num_devices": 8, "overrides": {"scale_up_domain": 0}},
            ["overrides", "scale_up_domain", "integer >= 1"],
        ),
        (
            {"device": "h100-sxm", "num_devices": 8, "overrides": {"hbm_bytes": -1}},
            ["overrides", "hbm_bytes", "positive number"],
        ),
        (
            {"device": "h100-sxm", "num_devices": 8, "overrides": {"nvlink": 1}},
            ["overrides", "unknown field", "'nvlink'", "scale_up_bytes_per_s"],
        ),
        ({"device": "h100-sxm", "num_devices": 8, "overrides": [1]}, ["overrides", "object"]),
        ({"device": "h100-sxm", "num_devices": 8, "gpus": 8}, ["unknown field", "'gpus'"]),
        ({"device": "h100-sxm", "num_devices": 8, "name": ""}, ["'name'", "non-empty"]),
        ({"device": "nope.json", "num_devices": 8}, ["nope.json", "file not found"]),
        ([], ["JSON object"]),
    ],
)
def test_parse_cluster_file_errors(tmp_path: Path, data: object, expected_bits: list[str]) -> None:
    path = _write(tmp_path / "cluster.json", data)
    with pytest.raises(ConfigError) as err:
        parse_cluster(str(path))
    msg = str(err.value)
    assert "\n" not in msg
    assert "cluster.json" in msg or "nope.json" in msg
    for bit in expected_bits:
        assert bit in msg


def test_parse_cluster_file_invalid_json(tmp_path: Path) -> None:
    path = _write(tmp_path / "broken.json", '{"device": "h100-sxm", "num_devices": }')
    with pytest.raises(ConfigError) as err:
        parse_cluster(str(path))
    assert "broken.json" in str(err.value)
    assert "invalid JSON" in str(err.value)


def test_parse_cluster_existing_file_without_json_suffix(tmp_path: Path) -> None:
    path = _write(tmp_path / "cluster.cfg", {"device": "b200", "num_devices": 72})
    cluster = parse_cluster(str(path))
    assert cluster.device.name == "b200"
    assert cluster.num_devices == 72
    assert cluster.devices_per_node == 8


def test_parse_cluster_unusable_path_is_config_error() -> None:
    for text in ["x" * 5000, "x" * 5000 + ".json"]:
        with pytest.raises(ConfigError) as err:
            parse_cluster(text)
        assert "\n" not in str(err.value)
        assert len(str(err.value)) < 1000


def test_devices_per_host_is_a_host_inside_the_domain(tmp_path: Path) -> None:
    """``devices_per_host`` (GB200 NVL72: 4 of the 72) may be overridden within the scale-up
    domain; a host larger than its domain is refused with the field named."""
    assert load_device("gb200-nvl72").host_devices == 4
    assert load_device("h100-sxm").devices_per_host is None
    assert load_device("h100-sxm").host_devices == 8
    ok = _write(tmp_path / "ok.json", {"device": "h100-sxm", "num_devices": 16,
                                       "overrides": {"devices_per_host": 4}})
    assert parse_cluster(str(ok)).device.host_devices == 4
    bad = _write(tmp_path / "bad.json", {"device": "h100-sxm", "num_devices": 16,
                                         "overrides": {"devices_per_host": 16}})
    with pytest.raises(ConfigError, match="'devices_per_host' must be at most scale_up_domain"):
        parse_cluster(str(bad))


def test_a_device_missing_a_field_is_told_which_fields_are_optional(tmp_path):
    """The error for a device object missing a required field lists the required fields,
    and the optional ones apart (it listed optional fields, e.g. compute_capability, as
    needed, though a device without them loads)."""
    import json

    from learn_to_shard.errors import ConfigError
    from learn_to_shard.hardware.presets import _DEFAULTED_FIELDS, load_device, parse_cluster
    dev = load_device("h100-sxm")
    import dataclasses

    data = {k: v for k, v in dataclasses.asdict(dev).items()
            if k not in _DEFAULTED_FIELDS and k not in ("sources",)}
    data.pop("hbm_bytes_per_s")
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"device": data, "num_devices": 8}), encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        parse_cluster(str(path))
    msg = str(err.value)
    assert "missing field(s) hbm_bytes_per_s" in msg
    needs, _, optional = msg.partition(" (optional: ")
    assert "compute_capability" not in needs.split("a device needs")[1]
    assert "compute_capability" in optional


def test_a_cluster_files_missing_device_file_names_the_cluster_file(tmp_path):
    """The error names the cluster file and its 'device' field, as the file's other errors
    do (it said only "device file 'sub/dev.json': file not found")."""
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"device": "sub/dev.json", "num_devices": 4}))
    with pytest.raises(ConfigError) as exc:
        parse_cluster(str(path))
    msg = str(exc.value)
    assert msg.startswith(f"{path}: field 'device' ('sub/dev.json'): ") and "not found" in msg
    assert "\n" not in msg

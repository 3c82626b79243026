"""Scale-up fabric of each shipped device preset: which collective algorithms the hardware has.

The device presets (``data/devices``) give a scale-up link's bandwidth and latency; what kind of
fabric carries it decides which all-reduce algorithms exist at all:

* **NVLink SHARP (NVLS)**, the in-switch reduction of third-generation and later NVSwitch
  chips (HGX H100 / H200 / B200 / B300 boards, the GB200 NVL72 NVLink Switch System). NCCL
  runs it as its ``NVLS`` algorithm (added in NCCL 2.17, NCCL release notes; its cost terms
  are in ``NVIDIA/nccl`` ``src/graph/tuning.cc``); A100's second-generation NVSwitch has no
  SHARP, PCIe cards no NVLink, AMD's xGMI and Trainium's NeuronLink no in-switch reduction.
* **A fully connected peer-to-peer domain** (every device can load and store every other's
  memory over NVLink / xGMI): what the engines' custom one-shot / two-shot all-reduce kernels
  need (vLLM ``CustomAllreduce`` refuses more than two devices that are not fully
  NVLink-connected: ``vllm/distributed/device_communicators/custom_all_reduce.py``
  ``should_custom_ar``; PCIe-only boxes fall back to NCCL). vLLM also runs them on exactly two
  PCIe devices whose peer-to-peer check passes; that case depends on the board and driver
  (GeForce cards have P2P disabled) and is not modelled: PCIe domains get NCCL only.
* **Compute capability** keys the engines' size tables (vLLM ``CUSTOM_ALL_REDUCE_MAX_SIZES``
  per ``"9.0"`` / ``"10.0"``; TensorRT-LLM's strategy table per SM 90 / 100).

A device without an entry here (a custom device file) is ``UNKNOWN_FABRIC``: only NCCL's ring
and tree algorithms are assumed.
"""

from __future__ import annotations

from dataclasses import dataclass

from .spec import DeviceSpec

__all__ = ["FABRICS", "ScaleUpFabric", "UNKNOWN_FABRIC", "compute_capability",
           "scale_up_fabric"]


@dataclass(frozen=True, slots=True)
class ScaleUpFabric:
    """What one device type's scale-up domain offers to collective algorithms.

    Attributes:
        kind: ``nvswitch`` (NVLink through NVSwitch chips), ``xgmi-mesh`` (AMD Infinity
            Fabric, every pair directly linked), ``pcie`` (no NVLink: PCIe switches / host),
            ``torus`` (Trainium2 NeuronLink), ``unknown``.
        vendor: ``nvidia``, ``amd``, ``aws`` or ``unknown`` (which collective library and
            engine kernels exist: NCCL / RCCL).
        nvls: NVLink SHARP in-switch reduction available (NVSwitch generation 3 or later).
        p2p_full_mesh: every pair of devices in one domain has direct load/store access.
        compute_capability: CUDA compute capability (``"9.0"``, ``"10.0"``, ``"10.3"``,
            ``"8.0"``, ...) or ``None`` for non-CUDA devices.
        source: where the facts come from.
    """

    kind: str
    vendor: str
    nvls: bool
    p2p_full_mesh: bool
    compute_capability: str | None
    source: str


_HGX_H = ("NVIDIA HGX H100/H200 8-GPU baseboard: four third-generation NVSwitch chips with "
          "NVLink SHARP in-network reduction (NVIDIA H100 Tensor Core GPU Architecture "
          "whitepaper, 'Third-generation NVSwitch'); NCCL NVLS algorithm since NCCL 2.17; "
          "compute capability 9.0 (CUDA programming guide, compute capabilities table)")
_HGX_B = ("NVIDIA HGX B200/B300 8-GPU baseboard: fifth-generation NVLink through NVLink switch "
          "chips with SHARP (NVIDIA Blackwell architecture technical brief, 'NVLink and NVLink "
          "Switch'); NCCL NVLS; compute capability {cc} (CUDA programming guide)")
_PCIE = ("PCIe card without NVLink (the preset's scale-up link is PCIe, see its sources): no "
         "NVSwitch, no SHARP, no fully NVLink-connected domain")
_AMD = ("AMD Instinct 8-GPU platform: xGMI (Infinity Fabric) links every GPU pair directly "
        "(fully connected mesh; AMD Instinct MI300X data sheet / MI300 platform brief); no "
        "in-switch reduction (no switch); RCCL ring/tree")

#: Preset name -> fabric (each entry's ``source`` cites the facts).
FABRICS: dict[str, ScaleUpFabric] = {
    "h100-sxm": ScaleUpFabric("nvswitch", "nvidia", True, True, "9.0", _HGX_H),
    "h200": ScaleUpFabric("nvswitch", "nvidia", True, True, "9.0", _HGX_H),
    "h20": ScaleUpFabric(
        "nvswitch", "nvidia", False, True, "9.0",
        "HGX H20: NVLink 900 GB/s per GPU through NVSwitch (preset sources); whether its "
        "NVSwitch enables SHARP is not established by a source read here, so NVLS is treated "
        "as unavailable"),
    "b200": ScaleUpFabric("nvswitch", "nvidia", True, True, "10.0", _HGX_B.format(cc="10.0")),
    "b300": ScaleUpFabric("nvswitch", "nvidia", True, True, "10.3", _HGX_B.format(cc="10.3")),
    "gb200-nvl72": ScaleUpFabric(
        "nvswitch", "nvidia", True, True, "10.0",
        "GB200 NVL72: 72 GPUs in one NVLink domain through NVLink Switch trays with SHARP "
        "(NVIDIA GB200 NVL72 product page; NVIDIA Blackwell technical brief); compute "
        "capability 10.0"),
    "a100-80gb": ScaleUpFabric(
        "nvswitch", "nvidia", False, True, "8.0",
        "HGX A100: six second-generation NVSwitch chips, no SHARP in-switch reduction (NVIDIA "
        "A100 Tensor Core GPU Architecture whitepaper; SHARP arrived with the third-generation "
        "NVSwitch of HGX H100); compute capability 8.0"),
    "l40s": ScaleUpFabric("pcie", "nvidia", False, False, "8.9", _PCIE),
    "rtx-4090": ScaleUpFabric("pcie", "nvidia", False, False, "8.9", _PCIE),
    "rtx-pro-6000": ScaleUpFabric("pcie", "nvidia", False, False, "12.0", _PCIE),
    "mi300x": ScaleUpFabric("xgmi-mesh", "amd", False, True, None, _AMD),
    "mi325x": ScaleUpFabric("xgmi-mesh", "amd", False, True, None, _AMD),
    "mi355x": ScaleUpFabric("xgmi-mesh", "amd", False, True, None, _AMD),
    "trainium2": ScaleUpFabric(
        "torus", "aws", False, False, None,
        "trn2.48xlarge: 16 Trainium2 chips on a NeuronLink-v3 4x4 torus (AWS Neuron docs, "
        "trn2 architecture): no switch, not every pair directly linked; no NCCL"),
}

#: The fabric assumed for a device without an entry (custom device files).
UNKNOWN_FABRIC = ScaleUpFabric("unknown", "unknown", False, False, None,
                               "device not in hardware.fabric.FABRICS: only NCCL ring and "
                               "tree are assumed")


def scale_up_fabric(device: DeviceSpec) -> ScaleUpFabric:
    """The scale-up fabric of ``device`` (looked up by preset name, case-folded and with the
    preset aliases, as :func:`~learn_to_shard.hardware.presets.load_device` reads it;
    :data:`UNKNOWN_FABRIC` for a device that is not a shipped preset)."""
    from .presets import ALIASES

    name = device.name.strip().lower()
    return FABRICS.get(ALIASES.get(name, name), UNKNOWN_FABRIC)


def compute_capability(device: DeviceSpec) -> str | None:
    """CUDA compute capability of ``device`` (``"9.0"``, ``"8.9"``, …): its own
    ``compute_capability`` field where a device file states one, else its preset's
    (:data:`FABRICS`); ``None`` where neither says (a custom device without the field, a
    non-CUDA chip)."""
    return device.compute_capability or scale_up_fabric(device).compute_capability

"""Hardware layer: device presets (data files) and cluster descriptions."""

from .presets import ALIASES, device_names, load_device, load_device_file, parse_cluster
from .spec import ClusterSpec, DeviceSpec

__all__ = [
    "ALIASES",
    "ClusterSpec",
    "DeviceSpec",
    "device_names",
    "load_device",
    "load_device_file",
    "parse_cluster",
]

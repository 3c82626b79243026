"""Accelerator and cluster descriptions (SI units: FLOP/s, bytes, bytes/s, seconds)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """One accelerator type and the links of the system it usually sits in.

    Attributes:
        name: preset key, e.g. ``"h100-sxm"``.
        display_name: human name, e.g. ``"NVIDIA H100 SXM5 80GB"``.
        peak_bf16_flops_per_s: dense (no 2:4 sparsity) BF16 tensor-core peak, FLOP/s.
        peak_fp8_flops_per_s: dense FP8 peak, FLOP/s; ``None`` if the chip has no FP8 math.
        hbm_bytes: device memory capacity, bytes.
        hbm_bytes_per_s: peak memory bandwidth, bytes/s.
        scale_up_domain: devices in one scale-up (NVLink / xGMI / NeuronLink) domain: a node,
            unless ``devices_per_host`` says a host holds fewer.
        scale_up_bytes_per_s: per-device unidirectional scale-up bandwidth, bytes/s
            (datasheets quote bidirectional totals; this is half of that).
        scale_out_bytes_per_s: per-device scale-out (InfiniBand / EFA) bandwidth, bytes/s.
        scale_up_latency_s: per-collective-step latency inside the domain, seconds.
        scale_out_latency_s: per-collective-step latency across domains, seconds.
        peak_fp4_flops_per_s: dense FP4 (NVFP4 / MXFP4) tensor-core peak, FLOP/s; ``None``
            if the chip has no FP4 math (then FP4 weights are dequantised, 16-bit math).
        w4a16_expert_flops_efficiency: fraction of the 16-bit GEMM rate (the cost model's
            ``flops_efficiency`` and shape terms applied first) that the routed-expert GEMMs of
            a checkpoint with experts below 8 bits reach on this chip where they do not run as
            FP4 GEMMs (MXFP4 / NVFP4 on a chip without FP4 math, GPTQ / AWQ integer experts on
            any chip): the weights are dequantised in the GEMM's main loop. ``None``: no
            measurement of such kernels on the chip, priced as 1. Set from measured MoE
            kernels (``fidelity.kernels.fit_w4a16_expert_efficiency``; H100 and H200 only).
        devices_per_host: devices of one host (one operating system, one launch of a serving
            engine's node) where it holds fewer than the scale-up domain: GB200 NVL72's 1U
            compute trays hold 4 of its 72 NVLink-connected GPUs, so a server of 8 is a
            two-node launch though its collectives stay on NVLink. ``None``: a host holds the
            whole domain (an HGX baseboard of 8). Read through :attr:`host_devices`.
        compute_capability: CUDA compute capability, ``"major.minor"`` (``"8.9"`` for Ada),
            of a device that is not a shipped preset; ``None``: the preset's, from
            :data:`learn_to_shard.hardware.fabric.FABRICS` (read through
            :func:`~learn_to_shard.hardware.fabric.compute_capability`), or unknown. What an
            engine's kernels need beyond the math rates (TensorRT-LLM's MXFP4 MoE runs on
            SM 9.0 and 10.x, not on an SM 8.9 chip that has FP8 math).
        sources: where each number comes from (field -> citation).
    """

    name: str
    display_name: str
    peak_bf16_flops_per_s: float
    peak_fp8_flops_per_s: float | None
    hbm_bytes: float
    hbm_bytes_per_s: float
    scale_up_domain: int
    scale_up_bytes_per_s: float
    scale_out_bytes_per_s: float
    scale_up_latency_s: float
    scale_out_latency_s: float
    peak_fp4_flops_per_s: float | None = None
    w4a16_expert_flops_efficiency: float | None = None
    devices_per_host: int | None = None
    compute_capability: str | None = None
    sources: tuple[tuple[str, str], ...] = ()

    @property
    def host_devices(self) -> int:
        """Devices per host: ``devices_per_host``, else the scale-up domain."""
        return self.devices_per_host or self.scale_up_domain

    @property
    def names(self) -> str:
        """The preset key and the display name, space-separated: what an engine's default
        that tests the device's name reads (vLLM tests the CUDA device name for ``a100``,
        :func:`learn_to_shard.engines.default_max_num_seqs`)."""
        return f"{self.name} {self.display_name}"


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """A homogeneous cluster: ``num_devices`` devices of one type in domains of
    ``device.scale_up_domain``.

    Attributes:
        device: the accelerator type.
        num_devices: total devices available to the plan.
        name: label for reports, e.g. ``"h100-sxm:64"``.
    """

    device: DeviceSpec
    num_devices: int
    name: str = ""

    @property
    def devices_per_node(self) -> int:
        """Devices in one scale-up domain (never more than the cluster holds)."""
        return min(self.device.scale_up_domain, self.num_devices)

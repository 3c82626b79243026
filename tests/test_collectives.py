"""Collective algorithms (issue 16, item 1): ring, tree, NVLS, one-shot / two-shot and the fused
all-reduce + RMSNorm, their availability per hardware and engine, and their fidelity against the
measured NCCL and custom all-reduce tables (``data/silicon``)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from learn_to_shard.cost.comm import (
    ALL_REDUCE,
    CUSTOM_KERNEL_LATENCY_S,
    NVLS_LATENCY_S,
    RING_PROTOCOLS,
    collective_options,
    collective_time_s,
    ring_time_s,
    rmsnorm_pass_time_s,
)
from learn_to_shard.cost.config import CostModelConfig
from learn_to_shard.engines.collectives import CUSTOM_ALL_REDUCE
from learn_to_shard.errors import ConfigError
from learn_to_shard.fidelity.kernels import collective_algorithm_report
from learn_to_shard.hardware import device_names, load_device, parse_cluster
from learn_to_shard.hardware.fabric import FABRICS, UNKNOWN_FABRIC, scale_up_fabric

KiB, MiB = 1024, 1024 * 1024
NVLS_DEVICES = ("h100-sxm", "h200", "b200", "b300", "gb200-nvl72")
NO_NVLS_DEVICES = ("l40s", "rtx-4090", "rtx-pro-6000", "a100-80gb", "mi300x", "mi325x",
                   "mi355x", "trainium2")


def _opts(cluster: str, n: int, size: float, **kw: object):
    return collective_options(parse_cluster(cluster), "all-reduce", n, size, **kw)  # type: ignore[arg-type]


def test_every_preset_has_a_fabric_entry() -> None:
    """A new preset must say which algorithms its fabric has (else it silently gets ring/tree)."""
    assert set(FABRICS) == set(device_names())
    assert all(f.source.strip() for f in FABRICS.values())


@pytest.mark.parametrize("name", NO_NVLS_DEVICES)
def test_nvls_unavailable_without_nvswitch_sharp(name: str) -> None:
    """PCIe cards, A100 (NVSwitch gen 2), AMD xGMI and Trainium have no in-switch reduction."""
    o = _opts(f"{name}:8", 8, 64 * KiB)
    assert o.time_s("nvls") is None
    assert any(a == "nvls" and "no NVLink SHARP" in why for a, why in o.unavailable)


@pytest.mark.parametrize("name", ("l40s", "rtx-4090", "rtx-pro-6000", "trainium2"))
def test_custom_kernels_need_a_fully_connected_domain(name: str) -> None:
    o = _opts(f"{name}:8", 8, 64 * KiB)
    assert o.time_s("one-shot") is None and o.time_s("two-shot") is None
    assert {a for a, _ in o.unavailable} >= {"nvls", "one-shot", "two-shot"}
    assert o.best is not None and o.best.algorithm in ("ring", "tree")


@pytest.mark.parametrize("name", NVLS_DEVICES)
def test_nvls_available_inside_one_nvswitch_domain(name: str) -> None:
    o = _opts(f"{name}:8", 8, 64 * MiB)
    assert o.time_s("nvls") is not None
    across = _opts(f"{name}:{2 * load_device(name).scale_up_domain}",
                   2 * load_device(name).scale_up_domain, 64 * MiB)
    assert across.time_s("nvls") is None          # NVLS stops at the NVLink domain


def test_nvls_beats_ring_for_small_messages_on_a_large_nvswitch_domain() -> None:
    """72 ranks of a GB200 NVL72: the ring's 2(n-1) steps cost far more than NVLS's one
    in-switch pass, so NVLS is cheaper for a small message (and for a large one)."""
    for size in (16 * KiB, 256 * KiB, 64 * MiB):
        o = _opts("gb200-nvl72:72", 72, size)
        nvls, ring = o.time_s("nvls"), o.time_s("ring")
        assert nvls is not None and ring is not None and nvls < ring


def test_nvls_against_ring_on_an_8_gpu_hgx_board() -> None:
    """On 8 ranks NCCL's own tuning model puts NVLS (25 µs) above ring with the LL protocol
    (6.6 + 14 × 0.6 µs) for small messages — the measured 8×H100 NCCL all-reduce of 2 KiB
    takes 15.7 µs, the ring figure — and NVLS wins once the message is large (it moves S per
    rank instead of 2(n-1)/n S): the crossover is at 1.1 MiB."""
    small, large = _opts("h100-sxm:8", 8, 64 * KiB), _opts("h100-sxm:8", 8, 64 * MiB)
    assert small.time_s("ring") < small.time_s("nvls")            # type: ignore[operator]
    assert large.time_s("nvls") < large.time_s("ring")            # type: ignore[operator]
    below, above = _opts("h100-sxm:8", 8, 1.0 * MiB), _opts("h100-sxm:8", 8, 1.25 * MiB)
    assert below.time_s("ring") < below.time_s("nvls")            # type: ignore[operator]
    assert above.time_s("nvls") < above.time_s("ring")            # type: ignore[operator]
    assert small.time_s("nvls") == pytest.approx(
        NVLS_LATENCY_S + 64 * KiB / (0.565 * 450e9), rel=1e-12)


def test_one_shot_beats_ring_small_and_loses_large() -> None:
    for cluster in ("h100-sxm:8", "b200:8", "a100-80gb:8", "mi300x:8"):
        small, large = _opts(cluster, 8, 16 * KiB), _opts(cluster, 8, 64 * MiB)
        assert small.time_s("one-shot") < small.time_s("ring")    # type: ignore[operator]
        assert large.time_s("one-shot") > large.time_s("ring")    # type: ignore[operator]
        # two-shot moves 2(n-1)/n S instead of (n-1) S: it overtakes one-shot as S grows
        assert small.time_s("one-shot") < small.time_s("two-shot")  # type: ignore[operator]
        assert large.time_s("two-shot") < large.time_s("one-shot")  # type: ignore[operator]


def test_one_shot_and_two_shot_are_alpha_beta() -> None:
    """The stated formulas: α + (n-1) S / B and 2α + 2(n-1)/n S / B on the bus bandwidth."""
    cfg = CostModelConfig()
    bus = 450e9 * cfg.scale_up_efficiency
    o = _opts("h100-sxm:8", 8, 1 * MiB)
    assert o.time_s("one-shot") == pytest.approx(CUSTOM_KERNEL_LATENCY_S + 7 * MiB / bus,
                                                 rel=1e-12)
    assert o.time_s("two-shot") == pytest.approx(
        2 * CUSTOM_KERNEL_LATENCY_S + 2 * 7 / 8 * MiB / bus, rel=1e-12)


def test_ring_bandwidth_term_is_the_cost_models_all_reduce_term() -> None:
    """With the Simple protocol the ring moves 2(n-1)/n S over the bus bandwidth — the same
    bandwidth term :func:`collective_time_s` charges the cost model's all-reduce."""
    bus, size = 360e9, 256 * MiB
    ring = ring_time_s("all-reduce", 8, size, bus)
    assert ring.detail.endswith("Simple protocol")
    simple = RING_PROTOCOLS[-1]
    assert ring.latency_s == pytest.approx(simple.base_latency_s + 14 * simple.nvlink_step_s)
    old = float(collective_time_s(np.array([ALL_REDUCE]), np.array([8]), np.array([size]),
                                  np.array([bus]), np.array([0.0]))[0])
    assert ring.bandwidth_s == pytest.approx(old, rel=1e-12)


def test_groups_that_span_domains_ride_the_scale_out_link() -> None:
    """16 H100s over two nodes: only NCCL's ring and tree, priced on the NIC; the tree's
    log2(nodes) latency beats the ring's 2·nodes network steps at a small message."""
    o = _opts("h100-sxm:16", 16, 16 * KiB)
    assert {x.algorithm for x in o.options} == {"ring", "tree"}
    assert o.time_s("tree") < o.time_s("ring")                    # type: ignore[operator]
    one = _opts("h100-sxm:8", 8, 16 * KiB)
    assert o.time_s("ring") > one.time_s("ring")                  # type: ignore[operator]
    big = _opts("h100-sxm:16", 16, 64 * MiB)
    ring = next(x for x in big.options if x.algorithm == "ring")
    nic_bus = 50e9 * CostModelConfig().scale_out_efficiency
    assert ring.bandwidth_s == pytest.approx(2 * 15 / 16 * 64 * MiB / nic_bus, rel=1e-12)


def test_vllm_runs_its_dispatch_below_its_cap() -> None:
    """vLLM on 8×H100 (symmetric memory available: cap 256 KiB) runs one-shot below the cap
    and NCCL above; two-shot is never its choice there; on 4 ranks it runs two-shot from
    512 KiB up to its 8 MiB cap."""
    small = _opts("h100-sxm:8", 8, 64 * KiB, engine="vllm")
    assert small.best is not None and small.best.algorithm == "one-shot"
    assert small.time_s("two-shot") is None
    above = _opts("h100-sxm:8", 8, 512 * KiB, engine="vllm")
    assert above.time_s("one-shot") is None and above.time_s("two-shot") is None
    assert any("runs NCCL" in why for _, why in above.unavailable)
    four = _opts("h100-sxm:4", 4, 1 * MiB, engine="vllm")
    assert four.time_s("two-shot") is not None and four.time_s("one-shot") is None
    assert _opts("h100-sxm:4", 4, 8 * MiB, engine="vllm").time_s("two-shot") is None
    assert CUSTOM_ALL_REDUCE["vllm"].dispatch(2, 64 * MiB) == "one-shot"


def test_trtllm_can_pin_either_kernel_and_does_not_run_on_amd() -> None:
    o = _opts("h100-sxm:8", 8, 1 * MiB, engine="trtllm")
    assert o.time_s("one-shot") is not None and o.time_s("two-shot") is not None
    assert o.best is not None and o.best.algorithm == "two-shot"
    assert _opts("h100-sxm:8", 8, 8 * MiB, engine="trtllm").time_s("two-shot") is None
    amd = _opts("mi300x:8", 8, 1 * MiB, engine="trtllm")
    assert amd.best is None and all("does not run on amd" in why for _, why in amd.unavailable)
    vllm_amd = _opts("mi300x:8", 8, 64 * KiB, engine="vllm")
    assert vllm_amd.best is not None and vllm_amd.best.algorithm == "one-shot"


def test_sglang_nvls_needs_its_flag() -> None:
    o = _opts("h100-sxm:8", 8, 64 * MiB, engine="sglang")
    nvls = next(x for x in o.options if x.algorithm == "nvls")
    assert "--enable-nccl-nvls" in nvls.detail


def test_fused_rmsnorm_saves_a_launch_and_one_pass() -> None:
    cfg = CostModelConfig()
    size = 64 * KiB
    o = _opts("h100-sxm:8", 8, size, engine="trtllm", then_rmsnorm=True)
    fused, plain = o.time_s("one-shot+rmsnorm"), o.time_s("one-shot")
    assert fused is not None and plain is not None
    hbm = 3.35e12 * cfg.hbm_efficiency
    assert plain - fused == pytest.approx(size / hbm + cfg.kernel_overhead_s, rel=1e-9)
    assert o.best is not None and o.best.algorithm == "one-shot+rmsnorm"
    assert rmsnorm_pass_time_s(size, hbm, True, 1.0) == pytest.approx(3 * size / hbm)
    # No fused kernels on A100 (SM 80) or AMD; without then_rmsnorm none is listed.
    for cluster in ("a100-80gb:8", "mi300x:8"):
        assert _opts(cluster, 8, size, then_rmsnorm=True).time_s("one-shot+rmsnorm") is None
    assert _opts("h100-sxm:8", 8, size).time_s("one-shot+rmsnorm") is None


def test_bad_arguments_and_one_rank() -> None:
    cl = parse_cluster("h100-sxm:8")
    with pytest.raises(ConfigError, match="collective"):
        collective_options(cl, "all-to-all", 8, 1024)
    with pytest.raises(ConfigError, match="engine"):
        collective_options(cl, "all-reduce", 8, 1024, engine="tgi")
    with pytest.raises(ConfigError, match="domain"):
        collective_options(load_device("h100-sxm"), "all-reduce", 16, 1024)
    with pytest.raises(ConfigError, match="message_bytes"):
        collective_options(cl, "all-reduce", 8, 0)
    one = collective_options(cl, "all-gather", 1, 1024)
    assert one.best is None and one.unavailable
    assert scale_up_fabric(load_device("h100-sxm")).nvls
    custom = dataclasses.replace(load_device("h100-sxm"), name="my-card")
    assert scale_up_fabric(custom) is UNKNOWN_FABRIC
    o = collective_options(custom, "all-reduce", 8, 1024)
    assert {x.algorithm for x in o.options} == {"ring", "tree"}


# Fidelity against the measured tables. Two constants were read from single H100 rows (the
# one-/two-shot pass latency and the NVLS all-reduce efficiency); everything else is NCCL's
# tuning model, the engines' rules and the datasheet links. Stated errors (median |error| per
# table × collective × algorithm × device, `collective_algorithm_report`):
#   Hopper (H100, H200): NCCL ring / NVLS groups <= 0.20 (observed 0.05-0.16); every other
#     group <= 0.30 (vLLM's one-shot sits at -0.28: its 4.6 µs floor against the 3.2 µs
#     constant) except TensorRT-LLM's two-shot under AUTO, which the model under-predicts by
#     about half: it takes 17.6 µs at 512 KiB on 8×H100 where vLLM's two-shot takes 12.0 µs.
#   A100 and B200 (held out): every group <= 0.60, nearly all under-predicted (these links
#     reach less than 0.8 of the datasheet NVLink figure and the kernels' latency is higher).
HOPPER, HELD_OUT = ("h100-sxm", "h200"), ("a100-80gb", "b200")


def test_algorithm_prices_match_the_measured_tables_within_the_stated_error() -> None:
    stats = collective_algorithm_report()
    assert {s.table for s in stats} == {"nccl", "vllm", "sglang", "trtllm"}
    assert {s.preset for s in stats} == set(HOPPER + HELD_OUT)
    assert {s.algorithm for s in stats} >= {"ring", "nvls", "one-shot", "two-shot"}
    for s in stats:
        where = f"{s.table} {s.op} {s.algorithm} {s.preset} (n={s.n})"
        assert math.isfinite(s.median_error) and s.n >= 1, where
        if s.preset in HELD_OUT:
            assert s.median_abs <= 0.60, where
        elif s.table == "nccl" and s.algorithm in ("ring", "nvls"):
            assert s.median_abs <= 0.20, where
        elif s.table == "trtllm" and s.algorithm == "two-shot":
            assert -0.60 <= s.median_error <= -0.30, where   # the stated known gap
        else:
            assert s.median_abs <= 0.30, where


# ------------------------------------------------------------------ expert all-to-all (DeepEP)
def test_deepep_fixed_costs_are_the_median_residual_of_the_one_node_rows():
    """A2A_FLOOR_S is fitted on the calibration subset (one-node rows) only: the median of
    measured minus transfer time, per mode, to two significant digits."""
    import statistics

    from learn_to_shard.cost.comm import A2A_FLOOR_S
    from learn_to_shard.fidelity.kernels import expert_a2a_kernels

    ks = expert_a2a_kernels(floor=False)
    for mode, floor in A2A_FLOOR_S.items():
        res = [meas - pred for split, m, _, pred, _, meas in ks
               if split == "calibration" and m == mode]
        assert len(res) >= 20
        assert float(f"{statistics.median(res):.2g}") == floor


def test_normal_kernels_cross_the_nic_once_per_node_and_fp8_halves_the_payload():
    """DeepSeek-V3 on 4 nodes (EP32): the normal kernels send a token over the NIC once per
    remote destination node and beat the per-rank low-latency kernels at 4096 tokens; an FP8
    payload (1 + 4/128 bytes per element) moves about half the BF16 bytes."""
    from learn_to_shard.cost.comm import expected_destinations, expert_a2a_time_s

    kw = dict(hidden=7168, top_k=8, experts=256, domain=8, scale_up_bytes_per_s=360e9,
              scale_out_bytes_per_s=40e9)
    normal = expert_a2a_time_s(4096, 32, payload="bf16", mode="normal", **kw)[0]
    ll = expert_a2a_time_s(4096, 32, payload="bf16", mode="low_latency", **kw)[0]
    assert normal < 0.6 * ll
    nodes, ranks = expected_destinations(4, 256, 8)[0], expected_destinations(32, 256, 8)[0]
    assert 1.0 < nodes < 4.0 < ranks < 8.0
    fp8 = expert_a2a_time_s(4096, 32, payload="fp8", mode="normal", **kw)[0]
    floor = 6.2e-05
    assert (fp8 - floor) / (normal - floor) == pytest.approx((1 + 4 / 128) / 2, rel=1e-9)
    assert expert_a2a_time_s(4096, 1, payload="bf16", mode="normal", **kw)[0] == 0.0
    with pytest.raises(ConfigError, match="payload"):
        expert_a2a_time_s(1, 8, payload="int8", mode="normal", **kw)


def test_deepep_prices_hold_on_the_held_out_multi_node_rows():
    """On the held-out rows (SGLang's DeepEP kernels on 2–8 nodes of H100 / H200), the normal
    kernels' price is within 20% (median) for dispatch and combine, where the cost model's
    current all-to-all is 77% / 28% too slow; the low-latency kernels stay within 40%."""
    from learn_to_shard.fidelity.kernels import expert_a2a_report

    got = {(s.split, s.mode, s.phase): s for s in expert_a2a_report()}
    for phase in ("dispatch", "combine"):
        s = got[("held-out", "normal", phase)]
        assert s.n >= 30 and abs(s.median_error) <= 0.2 < s.model_median_error
        assert abs(got[("held-out", "low_latency", phase)].median_error) <= 0.4


def test_collective_time_lookup_path_equals_the_formula():
    """``collective_time_s`` looks integer group sizes up in precomputed tables; float sizes
    take the formula. Both give the same times, and a NONE kind or a one-rank group costs 0
    even on a link of bandwidth 0."""
    from learn_to_shard.cost.comm import ALL_REDUCE, ALL_TO_ALL, GATHER_OR_SCATTER, NONE
    kind = np.array([NONE, ALL_REDUCE, GATHER_OR_SCATTER, ALL_TO_ALL, ALL_REDUCE, NONE])
    n = np.array([8, 8, 6, 16, 1, 4])
    size = np.full(6, 3.0e6)
    bw = np.array([0.0, 4e11, 4e11, 5e10, 0.0, 4e11])
    alpha = np.full(6, 2e-6)
    looked_up = collective_time_s(kind, n, size, bw, alpha)
    formula = collective_time_s(kind, n.astype(np.float64), size, bw, alpha)
    assert np.array_equal(looked_up, formula)
    frac8, frac6, frac16 = 7 / 8, 5 / 6, 15 / 16
    want = [0.0, 2 * frac8 * 3e6 / 4e11 + 2 * 3 * 2e-6, frac6 * 3e6 / 4e11 + 3 * 2e-6,
            frac16 * 3e6 / 16 / 5e10 + 4 * 2e-6, 0.0, 0.0]
    assert looked_up == pytest.approx(want, rel=1e-12)


def _collective_formula_s(kind, n, full_bytes, bw, alpha):
    """The closed form ``collective_time_s`` prices (before its table lookup): bus bytes
    ``2·frac·S`` / ``frac·S`` / ``frac·S/n`` over the bandwidth plus ``2⌈log2 n⌉`` /
    ``⌈log2 n⌉`` latency steps, zero for NONE or one rank."""
    from learn_to_shard.cost.comm import ALL_REDUCE, ALL_TO_ALL, GATHER_OR_SCATTER, NONE
    n_f = np.maximum(n, 1).astype(np.float64)
    frac = (n_f - 1.0) / n_f
    steps = np.ceil(np.log2(n_f))
    bus = np.select([kind == ALL_REDUCE, kind == GATHER_OR_SCATTER, kind == ALL_TO_ALL],
                    [2.0 * frac * full_bytes, frac * full_bytes, frac * full_bytes / n_f], 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        lat = np.select([kind == ALL_REDUCE, kind != NONE], [2.0 * steps, steps], 0.0) * alpha
        return np.where((kind == NONE) | (n_f <= 1), 0.0, bus / bw + lat)


def test_collective_time_is_zero_for_none_or_one_rank_and_keeps_nan_bytes():
    """Whatever the latency or group size holds (NaN, inf), a NONE kind or a one-rank group
    costs 0, as the docstring says; a NaN buffer size stays NaN (not priced as latency only);
    every other input (integer sizes below and above the table, float sizes) equals the
    closed form."""
    from learn_to_shard.cost.comm import ALL_REDUCE, ALL_TO_ALL, GATHER_OR_SCATTER, NONE
    kind = np.array([NONE, NONE, ALL_REDUCE, ALL_REDUCE, GATHER_OR_SCATTER, ALL_TO_ALL,
                     ALL_REDUCE, GATHER_OR_SCATTER])
    alpha = np.array([np.nan, 1e-6, np.inf, 1e-6, 1e-6, 1e-6, 1e-6, 1e-6])
    size = np.array([1e6, 1e6, 1e6, np.nan, 1e6, 1e6, -1e6, 1e6])
    bw = np.full(8, 1e11)
    for n in (np.array([8, 8, 1, 8, 6, 16, 8, 1 << 18]),
              np.array([8.0, np.nan, 1.0, 8.0, 6.0, 16.0, 8.0, 2.0 ** 18])):
        with np.errstate(invalid="ignore"):
            got = collective_time_s(kind, n, size, bw, alpha)
        assert got[0] == 0.0 and got[1] == 0.0 and got[2] == 0.0 and np.isnan(got[3])
        assert np.array_equal(got, _collective_formula_s(kind, n, size, bw, alpha),
                              equal_nan=True)

"""A parallel strategy: degrees (TP, EP, PP, attention-DP, batch) plus one sharding choice per
fused operator — the paper's action vector generalised (DESIGN §2)."""

from __future__ import annotations

from dataclasses import dataclass

from .ops import CHOICE_NAMES, MEGATRON_DIMS, NUM_OPS, OP_NAMES


@dataclass(frozen=True, slots=True)
class Strategy:
    """One model instance's parallel layout.

    The instance spans ``pp × tp × dp`` devices: ``pp`` pipeline stages, each a group of
    ``g = tp × dp`` devices that runs attention and dense layers with ``tp``-way tensor
    parallelism on ``dp`` disjoint batch shards (attention data parallelism), and MoE layers as
    ``ep × etp = g`` (expert parallelism × expert tensor parallelism; the TRT-LLM/aiconfigurator
    invariant ``tp × attention_dp = moe_tp × moe_ep``). Replicas fill the cluster.

    Attributes:
        tp: tensor-parallel degree.
        ep: expert-parallel degree (1 for dense models).
        pp: pipeline stages.
        dp: attention data-parallel degree inside a stage.
        batch: concurrent sequences per instance (decode/serve) or prompts per step (prefill).
        dims: per-operator choice, ``len == 12`` in :class:`~learn_to_shard.parallel.ops.Op`
            order, each 0 (``Shard(0)``), 1 (``Shard(1)``) or 2 (replicated).
        cp: decode context-parallel degree: every sequence's KV cache is split by tokens over
            ``cp`` ranks of the TP group, which then hold ``tp / cp``-way head groups for
            decode attention (vLLM / SGLang ``--decode-context-parallel-size``; no extra
            devices). 1: none. Whether it divides ``tp`` is the space's ``context_parallel`` rule.
    """

    tp: int
    ep: int
    pp: int
    dp: int
    batch: int
    dims: tuple[int, ...] = MEGATRON_DIMS
    cp: int = 1

    def __post_init__(self) -> None:
        if len(self.dims) != NUM_OPS or any(d not in (0, 1, 2) for d in self.dims):
            raise ValueError(f"dims must be {NUM_OPS} values in {{0,1,2}}, got {self.dims}")
        if self.cp < 1:
            raise ValueError(f"cp must be >= 1, got {self.cp}")

    @property
    def devices(self) -> int:
        """Devices in one instance: ``pp × tp × dp``."""
        return self.pp * self.tp * self.dp

    @property
    def etp(self) -> int:
        """Expert tensor-parallel degree ``tp × dp / ep`` (derived)."""
        return self.tp * self.dp // self.ep

    def placements(self) -> dict[str, str]:
        """Operator name -> placement name of its choice, e.g. ``{"o_proj": "Shard(0)"}``."""
        return {name: CHOICE_NAMES[d] for name, d in zip(OP_NAMES, self.dims, strict=False)}

    def short(self) -> str:
        """Compact one-line description, e.g. ``tp8 ep1 pp1 dp1 b64 [0,1,1,0,...]`` (``cp2``
        after ``dp`` when ``cp > 1``)."""
        dims = "".join("01∅"[d] for d in self.dims)
        cp = f" cp{self.cp}" if self.cp > 1 else ""
        return f"tp{self.tp} ep{self.ep} pp{self.pp} dp{self.dp}{cp} b{self.batch} [{dims}]"

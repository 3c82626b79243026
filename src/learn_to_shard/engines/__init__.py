"""Serving-engine capability profiles: what vLLM, SGLang and TensorRT-LLM can launch.

One pinned version per engine. A profile states the engine's parallel axes (how ``l2s``'s
``tp, ep, pp, dp`` map onto its flags), the per-operator layouts its kernels implement (as
allowed choice tuples per operator *block*, in ``Shard(0)=0 / Shard(1)=1 / Replicate()=2``
codes of :mod:`learn_to_shard.parallel.ops`), the degree rules it enforces and the memory
policy (a key of :data:`learn_to_shard.cost.config.ENGINE_PROFILES`). Every fact carries its
source: the file of the engine's release at the pinned version/commit.

The divisibility rules common to all three (attention heads by the attention TP degree, KV
heads divisible or replicated, FFN and hidden sizes by their groups, FP8 blocks, experts by EP)
are the strategy space's own rules (:data:`learn_to_shard.parallel.space.RULES`), which every
engine enforces with the same arithmetic; a profile adds what differs between engines: the
vocabulary padding rule (``vocab_multiple``), the layouts and the degree rules.

This module is data; it imports nothing from the planner's other layers (operators are named
by their ``OP_NAMES`` strings), so the strategy space can read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..units import GIB

#: Operator blocks: each block's choices are checked together (an engine implements a layout
#: of a block, e.g. column→row for an FFN pair, not each operator independently). The blocks
#: are disjoint and cover the 12 operators; their order is ``OP_NAMES`` order within a block.
BLOCKS: dict[str, tuple[str, ...]] = {
    "embedding": ("embedding",),
    "attention": ("qkv_proj", "attention", "o_proj"),
    "dense": ("dense_up", "dense_down"),
    "router": ("router",),
    "experts": ("expert_up", "expert_down"),
    "shared": ("shared_expert_up", "shared_expert_down"),
    "lm_head": ("lm_head",),
}

#: Megatron-LM's layout per block (vocab-parallel embedding and LM head, column→row pairs,
#: head-parallel attention, replicated router): the layout all three engines implement.
#: Same codes as ``learn_to_shard.parallel.ops.MEGATRON_DIMS`` (a test checks they agree).
MEGATRON: dict[str, tuple[int, ...]] = {
    "embedding": (0,), "attention": (1, 1, 0), "dense": (1, 0), "router": (2,),
    "experts": (1, 0), "shared": (1, 0), "lm_head": (1,),
}


@dataclass(frozen=True)
class Variant:
    """A non-Megatron layout of one block that an engine offers, and the flag that selects it.

    Attributes:
        block: a key of :data:`BLOCKS`.
        choices: the block's choice tuple under this variant.
        flags: the engine's command-line arguments that select it (e.g.
            ``("--moe-dense-tp-size", "1")``).
        source: where the engine defines it.
    """

    block: str
    choices: tuple[int, ...]
    flags: tuple[str, ...]
    source: str


def node_ranks_cover(group: np.ndarray | int, pp: np.ndarray | int,
                     devices_per_node: int, num_devices: int | None = None,
                     servers: np.ndarray | int | None = None) -> np.ndarray:
    """Whether SGLang's per-node rank ranges start every rank of a server of ``pp`` stages of
    ``group`` ranks (SGLang's ``--tp-size``: l2s ``tp × dp``) laid on ``nnodes = ceil(group ×
    pp / devices_per_node)`` nodes, each node holding at most ``devices_per_node`` of them.

    Each node launches ``max(pp // nnodes, 1)`` consecutive stages, or, when several nodes
    share a stage (``nnodes // pp`` of them), its share ``group // (nnodes // pp)`` of that
    stage's ranks (sgl-project/sglang v0.5.23, ``sglang/srt/entrypoints/engine.py``
    ``_calculate_rank_ranges``). So every stage starts only where ``pp`` is a multiple of
    ``nnodes`` or ``nnodes`` of ``pp`` (with ``group`` divisible by the nodes per stage); its
    own check, ``tp_size × pp_size`` divisible by ``nnodes``
    (``sglang/srt/arg_groups/validation_hook.py``), passes layouts that leave a stage
    unstarted, e.g. ``--tp-size 4 --pp-size 3 --nnodes 2``, where node 0 starts stage 0,
    node 1 stage 1, and the server waits for stage 2 for ever. Every node runs the same
    number of ranks, ``group × pp / nnodes``, on its GPUs 0, 1, …: with ``num_devices`` (a
    cluster of full nodes and one partial node of ``num_devices % devices_per_node``), the
    cluster must also have ``nnodes`` nodes with that many devices for each server, and
    room for every server's share, e.g. not TP2 PP6 on 12 devices of nodes of 8, whose
    second node has 4 of the 6 it would use. A server on one node is always covered.

    Args:
        group, pp: broadcastable integer arrays (or ints).
        devices_per_node: devices per node (per host: ``DeviceSpec.host_devices``).
        num_devices: the cluster's devices; ``None``: enough whole nodes.
        servers: the servers the plan launches (broadcastable; e.g. a dense model's DP
            replicas, which may leave devices idle); ``None``: ``num_devices // (group ×
            pp)``.

    Returns:
        bool array of the broadcast shape.
    """
    g = np.asarray(group, dtype=np.int64)
    p = np.maximum(np.asarray(pp, dtype=np.int64), 1)
    dpn = max(int(devices_per_node), 1)
    nodes = -(-(g * p) // dpn)
    stages_per_node = (p % nodes == 0) & ((p // np.maximum(nodes, 1)) * g <= dpn)
    per_stage = np.maximum(nodes // p, 1)
    split = (nodes % p == 0) & (g % per_stage == 0) & (g // per_stage <= dpn)
    ok = stages_per_node | split
    if num_devices is not None:
        n_dev = int(num_devices)
        on_node = -(-(g * p) // np.maximum(nodes, 1))          # each node's ranks
        full, rest = divmod(n_dev, dpn)
        hosts = full + (rest >= on_node)                        # nodes that hold a share
        slots = full * (dpn // on_node) + rest // on_node       # shares the cluster holds
        count = n_dev // np.maximum(g * p, 1) if servers is None else \
            np.asarray(servers, dtype=np.int64)
        ok &= (hosts >= nodes) & (slots >= np.maximum(count, 1) * nodes)
    return np.asarray((nodes <= 1) | ok)


def servers_fit_nodes(server_gpus: np.ndarray | int, servers: np.ndarray | int,
                      devices_per_node: int, num_devices: int) -> np.ndarray:
    """Whether ``servers`` servers of ``server_gpus`` GPUs each sit on ``num_devices``
    devices in nodes of ``devices_per_node`` (the last node may be partial) without sharing
    a node with another server's share of another node.

    A server no wider than a node sits inside one: ``floor(node / gpus)`` per full node and
    ``floor(rest / gpus)`` on the partial one (vLLM's executor refuses a world above the
    node's GPUs without Ray; SGLang starts one node's ranks; the cost model prices each such
    server inside a scale-up domain). A wider one takes ``ceil(gpus / node)`` nodes of its own
    (its own Ray cluster, ``--nnodes`` group or Slurm job, as the exports launch it), the
    partial node only as one server's last. The engines' own rules add to this
    (:func:`node_ranks_cover`, :func:`dp_ranks_fit_nodes`).

    Args:
        server_gpus, servers: broadcastable integer arrays (or ints).
        devices_per_node: devices per node (per host: ``DeviceSpec.host_devices``).
        num_devices: the cluster's devices.

    Returns:
        bool array of the broadcast shape.
    """
    g = np.maximum(np.asarray(server_gpus, dtype=np.int64), 1)
    count = np.asarray(servers, dtype=np.int64)
    dpn = max(int(devices_per_node), 1)
    full, rest = divmod(int(num_devices), dpn)
    inside = full * (dpn // g) + rest // g >= count
    spans = -(-g // dpn)
    last = g - (spans - 1) * dpn                        # GPUs on a server's last node
    own = (count * spans <= full) | ((count * spans <= full + 1) & (rest >= last))
    return np.asarray(np.where(g <= dpn, inside, own))


def dp_node_ranks(world: int, dp: int, devices_per_node: int) -> list[int]:
    """DP ranks of ``world`` GPUs (``tp × pp``, at most a node) that each node of one vLLM
    server holds when the ``dp`` ranks span nodes: ``floor(node / world)`` per node, the last
    node what is left (:func:`dp_ranks_fit_nodes`)."""
    per_node = max(devices_per_node // max(world, 1), 1)
    return [min(per_node, dp - k * per_node) for k in range(-(-dp // per_node))]


def dp_ranks_fit_nodes(world: np.ndarray | int, dp: np.ndarray | int,
                       devices_per_node: int, num_devices: int,
                       servers: np.ndarray | int | None = None) -> np.ndarray:
    """Whether vLLM can place ``servers`` servers of ``dp`` data-parallel ranks of ``world``
    GPUs each (``tp × pp``) on ``num_devices`` devices in nodes of ``devices_per_node`` (the
    last node may be partial), where a server's ranks span nodes.

    vLLM 0.33.0 (``vllm/v1/engine/utils.py`` ``create_dp_placement_groups``,
    ``vllm/engine/arg_utils.py``): a DP rank no wider than a node runs whole on one node —
    under internal load balancing each node of the server starts ``--data-parallel-size-local``
    ranks on its own GPUs (its executor refuses a world above the node's GPUs), under Ray's
    default ``strict`` packing each rank is a ``STRICT_PACK`` placement group on one node —
    so a server takes ``ceil(dp / floor(node / world))`` nodes of its own
    (:func:`dp_node_ranks`), the partial node only as one server's last. A rank wider than a
    node runs only under ``VLLM_RAY_DP_PACK_STRATEGY=span``, which asserts that the world is
    a multiple of the node size and that the Ray cluster's nodes are alike (so the ranks take
    whole nodes, which the partial node cannot give). A server whose ranks all sit on one
    node, and ``dp = 1`` (one replica, which Ray places over any nodes), are always placed.

    Args:
        world, dp: broadcastable integer arrays (or ints).
        devices_per_node: devices per node (per host: ``DeviceSpec.host_devices``).
        num_devices: the cluster's devices.
        servers: the servers launched (broadcastable); ``None``: ``num_devices // (world ×
            dp)``.

    Returns:
        bool array of the broadcast shape.
    """
    w = np.maximum(np.asarray(world, dtype=np.int64), 1)
    d = np.maximum(np.asarray(dp, dtype=np.int64), 1)
    dpn = max(int(devices_per_node), 1)
    full, rest = divmod(int(num_devices), dpn)
    count = np.maximum(int(num_devices) // (w * d) if servers is None else
                       np.asarray(servers, dtype=np.int64), 1)
    per_node = np.maximum(dpn // w, 1)
    need = -(-d // per_node)                            # nodes per server
    last = d - (need - 1) * per_node                    # ranks on a server's last node
    within = (count * need <= full) | ((count * need <= full + 1) & (rest // w >= last))
    spanning = (w % dpn == 0) & (count * w * d <= full * dpn)
    placed = np.where(w <= dpn, within, spanning)
    return np.asarray((d <= 1) | (w * d <= dpn) | placed)


@dataclass(frozen=True)
class EngineProfile:
    """What one serving engine, at one pinned version, can launch.

    Attributes:
        name: ``vllm``, ``sglang`` or ``trtllm`` (the ``--engine``/``--export`` value).
        title: display name.
        version: the pinned release.
        source: repository and commit (or wheel) the facts were read from.
        memory_profile: key of ``cost.config.ENGINE_PROFILES`` with its memory policy.
        vocab_multiple: the vocabulary is padded to a multiple of this before a vocabulary
            split must divide it evenly (0: padded per rank, no rule).
        ep_full_or_none: MoE expert parallelism is all or nothing: ``ep`` is 1 (experts
            tensor-parallel over the whole ``tp × dp`` group) or ``tp × dp`` (each rank owns
            whole experts). False: any ``ep`` dividing ``tp × dp`` (``etp = tp·dp/ep``).
        adp_all_or_none: attention-DP covers the whole group (attention TP 1) or is off:
            ``tp == 1 or dp == 1``.
        variants: offered non-Megatron layouts (:class:`Variant`).
        ep_whole_group: a MoE's ``ep`` is ``tp × dp`` exactly (no expert TP, not even EP 1):
            SGLang with an all-to-all backend, which sets ``--ep-size`` to ``--tp-size``
            (``api.make_cost_model`` sets it); False by default.
        decode_context_parallel: the engine shards the KV cache by tokens over ``cp`` ranks of
            its TP group (``cp > 1``; the flag is :attr:`dcp_flag`). False: ``cp`` is 1.
        node_rank_ranges: a server over several nodes starts on each node the ranks of
            SGLang's per-node rank ranges, so only the layouts :func:`node_ranks_cover`
            accepts start every stage; as each node runs the same number of ranks, where the
            mesh fills a node first, the space also leaves out the servers whose groups or
            pipeline hops change side between the two placements
            (``parallel.space.even_split_differs``). False: any layout (TensorRT-LLM one MPI
            rank per GPU in rank order).
        dp_ranks_in_nodes: a MoE server's data-parallel ranks that span nodes are placed
            whole on nodes, or over whole nodes each (vLLM: :func:`dp_ranks_fit_nodes`).
        dp_outer_ranks: the engine numbers a server's ranks DP outermost (``dp, pp, tp``,
            vLLM), where l2s's mesh prices them PP outermost
            (:mod:`learn_to_shard.parallel.mesh`): the two agree unless ``pp > 1`` and
            ``dp > 1``, where a MoE stage's expert group is a slice of every DP rank and its
            all-to-all crosses the nodes the pipeline hops l2s prices as crossing do not. The
            space leaves out such MoE servers wider than one scale-up domain (their price
            would be another placement's). False: PP outermost, as priced.
        ep_inner_ranks: the engine numbers a MoE stage's ranks expert-parallel innermost
            (TensorRT-LLM: ``moe_ep_rank = tp_rank % moe_ep_size``), where l2s's mesh puts
            expert TP innermost: with ``1 < ep < tp × dp`` over a stage wider than one
            scale-up domain the engine's expert-TP groups cross domains where l2s prices its
            all-to-all across them; the space leaves such layouts out. False: expert TP
            innermost, as priced.
        dcp_flag: the engine's decode context-parallel flag (empty without one).
        launcher: the server command.
        facts: ``(fact, source)`` pairs, listed by ``l2s engines``.
        adp_dense_replicated: a MoE model's dense MLP layers under attention-DP with attention
            TP above 1 run replicated (the ``dense`` block's ``(2, 2)`` variant) or not at
            all as ``l2s`` prices them: SGLang shards them over the whole ``--tp-size`` group
            with the DP ranks' rows gathered unless ``--moe-dense-tp-size 1`` replicates them
            (``is_dense_ffn_fully_dp``; ``--enable-dense-mlp-attn-tp``, the attention-TP
            split, is read by ``models/kimi_k3.py`` alone). False: Megatron's split within
            the attention TP group, as priced.
    """

    name: str
    title: str
    version: str
    source: str
    memory_profile: str
    vocab_multiple: int
    ep_full_or_none: bool
    adp_all_or_none: bool
    variants: tuple[Variant, ...] = ()
    ep_whole_group: bool = False
    decode_context_parallel: bool = False
    node_rank_ranges: bool = False
    dp_ranks_in_nodes: bool = False
    dp_outer_ranks: bool = False
    ep_inner_ranks: bool = False
    dcp_flag: str = ""
    launcher: str = ""
    facts: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    adp_dense_replicated: bool = False

    def allowed(self, block: str) -> tuple[tuple[int, ...], ...]:
        """Choice tuples the engine implements for ``block`` (Megatron's first).

        Raises:
            KeyError: unknown block.
        """
        out = [MEGATRON[block]]
        out += [v.choices for v in self.variants if v.block == block and v.choices not in out]
        return tuple(out)

    def replicates_dense_under_adp(self, is_moe: bool, has_dense_ffn: bool) -> bool:
        """Whether a model's dense MLP layers must run replicated wherever attention-DP and
        attention TP are both above 1 (:attr:`adp_dense_replicated`, for a MoE model,
        ``is_moe``, with dense layers, ``has_dense_ffn``): the one condition the search's
        ``engine_dense_adp`` rule and the export's note on a plan outside it read."""
        return self.adp_dense_replicated and is_moe and has_dense_ffn


_VLLM = "vllm-project/vllm v0.33.0 (wheel vllm-0.33.0, commit 4ba787ec9)"
_SGL = "sgl-project/sglang v0.5.23 (wheel sglang-0.5.23)"
_TRT_SERVE = ("NVIDIA/TensorRT-LLM tensorrt_llm/commands/serve.py @ "
              "00209af149e7774406881a37283dce303571eb11")
_TRT_ARGS = ("NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py @ "
             "0004396720054fd8e205cbf616f21f0b57c6b412")

ENGINES: dict[str, EngineProfile] = {
    "vllm": EngineProfile(
        name="vllm", title="vLLM", version="0.33.0", source=_VLLM, memory_profile="vllm",
        vocab_multiple=64, ep_full_or_none=True, adp_all_or_none=False,
        decode_context_parallel=True, dcp_flag="--decode-context-parallel-size",
        launcher="vllm serve", dp_ranks_in_nodes=True, dp_outer_ranks=True,
        facts=(
            ("ranks numbered DP outermost, then PP, then TP (world reshaped to dp × pp × pcp "
             "× tp), the expert group of a stage being every DP rank's TP ranks of that "
             "stage: a MoE server with pp > 1 and dp > 1 over several nodes runs its expert "
             "all-to-all across nodes and its stage hops inside one, the other way round "
             "from l2s's mesh (PP outermost), so l2s leaves such servers out of vLLM's space",
             f"{_VLLM}: vllm/distributed/parallel_state.py initialize_model_parallel"),
            ("a MoE server's DP ranks (tp × pp GPUs each) over several nodes: each rank whole "
             "on one node (internal load balancing starts --data-parallel-size-local ranks "
             "per node; Ray's default strict packing, one STRICT_PACK group per rank), or "
             "over whole nodes of equal size under VLLM_RAY_DP_PACK_STRATEGY=span (world a "
             "multiple of the node size)",
             f"{_VLLM}: vllm/v1/engine/utils.py create_dp_placement_groups, "
             "vllm/engine/arg_utils.py"),
            ("axes: --tensor-parallel-size, --pipeline-parallel-size, --data-parallel-size "
             "(attention-DP ranks of one MoE engine), --enable-expert-parallel",
             f"{_VLLM}: vllm/config/parallel.py ParallelConfig"),
            ("--decode-context-parallel-size (l2s cp) shards each sequence's KV cache by "
             "tokens (interleaved) over cp ranks inside the TP group, for MLA and GQA; it adds "
             "no GPUs and lies in [1, tp / num_kv_heads]; --dcp-comm-backend ag_rs gathers the "
             "queries and reduce-scatters the partial outputs",
             "vllm-project/vllm docs/serving/context_parallel_deployment.md @ 020505c2af90; "
             f"{_VLLM} flag snapshot (--dcp-comm-backend choices a2a, ag_rs)"),
            ("MoE: without --enable-expert-parallel experts are tensor-parallel over "
             "tp × dp (ep 1); with it each of the tp × dp ranks owns whole experts "
             "(ep = tp × dp, etp 1); no other split",
             f"{_VLLM}: vllm/model_executor/layers/fused_moe/config.py "
             "FusedMoEParallelConfig.make"),
            ("layouts: VocabParallelEmbedding, QKVParallelLinear (column), head-parallel "
             "attention, RowParallelLinear o_proj/down, MergedColumnParallelLinear gate_up, "
             "ReplicatedLinear router gate, ParallelLMHead: Megatron only",
             f"{_VLLM}: vllm/model_executor/layers/linear.py, vocab_parallel_embedding.py"),
            ("attention heads must divide by --tensor-parallel-size",
             f"{_VLLM}: vllm/config/model.py verify_with_parallel_config"),
            ("vocabulary padded to a multiple of 64, then split evenly over TP",
             f"{_VLLM}: vllm/model_executor/layers/vocab_parallel_embedding.py "
             "DEFAULT_VOCAB_PADDING_SIZE"),
            ("dense models: --data-parallel-size > 1 is refused offline ('not "
             "supported/useful for dense models'); l2s exports dense dp as more servers",
             f"{_VLLM}: vllm/config/parallel.py ParallelConfig.__post_init__"),
            ("memory: --gpu-memory-utilization (default 0.9) of the device for weights, "
             "activations and the paged KV cache; KV blocks allocated on demand",
             f"{_VLLM}: vllm/config/cache.py CacheConfig"),
        )),
    "sglang": EngineProfile(
        name="sglang", title="SGLang", version="0.5.23", source=_SGL,
        memory_profile="sglang", vocab_multiple=64, ep_full_or_none=False,
        adp_all_or_none=False, decode_context_parallel=True, node_rank_ranges=True,
        dcp_flag="--decode-context-parallel-size", launcher="python -m sglang.launch_server",
        adp_dense_replicated=True,
        variants=(
            Variant("dense", (2, 2), ("--moe-dense-tp-size", "1"),
                    source=f"{_SGL}: sglang/srt/arg_groups/fields/parallel.py "
                           "moe_dense_tp_size"),
        ),
        facts=(
            ("axes: --tp-size is the whole stage group (l2s tp × dp), --attn-dp-size the "
             "attention-DP groups inside it (attention TP = tp-size / attn-dp-size), "
             "--ep-size the expert-parallel width (moe TP = tp-size / ep-size), --pp-size",
             f"{_SGL}: sglang/srt/arg_groups/fields/parallel.py, "
             "sglang/srt/runtime_context.py parallel_widths_of"),
            ("--decode-context-parallel-size (alias --dcp-size) shards the KV cache by tokens "
             "over cp ranks of the TP group (l2s cp; --dcp-comm-backend a2a, ag_rs or "
             "fi_a2a)", f"{_SGL} flag snapshot: dest dcp_size"),
            ("--enable-dp-attention is a deprecated spelling (resolves to --attn-dp-size; "
             "'remove after 2026-12-31'): never exported",
             f"{_SGL}: sglang/srt/arg_groups/fields/parallel.py enable_dp_attention"),
            ("dense MLP layers of MoE models under DP attention: --moe-dense-tp-size 1 "
             "replicates them (l2s's dense (2, 2) variant, the only one searched where "
             "attention TP > 1; with attention TP 1 the Megatron split is the same local "
             "compute, exported the same way); without it they shard over the whole "
             "--tp-size group with the DP ranks' rows gathered, which l2s does not price. "
             "--enable-dense-mlp-attn-tp (the attention-TP split) is read by the Kimi-K3 "
             "model alone; Llama-4's dense layers never replicate, so its MoE servers take no "
             "attention-DP",
             f"{_SGL}: sglang/srt/models/deepseek_v2.py, glm4_moe.py (mlp_parallel_group "
             "'replicated' if is_dense_ffn_fully_dp() else 'tp'), models/kimi_k3.py "
             "_dense_mlp_parallel_group, models/llama4.py (LlamaMLP, parallel_group 'tp'), "
             "layers/layer_boundary/layout.py is_dense_ffn_fully_dp"),
            ("vocabulary padded to a multiple of 64 then split evenly",
             f"{_SGL}: sglang/srt/layers/vocab_parallel_embedding.py"),
            ("--moe-a2a-backend deepep sets --ep-size to --tp-size: under --moe-a2a l2s "
             "searches EP = the whole stage group only",
             f"{_SGL}: sglang/srt/server_args.py ServerArgs._handle_a2a_moe"),
            ("a server over several nodes (--nnodes) starts max(pp // nnodes, 1) stages per "
             "node, or a share of one stage's ranks when nnodes is a multiple of pp, the same "
             "number of ranks on every node's GPUs 0, 1, …: l2s searches only layouts where "
             "that starts every stage on nodes the cluster has (not --tp-size 4 --pp-size 3 "
             "on 2 nodes, whose third stage never starts; not TP2 PP6 on 12 GPUs of nodes of "
             "8, whose second node has 4 of the 6 it would run)",
             f"{_SGL}: sglang/srt/entrypoints/engine.py _calculate_rank_ranges"),
            ("each node of a server runs the same number of its ranks (world / nnodes), where "
             "l2s's mesh fills a node first: l2s leaves out the servers whose TP groups, "
             "expert groups or pipeline hops would change side of a node boundary between "
             "the two (non-power-of-two layouts, e.g. TP2 x attention-DP3 x PP3 on 24 GPUs "
             "runs 6 + 6 + 6)",
             f"{_SGL}: sglang/srt/entrypoints/engine.py _calculate_rank_ranges, "
             "sglang/srt/runtime_context.py spawn_world_rank"),
            ("memory: --mem-fraction-static of the device for weights and the KV pool; "
             "requests admitted on estimated KV use and retracted when full (on demand)",
             f"{_SGL}: sglang/srt/arg_groups/fields/schedule.py mem_fraction_static"),
        )),
    "trtllm": EngineProfile(
        name="trtllm", title="TensorRT-LLM", version="1.2.0rc2", source=_TRT_SERVE,
        memory_profile="trtllm", vocab_multiple=0, ep_full_or_none=False,
        adp_all_or_none=True, launcher="trtllm-serve", ep_inner_ranks=True,
        facts=(
            ("MoE ranks numbered expert-parallel innermost (moe_ep_rank = tp_rank % "
             "moe_ep_size, moe_tp_rank = tp_rank // moe_ep_size; pp outermost): with 1 < "
             "moe_expert_parallel_size < tensor_parallel_size over a stage wider than one "
             "NVLink domain the expert-TP groups cross domains where l2s prices the "
             "all-to-all across them, so l2s leaves such layouts out",
             "NVIDIA/TensorRT-LLM@b35ac1b64368513d215c57d2ed01d62d910df8da "
             "tensorrt_llm/mapping.py Mapping (the 1.2.0rc2 version.py)"),
            ("axes: --tp_size (tensor_parallel_size), --pp_size, --ep_size "
             "(moe_expert_parallel_size); moe_tensor_parallel_size and enable_attention_dp "
             "in the --config YAML; moe_tp × moe_ep = tp_size",
             f"{_TRT_SERVE}; {_TRT_ARGS} BaseLlmArgs"),
            ("enable_attention_dp: attention runs data parallel over the whole "
             "tensor_parallel_size (attention TP 1), so l2s needs tp == 1 or dp == 1",
             f"{_TRT_ARGS} enable_attention_dp"),
            ("--cp_size (context_parallel_size) exists; its decode mapping (Helix: KV "
             "sharded over cp in attention, TP over all ranks in the FFN) was not checked "
             "against l2s's cp, so l2s plans cp 1 for TensorRT-LLM",
             f"{_TRT_SERVE} flag snapshot"),
            ("vocabulary padded to a multiple of tp_size at checkpoint conversion (no rule)",
             "NVIDIA/TensorRT-LLM tensorrt_llm/models/convert_utils.py pad_vocab_size"),
            ("memory: the KV cache takes --kv_cache_free_gpu_memory_fraction (0.9) of the "
             "memory free after weights and buffers; GUARANTEED_NO_EVICT scheduler "
             "reserves a request's whole KV on admission",
             f"{_TRT_SERVE} get_llm_args"),
        )),
}


#: TensorRT-LLM's default ``max_batch_size`` (``BuildConfig``, which ``trtllm-serve``'s
#: ``get_llm_args`` takes its default from at the pinned commit).
TRTLLM_MAX_BATCH_SIZE = 2048
_TRT_BUILD = ("NVIDIA/TensorRT-LLM tensorrt_llm/builder.py @ "
              "008b2b8d23af95e4e19fa6f354f9c5f6349b2bfc BuildConfig.max_batch_size")
#: Where each engine's default admission cap is defined (the rule :func:`default_max_num_seqs`
#: implements).
ADMISSION_SOURCES: dict[str, str] = {
    "vllm": f"{_VLLM}: vllm/engine/arg_utils.py EngineArgs.get_batch_defaults (API server: "
            "1024 on devices of >= 70 GiB that are not an A100, else 256), per DP engine",
    "sglang": f"{_SGL}: sglang/srt/mem_cache/kv_cache_configurator.py resolve_max_num_reqs "
              "(per attention-DP worker: KV tokens / context length x 512, clamped to "
              "[2048, 4096], at most KV tokens // 2)",
    "trtllm": f"{_TRT_BUILD} = 2048, taken by {_TRT_SERVE} get_llm_args; per attention-DP "
              "rank and pipeline micro-batch (NVIDIA/TensorRT-LLM@1a0dc5f7 "
              "tensorrt_llm/_torch/pyexecutor/model_engine.py "
              "PyTorchModelEngine.get_max_num_sequences: pp_size x max_batch_size, the "
              "executor's max_num_active_requests)",
}


#: TensorRT-LLM's default ``max_num_tokens`` (``BuildConfig``, the same source as
#: :data:`TRTLLM_MAX_BATCH_SIZE`).
TRTLLM_MAX_NUM_TOKENS = 8192
#: Where each engine's default token budget per step is defined (the rule
#: :func:`default_max_num_batched_tokens` implements).
TOKEN_BUDGET_SOURCES: dict[str, str] = {
    "vllm": f"{_VLLM}: vllm/engine/arg_utils.py EngineArgs.get_batch_defaults (API server: "
            "16384 on devices of >= 160 GiB, 8192 on devices of >= 70 GiB that are not an "
            "A100, else 2048); vLLM v0.11.0 has the same rule without the 160 GiB tier",
    "sglang": f"{_SGL}: sglang/srt/arg_groups/memory_hook.py handle_gpu_memory_settings "
              "(chunked_prefill_size by device memory: < 20 GiB 2048, < 60 GiB 4096, "
              "< 160 GiB 8192, else 16384); with DP attention SGLang divides it by the "
              "attention-DP size (sglang/srt/arg_groups/parallel_hook.py)",
    "trtllm": "NVIDIA/TensorRT-LLM tensorrt_llm/builder.py @ "
              "008b2b8d23af95e4e19fa6f354f9c5f6349b2bfc BuildConfig.max_num_tokens = 8192, "
              f"taken by {_TRT_SERVE} get_llm_args",
}
def _vllm_large_device(device_name: str, device_memory_bytes: float) -> bool:
    """vLLM's larger batch defaults apply (``EngineArgs.get_batch_defaults``, source in
    :data:`TOKEN_BUDGET_SOURCES`): a device of >= 70 GiB whose name does not contain
    ``a100``."""
    return device_memory_bytes >= 70 * GIB and "a100" not in device_name.lower()


#: The token budget of a cost model with no engine: vLLM's on an H100-class device.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192


def default_max_num_batched_tokens(engine: str | None, device_name: str,
                                   device_memory_bytes: float) -> int:
    """Tokens per engine step (prompt chunk + decodes) when the launch does not set the
    engine's budget (vLLM ``--max-num-batched-tokens``, SGLang ``--chunked-prefill-size``,
    TensorRT-LLM ``max_num_tokens``); the rule and its source per engine are in
    :data:`TOKEN_BUDGET_SOURCES`. The engines read the memory from the device (bytes, as
    ``torch.cuda`` reports them) and compare it with thresholds in GiB.

    Args:
        engine: ``vllm``, ``sglang``, ``trtllm``, or ``None`` (no engine:
            :data:`DEFAULT_MAX_NUM_BATCHED_TOKENS`).
        device_name: the device's names, e.g. its preset key and display name (vLLM tests
            the CUDA device name for ``a100``).
        device_memory_bytes: the device's memory capacity, bytes.

    Returns:
        The engine's default for one scheduler. The cost model applies it per rank; SGLang
        with DP attention divides its own default over the attention-DP ranks, so a launch
        printed by ``l2s`` states the budget explicitly (per instance for SGLang: the plan's
        budget × attention-DP ranks).

    Raises:
        ConfigError: unknown engine.
    """
    mem_gib = device_memory_bytes / GIB
    if engine is None:
        return DEFAULT_MAX_NUM_BATCHED_TOKENS
    if engine == "vllm":
        if mem_gib >= 160:
            return 16384
        return 8192 if _vllm_large_device(device_name, device_memory_bytes) else 2048
    if engine == "sglang":
        if mem_gib < 20:
            return 2048
        if mem_gib < 60:
            return 4096
        return 8192 if mem_gib < 160 else 16384
    if engine == "trtllm":
        return TRTLLM_MAX_NUM_TOKENS
    raise ConfigError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")


#: Engines whose scheduler runs a prefill-only step whenever prompts are pending and decodes
#: otherwise (no mixed prefill + decode steps by default), the simulation's
#: ``prefill_first`` (for one scheduler: with attention-DP each rank schedules its own batch,
#: ``serving.load.simulate_estimate``); the others put decodes first in every step and fill
#: the token budget with prompt chunks (vLLM V1's scheduler; TensorRT-LLM's in-flight
#: batching).
PREFILL_FIRST_ENGINES: tuple[str, ...] = ("sglang",)
#: Where :data:`PREFILL_FIRST_ENGINES` is read.
SCHEDULING_SOURCES: dict[str, str] = {
    "sglang": "sgl-project/sglang python/sglang/srt/managers/scheduler.py "
              "Scheduler.get_next_batch_to_run ('Run prefill first if possible': a new prefill "
              "batch when one can be formed, else the decode batch); prefill is mixed into "
              "decode only with --enable-mixed-chunk (server_args.py, default False)",
}

#: When each engine's KV pool admits a request, the simulation's ``kv_admission``
#: (:data:`~learn_to_shard.cost.config.KV_ADMISSIONS`; a row or launch may override it,
#: ``CostModelConfig.kv_admission``). vLLM's pool is paged on demand, but simulating that
#: (``on_demand``) fits its calibration rows worse (serving loss 0.057 → 0.067 at the
#: same refitted overheads, measured before V0's multi-step bursts ran to their end) and
#: the held-out rows too (docs/validation.md, "What is left"),
#: so its default stays the reservation.
KV_ADMISSION: dict[str, str] = {"vllm": "reserve", "sglang": "reserve", "trtllm": "reserve"}
#: Where :data:`KV_ADMISSION` is read.
KV_ADMISSION_SOURCES: dict[str, str] = {
    "vllm": f"{_VLLM}: vllm/v1/core/sched/scheduler.py (a waiting request is scheduled when "
            "the blocks of its scheduled tokens can be allocated; a running request that "
            "cannot get its next block preempts the lowest-priority, last-added running "
            "request, whose blocks are freed and which is recomputed when it runs again: "
            "kv_admission on_demand, not the default, see KV_ADMISSION)",
    "sglang": f"{_SGL}: sglang/srt/managers/schedule_policy.py PrefillAdder.add_one_req (a "
              "new request is charged its prompt plus min(max_new_tokens, "
              "SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION = 4096) and each running one "
              "_get_running_request_total_token_offset, its remaining max_new_tokens x 1.0 "
              "for ignore_eos requests, which sglang.benchmark.serving sends by default); with "
              "the radix cache disabled, add_one_req_ignore_eos instead admits while no future "
              "step can run out of tokens (IGNORE_EOS_RESERVE_TOKENS = 1 per request)",
    "trtllm": f"{_TRT_SERVE} get_llm_args: the GUARANTEED_NO_EVICT capacity scheduler "
              "reserves a request's whole KV on admission",
}

#: Engines whose scheduler overlaps the host work of step n (processing its outputs,
#: scheduling) with the GPU work of step n + 1 by default, the simulation's
#: ``overlap_schedule``: the contents of a step are fixed while the step before it runs, so a
#: request that arrives during a step joins one step later than under a synchronous loop
#: (TensorRT-LLM: "introduces one extra decoding step"). vLLM's equivalent,
#: ``--async-scheduling``, is off by default.
OVERLAP_SCHEDULE_ENGINES: tuple[str, ...] = ("sglang", "trtllm")

#: Where :data:`OVERLAP_SCHEDULE_ENGINES` is read.
OVERLAP_SOURCES: dict[str, str] = {
    "sglang": "the zero-overhead batch scheduler, on by default since SGLang v0.4 "
              "(https://lmsys.org/blog/2024-12-04-sglang-v0-4/#zero-overhead-batch-scheduler; "
              "off with --disable-overlap-schedule, and under pipeline parallelism: "
              f"{_SGL} sglang/srt/arg_groups/overrides.py _pipeline_parallel_overlap_disable)",
    "trtllm": "TensorRT-LLM PyTorch backend overlap scheduler, 'Enabled by default' "
              "(https://nvidia.github.io/TensorRT-LLM/features/overlap-scheduler.html; off "
              "with disable_overlap_scheduler: true)",
    "vllm": "off unless --async-scheduling (vllm/config/scheduler.py async_scheduling, "
            f"default False; {_VLLM})",
}


def runs_two_batch_overlap(engine: str | None, ep: Any, moe_a2a: bool) -> Any:
    """Whether ``engine`` runs two-batch overlap (a bool, or element-wise over an array
    ``ep``) at expert parallelism ``ep``, with (``moe_a2a``) or without an all-to-all
    backend: vLLM's ``--enable-dbo`` needs a DeepEP / NIXL all-to-all, which needs expert
    parallelism (``ep > 1``; VllmConfig.__post_init__, vLLM 0.33.0); SGLang's
    ``--enable-two-batch-overlap`` needs an all-to-all backend and EP
    (sglang/srt/server_args.py); without an engine profile, everywhere."""
    if engine == "vllm":
        return ep > 1
    if engine == "sglang":
        return (ep > 1) & moe_a2a
    return np.full(np.shape(ep), True) if np.ndim(ep) else True


def runs_overlap_schedule(engine: str | None, pp: int) -> bool:
    """Whether ``engine``'s scheduler overlaps steps by default (:data:`OVERLAP_SCHEDULE_ENGINES`)
    for a server of ``pp`` pipeline stages: SGLang turns it off when ``pp > 1``
    (sgl-project/sglang v0.5.23 ``sglang/srt/arg_groups/overrides.py``
    ``_pipeline_parallel_overlap_disable``)."""
    return engine in OVERLAP_SCHEDULE_ENGINES and not (engine == "sglang" and pp > 1)


def default_kv_dtype(engine: str | None, checkpoint_kv_fp8: bool,
                     modelopt: bool = False) -> str:
    """The KV-cache dtype an engine's default (``auto``) gives a checkpoint: ``fp8`` where the
    checkpoint states FP8 KV quantisation and the engine takes it, else ``bf16`` (the
    activation dtype; no engine: the same).

    * TensorRT-LLM takes it from ModelOpt's ``kv_cache_quant_algo``
      (``ModelLoader._apply_modelopt_quant_config``,
      NVIDIA/TensorRT-LLM@0066b2a5696f5819dc4c98befa25e957e6e24fe5
      ``tensorrt_llm/llmapi/llm_utils.py``: with ``kv_cache_config.dtype`` ``auto`` it sets
      ``kv_cache_quant_algo`` from ``hf_quant_config.json``).
    * vLLM 0.33.0 resolves ``--kv-cache-dtype auto`` to ``fp8`` for a ModelOpt checkpoint
      whose ``kv_cache_quant_algo`` (or ``kv_cache_scheme``) is FP8
      (``vllm/utils/torch_utils.py`` ``resolve_kv_cache_dtype_string``, called from
      ``EngineArgs.create_engine_config``; only ``quant_method`` ``modelopt*``, which
      ``transformers_utils/model_arch_config_convertor.py`` sets for ModelOpt exports).
    * SGLang 0.5.23 picks ``float8_e4m3fn`` when the quantisation config's
      ``kv_cache_quant_algo`` is FP8 (``srt/mem_cache/kv_cache_dtype.py``
      ``configure_kv_cache_dtype``; ModelOpt's configs carry it).

    A compressed-tensors ``kv_cache_scheme`` is not read by vLLM's or SGLang's ``auto``.

    Args:
        engine: an engine name (``vllm``, ``sglang``, ``trtllm``) or ``None``; other names
            (fitted profiles) are read as no engine.
        checkpoint_kv_fp8: the checkpoint ships FP8 KV-cache scales
            (``QuantSpec.kv_cache_fp8``).
        modelopt: the checkpoint is a ModelOpt export (``QuantSpec.method`` ``modelopt:*``).
    """
    if not checkpoint_kv_fp8:
        return "bf16"
    if engine == "trtllm" or (engine in ("vllm", "sglang") and modelopt):
        return "fp8"
    return "bf16"


#: Architectures whose ``--kv-cache-dtype auto`` vLLM turns into FP8 on compute capability
#: 10.x whatever the checkpoint states: GLM-5's sparse-attention MoE ("Using fp8 kv-cache for
#: GlmMoeDsaForCausalLM on SM10x"; vllm-project/vllm v0.33.0, wheel vllm-0.33.0:
#: ``vllm/model_executor/models/config.py`` ``GlmMoeDsaForCausalLM.
#: verify_and_update_config``).
VLLM_FP8_KV_ON_SM10X: tuple[str, ...] = ("GlmMoeDsaForCausalLM",)


def vllm_auto_kv_is_fp8_on(architecture: str | None, compute_capability: str | None) -> bool:
    """Whether vLLM's ``--kv-cache-dtype auto`` stores the KV cache in FP8 for a model of
    ``architecture`` (``ModelSpec.config_architecture``) on a device of
    ``compute_capability``, whatever its checkpoint states (:data:`VLLM_FP8_KV_ON_SM10X`)."""
    return architecture in VLLM_FP8_KV_ON_SM10X \
        and (compute_capability or "").startswith("10.")


def weights_refusal(engine: str | None, quant_method: str, fp4: bool, device_name: str,
                    fp4_math: bool, fp8_math: bool,
                    compute_capability: str | None = None, fp8: bool = False,
                    moe: bool = False) -> str | None:
    """Why ``engine`` (an engine runtime: ``vllm``, ``sglang``, ``trtllm`` — TensorRT-LLM's
    PyTorch backend, what ``trtllm-serve`` runs — or ``trtllm-tensorrt``, its TensorRT-engine
    runtime) cannot load weights quantised by ``quant_method`` (``QuantSpec.method``, e.g.
    ``modelopt:NVFP4``, ``modelopt:FP8``, ``mxfp4``, ``gptq``; ``fp4`` / ``fp8``:
    ``QuantSpec.fp4`` / ``QuantSpec.fp8``) on a device with or without FP4 and FP8 math and
    of CUDA ``compute_capability`` (``"8.9"``, ``"9.0"``, …; ``None`` where not known: a
    custom device; ``moe``: the model has routed experts), with what would serve them;
    ``None`` where nothing known stops it.

    * TensorRT-LLM runs NVFP4 only with FP4 math (Blackwell): "FP4 Gemm not supported
      before Blackwell" (NVIDIA/TensorRT-LLM issue 5018, the SM >= 100 check of its FP4 GEMM;
      a W4A16 fallback on Hopper came with NVIDIA/TensorRT-LLM PR 14775, for Nemotron-H
      only). vLLM and SGLang run NVFP4 as W4A16 Marlin GEMMs on SM 80-90 (SGLang 0.5.23
      ``layers/quantization/fp4_utils.py`` ``initialize_fp4_gemm_config`` picks ``marlin``
      there, and its NVFP4 MoE falls back to Marlin on SM 80-90).
    * TensorRT-LLM has no MXFP4 (gpt-oss) MoE kernel before Hopper: below SM 100 its MoE runs
      MXFP4 as W4A16, whose CUTLASS kernel it implements for SM 90 only, and refuses the rest
      with "NotImplementedError: WFP4A16 MoE is unsupported on SM80" (TensorRT-LLM v1.2.0rc1
      serving gpt-oss on an A100: gpustack/gpustack@1f37f1b8bd79c6b424a0cb55c7abd08a5c2132dc
      ``docs/performance-lab/gpt-oss-20b/a100.md``) and "... on SM89" on an Ada L4, which
      has FP8 math (github.com/NVIDIA/TensorRT-LLM/issues/6717, closed as not a bug; the
      gpt-oss support matrix of ``examples/models/core/gpt_oss/README.md``, NVIDIA/TensorRT-LLM
      PR 6908, lists Hopper and Blackwell only). Every SM 8.x device is refused where the
      compute capability is known (a preset's, or a device file's ``compute_capability``),
      else (a custom device without it) a device with neither FP8 nor FP4 math.
    * TensorRT-LLM runs FP8 weights only with FP8 math (SM 89+): it has no weight-only FP8
      fallback (the TensorRT runtime: "Networks with FP8 precision require hardware with FP8
      support" on an A100, NVIDIA/TensorRT-LLM issue 1428; FP8 is an Ada / Hopper /
      Blackwell format, NVIDIA/Model-Optimizer issue 70), where vLLM runs FP8 checkpoints on
      SM 80 as W8A16 Marlin GEMMs (vllm-project/vllm PR 5975).
    * TensorRT-LLM's PyTorch backend loads quantised checkpoints that NVIDIA ModelOpt
      exported (FP8, NVFP4; "The PyTorch backend supports FP8 and NVFP4 quantization ...
      generated by TensorRT Model Optimizer", its documentation as quoted in
      NVIDIA/TensorRT-LLM issue 5716), not Hugging Face GPTQ / AWQ ones (issue 3548, open:
      a 4-bit AutoGPTQ Llama-3.3-70B fails to load); its TensorRT runtime converts AutoGPTQ
      / AutoAWQ Llama checkpoints (``examples/llama``, issue 2458) and is not refused here.
    * SGLang runs FP8 experts only from SM 89 (FP8 math): its fused-MoE kernel is Triton's
      ``fp8e4nv``, which Ampere lacks ("type fp8e4nv not supported in this architecture",
      sgl-project/sglang issues 5871 on an A10, Qwen3-30B-A3B-FP8; 13471 on an A800 with
      0.5.4.post3, MiniMax-M2; 38291 on an A100; the Marlin W8A16 MoE path, PR 30681, is
      open: in the 0.5.23 wheel ``layers/quantization/fp8.py`` ``Fp8MoEMethod`` has a Marlin
      branch for FP4 experts only), while its dense FP8 linear layers fall back to Marlin
      W8A16 on SM 80–88 (PR 8990, merged 2025-08-09; 0.5.23 ``Fp8LinearMethod.use_marlin``
      from ``fp8_utils.can_auto_enable_marlin_fp8``); and a ModelOpt FP8 checkpoint's loader
      checks SM 89 (0.5.23 ``layers/quantization/modelopt_quant.py``
      ``ModelOptFp8Config.get_min_capability`` returns 89). vLLM's allows SM 80 (Marlin
      W8A16, dense and MoE).
    """
    method = quant_method.upper()
    trt = engine in ("trtllm", "trtllm-tensorrt")
    title = f"TensorRT-LLM {ENGINES['trtllm'].version}"
    if trt and fp8 and not fp8_math:
        return (f"{title} runs FP8 weights only with FP8 math (SM 89+: Ada, Hopper, "
                f"Blackwell), which {device_name} does not have (vLLM runs them as W8A16)")
    if engine == "trtllm" and method.split(":")[0] in ("GPTQ", "AWQ"):
        return (f"{title} (trtllm-serve, its PyTorch backend) loads quantised checkpoints "
                f"that ModelOpt exported (FP8, NVFP4), not a Hugging Face "
                f"{method.split(':')[0]} checkpoint (vLLM and SGLang run it)")
    if trt and fp4:
        if "NVFP4" in method and not fp4_math:
            return (f"{title} runs NVFP4 weights only with FP4 math (Blackwell, SM 100+), "
                    f"which {device_name} does not have (vLLM and SGLang run them as W4A16)")
        pre_hopper = compute_capability.startswith("8.") if compute_capability \
            else not fp8_math and not fp4_math
        if "MXFP4" in method and pre_hopper:
            sm = (compute_capability or "8.0").replace(".", "")
            return (f"{title} has no MXFP4 (W4A16) MoE kernel for {device_name} (\"WFP4A16 "
                    f"MoE is unsupported on SM{sm}\": Hopper and Blackwell only; vLLM and "
                    f"SGLang run it)")
    if engine == "sglang" and (fp8 and moe or method == "MODELOPT:FP8") and not fp8_math:
        what = "a ModelOpt FP8 checkpoint" if method == "MODELOPT:FP8" else "FP8 experts"
        return (f"SGLang {ENGINES['sglang'].version} loads {what} only on chips with FP8 "
                f"math (SM 89+), which {device_name} is not (vLLM runs it)")
    return None


#: The planner's model classes whose sliding-window layers SGLang 0.5.23 keeps in a KV pool of
#: their own, window-sized (``srt/configs/model_config.py`` ``is_hybrid_swa_model``: its
#: allowlist, with gpt-oss among ``SWA_SINK_ARCHS``); every other windowed model (Gemma-2/3,
#: Command-R7B / Command-A, Mistral's and Phi-3's windows) holds full-length KV in each layer
#: of its one token pool, the window limiting only the attention span.
SGLANG_WINDOW_KV_CLASSES: tuple[str, ...] = ("GptOssForCausalLM",
                                             "Llama4ForConditionalGeneration")


def caps_window_kv(engine: str | None, architecture: str | None) -> bool:
    """Whether ``engine`` holds a sliding-window layer's KV to its window for a model of class
    ``architecture`` (``CostModelConfig.window_kv_capped``): SGLang only for
    :data:`SGLANG_WINDOW_KV_CLASSES`; vLLM's hybrid allocator and the defaults do; TensorRT-LLM
    is left at the default (its per-layer window, ``kv_cache_config.max_attention_window``,
    was not read against the export)."""
    if engine == "sglang":
        return architecture in SGLANG_WINDOW_KV_CLASSES
    return True


def kv_cache_refusal(engine: str | None, kv_fp8: bool, device_name: str,
                     fp8_math: bool) -> str | None:
    """Why ``engine`` cannot hold an FP8 KV cache on ``device_name``, or ``None``:
    TensorRT-LLM runs FP8, its KV cache included, only on chips with FP8 math (SM 89+: "The
    default PyTorch backend supports FP4 and FP8 quantization on the latest Blackwell and
    Hopper GPUs", nvidia.github.io/TensorRT-LLM features/quantization.html, whose recipes
    list the FP8 KV cache; its support matrix gives Ampere FP32/FP16/BF16/INT8/INT4 and no
    FP8, reference/support-matrix.html); vLLM and SGLang store FP8 KV on Ampere and convert it
    for the attention kernels."""
    if engine in ("trtllm", "trtllm-tensorrt") and kv_fp8 and not fp8_math:
        return (f"TensorRT-LLM {ENGINES['trtllm'].version} runs an FP8 KV cache only with "
                f"FP8 math (SM 89+: Ada, Hopper, Blackwell), which {device_name} does not "
                f"have (vLLM and SGLang store it; or plan with --kv-dtype bf16)")
    return None


def sglang_decode_graph_max_bs(device_memory_bytes: float, tp: int) -> int:
    """The largest decode batch SGLang captures in a CUDA graph when the launch does not set
    ``--cuda-graph-max-bs-decode``: 8 under 20 GiB of device memory, 48 (tp < 4) or 160
    under 35 GiB, 32 or 160 under 60 GiB, 256 or 512 under 160 GiB, else 512 (sgl-project/
    sglang v0.5.23, wheel sglang-0.5.23: ``sglang/srt/arg_groups/memory_hook.py``
    ``handle_gpu_memory_settings``; SGLang lowers it to ``--max-running-requests``, never
    raises it). A decode step of more sequences per forward runs eagerly
    (``runner/decode_cuda_graph_runner.py`` ``can_run_graph``), its kernels launched one by
    one, where the cost model prices a graph replay.

    Args:
        device_memory_bytes: the device's memory capacity, bytes.
        tp: the launch's ``--tp-size``.
    """
    mem = device_memory_bytes / 2**20
    gib = 1024.0
    if mem < 20 * gib:
        return 8
    if mem < 35 * gib:
        return 48 if tp < 4 else 160
    if mem < 60 * gib:
        return 32 if tp < 4 else 160
    if mem < 160 * gib:
        return 256 if tp < 4 else 512
    return 512


def vllm_cudagraph_capture_max(max_num_seqs: int, compute_capability: str | None) -> int:
    """The largest step, in tokens, vLLM captures in a CUDA graph when the launch does not set
    ``--max-cudagraph-capture-size``: ``min(2 · max_num_seqs, 512)``, 1,024 in place of 512
    on compute capability 10.x (vllm-project/vllm v0.33.0, wheel vllm-0.33.0:
    ``vllm/config/vllm.py`` ``VllmConfig._set_cudagraph_sizes``, one token per decoding
    request without speculative decoding). A larger decode step runs without graphs.

    Args:
        max_num_seqs: ``--max-num-seqs``.
        compute_capability: the device's (``"10.0"``), or ``None`` where not known.
    """
    family = 1024 if (compute_capability or "").startswith("10.") else 512
    return min(2 * max(1, max_num_seqs), family)


def sglang_auto_mem_fraction(device_memory_bytes: float, tp: int, pp: int, dp: int,
                             chunked_prefill_size: int, max_running_requests: int | None,
                             mla: bool, deepep: bool,
                             graph_max_bs: int | None = None) -> float:
    """The ``--mem-fraction-static`` SGLang chooses itself when the launch leaves it unset:
    ``(memory − reserved) / memory`` (memory in MiB), ``reserved`` its estimate of activations
    and CUDA-graph buffers (sgl-project/sglang v0.5.23, wheel sglang-0.5.23:
    ``sglang/srt/arg_groups/memory_hook.py`` ``handle_gpu_memory_settings``,
    ``reserve_for_graph_mb``, ``reserve_for_deepep_a2a_mb``; ``cuda_graph_hook.py``
    ``generate_prefill_cuda_graph_batch_sizes``; the post-capture sizing path is off by
    default, ``SGLANG_ENABLE_POST_CAPTURE_KV_SIZING = False``):

    * ``512 + 1.5 · max(chunked_prefill_size, 2048) + 1024 · tp · pp / 8`` MiB;
    * the decode CUDA graphs, ``2 · max_bs`` (``max_bs``: 8 under 20 GiB, 48/32 below
      35/60 GiB for tp < 4 else 160, 256 for tp < 4 else 512 below 160 GiB, else 512;
      capped by ``--max-running-requests``), with attention-DP ``3 · max_bs · dp`` more
      (``+ 1.5 · max_bs · dp`` above ``max_bs`` 300);
    * the prefill CUDA graphs (on by default on CUDA, off with pp > 1): 8 MiB per captured
      size up to ``chunked_prefill_size``, or 1,536 MiB with an MLA backend;
    * at least 10,240 MiB on a device of more than 60 GiB, then 2,048 MiB for DeepEP buffers.

    Args:
        device_memory_bytes: the device's memory.
        tp, pp, dp: the launch's ``--tp-size``, ``--pp-size`` and attention-DP ranks.
        chunked_prefill_size: ``--chunked-prefill-size`` (the server's).
        max_running_requests: ``--max-running-requests``, or ``None`` when unset.
        mla: the model's attention runs an MLA backend.
        deepep: ``--moe-a2a-backend deepep``.
        graph_max_bs: ``--cuda-graph-max-bs-decode``, or ``None`` when unset (the default,
            :func:`sglang_decode_graph_max_bs`).
    """
    mem = device_memory_bytes / 2**20
    gib = 1024.0
    max_bs = sglang_decode_graph_max_bs(device_memory_bytes, tp) if graph_max_bs is None \
        else graph_max_bs
    if max_running_requests is not None:
        max_bs = min(max_bs, max_running_requests)
    graphs = 2.0 * max_bs
    if dp > 1:
        graphs += 3.0 * max_bs * dp + (1.5 * max_bs * dp if max_bs > 300 else 0.0)
    if pp == 1:
        sizes = [b for b in (list(range(4, 33, 4)) + list(range(48, 257, 16))
                             + list(range(288, 513, 32)) + list(range(576, 1025, 64))
                             + list(range(1280, 4097, 256))
                             + list(range(4608, chunked_prefill_size + 1, 512)))
                 if b <= chunked_prefill_size]
        graphs += 1536.0 if mla else 8.0 * len(sizes)
    reserved = 512.0 + 1.5 * max(chunked_prefill_size, 2048) + gib * tp * pp / 8 + graphs
    if mem > 60 * gib:
        reserved = max(reserved, 10 * gib)
    reserved += 2048.0 if deepep else 0.0
    return round((mem - reserved) / mem, 3)


def default_max_num_seqs(engine: str, device_name: str, device_memory_bytes: float,
                         kv_tokens_per_rank: int, context_len: int) -> int:
    """Running requests one scheduler (one attention-DP rank) admits when the launch does not
    set the engine's cap (vLLM ``--max-num-seqs``, SGLang ``--max-running-requests``,
    TensorRT-LLM ``max_batch_size``); the rule and its source per engine are in
    :data:`ADMISSION_SOURCES`.

    Args:
        engine: ``vllm``, ``sglang`` or ``trtllm``.
        device_name: the device's names, e.g. its preset key and display name (vLLM tests
            the CUDA device name for ``a100``).
        device_memory_bytes: the device's memory capacity, bytes.
        kv_tokens_per_rank: KV-cache tokens the rank holds (SGLang sizes its cap from them).
        context_len: the served context length, tokens (SGLang's ``--context-length``).

    Raises:
        ConfigError: unknown engine.
    """
    if engine == "vllm":
        return 1024 if _vllm_large_device(device_name, device_memory_bytes) else 256
    if engine == "sglang":
        estimated = int(kv_tokens_per_rank / max(1, context_len) * 512)
        estimated = max(min(estimated, 4096), 2048)
        return max(1, min(estimated, kv_tokens_per_rank // 2))
    if engine == "trtllm":
        return TRTLLM_MAX_BATCH_SIZE
    raise ConfigError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")


def get_engine(name: str) -> EngineProfile:
    """The profile of engine ``name``.

    Raises:
        ConfigError: unknown engine (the message lists the known ones).
    """
    if name not in ENGINES:
        raise ConfigError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}")
    return ENGINES[name]


__all__ = ["ADMISSION_SOURCES", "BLOCKS", "DEFAULT_MAX_NUM_BATCHED_TOKENS", "ENGINES",
           "KV_ADMISSION", "KV_ADMISSION_SOURCES", "MEGATRON", "OVERLAP_SCHEDULE_ENGINES",
           "OVERLAP_SOURCES", "PREFILL_FIRST_ENGINES", "SCHEDULING_SOURCES",
           "TOKEN_BUDGET_SOURCES", "TRTLLM_MAX_BATCH_SIZE", "TRTLLM_MAX_NUM_TOKENS",
           "EngineProfile", "Variant", "default_max_num_batched_tokens", "default_max_num_seqs",
           "sglang_auto_mem_fraction",
           "get_engine", "runs_overlap_schedule", "runs_two_batch_overlap"]

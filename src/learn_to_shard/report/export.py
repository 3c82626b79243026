"""Launch settings that realise a plan on vLLM, SGLang or TensorRT-LLM (``l2s plan --export``).

The mapping from ``l2s``'s strategy (``tp, ep, pp, dp, batch`` and per-operator choices; see
:class:`~learn_to_shard.parallel.strategy.Strategy`) to each engine's flags follows the
engine profiles in :mod:`learn_to_shard.engines` (pinned versions, sources there):

* **vLLM 0.33.0** (``vllm serve``): ``--tensor-parallel-size tp``, ``--pipeline-parallel-size
  pp``; MoE attention-DP as ``--data-parallel-size dp`` and ``ep = tp × dp`` as
  ``--enable-expert-parallel``; ``--max-num-seqs`` is per DP rank and caps the requests
  running in it, pipeline micro-batches in flight included (``Scheduler.max_num_running_reqs``
  against ``len(self.running)``, whose requests still in flight in another micro-batch are
  skipped, vllm/v1/core/sched/scheduler.py at vllm-project/vllm@00024d31), so it is
  ``batch / dp``, and ``--max-num-batched-tokens`` at least that (vLLM refuses fewer
  tokens than sequences, vllm/config/scheduler.py); ``cp`` as
  ``--decode-context-parallel-size`` with ``--dcp-comm-backend ag_rs`` (the exchange priced).
* **SGLang 0.5.23** (``python -m sglang.launch_server``): ``--tp-size tp × dp`` (the whole
  stage group), ``--attn-dp-size dp``, ``--ep-size ep``, ``--pp-size pp``;
  ``--max-running-requests`` is the instance total (its scheduler divides it by
  ``attn_dp_size``, sglang/srt/model_executor/pool_configurator.py, and by ``pp_size`` for
  each pipeline micro-batch, ``pp_max_micro_batch_size = max_running_requests // pp_size``,
  python/sglang/srt/managers/scheduler.py at sgl-project/sglang@0003215c); ``cp`` as
  ``--decode-context-parallel-size`` with ``--dcp-comm-backend ag_rs``.
* **TensorRT-LLM** (``trtllm-serve``): ``--tp_size tp × dp``, ``--pp_size``, ``--ep_size``;
  ``enable_attention_dp``, ``moe_tensor_parallel_size``, ``moe_expert_parallel_size`` and
  ``kv_cache_config`` in the ``--config`` YAML; ``--max_batch_size`` per attention-DP rank
  and pipeline micro-batch (its executor admits ``max_batch_size × pp_size`` requests,
  ``PyTorchModelEngine.get_max_num_sequences``, tensorrt_llm/_torch/pyexecutor/model_engine.py
  at NVIDIA/TensorRT-LLM@1a0dc5f7).

Dense models have no attention-DP in any engine: their ``dp`` becomes more servers. Whatever a
plan chooses that the engine cannot express (a per-operator layout outside its profile, an
``ep`` it cannot split, online FP8 on TensorRT-LLM) is listed in :attr:`Export.unexpressed`;
nothing is dropped silently.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..cost.model import CostModel, Estimate
from ..cost.terms import runs_trtllm_gen_moe
from ..engines import (
    BLOCKS,
    MEGATRON,
    default_kv_dtype,
    default_max_num_batched_tokens,
    dp_node_ranks,
    dp_ranks_fit_nodes,
    get_engine,
    kv_cache_refusal,
    node_ranks_cover,
    sglang_auto_mem_fraction,
    sglang_decode_graph_max_bs,
    vllm_auto_kv_is_fp8_on,
    vllm_cudagraph_capture_max,
    weights_refusal,
)
from ..engines.architectures import architecture_note, architecture_refusal
from ..errors import ConfigError, PlannerError
from ..hardware.fabric import compute_capability as device_compute_capability
from ..hardware.presets import parse_cluster
from ..hardware.spec import DeviceSpec
from ..model.hf_config import hub_repo_id, shipped_repo_ids
from ..model.spec import AttentionKind, ModelSpec
from ..parallel.mesh import Mesh
from ..parallel.ops import CHOICE_NAMES, OP_NAMES
from ..parallel.space import dp_outer_differs, ep_inner_differs, even_split_differs
from ..parallel.strategy import Strategy
from ..workload import DType, Phase
from .plan import Plan

#: The engines ``--export`` accepts.
EXPORT_ENGINES = ("vllm", "sglang", "trtllm")


def sglang_max_running_requests(batch_per_server: int, dp: int, pp: int) -> int:
    """SGLang's ``--max-running-requests`` for a server of ``batch_per_server`` running
    requests over ``dp`` attention-DP ranks and ``pp`` pipeline stages: SGLang divides it
    over the attention-DP ranks and caps each pipeline micro-batch at its ``// pp``
    (sglang 0.5.23 ``srt/arg_groups/parallel_hook.py``, ``srt/managers/scheduler.py``
    ``pp_max_micro_batch_size``), so with ``pp > 1`` it is the batch rounded up to a multiple
    of ``dp × pp``, where every micro-batch of every rank is whole; the batch itself
    otherwise."""
    if pp <= 1:
        return batch_per_server
    unit = max(dp, 1) * pp
    return -(-batch_per_server // unit) * unit


def trtllm_max_batch_size(batch_per_rank: int, pp: int) -> int:
    """TensorRT-LLM's ``--max_batch_size`` for ``batch_per_rank`` running requests per
    attention-DP rank over ``pp`` pipeline stages: ``ceil(batch_per_rank / pp)``, at least 1.
    It is per pipeline micro-batch: the executor admits ``max_batch_size × pp_size``
    requests (``PyTorchModelEngine.get_max_num_sequences``,
    tensorrt_llm/_torch/pyexecutor/model_engine.py at NVIDIA/TensorRT-LLM@1a0dc5f7), the
    plan's batch rounded up to whole micro-batches, whose size the cost model prices
    (``CostModel.phase_rows``: ``ceil(batch / pp)`` sequences per micro-batch)."""
    return max(1, -(-max(1, batch_per_rank) // max(1, pp)))


@dataclass
class Export:
    """A plan's launch settings for one engine.

    Attributes:
        engine: ``vllm``, ``sglang`` or ``trtllm``.
        version: the engine version the flags were written for.
        launcher: the server command (``vllm serve`` …).
        model_id: the model argument (:func:`model_id_of`: an HF id or a local folder).
        args: the server's flags and values, after the launcher and the model.
        yaml_config: TensorRT-LLM's ``--config`` options as a mapping (``None`` elsewhere).
        servers: how many servers to start (the plan's replicas, times ``dp`` for dense
            models whose attention-DP is realised as replicas).
        gpus_per_server: devices each server uses.
        nodes_per_server: nodes each server spans (``ceil(gpus / devices per node)``).
        unexpressed: choices of the plan this engine cannot express, and what it runs instead.
        notes: other facts the user needs (multi-node launch, semantics of a flag).
        devices_per_node: devices per node, to place several servers on a node's devices
            (:meth:`server_commands`); ``None`` when unknown.
        env: environment variables the server needs (the NCCL algorithm a plan priced with
            ``--collectives`` pinned to one), exported before the launch lines by :meth:`text`.
        warnings: what keeps the command from running the planned model as printed (a
            config file the engine will not read), ``# WARNING:`` lines of :meth:`text`.
    """

    engine: str
    version: str
    launcher: str
    model_id: str
    args: list[str]
    yaml_config: dict[str, object] | None
    servers: int
    gpus_per_server: int
    nodes_per_server: int
    unexpressed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    devices_per_node: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def command(self, config_path: str = "extra_llm_api_options.yaml") -> str:
        """The launch command line (shell-quoted)."""
        extra = ["--config", config_path] if self.yaml_config is not None else []
        parts = [*self.launcher.split(), self.model_id, *self.args, *extra]
        if self.engine == "sglang":      # its model is a flag, not a positional argument
            parts = [*self.launcher.split(), "--model-path", self.model_id, *self.args]
        return shlex.join(parts)

    def yaml_text(self) -> str | None:
        """TensorRT-LLM's ``--config`` YAML (``None`` for the other engines)."""
        if self.yaml_config is None:
            return None
        return yaml.safe_dump(self.yaml_config, sort_keys=False)

    def text(self, config_path: str = "extra_llm_api_options.yaml") -> str:
        """Everything a user needs, as one shell-script-like text: a header with the server
        count, the command, the YAML (as a heredoc) and the unexpressed choices/notes as
        comments."""
        lines = [f"# {self.engine} {self.version}: {self.servers} server(s), "
                 f"{self.gpus_per_server} GPU(s) each"
                 + (f" over {self.nodes_per_server} nodes" if self.nodes_per_server > 1 else "")]
        for w in self.warnings:
            lines.append(f"# WARNING: {w}")
        for u in self.unexpressed:
            lines.append(f"# NOT EXPRESSIBLE: {u}")
        for n in self.notes:
            lines.append(f"# note: {n}")
        y = self.yaml_text()
        if y is not None:
            lines.append(f"cat > {config_path} <<'EOF'")
            lines.append(y.rstrip("\n"))
            lines.append("EOF")
        lines += [f"export {k}={shlex.quote(v)}" for k, v in self.env.items()]
        lines += self.server_commands(config_path)
        return "\n".join(lines) + "\n"

    def launch_lines(self, config_path: str = "extra_llm_api_options.yaml") -> list[str]:
        """What a node runs, compactly: :meth:`text` without its header, for tables of many
        launches (``l2s pareto``): the warnings, what the engine cannot express, the notes of
        a server that spans nodes (they say what the other nodes run; other notes are
        counted in a line), TensorRT-LLM's YAML heredoc, the environment and
        :meth:`server_commands`."""
        lines = [f"# WARNING: {w}" for w in self.warnings]
        lines += [f"# NOT EXPRESSIBLE: {u}" for u in self.unexpressed]
        if self.notes and self.nodes_per_server > 1:
            lines += [f"# note: {n}" for n in self.notes]
        elif self.notes:
            lines.append(f"# {len(self.notes)} note(s): see the whole script (l2s plan "
                         f"--export, or the JSON's 'script')")
        y = self.yaml_text()
        if y is not None:
            lines += [f"cat > {config_path} <<'EOF'", y.rstrip("\n"), "EOF"]
        lines += [f"export {k}={shlex.quote(v)}" for k, v in self.env.items()]
        return lines + self.server_commands(config_path)

    def server_commands(self, config_path: str = "extra_llm_api_options.yaml") -> list[str]:
        """The launch lines of one node. One server per node (or a server spanning nodes, or
        the node size unknown): :meth:`command`, once, after a comment when several servers
        each span nodes (each launched on its own nodes). Several servers on a node: one line per
        server, each pinned to its own devices (``CUDA_VISIBLE_DEVICES``) on its own
        ``--port`` from 8000 in steps of :data:`PORT_STRIDE`, started in the background, then
        ``wait``; when the servers fill several nodes, a comment says to run the same lines on
        each of them."""
        one = self.command(config_path)
        dpn = self.devices_per_node
        # Servers beyond what the nodes hold inside their boundaries (a WARNING says so)
        # cannot each have the nodes of their own that the lines below describe.
        spill = any("fit inside node boundaries" in w for w in self.warnings)
        if self.servers > 1 and self.nodes_per_server > 1:
            ray = "--distributed-executor-backend" in self.args
            group = {"vllm": "its own Ray cluster" if ray else
                     "its own data-parallel group, --data-parallel-address its first node",
                     "sglang": "its own --nnodes group",
                     "trtllm": "its own Slurm job"}.get(self.engine, "its own job")
            return [f"# {self.servers} servers of {self.nodes_per_server} nodes each: launch "
                    f"this server on each set of {self.nodes_per_server} nodes ({group}; "
                    f"NODE0_HOST, where named, is that set's first node)"
                    + (" (not every server gets whole nodes: see the WARNING above)"
                       if spill else ""), one]
        if self.servers <= 1 or self.nodes_per_server > 1 or not dpn:
            return [one]
        per_node = max(1, dpn // self.gpus_per_server)
        nodes = -(-self.servers // per_node)
        if per_node == 1:
            return [f"# one server per node: run this on each of {nodes} nodes"
                    + (" (more than the cluster has: see the WARNING above)" if spill else ""),
                    one]
        out: list[str] = []
        if nodes > 1:
            out.append(f"# {per_node} servers per node: run these lines on each of {nodes} "
                       f"nodes" + (f" (the last holds {self.servers - per_node * (nodes - 1)})"
                                   if self.servers % per_node else "")
                       + (" (more than the cluster has: see the WARNING above)" if spill
                          else ""))
        for slot in range(min(per_node, self.servers)):
            first = slot * self.gpus_per_server
            gpus = ",".join(str(first + g) for g in range(self.gpus_per_server))
            out.append(f"CUDA_VISIBLE_DEVICES={gpus} {one} --port {8000 + PORT_STRIDE * slot} &")
        out.append("wait")
        return out


#: Engines whose HTTP server listens on loopback only unless ``--host`` says otherwise: SGLang
#: (``host`` default ``127.0.0.1``, sglang/srt/arg_groups/fields/serving.py of SGLang 0.5.23)
#: and trtllm-serve (``--host`` default ``localhost``, NVIDIA/TensorRT-LLM
#: tensorrt_llm/commands/serve.py @ 00209af1). vLLM's ``--host`` defaults to none, every
#: interface (vllm/entrypoints/common/cli_args.py of vLLM 0.33.0).
LOCAL_ONLY_HOST: dict[str, str] = {"sglang": "127.0.0.1", "trtllm": "localhost"}

#: Compute capabilities on which TensorRT-LLM's PyTorch backend keeps chunked prefill on for MLA
#: models (``tensorrt_llm/_torch/pyexecutor/py_executor_creator.py``: "Chunked Prefill for MLA
#: can only be enabled on SM90/SM100", widened to SM103/SM120 in later versions; elsewhere it
#: turns it off with a warning). SM120 is left out: not every version takes it.
MLA_CHUNKED_PREFILL_CC: frozenset[str] = frozenset({"9.0", "10.0", "10.3"})

#: Ports between two servers on one node. SGLang with attention-DP opens TCP ports from its
#: ``--port``: ``port + 233`` for the distributed init and the 6 after it (``PortArgs.init_new``
#: in sglang/srt/server_args.py of SGLang 0.5.23); servers one port apart would collide there,
#: ten apart never do (``233 … 239`` is no multiple of 10).
PORT_STRIDE = 10


def checkpoint_refusal(engine: str, device: DeviceSpec, model: ModelSpec | None
                       ) -> str | None:
    """Why ``engine`` (an engine runtime, :func:`~learn_to_shard.engines.weights_refusal`)
    cannot load ``model``'s checkpoint on ``device``, or ``None`` (no model, nothing known
    stops it): a model class the engine does not register and cannot fall back from
    (:func:`~learn_to_shard.engines.architectures.architecture_refusal`, the config's
    ``architectures[0]``), or quantised weights the engine cannot run there (their math, the
    chip's compute capability, :func:`~learn_to_shard.hardware.fabric.compute_capability`)."""
    if model is None:
        return None
    why = architecture_refusal(engine, model.config_architecture)
    if why is not None:
        return why
    q = model.quant
    if q is None:
        return None
    return weights_refusal(engine, q.method, q.fp4, device.name,
                           bool(device.peak_fp4_flops_per_s),
                           bool(device.peak_fp8_flops_per_s),
                           device_compute_capability(device), fp8=q.fp8, moe=model.is_moe)


def model_id_of(name: str, model: ModelSpec | None = None) -> str:
    """The model argument an engine's launcher needs to load ``model``.

    * a shipped config: the HF repository id it was copied from (``data/models/SOURCES.md``),
      under the hub's current name (:func:`~learn_to_shard.model.hf_config.hub_repo_id`);
    * a HuggingFace cache snapshot (``--model org/name``): the repository id
      (``ModelSpec.repo_id``; the engines resolve it through the same cache);
    * a local file or folder: the folder holding ``config.json`` (the engines load a local
      checkpoint from its folder; the weights must be there too).

    Without ``model``, the shipped name's HF id, else ``name`` itself.
    """
    if model is None or model.source_kind == "shipped" or not model.source:
        repo = shipped_repo_ids().get(model.name if model is not None else name)
        return hub_repo_id(repo) if repo is not None else name
    if model.repo_id is not None:
        return model.repo_id
    src = Path(model.source)          # the file read: its folder is what engines load
    return str(src.parent if src.suffix == ".json" or src.is_file() else src)


def _blocks_off(s: Strategy, engine: str, model: ModelSpec | None) -> list[str]:
    """Per-operator choices of ``s`` outside ``engine``'s layouts, with what it runs instead
    (blocks split over a group of one device are skipped: every choice is the same there)."""
    prof = get_engine(engine)
    present = {"dense": model.has_dense_ffn, "router": model.is_moe, "experts": model.is_moe,
               "shared": model.has_shared_experts} if model is not None else {}
    out = []
    for block, ops in BLOCKS.items():
        group = s.etp if block == "experts" else s.tp
        if not present.get(block, True) or group == 1:     # a group of one splits nothing
            continue
        got = tuple(s.dims[OP_NAMES.index(o)] for o in ops)
        adp_dense = block == "dense" and s.dp > 1 and model is not None \
            and prof.replicates_dense_under_adp(model.is_moe, model.has_dense_ffn)
        if got in prof.allowed(block) and not (adp_dense and got != (2, 2)):
            continue
        if adp_dense:
            have = ", ".join(f"{o}={CHOICE_NAMES[c]}" for o, c in zip(ops, got, strict=True))
            out.append(f"dense: plan has {have} within the attention-TP group; under "
                       f"attention-DP {prof.title} runs a MoE model's dense MLP replicated "
                       f"(--moe-dense-tp-size 1, exported) or over the whole --tp-size group")
            continue
        ran = MEGATRON[block]
        have = ", ".join(f"{o}={CHOICE_NAMES[c]}" for o, c in zip(ops, got, strict=True))
        run = ", ".join(f"{o}={CHOICE_NAMES[c]}" for o, c in zip(ops, ran, strict=True))
        out.append(f"{block}: plan has {have}; {prof.title} runs {run}")
    return out


def _ll_dispatch(rows: int, tp: int, tbo: bool) -> int:
    """Rows one rank sends through SGLang's DeepEP low-latency dispatch for a forward of
    ``rows`` rows of its DP rank: its attention-TP share (``ceil(rows / tp)``), halved under
    two-batch overlap (each half dispatched apart); sglang 0.5.23
    srt/layers/layer_boundary/factories.py, srt/layers/moe/token_dispatcher/deepep.py."""
    per_rank = math.ceil(rows / max(tp, 1))
    return math.ceil(per_rank / 2) if tbo else per_rank


#: NCCL ``NCCL_ALGO`` value of each NCCL algorithm (NCCL environment-variable docs:
#: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-algo).
NCCL_ALGO_ENV = {"ring": "Ring", "tree": "Tree", "nvls": "NVLS"}


def _collectives(cfg: dict[str, object], engine: str, group: int, args: list[str],
                 yaml_cfg: dict[str, object] | None, unexpressed: list[str],
                 notes: list[str]) -> dict[str, str]:
    """Add the launch settings of the collective pricing the plan used
    (``CostModelConfig.collective_algorithm`` / ``collective_setting``) to ``args`` /
    ``yaml_cfg`` and return the environment it needs; a pricing no setting of ``engine``
    pins is listed in ``unexpressed``. Nothing for the default ``alpha-beta`` pricing or a
    TP group of one (no collective)."""
    from ..engines.collectives import collective_setting

    algo = str(cfg.get("collective_algorithm") or "alpha-beta")
    name = cfg.get("collective_setting")
    if algo == "alpha-beta" or group <= 1:
        return {}
    if name is not None:
        st = collective_setting(engine, str(name))
        if st is None:
            unexpressed.append(f"collectives: the plan priced setting {name!r}, which is no "
                               f"{engine} setting; rerun with --engine {engine}")
            return {}
        args += list(st.args)
        if yaml_cfg is not None:
            yaml_cfg.update(dict(st.yaml))
        notes.append(f"collectives: setting {st.name} (l2s plan --collectives)")
        return dict(st.env)
    if algo in NCCL_ALGO_ENV:
        if engine == "trtllm" and yaml_cfg is not None:
            yaml_cfg["allreduce_strategy"] = "NCCL"
        else:
            args += ["--disable-custom-all-reduce"]
            if engine == "sglang" and algo == "nvls":
                args += ["--enable-nccl-nvls"]
        notes.append(f"collectives: NCCL pinned to its {algo} algorithm (NCCL_ALGO)")
        return {"NCCL_ALGO": NCCL_ALGO_ENV[algo]}
    if engine == "trtllm" and yaml_cfg is not None and algo in (
            "one-shot", "two-shot", "one-shot+rmsnorm", "two-shot+rmsnorm"):
        yaml_cfg["allreduce_strategy"] = "ONESHOT" if algo.startswith("one") else "TWOSHOT"
        return {}
    unexpressed.append(f"collectives: priced as {algo!r}, which no single {engine} launch "
                       f"setting pins; use --collectives search for the best setting "
                       f"{engine} launches")
    return {}


#: The environment variable that sets each pipeline stage's layer count, per engine whose own
#: split of an uneven layer count differs from the plan's (the first stages take the extra
#: layers, ``cost.model.stage_layer_counts``; TensorRT-LLM's ``Mapping.pp_layers`` splits
#: alike, ``torch.tensor_split``): vLLM 0.33.0 gives them to the stages before the last
#: (``vllm/distributed/utils.py`` ``get_pp_indices``), SGLang 0.5.23 to the last stages
#: (``srt/distributed/utils.py`` ``get_pp_indices``); both read the variable there.
LAYER_PARTITION_ENV: dict[str, str] = {"vllm": "VLLM_PP_LAYER_PARTITION",
                                       "sglang": "SGLANG_PP_LAYER_PARTITION"}


def engine_layer_split(engine: str, layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage as ``engine`` splits ``layers`` over ``pp`` stages by
    default (see :data:`LAYER_PARTITION_ENV`): vLLM adds the extra layers to the stages
    before the last, working back; SGLang to the last stages; others as the plan, the first
    stages."""
    from ..cost.model import stage_layer_counts

    base, rem = divmod(layers, pp)
    counts = [base] * pp
    if engine == "vllm":
        for i in range(2, rem + 2):
            counts[-i] += 1
    elif engine == "sglang":
        for i in range(pp - rem, pp):
            counts[i] += 1
    else:
        counts = stage_layer_counts(layers, pp)
    return counts


def _layer_partition(plan: Plan, engine: str, env: dict[str, str],
                     notes: list[str]) -> None:
    """Set :data:`LAYER_PARTITION_ENV` to the plan's layers per stage where the engine's own
    split (:func:`engine_layer_split`) would put extra layers, and their weights and KV, on
    other stages than the plan priced, with a note."""
    from ..cost.model import stage_layer_counts

    var = LAYER_PARTITION_ENV.get(engine)
    pp = plan.best.strategy.pp if plan.best is not None else 1
    layers = plan.num_layers
    if var is None or pp <= 1 or not layers or layers % pp == 0:
        return
    counts = stage_layer_counts(layers, pp)
    if counts == engine_layer_split(engine, layers, pp):
        return
    env[var] = ",".join(str(c) for c in counts)
    extra = "the first stage takes" if layers % pp == 1 else \
        f"the first {layers % pp} stages take"
    notes.append(f"{var}={env[var]}: the plan's layers per pipeline stage ({extra} one "
                 f"more); {engine}'s own split of {layers} layers over "
                 f"{pp} stages puts the extra ones on other stages, whose memory and time the "
                 f"plan did not price; set it on every node")


def _sequence_parallel(cfg: dict[str, object], engine: str, group: int, args: list[str],
                       unexpressed: list[str]) -> None:
    """Add the compile options of ``sequence_parallel`` / ``gemm_overlap``
    (:data:`~learn_to_shard.engines.collectives.SEQUENCE_PARALLEL_PASS`) to ``args``, merged
    into one ``--compilation-config`` JSON with any pass the collective setting enabled; an
    engine without them gets an ``unexpressed`` line. Nothing when neither is on or the TP
    group is one device."""
    from ..engines.collectives import SEQUENCE_PARALLEL_PASS

    wanted = [name for name in ("sequence_parallel", "gemm_overlap") if cfg.get(name)]
    if not wanted or group <= 1:
        return
    keys = SEQUENCE_PARALLEL_PASS.get(engine)
    if keys is None:
        unexpressed.append(f"{' and '.join(w.replace('_', ' ') for w in wanted)}: the plan "
                           f"priced it, but {engine} has no launch option for it here; its "
                           f"collectives run as all-reduces")
        return
    passes = {keys[0]: True} if "sequence_parallel" in wanted else {}
    if "gemm_overlap" in wanted:
        passes.update({keys[0]: True, keys[1]: True})
    if "--compilation-config" in args:
        i = args.index("--compilation-config") + 1
        merged = json.loads(args[i])
        merged.setdefault("pass_config", {}).update(passes)
        args[i] = json.dumps(merged)
    else:
        args += ["--compilation-config", json.dumps({"pass_config": passes})]


#: Tokens SGLang 0.5.23 keeps between the longest prompt it admits and ``--context-length``:
#: a prompt of ``context_len - 6`` tokens or more is aborted (``srt/managers/tp_worker.py``
#: ``max_req_input_len = min(context_len - 1, kv_capacity - 1) - 5``,
#: ``srt/managers/utils.py`` ``validate_input_length``).
SGLANG_PROMPT_MARGIN = 7

#: Environment variables that let an engine start with a length limit above the one it
#: derives from the config, which for a YaRN ``rope_scaling`` is ``max_position_embeddings``
#: as written (vLLM 0.33.0 ``vllm/config/model.py`` ``_get_and_verify_max_len`` raises
#: unless ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` is set, ``vllm/envs.py``; SGLang 0.5.23
#: ``srt/configs/model_config.py`` ``_derive_context_length`` raises unless
#: ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN`` is set).
LONG_CONTEXT_OVERRIDE: dict[str, str] = {
    "vllm": "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
    "sglang": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN",
}


#: SGLang 0.5.23's default ``--max-prefill-tokens``: the most prompt tokens of one prefill
#: batch, unless the context length is longer (``srt/arg_groups/fields/schedule.py``).
SGLANG_MAX_PREFILL_TOKENS = 16384

#: SGLang's setting of the tokens per rank DeepEP's low-latency (decode) dispatch is sized
#: for: its default and the most it takes (sgl-project/sglang v0.5.23, wheel sglang-0.5.23:
#: ``srt/environ.py`` ``SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK = EnvInt(128)``;
#: ``srt/layers/moe/token_dispatcher/deepep.py`` asserts it is at most 1,024, the tag
#: DeepEP's internode low-latency dispatch counts with).
SGLANG_DEEPEP_LL_ENV = "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"
SGLANG_DEEPEP_LL_DEFAULT_TOKENS = 128
SGLANG_DEEPEP_LL_MAX_TOKENS = 1024


def _token_budget(plan: Plan, engine: str) -> int:
    """Tokens per step the launch states: the budget the plan was priced with
    (``Plan.cost_model["max_num_batched_tokens"]``, resolved by the cost model), or, for a
    plan that records none, ``engine``'s default on the plan's device
    (:func:`~learn_to_shard.engines.default_max_num_batched_tokens`).

    Raises:
        ConfigError: no budget recorded and the plan's cluster cannot be read.
    """
    value = plan.cost_model.get("max_num_batched_tokens")
    if value is not None:
        return int(str(value))
    try:
        device = plan.cluster_spec.device if plan.cluster_spec is not None \
            else parse_cluster(plan.cluster).device
    except PlannerError as exc:
        raise ConfigError(f"--export: the plan records no token budget and its cluster "
                          f"{plan.cluster!r} cannot be read for {engine}'s default: "
                          f"{exc}") from None
    return default_max_num_batched_tokens(engine, device.names, device.hbm_bytes)


#: Launch flags that select TensorRT-LLM-gen's block-scaled FP8 MoE kernels (FlashInfer's) on
#: Blackwell: vLLM ``--moe-backend``, SGLang ``--moe-runner-backend`` (both among the choices
#: of their flag snapshots).
TRTLLM_GEN_MOE_FLAGS: dict[str, tuple[str, ...]] = {
    "vllm": ("--moe-backend", "flashinfer_trtllm"),
    "sglang": ("--moe-runner-backend", "flashinfer_trtllm"),
}


def _block_fp8_moe(plan: Plan, model: ModelSpec | None, device: DeviceSpec | None,
                   engine: str, args: list[str], notes: list[str],
                   yaml_cfg: dict[str, object] | None) -> None:
    """For a block-scaled FP8 MoE (DeepSeek's 128 × 128 scales) on datacenter Blackwell,
    launch the MoE kernels the plan priced (``CostModelConfig.block_fp8_moe_kernel``, by
    :func:`~learn_to_shard.cost.terms.runs_trtllm_gen_moe` as the cost model decides):
    vLLM and SGLang select TensorRT-LLM-gen's (:data:`TRTLLM_GEN_MOE_FLAGS`; what their B200
    tables measured); TensorRT-LLM's YAML gets ``moe_config: {backend: TRTLLM}`` or
    ``DEEPGEMM`` (``TorchLlmArgs.moe_config``, ``MoeConfig.backend``: keys and choices of its
    YAML snapshot). ``device`` None (the plan's cluster unreadable here): nothing."""
    if model is None or device is None:
        return
    cfg = plan.cost_model
    kernel = str(cfg.get("block_fp8_moe_kernel", "trtllm-gen"))
    a2a = cfg.get("moe_a2a_kernel")

    def runs(k: str) -> bool:
        return runs_trtllm_gen_moe(model, device, plan.workload.weight_dtype, k,
                                   None if a2a is None else str(a2a),
                                   bool(cfg.get("two_batch_overlap")))

    if engine in TRTLLM_GEN_MOE_FLAGS and runs(kernel):
        args += list(TRTLLM_GEN_MOE_FLAGS[engine])
        notes.append(f"{' '.join(TRTLLM_GEN_MOE_FLAGS[engine])}: the block-scaled FP8 MoE "
                     f"kernels the plan priced (TensorRT-LLM-gen's, through FlashInfer)")
    elif engine == "trtllm" and runs("trtllm-gen"):     # where the backend choice matters
        backend = "TRTLLM" if kernel == "trtllm-gen" else "DEEPGEMM"
        if yaml_cfg is not None:
            yaml_cfg["moe_config"] = {"backend": backend}
        notes.append(f"moe_config.backend {backend}: the block-scaled FP8 MoE kernels the "
                     f"plan priced ({kernel})")


def memory_refit(cost_model: CostModel | None, strategy: Strategy,
                 memory_utilization: float) -> Estimate | None:
    """``strategy`` (its degrees, operator layout and batch) re-evaluated by ``cost_model``
    at ``memory_utilization``, where it still fits in memory there (the worst stage within
    the usable memory, the batch within the largest that fits), else ``None``; also
    ``None`` without a cost model. Latency limits are not asked: the plan met them at its
    own memory budget, and memory does not change its step times."""
    if cost_model is None:
        return None
    cm = cost_model
    at = CostModel(cm.model, cm.cluster, cm.workload,
                   config=dataclasses.replace(cm.config, memory_utilization=memory_utilization),
                   space=cm.space.with_batches((strategy.batch,)))
    est = at.evaluate(strategy)
    m = est.memory
    fits = m.total_bytes <= m.usable_bytes and est.max_batch >= strategy.batch
    return est if fits else None


def build_export(plan: Plan, engine: str, *, model: ModelSpec | None = None,
                 devices_per_node: int | None = None,
                 max_model_len: int | None = None,
                 cost_model: CostModel | None = None) -> Export:
    """The launch settings of ``plan.best`` for ``engine``.

    Args:
        plan: a feasible plan.
        engine: ``vllm``, ``sglang`` or ``trtllm``.
        model: the model (tells dense from MoE, which blocks exist, and whether the
            checkpoint is already quantised, ``ModelSpec.quant``); without it the plan's
            layout is checked on every block and the checkpoint is taken to be in the plan's
            weight dtype.
        devices_per_node: devices per node, i.e. per host (``DeviceSpec.host_devices``: the
            scale-up domain, or a GB200 NVL72 compute tray of 4), for multi-node servers.
        max_model_len: longest request (prompt + output tokens) the server must accept;
            default and minimum the workload's ``isl + osl`` (a length distribution or trace
            has longer ones).
        cost_model: the cost model the plan was searched with: SGLang then gets its own,
            lower ``--mem-fraction-static`` where the plan's strategy and batch still fit in
            memory at it (:func:`memory_refit`). ``None``: the plan's memory budget.

    Returns:
        An :class:`Export`.

    Raises:
        ConfigError: unknown engine, or the plan has no feasible strategy.
    """
    if engine not in EXPORT_ENGINES:
        raise ConfigError(f"--export: {engine!r} is not one of {', '.join(EXPORT_ENGINES)}")
    if plan.best is None:
        raise ConfigError("--export: the plan has no feasible strategy to export")
    prof = get_engine(engine)
    e = plan.best
    s = e.strategy
    wl = plan.workload
    cfg = plan.cost_model
    moe = model.is_moe if model is not None else s.ep > 1
    unexpressed = _blocks_off(s, engine, model)
    notes: list[str] = []
    arch_note = architecture_note(engine, model.config_architecture) if model is not None \
        else None
    if arch_note is not None:
        notes.append(arch_note)
    env_extra: dict[str, str] = {}
    launcher = prof.launcher
    # Dense models: attention-DP is the same as more replicas (no engine has it for them).
    dense_dp = s.dp if (not moe and s.dp > 1) else 1
    dp = s.dp // dense_dp
    servers = e.instances * dense_dp
    gpus = s.devices // dense_dp
    batch_per_server = s.batch // dense_dp
    nodes = max(1, math.ceil(gpus / devices_per_node)) if devices_per_node else 1
    # vLLM places a MoE server's DP ranks (tp × pp GPUs each) whole on nodes, so one that
    # spans nodes takes as many as engines.dp_node_ranks lists, not ceil(GPUs / node).
    node_size = devices_per_node or 0
    vllm_dp_nodes = engine == "vllm" and dp > 1 and nodes > 1 and 0 < s.tp * s.pp <= node_size
    if vllm_dp_nodes:
        nodes = len(dp_node_ranks(s.tp * s.pp, dp, node_size))
    # A request carries at least one output token (a prefill plan's osl is 0): the engines
    # refuse prompt + max_tokens above their limit (vLLM max_model_len, SGLang
    # context_length, TensorRT-LLM max_seq_len).
    max_len = max(wl.isl + max(wl.osl, 1), max_model_len or 0)
    limit = model.max_position_embeddings if model is not None else 0
    if model is not None and limit and max_len > limit:
        # The engines refuse a length limit above the model's positions (SGLang 0.5.23
        # _derive_context_length raises; vLLM checks max_model_len against the config).
        unexpressed.append(f"requests of {max_len} tokens (prompt and at least one output "
                           f"token) exceed {model.name}'s max_position_embeddings {limit}: "
                           f"no engine serves them; the length limit is set to {limit}")
        max_len = limit
    if engine == "sglang":
        # SGLang aborts a prompt of max(context length, KV pool) - 6 tokens or more
        # (0.5.23 srt/managers/tp_worker.py: max_req_input_len = min(context_len - 1,
        # kv_capacity - 1) - 5; srt/managers/utils.py validate_input_length refuses
        # len >= it): the context length leaves those 6 tokens above the longest prompt,
        # here the longest request less its one output token.
        need = max_len - 1 + SGLANG_PROMPT_MARGIN
        if limit and need > limit:
            unexpressed.append(f"prompts of {max_len - 1} tokens: SGLang refuses a prompt "
                               f"within {SGLANG_PROMPT_MARGIN} tokens of --context-length, "
                               f"which {model_id_of(plan.model, model)}'s "
                               f"max_position_embeddings {limit} caps")
        max_len = min(need, limit) if limit else need
    written = model.config_max_positions if model is not None else 0
    if model is not None and written and max_len > written:
        yarn = (f"{model.name}'s config says max_position_embeddings {written}, which its "
                f"YaRN rope_scaling extends to {model.max_position_embeddings} "
                f"(original_max_position_embeddings × factor)")
        var = LONG_CONTEXT_OVERRIDE.get(engine)
        if var is not None:
            env_extra[var] = "1"
            notes.append(f"{var}=1: {yarn}; {prof.title} takes the former as its length "
                         f"limit for YaRN and starts with {max_len} tokens only with this "
                         f"override")
        else:
            # trtllm-serve's PyTorch engine lowers a --max_seq_len above the length it infers
            # from the config to that length, with a warning (tensorrt_llm/_torch/pyexecutor/
            # model_engine.py PyTorchModelEngine._init_max_seq_len; the override variable
            # TLLM_ALLOW_LONG_MAX_MODEL_LEN comes in later sources)
            unexpressed.append(f"requests of {max_len} tokens: {yarn}; {prof.title} "
                               f"{prof.version} lowers --max_seq_len to the length it infers "
                               f"from the config ({written}), so the server would refuse "
                               f"them: set max_position_embeddings to "
                               f"{model.max_position_embeddings} in the checkpoint's "
                               f"config.json")
    # Tokens per sequence the server's KV pool holds at the plan's batch (the length note
    # below): the plan's, or at SGLang's own memory fraction where the export takes it.
    held_per_seq = e.max_context_tokens
    tokens = _token_budget(plan, engine)
    if wl.phase is Phase.PREFILL:
        # A prefill plan prices one micro-batch's prompts per attention-DP rank in one pass
        # (its workspace too; CostModel.phase_rows: ceil(ceil(batch / min(pp, batch)) / dp)
        # of them): the step budget holds them, or the engine would chunk them over steps
        # the plan did not price.
        per_mb = math.ceil(s.batch / min(s.pp, s.batch))
        prompts = math.ceil(per_mb / s.dp)
        step = prompts * wl.isl
        if step > tokens:
            notes.append(f"the token budget is {step} (not the engine's {tokens}): the plan "
                         f"prefills {prompts} prompts of {wl.isl} tokens per rank"
                         + (" and micro-batch" if s.pp > 1 else "") + " in one pass")
            tokens = step
    mem_util = float(str(cfg.get("memory_utilization", 0.9)))
    kv_frac = float(str(cfg.get("kv_cache_free_fraction", 0.9)))
    fp8_weights = wl.weight_dtype is DType.FP8
    # A checkpoint that is already quantised (block FP8, ModelOpt per-tensor FP8, W8A8, 4-bit:
    # ModelSpec.quant) is served as stored; online FP8 is only for 16-bit checkpoints.
    native_quant = model is not None and (model.weight_block_size is not None
                                          or model.quant is not None)
    fp8_kv = wl.kv_dtype is DType.FP8
    # vLLM's and SGLang's --kv-cache-dtype auto take a ModelOpt export's FP8 KV quantisation
    # (engines.default_kv_dtype): a 16-bit KV plan of such a checkpoint names its dtype.
    auto_fp8_kv = model is not None and model.quant is not None \
        and default_kv_dtype(engine, model.quant.kv_cache_fp8, model.quant.modelopt) == "fp8"
    if model is not None and model.checkpoint_dtype == "fp8" and wl.weight_dtype is DType.BF16:
        # The engines load an FP8 checkpoint as its quantization_config says (vLLM, SGLang:
        # the checkpoint's quant method; TensorRT-LLM: hf_quant_config.json) and none has a
        # flag that dequantises it, so the launch would hold FP8 weights, not the plan's.
        unexpressed.append(f"bf16 weights: {model_id_of(plan.model, model)} is an FP8 "
                           f"checkpoint, which {prof.title} loads as stored (no flag "
                           f"dequantises it), so the server would hold FP8 weights, not "
                           f"the plan's bf16; serve a BF16 checkpoint of the model for this "
                           f"plan, or plan with --dtype fp8")
    a2a_value = cfg.get("moe_a2a_kernel")          # CostModelConfig.moe_a2a_kernel
    a2a = str(a2a_value) if a2a_value is not None else None
    tbo = bool(cfg.get("two_batch_overlap"))
    if wl.phase is not Phase.SERVE:
        notes.append(f"the plan is for the {wl.phase.value} phase; the engine serves mixed "
                     f"steps, so its numbers apply to a server fed only {wl.phase.value} work")
    # the scale-up domain as the mesh counts it (ClusterSpec.devices_per_node), for the checks
    # of the engines' rank orders
    mesh_domain = max(node_size, 1)
    try:
        cluster_spec = plan.cluster_spec or parse_cluster(plan.cluster)
        device: DeviceSpec | None = cluster_spec.device
        cluster_devices: int | None = cluster_spec.num_devices
        mesh_domain = cluster_spec.devices_per_node
    except PlannerError:
        device, cluster_devices = None, None   # the plan's cluster file unreadable here
    # vLLM's auto also stores GLM-5's cache in FP8 on SM 10.x (engines.vllm_auto_kv_is_fp8_on).
    if engine == "vllm" and not fp8_kv and model is not None and device is not None \
            and vllm_auto_kv_is_fp8_on(model.config_architecture,
                                       device_compute_capability(device)):
        auto_fp8_kv = True
        notes.append(f"--kv-cache-dtype bfloat16: vLLM {get_engine('vllm').version}'s auto "
                     f"would store {model_id_of(plan.model, model)}'s KV cache in FP8 on "
                     f"{device.name} (the plan priced 16 bits); plan with --kv-dtype fp8 for "
                     f"the FP8 cache and its tokens")
    if nodes > 1:
        # Hosts smaller than the NVLink domain (GB200 NVL72's trays): a server whose devices
        # (laid one after another) stay inside one domain keeps its collectives on NVLink.
        domain = device.scale_up_domain if device is not None and \
            device.devices_per_host is not None else 0
        inside = bool(domain) and all(k * gpus // domain == ((k + 1) * gpus - 1) // domain
                                      for k in range(servers))
        # a server whose GPUs do not fill whole nodes (16 GPUs on nodes of 3) says so: one
        # server fills all but its last node; several, laid one after another, share nodes
        last = gpus - (nodes - 1) * node_size
        on = f"{nodes} nodes of {devices_per_node} devices"
        if not vllm_dp_nodes and last != devices_per_node:
            on = f"{nodes} nodes, {nodes - 1} of {devices_per_node} devices and one of {last}" \
                if servers == 1 else (f"{on}, its {gpus} GPUs laid after the servers before "
                                      f"it, so servers share nodes")
        notes.append(f"each server spans {on}"
                     + (f" (hosts of one NVLink domain of {domain}: its collectives stay on "
                        f"NVLink, as priced)" if inside else ""))
    if s.pp > 1:
        notes.append(f"pipeline stages: l2s priced {s.pp} stages with {e.micro_batches} "
                     f"micro-batches in flight")
    yaml_cfg: dict[str, object] | None = None
    model_path: str | None = None          # the model argument where the hub id cannot serve

    def tbo_dropped(why: str) -> None:
        """Two-batch overlap the server cannot run: searched for this engine, the plan
        priced none there (CostModel._two_batch_overlap), so a note; else NOT EXPRESSIBLE."""
        if plan.engine == engine:
            notes.append(why + " (and not priced)")
        else:
            unexpressed.append(why)
    args: list[str] = []
    if engine == "vllm":
        ep_ok = s.ep in (1, s.tp * dp) or not moe
        if not ep_ok:
            unexpressed.append(f"ep={s.ep} with etp={s.etp}: vLLM splits experts over all "
                               f"tp × dp = {s.tp * dp} ranks one way (ep 1 or ep {s.tp * dp}); "
                               f"exported as --enable-expert-parallel (ep {s.tp * dp})")
        seqs = max(1, batch_per_server // dp)
        args += ["--tensor-parallel-size", str(s.tp)]
        if s.pp > 1:
            args += ["--pipeline-parallel-size", str(s.pp)]
        if dp > 1:
            args += ["--data-parallel-size", str(dp)]
        if moe and s.ep > 1:
            args += ["--enable-expert-parallel"]
        if s.cp > 1:
            args += ["--decode-context-parallel-size", str(s.cp), "--dcp-comm-backend", "ag_rs"]
        if seqs > tokens:
            notes.append(f"--max-num-batched-tokens raised from {tokens} to {seqs}: vLLM "
                         f"refuses a step budget below --max-num-seqs, so a step may carry "
                         f"more prompt tokens than the plan priced ({tokens} per micro-batch "
                         f"and DP rank)")
        args += ["--max-num-seqs", str(seqs), "--max-model-len", str(max_len),
                 "--max-num-batched-tokens", str(max(tokens, seqs)),
                 "--gpu-memory-utilization", f"{mem_util:g}"]
        if dp > 1:
            # Each DP rank is an engine core with its own scheduler and these limits
            # (vllm/v1/engine/core.py DPEngineCoreProc, vLLM 0.33.0 wheel).
            # (the space's batch rule makes the plan's batch a multiple of dp)
            notes.append(f"--max-num-seqs {seqs} and --max-num-batched-tokens "
                         f"{max(tokens, seqs)} are per DP rank: each of the {dp} ranks runs "
                         f"its own scheduler, so the server runs {seqs * dp} requests at once "
                         f"(the plan's {batch_per_server})")
        # A decode forward of more sequences than vLLM captures in CUDA graphs runs without
        # them, where the plan prices a replay.
        forward = -(-seqs // max(1, s.pp))
        captured = vllm_cudagraph_capture_max(seqs, device_compute_capability(device)
                                              if device is not None else None)
        if forward > captured:
            # vLLM captures sizes 16 apart above 256 and truncates a size set between them
            # to the one below (vllm/config/vllm.py _set_cudagraph_sizes): a multiple of 16.
            size = -(-forward // 16) * 16
            args += ["--max-cudagraph-capture-size", str(size)]
            notes.append(f"--max-cudagraph-capture-size {size}: vLLM "
                         f"{get_engine('vllm').version} captures CUDA graphs up to {captured} "
                         f"tokens by default and runs larger decode steps without them; the "
                         f"plan prices its {forward} sequences per decode forward as a graph "
                         f"replay")
        if wl.phase is Phase.SERVE:
            args += ["--enable-chunked-prefill"]
        if fp8_weights and not native_quant:
            args += ["--quantization", "fp8"]
        if fp8_kv:
            args += ["--kv-cache-dtype", "fp8"]
        elif auto_fp8_kv:
            half = model is not None and model.native_dtype in ("float16", "half")
            args += ["--kv-cache-dtype", "float16" if half else "bfloat16"]
        if moe and a2a is not None and s.ep == 1:
            unexpressed.append(f"moe all-to-all {a2a}: the plan has no expert parallelism "
                               f"(EP 1), so no --all2all-backend is set; its MoE exchange "
                               f"between attention-DP ranks was priced as a plain all-to-all")
        if moe and a2a is not None and s.ep > 1:
            # A decode plan's steps are all decodes: DeepEP's low-latency kernels, as the
            # auto mode priced them.
            low = a2a == "deepep_low_latency" or (a2a == "deepep_auto"
                                                  and wl.phase is Phase.DECODE)
            args += ["--all2all-backend", "deepep_low_latency" if low
                     else "deepep_high_throughput"]
            if a2a == "deepep_auto" and not low and wl.phase is not Phase.PREFILL:
                unexpressed.append("moe all-to-all: the plan priced DeepEP's normal kernels "
                                   "for steps that prefill and its low-latency ones for pure "
                                   "decode steps; vLLM runs one mode per server: exported as "
                                   "deepep_high_throughput")
        if moe and tbo:
            # vLLM's DBO (micro-batching) asserts a DeepEP or NIXL all-to-all backend on CUDA
            # (VllmConfig.__post_init__, vllm/config/vllm.py of the vLLM 0.33.0 wheel,
            # commit g4ba787ec9); its default allgather_reducescatter fails at start.
            if s.ep == 1:
                tbo_dropped("two-batch overlap with EP 1: vLLM's --enable-dbo runs only "
                            "with a DeepEP / NIXL all-to-all, which needs expert "
                            "parallelism; exported without it")
            else:
                if a2a is None:
                    backend = "deepep_low_latency" if wl.phase is Phase.DECODE \
                        else "deepep_high_throughput"
                    args += ["--all2all-backend", backend]
                    notes.append(f"--all2all-backend {backend}: vLLM's --enable-dbo runs only "
                                 f"with a DeepEP / NIXL all-to-all; the plan priced the MoE "
                                 f"exchange without one (--moe-a2a prices DeepEP's)")
                args += ["--enable-dbo"]
        if "deepep_high_throughput" in args and dp > 1 and wl.phase is not Phase.PREFILL:
            # vllm/config/compilation.py (vLLM 0.33.0 wheel): "Disable CUDA graphs for DeepEP
            # high-throughput since its not CG compatible" when data_parallel_size > 1.
            unexpressed.append("--all2all-backend deepep_high_throughput with "
                               f"--data-parallel-size {dp}: vLLM turns CUDA graphs off, so "
                               "every decode step launches its kernels eagerly, which the "
                               "plan (decode steps replayed as CUDA graphs) did not price")
        rank_gpus = s.tp * s.pp
        if nodes > 1 and dp > 1 and devices_per_node and cluster_devices and not bool(
                dp_ranks_fit_nodes(rank_gpus, dp, devices_per_node, cluster_devices,
                                   servers)):
            unexpressed.append(
                f"{dp} DP ranks of {rank_gpus} GPUs (tp × pp) over nodes of "
                f"{devices_per_node}: vLLM runs each rank whole on one node (or, with "
                f"VLLM_RAY_DP_PACK_STRATEGY=span, over whole nodes when tp × pp is a multiple "
                f"of the node size), and this cluster's nodes hold fewer such ranks than the "
                f"plan needs; plan with --engine vllm for a layout it places")
        if moe and bool(dp_outer_differs(s.tp, dp, s.pp, mesh_domain)):
            # vllm/distributed/parallel_state.py initialize_model_parallel (vLLM 0.33.0):
            # ranks DP outermost (engines.EngineProfile.dp_outer_ranks)
            unexpressed.append(
                f"--pipeline-parallel-size {s.pp} with --data-parallel-size {dp} over "
                f"{gpus} GPUs, more than one NVLink domain of {mesh_domain}: vLLM numbers "
                f"ranks DP "
                f"outermost, so each stage's expert all-to-all runs over every domain the "
                f"server spans and its pipeline hops inside one, where the plan priced ranks PP "
                f"outermost (the all-to-all inside a domain, the hops across); plan with "
                f"--engine vllm for a layout priced as vLLM places it")
        if vllm_dp_nodes:
            # Internal load balancing over nodes: one vllm serve per node, each starting the
            # DP ranks it holds whole (engines.dp_node_ranks); node 0 runs the API server
            # (vllm-project/vllm docs/serving/data_parallel_deployment.md at 01e4fce0,
            # "Internal Load Balancing"; the flags are in the pinned flag snapshot,
            # --headless is vllm serve's own).
            counts = dp_node_ranks(rank_gpus, dp, node_size)
            local = counts[0]                   # node 0's ranks, as many as any node holds
            args += ["--data-parallel-size-local", str(local),
                     "--data-parallel-address", "NODE0_HOST",
                     "--data-parallel-rpc-port", "13345"]
            others = ", ".join(f"node {k}: --data-parallel-start-rank {sum(counts[:k])} "
                               f"--data-parallel-size-local {c}"
                               for k, c in enumerate(counts) if k)
            notes.append(f"this is node 0's command (its {local} DP "
                         f"{'rank' if local == 1 else 'ranks'} and the API "
                         f"server); on every other node run it with --headless and its own "
                         f"ranks ({others}), node 0's address in --data-parallel-address")
            if local * rank_gpus < node_size:
                notes.append(f"each node runs {local} whole DP ranks of {rank_gpus} GPUs "
                             f"({node_size - local * rank_gpus} of its {node_size} GPUs "
                             f"stay free): vLLM does not split a rank over nodes")
        elif nodes > 1:
            # A replica wider than a node: vLLM refuses a world size above the node's GPUs
            # unless the executor is Ray (ParallelConfig.__post_init__, vllm/config/
            # parallel.py of the vLLM 0.33.0 wheel, commit g4ba787ec9).
            notes.append("vLLM runs a server whose model replica spans nodes on a Ray cluster "
                         "spanning them (start Ray first, then run this command on its head "
                         "node)" + (": --data-parallel-backend ray places the DP ranks, each "
                                    "over whole nodes (VLLM_RAY_DP_PACK_STRATEGY=span; the Ray "
                                    "cluster's nodes must be alike)" if dp > 1 else ""))
            args += ["--distributed-executor-backend", "ray"]
            if dp > 1:
                args += ["--data-parallel-backend", "ray"]
                env_extra["VLLM_RAY_DP_PACK_STRATEGY"] = "span"
    elif engine == "sglang":
        args += ["--tp-size", str(s.tp * dp)]
        if dp > 1:
            args += ["--attn-dp-size", str(dp)]
            if s.tp > 1:
                args += ["--enable-dp-lm-head"]
        if moe and s.ep > 1:
            args += ["--ep-size", str(s.ep)]
        if s.pp > 1:
            args += ["--pp-size", str(s.pp)]
        if s.cp > 1:
            args += ["--decode-context-parallel-size", str(s.cp), "--dcp-comm-backend", "ag_rs"]
        if model is not None and model.is_moe and model.has_dense_ffn and dp > 1:
            # Replicated dense layers (the (2, 2) variant; with attention TP 1 any layout is
            # the same local compute): without the flag SGLang splits them over the whole
            # --tp-size group and gathers the DP ranks' rows (EngineProfile.
            # adp_dense_replicated). A split within attention TP > 1 is _blocks_off's.
            args += ["--moe-dense-tp-size", "1"]
        running = sglang_max_running_requests(batch_per_server, dp, s.pp)
        if running > batch_per_server:
            # SGLang divides --max-running-requests over the attention-DP ranks, then caps
            # each pipeline micro-batch of a rank at its share // pp-size (sglang 0.5.23
            # srt/model_executor/pool_configurator.py, srt/managers/scheduler.py
            # pp_max_micro_batch_size).
            per_rank = running // dp
            notes.append(f"--max-running-requests {running}: SGLang runs at most "
                         + (f"{running} // {dp} = {per_rank} requests per attention-DP rank "
                            f"and " if dp > 1 else "")
                         + f"{per_rank} // {s.pp} = {per_rank // s.pp} per pipeline "
                         f"micro-batch, so the server admits {running}, "
                         f"{running - batch_per_server} more than the plan's "
                         f"{batch_per_server} (whole micro-batches)")
        # Each rank's pipeline micro-batch is one decode forward: beyond SGLang's default
        # graph size for the device it would run eagerly, where the plan prices a replay.
        forward = max(1, running // dp // max(1, s.pp))
        default_bs = sglang_decode_graph_max_bs(device.hbm_bytes, s.tp * dp) \
            if device is not None else forward
        graph_bs = forward if forward > default_bs else None
        # DeepEP's low-latency buffers are sized below for `forward` rows per rank, and a
        # graph captured larger would dispatch more at capture: SGLang captures up to the
        # default size clamped to a rank's request slots (its share of
        # --max-running-requests plus one, not divided by the pipeline stages;
        # runner/base_cuda_graph_runner.py get_batch_sizes_to_capture,
        # pool_configurator.py _get_num_req_slots), so the export pins the capture at
        # `forward` wherever that goes past it.
        ll = bool(moe and s.ep > 1 and a2a in ("deepep_low_latency", "deepep_auto"))
        captured = min(default_bs, running // dp + 1)
        # The rows a low-latency step dispatches: a decode forward, or in low_latency mode a
        # prompt step's tokens where more (the dispatch sizing below reads it too).
        ll_prompt = a2a == "deepep_low_latency" and wl.phase is not Phase.DECODE \
            and tokens > forward
        ll_rows = tokens if ll_prompt else forward
        ll_buffer = max(SGLANG_DEEPEP_LL_DEFAULT_TOKENS, _ll_dispatch(ll_rows, s.tp, tbo))
        at_capture = _ll_dispatch(captured, s.tp, tbo)
        if graph_bs is not None:
            notes.append(f"--cuda-graph-max-bs-decode {forward}: SGLang "
                         f"{get_engine('sglang').version} captures decode CUDA graphs up to "
                         f"{default_bs} "
                         f"sequences on this device by default and runs larger decode steps "
                         f"eagerly; the plan prices its {forward} per forward as a graph "
                         f"replay")
        elif ll and at_capture > ll_buffer:
            graph_bs = forward
            notes.append(f"--cuda-graph-max-bs-decode {forward}: SGLang "
                         f"{get_engine('sglang').version} would capture decode CUDA graphs "
                         f"of up to {captured} sequences per DP rank (its default, within a "
                         f"rank's request slots), whose DeepEP low-latency dispatch at "
                         f"capture, {at_capture} rows per rank"
                         + (" and micro-batch" if tbo else "") + f", would exceed the "
                         f"buffers for {ll_buffer}")
        if graph_bs is not None:
            args += ["--cuda-graph-max-bs-decode", str(forward)]
        args += ["--max-running-requests", str(running),
                 "--context-length", str(max_len),
                 # per instance: SGLang divides it over the attention-DP ranks (sglang
                 # v0.5.23 sglang/srt/arg_groups/parallel_hook.py), as --max-running-requests
                 "--chunked-prefill-size", str(tokens * dp),
                 "--mem-fraction-static", f"{mem_util:g}"]
        if device is not None:
            auto = sglang_auto_mem_fraction(
                device.hbm_bytes, s.tp * dp, s.pp, dp, tokens * dp, running,
                model is not None and model.attention.kind is AttentionKind.MLA,
                bool(moe and a2a is not None and s.ep > 1), graph_bs)
            if auto <= 0.0:
                notes.append(f"--mem-fraction-static {mem_util:g} (the plan's memory budget) "
                             f"is set because SGLang {get_engine('sglang').version}'s own "
                             f"estimate for this launch (activations of a "
                             f"--chunked-prefill-size {tokens * dp} step and CUDA graphs) "
                             f"holds back more than the device's "
                             f"{device.hbm_bytes / 2**30:.0f} GiB, so left to choose it would "
                             f"not start; the plan sized the workspace of "
                             f"{tokens} tokens per rank itself")
            elif mem_util > auto and (refit := memory_refit(cost_model, s, auto)) is not None:
                args[args.index("--mem-fraction-static") + 1] = f"{auto:g}"
                held_per_seq = refit.max_context_tokens
                notes.append(f"--mem-fraction-static {auto:g}: what SGLang "
                             f"{get_engine('sglang').version} chooses itself for this launch "
                             f"(it holds back {(1 - auto) * device.hbm_bytes / 2**30:.1f} GiB "
                             f"for activations and CUDA graphs by its own estimate), below "
                             f"the plan's {mem_util:g}; the plan's batch still fits in memory "
                             f"there, in a KV pool of {refit.kv_capacity_tokens:,} tokens "
                             f"(the plan shows {e.kv_capacity_tokens:,} at {mem_util:g})")
            elif mem_util > auto and auto * device.hbm_bytes <= e.memory.weight_bytes:
                notes.append(f"--mem-fraction-static {mem_util:g} (the plan's memory budget) "
                             f"is set because SGLang {get_engine('sglang').version}'s own "
                             f"estimate for this launch ({auto:g}: activations of a "
                             f"--chunked-prefill-size {tokens * dp} step and CUDA graphs) "
                             f"would leave {auto * device.hbm_bytes / 2**30:.1f} GiB, less "
                             f"than the plan's {e.memory.weight_bytes / 2**30:.1f} GiB of "
                             f"weights per device, so left to choose it would not start; the "
                             f"plan sized the workspace of {tokens} tokens per rank itself")
            elif mem_util > auto:
                notes.append(f"--mem-fraction-static {mem_util:g} (the plan's memory budget) "
                             f"is above the {auto:g} SGLang {get_engine('sglang').version} "
                             f"chooses itself for this launch, which holds back "
                             f"{(1 - auto) * device.hbm_bytes / 2**30:.1f} GiB for "
                             f"activations and CUDA graphs by its own estimate: if the server "
                             f"runs out of memory starting, plan with --gpu-memory-utilization "
                             f"{auto:g} (fewer KV tokens)")
        if tokens > SGLANG_MAX_PREFILL_TOKENS and tokens > max_len:
            # A prefill batch holds at most max(--max-prefill-tokens, context length) tokens
            # (default 16384; sglang 0.5.23 srt/arg_groups/fields/schedule.py), which would
            # cut the planned steps short. Per attention-DP rank: SGLang divides only
            # --chunked-prefill-size over the ranks (srt/arg_groups/parallel_hook.py) and
            # each rank's scheduler budgets its batch by the whole --max-prefill-tokens
            # (srt/managers/scheduler.py, the model worker's max_prefill_tokens).
            args += ["--max-prefill-tokens", str(tokens)]
        if dp > 1:
            notes.append(f"--chunked-prefill-size {tokens * dp} and --max-running-requests "
                         f"{running} are the server's: SGLang divides them over its "
                         f"{dp} attention-DP ranks ({tokens} tokens and "
                         f"{running // dp} requests each"
                         + (", as planned)" if running == batch_per_server else ")"))
        if fp8_weights and not native_quant:
            args += ["--quantization", "fp8"]
            if device is not None and not device.peak_fp8_flops_per_s and moe:
                # SGLang's fused-MoE FP8 kernel is Triton fp8e4nv, which chips before SM 89
                # lack (engines.weights_refusal; its dense layers fall back to Marlin W8A16);
                # vLLM's --quantization fp8 runs W8A16 there, experts included.
                unexpressed.append(f"FP8 experts: SGLang {get_engine('sglang').version} "
                                   f"runs FP8 experts only on chips with FP8 math (SM 89+), "
                                   f"which {device.name} is not; export for vLLM (W8A16 "
                                   f"Marlin), or plan 16-bit weights")
        if fp8_kv:
            args += ["--kv-cache-dtype", "fp8_e4m3"]
        elif auto_fp8_kv:
            args += ["--kv-cache-dtype", "bf16"]
        if moe and a2a is not None and s.ep > 1:
            args += ["--moe-a2a-backend", "deepep", "--deepep-mode",
                     {"deepep_auto": "auto", "deepep_normal": "normal"}.get(a2a, "low_latency")]
            if a2a == "deepep_normal" and wl.phase is not Phase.PREFILL:
                # srt/arg_groups/moe_hook.py (sglang 0.5.23): "Cuda graph is disabled because
                # deepep_mode=`normal`", decode and prefill graphs alike.
                unexpressed.append("--deepep-mode normal: SGLang turns its CUDA graphs off "
                                   "in this mode, so every decode step launches its kernels "
                                   "eagerly, which the plan (decode steps replayed as CUDA "
                                   "graphs) did not price")
            elif a2a != "deepep_normal":
                # DeepEP's low-latency dispatch is sized for at most
                # SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK tokens per rank (default 128,
                # at most 1,024: DeepEP's internode low-latency kernels count with a 1,024 tag;
                # sglang 0.5.23 srt/environ.py, srt/layers/moe/token_dispatcher/deepep.py).
                # Each rank dispatches its attention-TP share of its DP rank's rows
                # (srt/layers/layer_boundary/factories.py: an all-to-all MoE computes on the
                # rank's own rows), as the cost model prices it; low_latency mode sends
                # prompt steps through the same kernels (auto mode sends them through the
                # normal ones), and two-batch overlap dispatches each half apart. A decode
                # forward is one micro-batch of a DP rank's running requests (``forward``
                # above, pp_max_micro_batch_size under PP).
                what = "tokens of a prompt step" if ll_prompt else "decode tokens"
                dispatch = _ll_dispatch(ll_rows, s.tp, tbo)
                if dispatch > SGLANG_DEEPEP_LL_MAX_TOKENS:
                    unexpressed.append(
                        f"DeepEP low-latency dispatch of {dispatch} {what} per rank"
                        + (" and micro-batch" if tbo else "") + f": SGLang's low-latency "
                        f"kernels take at most {SGLANG_DEEPEP_LL_MAX_TOKENS} per rank; plan a "
                        f"smaller batch (or token budget) per attention-DP rank, or --moe-a2a "
                        f"deepep (normal kernels for prompt steps) or deepep-normal")
                elif dispatch > SGLANG_DEEPEP_LL_DEFAULT_TOKENS:
                    env_extra[SGLANG_DEEPEP_LL_ENV] = str(dispatch)
                    notes.append(f"{SGLANG_DEEPEP_LL_ENV}={dispatch}: the steps dispatch up "
                                 f"to {dispatch} {what} per rank"
                                 + (" and micro-batch" if tbo else "")
                                 + f" through DeepEP's low-latency kernels, whose buffers "
                                 f"SGLang sizes for {SGLANG_DEEPEP_LL_DEFAULT_TOKENS} unless "
                                 f"told (larger buffers, not priced in the plan's memory)")
            if s.ep != s.tp * dp:
                # sglang/srt/server_args.py ServerArgs._handle_a2a_moe: with the DeepEP
                # backend "the expert parallel size is adjusted to be the same as the tensor
                # parallel size".
                unexpressed.append(f"ep={s.ep} with --moe-a2a-backend deepep: SGLang sets "
                                   f"--ep-size to --tp-size, so the server runs EP "
                                   f"{s.tp * dp} (experts not tensor-parallel)")
        if moe and tbo:
            if a2a is not None and s.ep > 1:
                args += ["--enable-two-batch-overlap"]
            else:
                # Without an EP all-to-all SGLang 0.5.23 runs two-batch overlap only with
                # attention DP, overlapping its gather / scatter of the DP ranks' rows
                # (srt/arg_groups/validation_hook.py check_two_batch_overlap); the overlap of
                # the experts' exchange that l2s prices needs an all-to-all backend.
                tbo_dropped("two-batch overlap: SGLang overlaps the expert exchange only "
                            "with an EP all-to-all backend (--moe-a2a-backend, here none: "
                            + ("no --moe-a2a" if a2a is None else "EP 1") + "; without "
                            "one it overlaps only attention-DP's gather and scatter of "
                            "rows); exported without --enable-two-batch-overlap")
        if nodes > 1 and devices_per_node and not bool(
                node_ranks_cover(s.tp * dp, s.pp, devices_per_node, cluster_devices,
                                 servers)):
            unexpressed.append(f"tp={s.tp * dp} pp={s.pp} over {nodes} nodes: SGLang starts "
                               f"max(pp // nnodes, 1) stages per node (or a share of one "
                               f"stage's ranks where nnodes is a multiple of pp), the same "
                               f"number of ranks on every node, so some stage of this layout "
                               f"never starts or needs GPUs a node of this cluster lacks; plan "
                               f"with --engine sglang for a layout it launches")
        elif nodes > 1 and devices_per_node and bool(even_split_differs(
                [s.tp], [s.ep], [s.pp], [s.tp * dp if moe else s.tp], devices_per_node,
                mesh_domain, moe)[0]):
            unexpressed.append(f"tp={s.tp * dp} pp={s.pp} over {nodes} nodes: SGLang runs the "
                               f"same number of the server's ranks on each node, where the "
                               f"plan priced each node filled first, so some TP group, "
                               f"expert group or pipeline hop lands on the other side of a "
                               f"node boundary than priced; plan with --engine sglang for a "
                               f"layout priced as SGLang places it")
        if nodes > 1:
            args += ["--nnodes", str(nodes), "--node-rank", "0",
                     "--dist-init-addr", "NODE0_HOST:5000"]
            notes.append("start the same command on every node of a server with its "
                         "--node-rank (0 … nnodes-1) and node 0's address in --dist-init-addr")
    else:
        group = s.tp * dp
        if s.tp > 1 and dp > 1:
            unexpressed.append(f"attention tp={s.tp} with dp={dp}: TensorRT-LLM's attention-DP "
                               f"covers the whole group (attention TP 1); exported as "
                               f"enable_attention_dp over {group} ranks")
        args += ["--tp_size", str(group)]
        if s.cp > 1:
            unexpressed.append(f"cp={s.cp}: decode context parallelism inside the TP group; "
                               "TensorRT-LLM's --cp_size (Helix) maps ranks differently and "
                               "is not exported: exported without it (the KV cache is then "
                               "replicated over the KV heads' copies)")
        if s.pp > 1:
            args += ["--pp_size", str(s.pp)]
        if moe and s.ep > 1:
            args += ["--ep_size", str(s.ep)]
        # Per pipeline micro-batch: TensorRT-LLM admits max_batch_size x pp_size requests
        # (PyTorchModelEngine.get_max_num_sequences, NVIDIA/TensorRT-LLM@1a0dc5f7
        # tensorrt_llm/_torch/pyexecutor/model_engine.py, PyExecutor's
        # max_num_active_requests) and schedules max_batch_size per micro-batch.
        per_rank = max(1, batch_per_server // dp)
        per_mb = trtllm_max_batch_size(per_rank, s.pp)
        if s.pp > 1:
            where = " per attention-DP rank" if dp > 1 else ""
            more = (f", {per_mb * s.pp - per_rank} more than the plan's {per_rank} (whole "
                    f"micro-batches)" if per_mb * s.pp > per_rank else "")
            notes.append(f"--max_batch_size {per_mb} is per pipeline micro-batch: "
                         f"TensorRT-LLM runs up to {per_mb} x {s.pp} = {per_mb * s.pp} "
                         f"requests{where}{more}")
        if mem_util < 1.0:
            # TensorRT-LLM has no cap on the device's memory: its KV pool is kv_frac of what
            # weights and buffers leave of the whole device. The plan's pool is kv_frac of
            # what they leave of mem_util of it, so the exported fraction shrinks to match.
            m = e.memory
            hbm = m.usable_bytes / mem_util
            left_all = hbm - m.weight_bytes - m.workspace_bytes
            left_cap = m.usable_bytes - m.weight_bytes - m.workspace_bytes
            if left_all > 0 and left_cap > 0:
                planned = kv_frac
                kv_frac = math.floor(1000 * kv_frac * left_cap / left_all) / 1000
                notes.append(f"--gpu-memory-utilization {mem_util:g}: TensorRT-LLM has no cap "
                             f"on the device's memory, so the KV pool fraction is "
                             f"{kv_frac:g} (not {planned:g}) of the memory weights and "
                             f"buffers leave, the pool the plan holds within "
                             f"{mem_util:g} of the device")
        args += ["--max_batch_size", str(per_mb),
                 "--max_num_tokens", str(tokens), "--max_seq_len", str(max_len),
                 "--kv_cache_free_gpu_memory_fraction", f"{kv_frac:g}"]
        yaml_cfg = {"tensor_parallel_size": group, "pipeline_parallel_size": s.pp}
        if moe:
            yaml_cfg["moe_expert_parallel_size"] = s.ep
            yaml_cfg["moe_tensor_parallel_size"] = group // max(1, s.ep)
            if bool(ep_inner_differs(group, s.ep,
                                     Mesh(cluster_devices or group, mesh_domain))):
                # tensorrt_llm/mapping.py Mapping (engines.EngineProfile.ep_inner_ranks)
                unexpressed.append(
                    f"moe_expert_parallel_size {s.ep} × moe_tensor_parallel_size "
                    f"{group // s.ep} over a stage of {group} GPUs across NVLink domains "
                    f"of {mesh_domain}: TensorRT-LLM numbers expert-parallel ranks "
                    f"innermost, so its expert-TP groups cross domains where the plan priced "
                    f"the all-to-all across them (expert TP innermost); plan with --engine "
                    f"trtllm for a layout priced as TensorRT-LLM places it")
        yaml_cfg["enable_attention_dp"] = dp > 1
        # Chunked prefill wherever a prompt may be longer than the step budget: without it the
        # PyTorch backend refuses a prompt above max_num_tokens ("The sum of prompt length
        # ... should not exceed max_num_tokens": tensorrt_llm/llmapi/llm.py
        # _check_arguments checks it only with enable_chunked_prefill off), so a decode plan's
        # server could not take its own context. A prefill plan's budget holds its prompts
        # whole (above) and runs them unchunked.
        yaml_cfg["enable_chunked_prefill"] = wl.phase is not Phase.PREFILL
        cc = device_compute_capability(device) if device is not None else None
        if wl.phase is not Phase.PREFILL and max_len > tokens and model is not None \
                and model.attention.kind is AttentionKind.MLA \
                and cc not in MLA_CHUNKED_PREFILL_CC:
            unexpressed.append(
                f"chunked prefill for MLA: TensorRT-LLM turns it off on compute capability "
                f"{cc or 'unknown'} (py_executor_creator.py: 'Chunked Prefill for MLA can only "
                f"be enabled on SM90/SM100', SM103/SM120 in later versions), so a prompt above "
                f"--max_num_tokens {tokens} fails there; "
                + (f"plan with --max-num-batched-tokens {max_len}" if wl.phase is Phase.SERVE
                   else f"launch with --max_num_tokens {max_len}")
                + " (a larger step workspace than planned) or a shorter context")
        kv: dict[str, object] = {"free_gpu_memory_fraction": kv_frac}
        if fp8_kv:
            kv["dtype"] = "fp8"
            why_kv = kv_cache_refusal(engine, True, device.name,
                                      bool(device.peak_fp8_flops_per_s)) \
                if device is not None else None
            if why_kv is not None:
                unexpressed.append(f"FP8 KV cache: {why_kv}")
        elif model is not None and model.quant is not None and model.quant.kv_cache_fp8:
            # kv_cache_config.dtype selects only fp8 / nvfp4 over the checkpoint; anything
            # else leaves the checkpoint's kv_cache_quant_algo (api.checkpoint_dtypes).
            unexpressed.append(f"KV cache in {wl.kv_dtype.value}: TensorRT-LLM takes the "
                               f"checkpoint's FP8 KV quantisation (hf_quant_config "
                               f"kv_cache_quant_algo) and kv_cache_config.dtype cannot ask "
                               f"for 16 bits; the server runs an FP8 KV cache (plan with "
                               f"--kv-dtype fp8 to price it)")
        yaml_cfg["kv_cache_config"] = kv
        if fp8_weights and not native_quant:
            unexpressed.append("FP8 weights: trtllm-serve has no online FP8 quantisation; "
                               "serve an FP8 checkpoint (e.g. quantised with ModelOpt)")
        if nodes > 1:
            # One MPI rank per GPU over the server's nodes, trtllm-serve under
            # trtllm-llmapi-launch (NVIDIA/TensorRT-LLM examples/llm-api/
            # llm_mgmn_trtllm_serve.sh at 0bd88711: "the number of MPI processes should be the
            # same as the model world size"; HF downloads are not supported there).
            # The plan fills each node before the next (stages in order, a TP group inside
            # a node): srun's -n takes precedence over --ntasks-per-node, which is then the
            # most tasks per node; block distribution numbers consecutive ranks on one node,
            # but shares the tasks out evenly over the nodes unless Pack packs them as
            # tightly as it can (https://slurm.schedmd.com/srun.html, --ntasks-per-node and
            # --distribution), so 12 ranks on nodes of 8 run 8 + 4, not 6 + 6.
            per_node = min(devices_per_node, gpus) if devices_per_node else -(-gpus // nodes)
            launcher = (f"srun -N {nodes} -n {gpus} --ntasks-per-node={per_node} "
                        f"--distribution=block,Pack --mpi=pmix trtllm-llmapi-launch "
                        f"{prof.launcher}")
            hub_id = model_id_of(plan.model, model)
            if not hub_id.startswith("/"):
                # Slurm mode loads from a local path only: a placeholder the user fills in.
                model_path = f"/path/to/{hub_id.rsplit('/', 1)[-1]}"
            notes.append(f"a Slurm job over the server's {nodes} nodes runs it, one MPI rank "
                         f"per GPU (up to {per_node} per node, the first nodes filled "
                         f"first; under another MPI launcher, "
                         f"{gpus} ranks of trtllm-llmapi-launch {prof.launcher}); put the "
                         f"checkpoint of {hub_id} in a local folder on every node and give "
                         f"that folder for {model_path or hub_id} (Slurm mode downloads "
                         f"nothing from the hub)")
    why = checkpoint_refusal(engine, device, model) if device is not None \
        else architecture_refusal(engine, model.config_architecture) if model is not None \
        else None
    if why is not None:
        unexpressed.append(f"{why}; export for another engine, or serve another "
                           f"checkpoint")
    env = _collectives(cfg, engine, s.tp * dp, args, yaml_cfg, unexpressed, notes)
    env.update(env_extra)
    _layer_partition(plan, engine, env, notes)
    _sequence_parallel(cfg, engine, s.tp * dp, args, unexpressed)
    _block_fp8_moe(plan, model, device, engine, args, notes, yaml_cfg)
    if model is not None and model.remote_code:
        # A config with auto_map names classes in the checkpoint's repository (config,
        # model or tokenizer); the engines load them only with this flag (vLLM / SGLang
        # --trust-remote-code, trtllm-serve --trust_remote_code; their flag snapshots).
        flag = "--trust_remote_code" if engine == "trtllm" else "--trust-remote-code"
        args.append(flag)
        notes.append(f"the checkpoint ships code of its own (auto_map in its config.json), "
                     f"which {prof.title} loads only with {flag}: read it before launching")
    warnings: list[str] = []
    # Where hosts are smaller than the NVLink domain (GB200 NVL72's trays), a server over
    # several hosts of one domain stays on NVLink: the boundary that matters is the domain's.
    unit, where = devices_per_node, "node"
    if devices_per_node and device is not None and device.devices_per_host is not None:
        unit, where = device.scale_up_domain, "NVLink domain"
    if unit:
        # Servers placed inside node boundaries: a server of g <= node devices fits
        # node // g times per node (and the partial last node's rest); a larger one needs
        # whole nodes of its own.
        total = e.instances * s.devices + e.idle_devices
        full, rest = divmod(total, unit)
        spans = max(1, math.ceil(gpus / unit))
        # A server spanning nodes is priced over the scale-out link; what is not priced is
        # servers sharing a node's devices with another server's share of another node.
        fit = (full * (unit // gpus) + rest // gpus) if gpus <= unit \
            else (full // spans if gpus % unit == 0 else 1)
        if vllm_dp_nodes and unit == devices_per_node:
            # servers of whole DP ranks per node, each on nodes of its own
            fit = max((k for k in range(servers + 1) if k == 0 or bool(dp_ranks_fit_nodes(
                s.tp * s.pp, dp, unit, total, servers=k))), default=0)
        if servers > fit:
            warnings.append(
                f"{servers} servers of {gpus} GPUs on {full} {where}(s) of {unit}"
                + (f" and one of {rest}" if rest else "")
                + f": only {fit} fit inside {where} boundaries; the others would span "
                f"{where}s over the scale-out network, which the plan did not price")
    if model is not None and model.source_kind == "shipped" \
            and model.name not in shipped_repo_ids():
        # a shipped config with no published checkpoint (SOURCES.md: the paper's GPT-MoE
        # shapes): the model argument is only its name
        warnings.append(f"{model.name} is a config with no published checkpoint "
                        f"(learn_to_shard/data/models/SOURCES.md), so no engine can load "
                        f"'{model.name}': the command shows the launch settings only; put "
                        f"the path of a checkpoint of this shape in its place")
    if model is not None and model.source_kind == "file":
        src = Path(model.source or "")
        if src.name != "config.json":
            there = (src.parent / "config.json").exists()
            warnings.append(
                f"l2s planned the model of {src}, but the engine loads the config.json of "
                f"{src.parent}, "
                + ("which is another file" if there else
                   "and there is none: put the checkpoint and this config, named "
                   "config.json, in one folder and plan with that folder"))
        else:
            notes.append(f"the model is loaded from the folder {model_id_of(plan.model, model)}"
                         f" (config.json read by l2s); its weights must be in that folder")
    if servers > 1:
        notes.append(f"{servers} servers: put a load balancer in front of them that spreads "
                     f"requests round-robin (what the plan's throughput and its simulation "
                     f"assume)")
        if engine in LOCAL_ONLY_HOST:
            # The balancer reaches servers on other nodes only if they listen beyond
            # loopback; vLLM's default binds every interface already.
            args += ["--host", "0.0.0.0"]
            notes.append(f"--host 0.0.0.0: {prof.title} listens on "
                         f"{LOCAL_ONLY_HOST[engine]} by default, which a load balancer on "
                         f"another machine cannot reach")
    if e.idle_devices:
        used = e.instances * s.devices
        notes.append(f"{e.idle_devices} of the cluster's {used + e.idle_devices} GPUs stay "
                     f"idle: the plan's {servers} server(s) use {used}; its tokens/s per "
                     f"device counts the idle ones too")
    if unexpressed and plan.engine != engine:
        notes.append(f"the plan was searched for engine {plan.engine or 'none'}; rerun with "
                     f"--engine {engine} for the best strategy {prof.title} launches as is")
    if held_per_seq > max_len or wl.phase is not Phase.SERVE:
        # a prefill or decode plan's limit follows from one length of the phase's: said
        # always; a serve plan's where its KV pool would hold longer requests
        flag = {"vllm": "--max-model-len", "sglang": "--context-length",
                "trtllm": "--max_seq_len"}[engine]
        # what the limit is made of: a prefill plan has no osl (a request carries one output
        # token) and a decode plan's isl is its context
        made_of = "longest request" if max_model_len else {
            Phase.SERVE: "isl + osl", Phase.PREFILL: "isl + one output token",
            Phase.DECODE: "context + one token"}[wl.phase]
        notes.append(f"the length limit ({flag}) is the plan's {made_of}"
                     + (" plus SGLang's prompt margin" if engine == "sglang" else "")
                     + f", {max_len:,} tokens: the server refuses a longer request (prompt + "
                     f"max_tokens)"
                     + (f"; its KV pool holds {held_per_seq:,} tokens per sequence at the "
                        f"plan's batch, so a larger limit serves longer requests, fewer of "
                        f"them at once" if held_per_seq > max_len else ""))
    return Export(engine=engine, version=prof.version, launcher=launcher,
                  model_id=model_path or model_id_of(plan.model, model), args=args,
                  yaml_config=yaml_cfg,
                  warnings=warnings,
                  servers=servers, gpus_per_server=gpus, nodes_per_server=nodes,
                  unexpressed=unexpressed, notes=notes, devices_per_node=devices_per_node,
                  env=env)


def export_command(plan: Plan, engine: str, *, model: ModelSpec | None = None,
                   devices_per_node: int | None = None, max_model_len: int | None = None) -> str:
    """The launch text of ``plan`` for ``engine``: :meth:`Export.text` of
    :func:`build_export` (same arguments and errors)."""
    return build_export(plan, engine, model=model, devices_per_node=devices_per_node,
                        max_model_len=max_model_len).text()

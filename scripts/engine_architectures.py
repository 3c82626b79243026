"""Regenerate the pinned snapshot of the model classes each serving engine registers
(``src/learn_to_shard/engines/data/architectures.json``).

An engine picks the class that runs a checkpoint from its config's ``architectures[0]``;
``l2s`` checks a plan's model against these lists before it prints a launch command
(:mod:`learn_to_shard.engines.architectures`). Read with ``ast`` from the engines' own files,
nothing imported:

* vLLM: ``vllm/model_executor/models/registry.py`` in the release wheel: the keys of
  ``_TEXT_GENERATION_MODELS`` and ``_MULTIMODAL_MODELS`` (its own implementations), of
  ``_TRANSFORMERS_SUPPORTED_MODELS`` (run on its Transformers backend) and
  ``_PREVIOUSLY_SUPPORTED_MODELS`` (refused now, with the last release that ran them);
* SGLang: every ``EntryClass`` of ``sglang/srt/models/*.py`` in the release wheel (the classes
  ``ModelRegistry`` registers by name);
* TensorRT-LLM (PyTorch runtime): the names given to ``register_auto_model("...")`` in
  ``tensorrt_llm/_torch/models/*.py`` of a source checkout (no wheel of it installs from
  PyPI: its sdist downloads from NVIDIA's index at build time).

``planner`` lists, per engine, the HF class names of the families ``l2s`` loads that the engine
does not register (:data:`PLANNER_ARCHITECTURES`), computed from the lists above.

Usage::

    python scripts/engine_architectures.py vllm [--wheel vllm-0.33.0-...whl]   # else downloads
    python scripts/engine_architectures.py sglang [--wheel sglang-0.5.23-...whl]
    python scripts/engine_architectures.py trtllm --source /path/to/TensorRT-LLM --commit SHA

Each run rewrites its engine's entry and keeps the others'.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "learn_to_shard" / "engines" / "data" / "architectures.json"

#: The HF ``architectures[0]`` class names of the families ``l2s`` loads
#: (``learn_to_shard.model.hf_config.SUPPORTED_MODEL_TYPES``; Kimi-K2's config names
#: ``DeepseekV3ForCausalLM``, Falcon's older checkpoints ``RWForCausalLM``).
PLANNER_ARCHITECTURES: tuple[str, ...] = (
    "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM", "MixtralForCausalLM", "PhiMoEForCausalLM", "DeepseekV2ForCausalLM",
    "DeepseekV3ForCausalLM", "GptOssForCausalLM", "Llama4ForConditionalGeneration",
    "Llama4ForCausalLM", "MiniMaxM2ForCausalLM", "Gemma2ForCausalLM",
    "Gemma3ForConditionalGeneration", "Gemma3ForCausalLM", "Phi3ForCausalLM",
    "GemmaForCausalLM", "GraniteForCausalLM", "Olmo2ForCausalLM", "Glm4ForCausalLM",
    "InternLM2ForCausalLM", "CohereForCausalLM", "Cohere2ForCausalLM", "Qwen2MoeForCausalLM",
    "NemotronForCausalLM",
    "Glm4MoeForCausalLM",
    "FalconForCausalLM", "RWForCausalLM", "DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM",
    "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
    "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
    "LlavaForConditionalGeneration", "LlavaNextForConditionalGeneration",
    "Mistral3ForConditionalGeneration", "InternVLChatModel",
    "InternVLForConditionalGeneration",
)


def _dict_keys(tree: ast.Module, name: str) -> list[str]:
    """The string keys of the module-level dict literal assigned to ``name``."""
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 \
            else node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id == name and isinstance(node.value, ast.Dict):
            return sorted(k.value for k in node.value.keys
                          if isinstance(k, ast.Constant) and isinstance(k.value, str))
    raise SystemExit(f"no dict literal {name} in the registry")


def read_vllm(wheel: Path) -> dict:
    """vLLM's registry from its wheel: ``native`` and ``transformers_backend`` class names."""
    with zipfile.ZipFile(wheel) as z:
        tree = ast.parse(z.read("vllm/model_executor/models/registry.py").decode())
    native = sorted(set(_dict_keys(tree, "_TEXT_GENERATION_MODELS"))
                    | set(_dict_keys(tree, "_MULTIMODAL_MODELS")))
    removed = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "_PREVIOUSLY_SUPPORTED_MODELS"
                for t in node.targets) and isinstance(node.value, ast.Dict):
            pairs = zip(node.value.keys, node.value.values, strict=True)
            removed = {k.value: v.value for k, v in pairs
                       if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)}
    return {"native": native,
            "transformers_backend": _dict_keys(tree, "_TRANSFORMERS_SUPPORTED_MODELS"),
            "removed": dict(sorted(removed.items()))}


def _entry_names(node: ast.expr) -> list[str]:
    """Class names an ``EntryClass = ...`` value holds (a name, or a list / tuple of them)."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [n for e in node.elts for n in _entry_names(e)]
    if isinstance(node, ast.BinOp):                 # [A, B] + [C]
        return _entry_names(node.left) + _entry_names(node.right)
    return []


_SGL_MODELS = "sglang.srt.models."


def _imported_models(tree: ast.Module) -> dict[str, tuple[str, str]]:
    """``local name -> (module, name)`` of every ``from sglang.srt.models.X import Y [as Z]``
    anywhere in ``tree`` (function-level imports included)."""
    out: dict[str, tuple[str, str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(_SGL_MODELS):
            for a in node.names:
                out[a.asname or a.name] = (str(node.module), a.name)
    return out


def _class_chain(mods: dict[str, ast.Module], module: str, name: str,
                 seen: set[tuple[str, str]] | None = None
                 ) -> list[tuple[str, ast.ClassDef]]:
    """The class ``name`` as ``module`` sees it, then its bases that SGLang's model files
    define, in method-resolution order (depth first), as ``(module, ClassDef)``; a base outside
    ``sglang.srt.models`` (``nn.Module``) ends its branch."""
    seen = set() if seen is None else seen
    tree = mods.get(module)
    if tree is None or (module, name) in seen:
        return []
    seen.add((module, name))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            out = [(module, node)]
            for base in node.bases:
                if isinstance(base, ast.Name):
                    out += _class_chain(mods, module, base.id, seen)
            return out
    imported = _imported_models(tree).get(name)
    return _class_chain(mods, *imported, seen) if imported else []


def _forward_params(chain: list[tuple[str, ast.ClassDef]]) -> list[str] | None:
    """Parameter names of the first ``forward`` along ``chain`` (``None``: none found)."""
    for _, cls in chain:
        for node in cls.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and node.name == "forward":
                a = node.args
                return [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    return None


def read_sglang(wheel: Path) -> dict:
    """SGLang's registered classes from its wheel: every ``EntryClass`` of its model files,
    and two capabilities of the planner's classes it registers:

    * ``pp_unsupported``: the class's ``forward`` takes no ``pp_proxy_tensors``, so a
      launch with ``--pp-size`` > 1 stops at start-up ("Pipeline Parallel is not compatible
      with this model.", ``ModelRunner.__init__``: ``support_pp = "pp_proxy_tensors" in
      inspect.signature(self.model.forward).parameters``, ``sglang/srt/model_executor/
      model_runner.py``);
    * ``attention_dp_unsupported``: the class's module and those of its bases, with the
      model modules they import, do not both read ``attn_tp_size`` and declare their layers'
      stages (``append_stages``). Attention-DP needs both: the attention split over the
      attention-TP group ``--attn-dp-size`` leaves each DP rank (``tp-size /
      attn-dp-size``), and the layer stages' communicator that gathers the DP ranks' rows
      for the MoE and scatters them back (``sglang/srt/models/qwen3_moe.py`` has both;
      ``mixtral.py``'s attention splits heads over the whole ``--tp-size`` group;
      ``phimoe.py`` declares no stages, so its MoE all-reduces over the TP group ranks that
      hold other requests, and it refuses an attention-TP group between 1 and the TP group
      at start-up, ``reject_attn_tp_shard_with_tp_reduce``). A text test of the model
      files, not of SGLang's behaviour; ``l2s`` reads it for MoE classes only, since it
      exports attention-DP for MoE servers alone (a dense model's DP ranks are servers of
      their own);
    * ``dense_mlp_whole_group``: the classes whose module and those of its bases, with the
      model modules they import, never read ``is_dense_ffn_fully_dp``: a MoE model's dense
      MLP layers there shard over the whole ``--tp-size`` group under attention-DP, the DP
      ranks' rows gathered for them (``sglang/srt/models/llama4.py``: ``LlamaMLP`` with its
      default ``parallel_group="tp"``), and ``--moe-dense-tp-size 1`` does not replicate them
      (``deepseek_v2.py``: ``"replicated" if is_dense_ffn_fully_dp() else "tp"``). Read for
      every class; ``l2s`` applies it to MoE models with dense layers only.
    """
    names: dict[str, str] = {}
    mods: dict[str, ast.Module] = {}
    texts: dict[str, str] = {}
    with zipfile.ZipFile(wheel) as z:
        for path in z.namelist():
            if not (path.startswith("sglang/srt/models/") and path.endswith(".py")):
                continue
            text = z.read(path).decode("utf-8", "replace")
            module = path[:-3].replace("/", ".")
            tree = mods[module] = ast.parse(text)
            texts[module] = text
            for node in tree.body:
                if isinstance(node, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets):
                    names.update((n, module) for n in _entry_names(node.value))
    no_pp, no_adp, whole = [], [], []
    for arch in PLANNER_ARCHITECTURES:
        if arch not in names:
            continue
        chain = _class_chain(mods, names[arch], arch)
        params = _forward_params(chain)
        if params is None:
            raise SystemExit(f"sglang: no forward found for {arch} in {names[arch]}")
        if "pp_proxy_tensors" not in params:
            no_pp.append(arch)
        reach = {m for m, _ in chain}
        reach |= {m for r in list(reach) for m, _ in _imported_models(mods[r]).values()}
        text = "".join(texts.get(m, "") for m in reach)
        if not ("attn_tp_size" in text and "append_stages" in text):
            no_adp.append(arch)
        if "is_dense_ffn_fully_dp" not in text:
            whole.append(arch)
    return {"native": sorted(names), "pp_unsupported": sorted(no_pp),
            "attention_dp_unsupported": sorted(no_adp), "dense_mlp_whole_group": sorted(whole)}


def read_trtllm(source: Path) -> dict:
    """TensorRT-LLM's PyTorch-runtime classes: ``register_auto_model("...")`` names."""
    names: set[str] = set()
    for path in sorted((source / "tensorrt_llm" / "_torch" / "models").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) \
                    == "register_auto_model" and node.args \
                    and isinstance(node.args[0], ast.Constant):
                names.add(str(node.args[0].value))
    return {"native": sorted(names)}


def _download(engine: str, version: str, where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d",
                    str(where), f"{engine}=={version}"], check=True)
    (wheel,) = where.glob(f"{engine}-{version}-*.whl")
    return wheel


def main() -> None:
    """Command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("engine", choices=["vllm", "sglang", "trtllm"])
    ap.add_argument("--wheel", type=Path, help="vllm / sglang: the release wheel to read")
    ap.add_argument("--source", type=Path, help="trtllm: a TensorRT-LLM source checkout")
    ap.add_argument("--commit", help="trtllm: the checkout's commit, recorded as its source")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from learn_to_shard.engines import get_engine

    prof = get_engine(args.engine)
    if args.engine == "trtllm":
        if args.source is None or args.commit is None:
            ap.error("trtllm needs --source DIR (a TensorRT-LLM checkout) and --commit SHA")
        entry = read_trtllm(args.source)
        entry["source"] = (f"NVIDIA/TensorRT-LLM tensorrt_llm/_torch/models/*.py @ "
                           f"{args.commit} (register_auto_model names)")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            wheel = args.wheel or _download(args.engine, prof.version, Path(tmp))
            entry = (read_vllm if args.engine == "vllm" else read_sglang)(wheel)
            entry["source"] = f"{prof.source}: {wheel.name}"
    entry["version"] = prof.version
    entry["complete"] = True            # every class the engine registers, not a search's
    known = set(entry["native"]) | set(entry.get("transformers_backend", []))
    entry["planner_absent"] = [a for a in PLANNER_ARCHITECTURES if a not in known]
    snap = json.loads(OUT.read_text()) if OUT.exists() else {}
    snap[args.engine] = entry
    OUT.write_text(json.dumps(snap, indent=1, sort_keys=True) + "\n")
    print(f"{OUT}: {args.engine} {prof.version}: {len(entry['native'])} classes, "
          f"absent of the planner's: {', '.join(entry['planner_absent']) or 'none'}")


if __name__ == "__main__":
    main()

"""The engines' registered model classes (``engines/data/architectures.json``): the pinned
snapshot covers every family the planner loads, a launch an engine cannot start is refused,
and a fallback to an engine's Transformers backend is said."""

from __future__ import annotations

import importlib.util
import json
import zipfile
from importlib import resources
from pathlib import Path

import pytest
from typer.testing import CliRunner

from learn_to_shard.cli import app
from learn_to_shard.engines.architectures import (
    architecture_note,
    architecture_refusal,
    load_architectures,
)

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location(
        "engine_architectures", ROOT / "scripts" / "engine_architectures.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _shipped_architectures() -> set[str]:
    out = set()
    for entry in (resources.files("learn_to_shard") / "data" / "models").iterdir():
        path = entry / "config.json" if entry.is_dir() else entry
        if not path.name.endswith(".json"):
            continue
        archs = json.loads(path.read_text()).get("architectures")
        if archs:
            out.add(archs[0])
    return out


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_every_planner_class_is_classified_for_every_engine(engine: str) -> None:
    """Each class of the families the planner loads (the script's list, which holds every
    shipped config's ``architectures[0]`` that the planner accepts) is either registered
    by the engine or listed absent, so no shipped model is 'not known' to a snapshot; the
    snapshot's version is the engine profile's."""
    from learn_to_shard.engines import get_engine

    planner = set(_script().PLANNER_ARCHITECTURES)
    shipped = _shipped_architectures() - {"DeepseekV4ForCausalLM",          # refused models
                                          "Qwen3_5ForConditionalGeneration"}
    assert shipped <= planner, shipped - planner
    snap = load_architectures(engine)
    assert snap is not None and snap.version == get_engine(engine).version
    known = snap.native | snap.transformers_backend
    assert planner <= known | snap.planner_absent
    assert not (known & snap.planner_absent)
    if snap.complete:
        assert snap.planner_absent == planner - known


def test_trtllm_refuses_a_class_its_pytorch_runtime_does_not_register(tmp_path: Path) -> None:
    """Granite (HF GraniteForCausalLM) is registered by vLLM and SGLang, not by TensorRT-LLM's
    PyTorch runtime, which has no fallback: ``--export trtllm`` and ``--engine trtllm`` stop
    with one line naming the class, the engine table leaves TensorRT-LLM out with that
    reason, vLLM and SGLang export it without a note; Llama stays exportable to all three."""
    cfg = {"architectures": ["GraniteForCausalLM"], "hidden_act": "silu",
           "hidden_size": 2048, "intermediate_size": 8192, "model_type": "granite",
           "num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 8,
           "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
           "tie_word_embeddings": True, "torch_dtype": "bfloat16", "vocab_size": 49155}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    base = ["plan", "--model", str(path), "--cluster", "h100-sxm:1", "--phase", "serve",
            "--isl", "1000", "--osl", "100", "-q"]
    why = ("TensorRT-LLM 1.2.0rc2's PyTorch runtime has no model class GraniteForCausalLM "
           "(no register_auto_model names it; trtllm-serve stops with 'Unknown architecture "
           "for AutoModelForCausalLM: GraniteForCausalLM')")
    for flag in ("--export", "--engine"):
        r = CliRunner().invoke(app, [*base, flag, "trtllm"])
        assert r.exit_code == 2 and f"{flag} trtllm: {why}" in r.output, r.output
        assert "Traceback" not in r.output
    doc = json.loads(CliRunner().invoke(app, [*base, "--json", "--no-timing"]).stdout)
    assert {"engine": "trtllm", "reason": why} in doc["engine_optima_left_out"]
    for engine in ("vllm", "sglang"):
        ok = CliRunner().invoke(app, [*base, "--export", engine])
        assert ok.exit_code == 0 and "Transformers backend" not in ok.output, ok.output
    llama = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster",
                                     "h100-sxm:1", "--phase", "serve", "--isl", "1000",
                                     "--osl", "100", "-q", "--export", "trtllm"])
    assert llama.exit_code == 0 and "no model class" not in llama.output, llama.output


def test_a_fallback_to_the_transformers_backend_is_said() -> None:
    """SGLang 0.5.23 has no Falcon implementation (no EntryClass names FalconForCausalLM) and
    vLLM 0.33.0 maps OLMo 2 to its Transformers backend: both launch, with a note that the
    backend runs without the engine's fused kernels; a class neither registry holds gets the
    vLLM note too, while TensorRT-LLM's partial list refuses only what it lists absent."""
    falcon = CliRunner().invoke(app, ["plan", "--model", "falcon-7b-instruct", "--cluster",
                                      "h100-sxm:1", "--phase", "serve", "--isl", "1000",
                                      "--osl", "100", "-q", "--export", "sglang"])
    assert falcon.exit_code == 0, falcon.output
    assert ("# note: SGLang 0.5.23 has no implementation of FalconForCausalLM: it runs the "
            "checkpoint only on its Transformers backend") in falcon.output
    assert architecture_note("vllm", "FalconForCausalLM") is None
    assert "runs Olmo2ForCausalLM on its Transformers backend (its registry maps the class " \
        "there)" in str(architecture_note("vllm", "Olmo2ForCausalLM"))
    assert "has no implementation of MyLlamaForCausalLM" in str(
        architecture_note("vllm", "MyLlamaForCausalLM"))
    assert architecture_note("trtllm", "GraniteForCausalLM") is None
    assert architecture_refusal("vllm", "MyLlamaForCausalLM") is None
    assert architecture_refusal("trtllm", "MyLlamaForCausalLM") is None     # not searched
    assert architecture_refusal("trtllm", "InternLM2ForCausalLM") is not None
    assert architecture_refusal("trtllm", "Qwen3MoeForCausalLM") is None


def test_the_script_reads_the_engines_registries(tmp_path: Path) -> None:
    """``scripts/engine_architectures.py`` reads vLLM's registry dicts, SGLang's
    ``EntryClass`` declarations (a name, a list, a sum of lists) and TensorRT-LLM's
    ``register_auto_model`` names, by ``ast`` from the files a wheel or checkout holds."""
    mod = _script()
    vllm = tmp_path / "vllm.whl"
    with zipfile.ZipFile(vllm, "w") as z:
        z.writestr("vllm/model_executor/models/registry.py",
                   '_TEXT_GENERATION_MODELS = {"AForCausalLM": ("a", "A")}\n'
                   '_MULTIMODAL_MODELS = {"BForConditionalGeneration": ("b", "B")}\n'
                   '_TRANSFORMERS_SUPPORTED_MODELS = {"CForCausalLM": ("t", "T")}\n')
    assert mod.read_vllm(vllm) == {"native": ["AForCausalLM", "BForConditionalGeneration"],
                                   "transformers_backend": ["CForCausalLM"]}
    sglang = tmp_path / "sglang.whl"
    with zipfile.ZipFile(sglang, "w") as z:
        z.writestr("sglang/srt/models/a.py", "class A: ...\nEntryClass = A\n")
        z.writestr("sglang/srt/models/b.py", "EntryClass = [B, C] + [D]\n")
        z.writestr("sglang/srt/other.py", "EntryClass = E\n")
    assert mod.read_sglang(sglang) == {"native": ["A", "B", "C", "D"]}
    models = tmp_path / "tensorrt_llm" / "_torch" / "models"
    models.mkdir(parents=True)
    (models / "modeling_x.py").write_text('@register_auto_model("XForCausalLM")\n'
                                          '@register_auto_model("YForCausalLM")\n'
                                          'class X: ...\n')
    assert mod.read_trtllm(tmp_path) == {"native": ["XForCausalLM", "YForCausalLM"]}

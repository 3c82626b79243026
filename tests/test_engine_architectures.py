"""The engines' registered model classes (``engines/data/architectures.json``): the pinned
snapshot covers every family the planner loads, a launch an engine cannot start is refused,
and a fallback to an engine's Transformers backend is said."""

from __future__ import annotations

import importlib.util
import json
import zipfile
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from conftest import granite_folder
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
    assert planner <= known | snap.planner_absent | snap.unverified
    assert not (known & snap.planner_absent) and not (known & snap.unverified)
    if snap.complete:
        assert snap.planner_absent == planner - known and not snap.unverified


def test_trtllm_refuses_a_class_its_pytorch_runtime_does_not_register(tmp_path: Path) -> None:
    """Granite (HF GraniteForCausalLM) is registered by vLLM and SGLang, not by TensorRT-LLM's
    PyTorch runtime, which has no fallback: ``--export trtllm`` and ``--engine trtllm`` stop
    with one line naming the class, the engine table leaves TensorRT-LLM out with that
    reason, vLLM and SGLang export it without a note; Llama stays exportable to all three."""
    path = granite_folder(tmp_path)
    base = ["plan", "--model", str(path), "--cluster", "h100-sxm:1", "--phase", "serve",
            "--isl", "1000", "--osl", "100", "-q"]
    why = ("TensorRT-LLM 1.2.0rc2's PyTorch runtime has no model class GraniteForCausalLM "
           "(no register_auto_model names it; trtllm-serve stops with 'Unknown architecture "
           "for AutoModelForCausalLM: GraniteForCausalLM'); vLLM 0.33.0 and SGLang 0.5.23 "
           "register it")
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
    assert architecture_note("trtllm", "GraniteForCausalLM") is None        # refused
    assert architecture_refusal("vllm", "MyLlamaForCausalLM") is None
    assert architecture_refusal("trtllm", "MyLlamaForCausalLM") is None     # not searched
    assert "MyLlamaForCausalLM was not read (it is not among the classes searched for)" \
        in str(architecture_note("trtllm", "MyLlamaForCausalLM"))
    assert architecture_refusal("trtllm", "InternLM2ForCausalLM") is not None
    assert architecture_refusal("trtllm", "Qwen3MoeForCausalLM") is None
    assert architecture_note("trtllm", "Qwen3MoeForCausalLM") is None
    # no class named: nothing checked (the engines resolve one from model_type)
    assert architecture_refusal("trtllm", None) is None
    assert architecture_note("vllm", None) is None


@pytest.mark.parametrize("model", ["glm-5", "minimax-m2.5", "gemma-2-9b-it"])
def test_trtllm_classes_registered_only_after_its_pinned_release_are_refused(model):
    """GLM-5 (TensorRT-LLM's GLM-5 guide: minimum 1.3.0rc8), MiniMax-M2 (its pull request
    10532, January 2026) and Gemma-2 (modeling_gemma2.py, copyright 2026) are registered by
    later TensorRT-LLM sources, not by the pinned 1.2.0rc2: the export is refused."""
    r = CliRunner().invoke(app, ["plan", "--model", model, "--cluster", "b200:8", "--phase",
                                 "serve", "--isl", "1000", "--osl", "100", "-q", "--export",
                                 "trtllm"])
    assert r.exit_code == 2 and "PyTorch runtime has no model class" in r.output, r.output


def test_unverified_classes_launch_with_a_note_and_unnamed_configs_are_not_checked(
        tmp_path: Path) -> None:
    """Phi-3 is registered by a TensorRT-LLM source whose date against 1.2.0rc2 was not
    read: its launch says so. A config without ``architectures`` (the engines resolve a
    class from ``model_type``) gets no class note or refusal from any engine. vLLM 0.33.0
    refuses a class it removed (RWForCausalLM, supported until 0.28.0)."""
    base = ["--cluster", "h100-sxm:1", "--phase", "serve", "--isl", "1000", "--osl", "100",
            "-q", "--export"]
    phi = CliRunner().invoke(app, ["plan", "--model", "phi-3-mini-4k-instruct", *base,
                                   "trtllm"])
    assert phi.exit_code == 0 and ("whether TensorRT-LLM 1.2.0rc2's PyTorch runtime "
                                   "registers Phi3ForCausalLM was not read (a later source "
                                   "registers it)") in phi.output, phi.output
    text = (resources.files("learn_to_shard") / "data" / "models" / "llama-3.1-8b.json")
    cfg = {k: v for k, v in json.loads(text.read_text()).items() if k != "architectures"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    for engine in ("vllm", "sglang", "trtllm"):
        r = CliRunner().invoke(app, ["plan", "--model", str(path), *base, engine])
        assert r.exit_code == 0 and "Transformers backend" not in r.output \
            and "was not read" not in r.output, r.output
    falcon = json.loads((resources.files("learn_to_shard") / "data" / "models"
                         / "falcon-7b-instruct.json").read_text())
    rw = tmp_path / "rw" / "config.json"
    rw.parent.mkdir()
    rw.write_text(json.dumps(falcon | {"architectures": ["RWForCausalLM"]}))
    r = CliRunner().invoke(app, ["plan", "--model", str(rw), *base, "vllm"])
    assert r.exit_code == 2 and "vLLM 0.33.0 no longer runs RWForCausalLM (supported until " \
        "v0.28.0" in r.output, r.output


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
                   '_TRANSFORMERS_SUPPORTED_MODELS = {"CForCausalLM": ("t", "T")}\n'
                   '_PREVIOUSLY_SUPPORTED_MODELS = {"DForCausalLM": "0.9.2"}\n')
    assert mod.read_vllm(vllm) == {"native": ["AForCausalLM", "BForConditionalGeneration"],
                                   "transformers_backend": ["CForCausalLM"],
                                   "removed": {"DForCausalLM": "0.9.2"}}
    sglang = tmp_path / "sglang.whl"
    with zipfile.ZipFile(sglang, "w") as z:
        z.writestr("sglang/srt/models/a.py", "class A: ...\nEntryClass = A\n")
        z.writestr("sglang/srt/models/b.py", "EntryClass = [B, C] + [D]\n")
        z.writestr("sglang/srt/other.py", "EntryClass = E\n")
    assert mod.read_sglang(sglang) == {"native": ["A", "B", "C", "D"], "pp_unsupported": [],
                                       "attention_dp_unsupported": [],
                                       "dense_mlp_whole_group": []}
    # The planner's classes: pipeline parallelism where the forward found along the bases
    # (in the module, or imported from another model module) takes pp_proxy_tensors (a
    # **kwargs catch-all does not, as SGLang's inspect.signature test); attention-DP where
    # the class's module, its bases' and the model modules they import read attn_tp_size and
    # declare their layers' stages (append_stages, the DP ranks' gather for the MoE); dense
    # MLP layers that replicate under attention-DP where those modules read
    # is_dense_ffn_fully_dp (DeepSeek's), over the whole TP group otherwise.
    sglang = tmp_path / "sglang2.whl"
    with zipfile.ZipFile(sglang, "w") as z:
        z.writestr("sglang/srt/models/llama.py",
                   "class LlamaForCausalLM(nn.Module):\n"
                   "    def forward(self, ids, pos, batch, pp_proxy_tensors=None): ...\n"
                   "EntryClass = LlamaForCausalLM\n")
        z.writestr("sglang/srt/models/mistral.py",
                   "from sglang.srt.models.llama import LlamaForCausalLM\n"
                   "class MistralForCausalLM(LlamaForCausalLM):\n    pass\n"
                   "EntryClass = [MistralForCausalLM]\n")
        z.writestr("sglang/srt/models/phimoe.py",        # attn_tp_size, no stages
                   "n = get_parallel().attn_tp_size\n"
                   "class PhiMoEForCausalLM(nn.Module):\n"
                   "    def forward(self, ids, pos, batch, pp_proxy_tensors=None): ...\n"
                   "EntryClass = PhiMoEForCausalLM\n")
        z.writestr("sglang/srt/models/gemma2.py",
                   "class Gemma2ForCausalLM(nn.Module):\n"
                   "    def forward(self, ids, pos, batch, **kwargs): ...\n"
                   "EntryClass = Gemma2ForCausalLM\n")
        z.writestr("sglang/srt/models/qwen3_moe.py",
                   "n = get_parallel().attn_tp_size\n"
                   "stages = append_stages(attn, ffn)\n"
                   "class Qwen3MoeForCausalLM(nn.Module):\n"
                   "    def forward(self, ids, pos, batch, pp_proxy_tensors=None): ...\n"
                   "EntryClass = Qwen3MoeForCausalLM\n")
        z.writestr("sglang/srt/models/deepseek_v2.py",
                   "n = get_parallel().attn_tp_size\n"
                   "stages = append_stages(attn, ffn)\n"
                   "group = 'replicated' if is_dense_ffn_fully_dp() else 'tp'\n"
                   "class DeepseekV3ForCausalLM(nn.Module):\n"
                   "    def forward(self, ids, pos, batch, pp_proxy_tensors=None): ...\n"
                   "EntryClass = DeepseekV3ForCausalLM\n")
        z.writestr("sglang/srt/models/mllama4.py",
                   "class Llama4ForConditionalGeneration(nn.Module):\n"
                   "    def __init__(self):\n"
                   "        from sglang.srt.models.qwen3_moe import Qwen3MoeForCausalLM\n"
                   "    def forward(self, ids, pos, batch): ...\n"
                   "EntryClass = Llama4ForConditionalGeneration\n")
    got = mod.read_sglang(sglang)
    assert got["pp_unsupported"] == ["Gemma2ForCausalLM", "Llama4ForConditionalGeneration"]
    assert got["attention_dp_unsupported"] == ["Gemma2ForCausalLM", "LlamaForCausalLM",
                                               "MistralForCausalLM", "PhiMoEForCausalLM"]
    assert got["dense_mlp_whole_group"] == [
        "Gemma2ForCausalLM", "Llama4ForConditionalGeneration", "LlamaForCausalLM",
        "MistralForCausalLM", "PhiMoEForCausalLM", "Qwen3MoeForCausalLM"]
    models = tmp_path / "tensorrt_llm" / "_torch" / "models"
    models.mkdir(parents=True)
    (models / "modeling_x.py").write_text('@register_auto_model("XForCausalLM")\n'
                                          '@register_auto_model("YForCausalLM")\n'
                                          'class X: ...\n')
    assert mod.read_trtllm(tmp_path) == {"native": ["XForCausalLM", "YForCausalLM"]}


def test_the_class_facts_reach_the_plan_and_pareto(tmp_path: Path) -> None:
    """A plan made for SGLang says, on its model line, that SGLang runs Falcon on its
    Transformers backend (slower than priced); pareto under the TensorRT-engine profile,
    whose launch engine (trtllm-serve) does not register Granite, says so where a launch
    command would be, not that no engine runs on the device."""
    plan = CliRunner().invoke(app, ["plan", "--model", "falcon-7b-instruct", "--cluster",
                                    "h100-sxm:1", "--phase", "serve", "--isl", "1000",
                                    "--osl", "100", "--engine", "sglang"])
    assert plan.exit_code == 0, plan.output
    assert "SGLang 0.5.23 has no implementation of FalconForCausalLM" in \
        " ".join(plan.output.split())
    r = CliRunner().invoke(app, ["pareto", "--model", str(granite_folder(tmp_path)),
                                 "--cluster", "h100-sxm:1", "--isl", "1000", "--osl", "100",
                                 "--engine", "trtllm-tensorrt", "--out", str(tmp_path / "p")])
    text = " ".join(r.output.split())
    assert r.exit_code == 0, r.output
    assert "has no model class GraniteForCausalLM" in text
    assert "no exported engine runs on this device" not in text


def test_sglang_plans_leave_out_the_degrees_its_model_class_cannot_run() -> None:
    """SGLang 0.5.23 asserts pipeline-parallel support at start-up (a ``forward`` taking
    ``pp_proxy_tensors``), which Gemma 2, Gemma 3, Llama-4's multimodal wrapper and PhiMoE
    lack; its Mixtral attention splits heads over the whole ``--tp-size`` group, so
    ``--attn-dp-size`` would run it on the wrong heads, and its PhiMoE declares no layer
    stages, so nothing gathers the DP ranks' rows for its MoE (and it refuses an
    attention-TP group narrower than TP at start-up): the snapshot says so, the search
    under ``--engine sglang`` leaves those degrees out (without an engine, and under vLLM,
    they stay), the plan says why, and the classes written for them keep them."""
    from learn_to_shard.api import cost_config, make_cost_model
    from learn_to_shard.engines.architectures import unsupported_degrees
    from learn_to_shard.workload import Phase, Workload

    assert unsupported_degrees("sglang", "Gemma2ForCausalLM") == ("pp", "attention_dp")
    assert unsupported_degrees("sglang", "MixtralForCausalLM") == ("attention_dp",)
    assert unsupported_degrees("sglang", "PhiMoEForCausalLM") == ("pp", "attention_dp")
    for ok in ("LlamaForCausalLM", "MistralForCausalLM", "Qwen3MoeForCausalLM",
               "DeepseekV3ForCausalLM", "GptOssForCausalLM", "Llama4ForCausalLM"):
        assert "pp" not in unsupported_degrees("sglang", ok), ok
    for ok in ("Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM", "GptOssForCausalLM",
               "Llama4ForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
               "MiniMaxM2ForCausalLM", "Glm4MoeForCausalLM"):
        assert "attention_dp" not in unsupported_degrees("sglang", ok), ok
    assert unsupported_degrees("vllm", "Gemma2ForCausalLM") == ()
    assert unsupported_degrees("sglang", None) == ()

    wl = Workload(Phase.SERVE, isl=1024, osl=256)

    def refused(model: str, cluster: str, engine: str | None, tp: int, pp: int,
                dp: int) -> bool:
        cm = make_cost_model(model, cluster, wl, cost_config(engine), engine=engine)
        space = cm.space
        return bool(space._engine_degrees_bad(np.array([tp]), np.array([1]), np.array([dp]),
                                              np.array([pp]))[0]) if engine else False

    assert refused("gemma-2-9b-it", "l40s:2", "sglang", 1, 2, 1)
    assert not refused("gemma-2-9b-it", "l40s:2", "sglang", 2, 1, 1)
    assert not refused("gemma-2-9b-it", "l40s:2", "vllm", 1, 2, 1)
    assert refused("mixtral-8x7b", "h100-sxm:8", "sglang", 2, 1, 2)       # attention-DP
    assert not refused("mixtral-8x7b", "h100-sxm:8", "sglang", 2, 2, 1)   # PP runs
    assert not refused("qwen3-30b-a3b", "h100-sxm:8", "sglang", 2, 1, 2)
    for model, cluster, flag in (("gemma-2-9b-it", "l40s:2", "--pp-size"),
                                 ("mixtral-8x7b", "h100-sxm:8", "--attn-dp-size"),
                                 ("phi-3.5-moe-instruct", "rtx-4090:8", "--pp-size"),
                                 ("phi-3.5-moe-instruct", "h100-sxm:8", "--attn-dp-size")):
        r = CliRunner().invoke(app, ["plan", "--model", model, "--cluster", cluster,
                                     "--phase", "serve", "--isl", "1024", "--osl", "256",
                                     "--export", "sglang"])
        assert r.exit_code == 0, r.output
        assert flag not in r.stdout, (model, r.stdout)
        assert "the search left" in " ".join(r.stderr.split()), r.stderr
    unrestricted = CliRunner().invoke(app, ["plan", "--model", "gemma-2-9b-it", "--cluster",
                                            "l40s:2", "--phase", "serve", "--isl", "1024",
                                            "--osl", "256", "--engine", "vllm", "--json",
                                            "--no-timing", "-q"])
    assert "the search left" not in unrestricted.stdout


def test_l2s_engines_lists_the_class_snapshot() -> None:
    """``l2s engines`` states each engine's model-class snapshot beside its other facts: how
    much of the registry it holds and the planner's classes the engine does not register."""
    r = CliRunner().invoke(app, ["engines"])
    text = " ".join(r.output.split())
    assert r.exit_code == 0
    assert "model classes (251 model classes registered)" in text
    assert "model classes (290 model classes registered)" in text       # SGLang's
    # SGLang's class capabilities (table cells wrap beside their source column, so words)
    for word in ("pp_proxy_tensors;", "Gemma2ForCausalLM,", "attention-TP", "wrong heads,",
                 "MixtralForCausalLM,"):
        assert word in text, word
    assert "model classes (18 of the planner's model classes registered" in text


def test_sglang_holds_full_length_kv_for_windowed_models_outside_its_swa_list() -> None:
    """SGLang 0.5.23 keeps sliding-window layers in a window-sized pool only for the classes
    of its hybrid-SWA allowlist (gpt-oss, Llama-4 among the planner's): Gemma-3's windowed
    layers hold full-length KV there, so at 33,000 tokens one H100 fits 3 sequences under
    SGLang where vLLM's hybrid allocator fits 20; gpt-oss stays window-capped under SGLang."""
    from learn_to_shard.api import cost_config, make_cost_model
    from learn_to_shard.workload import Phase, Workload

    wl = Workload(Phase.SERVE, isl=32000, osl=1000)
    for model, engine, capped in (("gemma-3-12b-it", "sglang", False),
                                  ("gemma-3-12b-it", "vllm", True),
                                  ("gpt-oss-20b", "sglang", True),
                                  ("llama-3.1-8b", "sglang", True)):   # no windows
        cm = make_cost_model(model, "h100-sxm:1", wl, cost_config(engine), engine=engine)
        assert cm.config.window_kv_capped is capped, (model, engine)
    batches, notes = {}, {}
    for engine in ("sglang", "vllm"):
        r = CliRunner().invoke(app, ["plan", "--model", "gemma-3-12b-it", "--cluster",
                                     "h100-sxm:1", "--phase", "serve", "--isl", "32000",
                                     "--osl", "1000", "--engine", engine, "--json",
                                     "--no-timing", "-q"])
        assert r.exit_code == 0, r.output
        batches[engine] = json.loads(r.stdout)["best"]["strategy"]["batch"]
        notes[engine] = " ".join(json.loads(r.stdout)["notes"])
    assert batches["sglang"] <= 4 < 16 <= batches["vllm"], batches
    # The SGLang plan says so (the vLLM one, which caps the windows, does not).
    assert "SGLang 0.5.23 holds Gemma3ForConditionalGeneration's sliding-window layers at " \
        "full length" in notes["sglang"]
    assert "sliding-window" not in notes["vllm"]
    # Phi-3.5-MoE's window spans its positions and never binds: nothing to say.
    r = CliRunner().invoke(app, ["plan", "--model", "phi-3.5-moe-instruct", "--cluster",
                                 "h100-sxm:8", "--phase", "serve", "--isl", "1024", "--osl",
                                 "256", "--engine", "sglang", "--json", "--no-timing", "-q"])
    assert "sliding-window" not in " ".join(json.loads(r.stdout)["notes"])


def test_the_engine_table_says_which_row_runs_on_a_transformers_backend(tmp_path: Path) -> None:
    """Without --engine, the table's SGLang row for Falcon (no SGLang implementation) carries
    the fallback note in the JSON, the text and the report, and vLLM's row (native) none."""
    base = ["plan", "--model", "falcon-7b-instruct", "--cluster", "h100-sxm:1", "--phase",
            "serve", "--isl", "1000", "--osl", "100", "--no-timing"]
    doc = json.loads(CliRunner().invoke(app, [*base, "--json"]).stdout)
    notes = {row["engine"]: row["architecture_note"] for row in doc["engine_optima"]}
    assert notes["vllm"] is None
    assert str(notes["sglang"]).startswith("SGLang 0.5.23 has no implementation of "
                                           "FalconForCausalLM")
    r = CliRunner().invoke(app, [*base, "--report", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "sglang: SGLang 0.5.23 has no implementation of FalconForCausalLM" in text
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "sglang: SGLang 0.5.23 has no implementation of FalconForCausalLM" in md


def test_the_engine_table_leaves_out_an_engine_that_cannot_hold_the_kv_asked_for() -> None:
    """--kv-dtype fp8 on an A100: TensorRT-LLM cannot hold an FP8 KV cache there, so its row
    is left out with the reason (it was priced as if it could)."""
    doc = json.loads(CliRunner().invoke(app, [
        "plan", "--model", "llama-3.1-8b", "--cluster", "a100-80gb:1", "--phase", "serve",
        "--isl", "1000", "--osl", "100", "--kv-dtype", "fp8", "--json", "--no-timing"]).stdout)
    assert "trtllm" not in {row["engine"] for row in doc["engine_optima"]}
    assert any(g["engine"] == "trtllm" and "FP8 KV cache only with FP8 math" in g["reason"]
               for g in doc["engine_optima_left_out"])


def test_a_system_fitted_profile_prices_its_own_device_kind_only() -> None:
    """The Splitwise profiles are fitted on one DGX system each: --engine splitwise-dgx-h100
    on a B200 cluster is refused in one line (it priced the B200 with the H100 system's
    fitted host and kernel factors), on h100-sxm it plans."""
    base = ["plan", "--model", "llama-3.1-8b", "--phase", "serve", "--isl", "1000", "--osl",
            "100", "-q", "--method", "megatron"]
    r = CliRunner().invoke(app, [*base, "--cluster", "b200:1", "--engine",
                                 "splitwise-dgx-h100"])
    assert r.exit_code == 2 and "the splitwise-dgx-h100 profile is fitted on measurements " \
        "of h100-sxm systems, not b200" in " ".join(r.output.split()), r.output
    r = CliRunner().invoke(app, [*base, "--cluster", "a100-80gb:1", "--engine",
                                 "splitwise-dgx-a100"])
    assert r.exit_code == 0, r.output


def test_sglang_runs_a_moe_models_dense_layers_replicated_under_attention_dp() -> None:
    """SGLang 0.5.23's DeepSeek and GLM-4.5 classes run their dense MLP layers under
    attention-DP replicated (``--moe-dense-tp-size 1``) or over the whole ``--tp-size``
    group with the DP ranks' rows gathered; ``--enable-dense-mlp-attn-tp`` is read by the
    Kimi-K3 model alone. So with attention TP > 1 the search keeps only the replicated layout
    (rule ``engine_dense_adp``), every attention-DP export says ``--moe-dense-tp-size 1`` and
    none the ignored flag; Llama-4's dense layers never replicate, so its servers take no
    attention-DP; without an engine, and under vLLM, the split layout stays."""
    import dataclasses

    from learn_to_shard.api import cost_config, make_cost_model
    from learn_to_shard.engines.architectures import unsupported_degrees
    from learn_to_shard.parallel.ops import MEGATRON_DIMS, OP_NAMES
    from learn_to_shard.parallel.strategy import Strategy
    from learn_to_shard.workload import DType, Phase, Workload

    assert unsupported_degrees("sglang", "Llama4ForConditionalGeneration") == (
        "pp", "attention_dp_dense")
    assert "attention_dp_dense" not in unsupported_degrees("sglang", "DeepseekV3ForCausalLM")
    wl = Workload(Phase.SERVE, isl=1024, osl=256, weight_dtype=DType.FP8)
    megatron = Strategy(tp=4, ep=8, pp=1, dp=2, batch=64, dims=MEGATRON_DIMS)
    dims = list(MEGATRON_DIMS)
    for op in ("dense_up", "dense_down"):
        dims[OP_NAMES.index(op)] = 2
    replicated = dataclasses.replace(megatron, dims=tuple(dims))
    for engine in ("sglang", "vllm", None):
        cm = make_cost_model("deepseek-v3", "h200:8", wl, cost_config(engine), engine=engine)
        split = cm.evaluate(megatron).violations
        assert any(v.startswith("engine_dense_adp") for v in split) == (engine == "sglang"), \
            (engine, split)
        assert not any(v.startswith("engine_dense_adp")
                       for v in cm.evaluate(replicated).violations)
    # attention TP 1: every layout is the same local compute; no rule, and the flag
    cm = make_cost_model("deepseek-v3", "h200:8", wl, cost_config("sglang"), engine="sglang")
    assert not any(v.startswith("engine_dense_adp") for v in cm.evaluate(
        dataclasses.replace(megatron, tp=1, dp=8)).violations)
    with_adp = 0
    for model, cluster in (("deepseek-v3", "h100-sxm:32"), ("glm-4.5-air", "h100-sxm:8")):
        r = CliRunner().invoke(app, ["plan", "--model", model, "--cluster", cluster,
                                     "--phase", "decode", "--context", "4096", "--export",
                                     "sglang", "-q"])
        assert r.exit_code == 0, r.output
        launch = next(ln for ln in r.stdout.splitlines() if "sglang.launch_server" in ln)
        assert "--enable-dense-mlp-attn-tp" not in launch
        if "--attn-dp-size" in launch:
            with_adp += 1
            assert "--moe-dense-tp-size 1" in launch, launch
    assert with_adp >= 1
    cm = make_cost_model("llama-4-maverick", "h100-sxm:16", Workload(
        Phase.SERVE, isl=1024, osl=256), cost_config("sglang"), engine="sglang")
    bad = cm.space._engine_degrees_bad(np.array([8, 8]), np.array([16, 16]),
                                       np.array([2, 1]), np.array([1, 2]))
    assert bad.tolist() == [True, True]        # attention-DP, and PP (the wrapper's forward)

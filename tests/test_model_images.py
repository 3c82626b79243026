"""``--images-per-request``: each image adds its vision tokens to the prompt the language model
prefills (``api.with_images``, ``model/vision.py``); bad values are one line, exit 2."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from learn_to_shard.api import make_cost_model, make_workload, with_images
from learn_to_shard.cli import app
from learn_to_shard.errors import ConfigError
from learn_to_shard.model import load_model
from learn_to_shard.parallel.strategy import Strategy
from learn_to_shard.workload import Phase, Workload

runner = CliRunner()
MODELS = resources.files("learn_to_shard") / "data" / "models"


def _serve(isl: int = 512) -> Workload:
    return make_workload("serve", isl=isl, osl=128)


def _cli(*args: str) -> Any:
    return runner.invoke(app, ["plan", "--cluster", "h100-sxm:2", "--phase", "serve",
                               "--isl", "512", "--osl", "128", "--method", "megatron-rule",
                               "--json", "--no-timing", *args])


def test_gemma3_images_take_mm_tokens_per_image_from_the_config() -> None:
    """Gemma-3's config fixes 256 tokens per image (mm_tokens_per_image)."""
    spec = load_model("gemma-3-12b-it")
    assert spec.image_tokens is not None and spec.image_tokens.fixed == 256
    wl = with_images(_serve(), spec, 3, None)
    assert (wl.isl, wl.images_per_request, wl.tokens_per_image) == (512 + 3 * 256, 3, 256)
    assert wl.image_prompt_tokens == 768 and wl.max_context == 512 + 768 + 128
    assert with_images(_serve(), spec, 3, 256) == wl        # the same count may be given


def test_image_tokens_are_priced_as_prompt_tokens() -> None:
    """The language model prefills text + image tokens: the estimate is that of a text
    prompt of the same total length (the vision encoder itself is not priced)."""
    spec = load_model("gemma-3-12b-it")
    imaged = make_cost_model(spec, "h100-sxm:1", with_images(_serve(), spec, 2, None))
    plain = make_cost_model(spec, "h100-sxm:1", _serve(512 + 2 * 256))
    text_only = make_cost_model(spec, "h100-sxm:1", _serve())
    s = Strategy(tp=1, ep=1, pp=1, dp=1, batch=8)
    a, b, c = imaged.evaluate(s), plain.evaluate(s), text_only.evaluate(s)
    assert a.ttft_s == b.ttft_s and a.memory.kv_cache_bytes == b.memory.kv_cache_bytes
    assert a.ttft_s > c.ttft_s


def test_resolution_dependent_wrappers_need_image_tokens() -> None:
    spec = load_model("qwen3-vl-32b-instruct")
    with pytest.raises(ConfigError) as exc:
        with_images(_serve(), spec, 1, None)
    msg = str(exc.value)
    assert "--image-tokens" in msg and "ceil(H/32)*ceil(W/32)" in msg and "\n" not in msg
    assert with_images(_serve(), spec, 2, 1024).isl == 512 + 2048
    rule = load_model("llama-4-scout").image_tokens
    assert rule is not None and rule.fixed is None and rule.rule.startswith("144 per 336-px")
    # the worked example rounds up as the rule says: 32-px cells (Qwen3-VL) 1,024 tokens
    # for 1024 x 1024 px, 28-px cells (Qwen2/2.5-VL's 14-px patches merged 2 x 2) 37² = 1,369
    assert "1024x1024 px -> 1024" in msg
    from learn_to_shard.model.vision import image_tokens
    qwen25 = image_tokens("qwen2_5_vl", {"vision_config": {"patch_size": 14,
                                                           "spatial_merge_size": 2}})
    assert qwen25.fixed is None and "ceil(H/28)*ceil(W/28)" in qwen25.rule \
        and "1024x1024 px -> 1369" in qwen25.rule


def test_llava_tokens_per_image_from_vision_config(tmp_path: Path) -> None:
    """LLaVA-1.5: (image_size / patch_size)^2 = 576 for 336-px images of 14-px patches."""
    text = json.loads((MODELS / "llama-3.1-8b.json").read_text())
    cfg = {"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"],
           "text_config": text, "vision_feature_select_strategy": "default",
           "vision_config": {"model_type": "clip_vision_model", "hidden_size": 1024,
                             "image_size": 336, "patch_size": 14, "num_hidden_layers": 24,
                             "intermediate_size": 4096}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    spec = load_model(str(path))
    assert spec.image_tokens is not None and spec.image_tokens.fixed == 576


@pytest.mark.parametrize("model, images, tokens, needle", [
    ("llama-3.1-8b", 1, None, "not a vision-language model"),
    ("gemma-3-12b-it", -1, None, "--images-per-request: must be in"),
    ("gemma-3-12b-it", 10_001, None, "--images-per-request: must be in"),
    ("gemma-3-12b-it", 1, 300, "fixes 256 tokens per image"),
    ("gemma-3-12b-it", 0, 256, "give --images-per-request too"),
    ("qwen3-vl-32b-instruct", 1, 0, "--image-tokens: must be a positive"),
])
def test_bad_image_values_are_one_line(model: str, images: int, tokens: int | None,
                                       needle: str) -> None:
    with pytest.raises(ConfigError) as exc:
        with_images(_serve(), load_model(model), images, tokens)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_workload_checks_its_image_fields() -> None:
    with pytest.raises(ConfigError, match="--phase prefill or serve"):
        Workload(Phase.DECODE, isl=4096, images_per_request=1, tokens_per_image=256)
    with pytest.raises(ConfigError, match="cannot hold"):
        Workload(Phase.PREFILL, isl=256, images_per_request=1, tokens_per_image=256)


def test_cli_images_flag_in_the_plan() -> None:
    r = _cli("--model", "gemma-3-12b-it", "--images-per-request", "2")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["workload"]["isl"] == 1024 and data["workload"]["images_per_request"] == 2
    assert "2 image(s) x 256 tokens" in data["weights"]
    assert "vision encoder's compute is not priced" in data["weights"]


@pytest.mark.parametrize("args", [
    ("--model", "qwen3-vl-32b-instruct", "--images-per-request", "1"),
    ("--model", "llama-3.1-8b", "--images-per-request", "1"),
    ("--model", "gemma-3-12b-it", "--images-per-request", "1", "--trace", "t.csv"),
])
def test_cli_bad_image_values_exit_2_with_one_line(args: tuple[str, ...]) -> None:
    r = _cli(*args)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in r.output


def test_unparsable_image_count_is_one_line_through_the_entry_point() -> None:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", "from learn_to_shard.cli import main; main()",
                        "plan", "--model", "gemma-3-12b-it", "--cluster", "h100-sxm:1",
                        "--phase", "serve", "--isl", "512", "--osl", "64",
                        "--images-per-request", "two"], capture_output=True, text=True,
                       timeout=120)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "--images-per-request" in lines[0]


def test_pareto_and_compare_take_the_images_flag(tmp_path: Path) -> None:
    r = runner.invoke(app, ["pareto", "--model", "gemma-3-12b-it", "--cluster", "h100-sxm:1",
                            "--phase", "serve", "--isl", "256", "--osl", "64",
                            "--images-per-request", "1", "--json", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "pareto.json").read_text())["workload"]["isl"] == 512
    r = runner.invoke(app, ["compare", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1",
                            "--phase", "serve", "--isl", "256", "--osl", "64",
                            "--images-per-request", "1", "--out", str(tmp_path / "c")])
    assert r.exit_code == 2 and "not a vision-language model" in r.output


@pytest.mark.parametrize("mutate, field", [
    ({"hidden_size": "1152"}, "vision_config.hidden_size"),
    ({"hidden_size": 1152.5}, "vision_config.hidden_size"),
    ({"depth": -3}, "vision_config.depth"),
    ({"depth": 100_000}, "vision_config.depth"),
    ({"patch_size": [16]}, "vision_config.patch_size"),
    ({"mlp_ratio": "4"}, "vision_config.mlp_ratio"),
    ({"hidden_act": 3}, "vision_config.hidden_act"),
    ({"deepstack_visual_indexes": "8,16"}, "vision_config.deepstack_visual_indexes"),
    (None, "'vision_config' must be a JSON object"),
])
def test_bad_vision_config_values_are_one_line_naming_the_field(
        tmp_path: Path, mutate: dict[str, Any] | None, field: str) -> None:
    """A vision tower's size is read like the language model's: a wrongly typed or
    out-of-range value is a ConfigError naming the field, not silently left out of memory."""
    cfg = json.loads((MODELS / "qwen3-vl-32b-instruct.json").read_text())
    if mutate is None:
        cfg["vision_config"] = "siglip"
    else:
        cfg["vision_config"].update(mutate)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_model(str(path))
    r = runner.invoke(app, ["plan", "--model", str(path), "--cluster", "h100-sxm:1",
                            "--phase", "serve", "--isl", "512", "--osl", "64"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert [ln for ln in r.output.splitlines() if ln.strip()][0].startswith("error:")


def test_internvl_downsample_ratio_out_of_range_is_named(tmp_path: Path) -> None:
    text = json.loads((MODELS / "qwen3-8b.json").read_text())
    cfg = {"model_type": "internvl_chat", "llm_config": text, "downsample_ratio": 2,
           "vision_config": {"hidden_size": 1024, "num_hidden_layers": 24,
                             "intermediate_size": 4096, "patch_size": 14, "image_size": 448}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="'downsample_ratio' must be a number in"):
        load_model(str(path))


def test_report_says_the_vision_tower_and_the_images(tmp_path: Path) -> None:
    """--report carries the plan's model line: the vision tower in memory and the prompt's
    text and image tokens, as the printed plan does."""
    r = runner.invoke(app, ["plan", "--model", "gemma-3-12b-it", "--cluster", "h100-sxm:1",
                            "--phase", "serve", "--isl", "512", "--osl", "64",
                            "--images-per-request", "2", "--method", "megatron-rule", "-q",
                            "--report", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "vision tower (gemma3, ~0.42B params) in memory" in md
    assert "prompt = 512 text + 2 image(s) x 256 tokens" in md


def test_a_wrapper_text_config_of_the_wrong_type_is_named_as_such(tmp_path):
    """A Gemma-3 wrapper whose ``text_config`` is a list said the field was missing; it
    names the value and that it must be an object. Absent, it is missing."""
    import json
    from importlib import resources

    from learn_to_shard.errors import ConfigError
    from learn_to_shard.model import load_model

    data = json.loads(resources.files("learn_to_shard").joinpath(
        "data", "models", "gemma-3-12b-it.json").read_text())
    listed = tmp_path / "listed.json"
    listed.write_text(json.dumps(data | {"text_config": [data["text_config"]]}))
    with pytest.raises(ConfigError, match="field 'text_config' must be a JSON object .*\\(list\\)"):
        load_model(str(listed))
    data.pop("text_config")
    absent = tmp_path / "absent.json"
    absent.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="missing required field 'text_config'"):
        load_model(str(absent))

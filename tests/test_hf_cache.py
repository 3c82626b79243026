"""Where users keep models: HuggingFace repo ids from the local HF cache (offline), model
folders with ``hf_quant_config.json``, local files that shadow a shipped name, and the
checkpoint's dtype as the default ``--dtype``."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from learn_to_shard.cli import app
from learn_to_shard.errors import ConfigError
from learn_to_shard.model import count_params, load_model

runner = CliRunner()

#: Qwen/Qwen2.5-72B-Instruct config.json as published on the Hub
#: (https://huggingface.co/Qwen/Qwen2.5-72B-Instruct/blob/main/config.json); 72.7B parameters
#: on the model card. Used only to fill a test-made HF cache (no repository copy with a commit
#: was found to ship; see data/models/SOURCES.md).
QWEN25_72B: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu",
    "hidden_size": 8192, "initializer_range": 0.02, "intermediate_size": 29568,
    "max_position_embeddings": 32768, "max_window_layers": 70, "model_type": "qwen2",
    "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.43.1",
    "use_cache": True, "use_sliding_window": False, "vocab_size": 152064,
}
REPO = "Qwen/Qwen2.5-72B-Instruct"


def _cache(root: Path, repo: str, files: dict[str, Any]) -> Path:
    """A hub cache in huggingface_hub's layout: models--org--name/{refs/main, snapshots/<sha>}."""
    sha = "0123456789abcdef0123456789abcdef01234567"
    folder = root / ("models--" + repo.replace("/", "--"))
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(sha)
    snap = folder / "snapshots" / sha
    snap.mkdir(parents=True)
    for name, data in files.items():
        (snap / name).write_text(json.dumps(data))
    return root


def _plan(*extra: str) -> Any:
    return runner.invoke(app, ["plan", "--cluster", "h100-sxm:8", "--phase", "decode",
                               "--context", "4096", "--method", "megatron-rule", "--json",
                               *extra])


def test_plan_qwen25_72b_from_the_hf_cache(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(_cache(tmp_path / "hub", REPO,
                                                  {"config.json": QWEN25_72B})))
    spec = load_model(REPO)
    assert spec.source_kind == "hf-cache" and spec.attention.qkv_bias
    assert count_params(spec).total == pytest.approx(72.7e9, rel=0.01)
    r = _plan("--model", REPO)
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["feasible"] and "HuggingFace cache" in data["model_source"]
    assert "snapshots" in data["model_source"]


def test_hf_home_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    _cache(tmp_path / "hub", REPO, {"config.json": QWEN25_72B})
    assert load_model(REPO).hidden_size == 8192


def test_missing_repo_is_one_line_naming_the_cache(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(ConfigError) as exc:
        load_model(REPO)
    msg = str(exc.value)
    assert "\n" not in msg and "looked in" in msg
    assert str(tmp_path / "empty" / "models--Qwen--Qwen2.5-72B-Instruct") in msg
    r = _plan("--model", REPO)
    assert r.exit_code == 2 and "looked in" in r.output and "Traceback" not in r.output
    assert "is that repository's config" not in msg        # no shipped copy of it
    # a repository a shipped config was copied from (data/models/SOURCES.md): the message
    # names the shipped name that needs no download
    with pytest.raises(ConfigError, match=r"the shipped 'qwen3-32b' is that repository's "
                                          r"config \(--model qwen3-32b\)"):
        load_model("Qwen/Qwen3-32B")
    # Meta's renamed Llama 3.1 repositories (Meta-Llama-3.1-8B is now Llama-3.1-8B, the hub
    # redirecting the old id) name the shipped copy under either id, in any case
    for repo in ("meta-llama/Llama-3.1-8B", "meta-llama/meta-llama-3.1-8b"):
        with pytest.raises(ConfigError, match=r"the shipped 'llama-3.1-8b' is that "):
            load_model(repo)
    with pytest.raises(ConfigError) as exc:
        load_model("meta-llama/Llama-3.1-8B-Instruct")      # not the shipped base model
    assert "is that repository's config" not in str(exc.value)
    # a SOURCES.md row of a config that is not loadable (grok-1 is not shipped) names none
    with pytest.raises(ConfigError) as exc:
        load_model("xai-org/grok-1")
    assert "is that repository's config" not in str(exc.value)


@pytest.mark.parametrize("repo", ["acme/Tiny@abc123", "org/My Model", "acme/Tiny:main",
                                  "acme/-x", "acme/" + "x" * 100])
def test_a_repo_id_hf_refuses_is_one_line(repo: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A name shaped like ``org/name`` that huggingface_hub refuses as a repo id (a revision
    suffix, a space, a leading dash, over 96 characters) is one line naming --model, exit 2,
    not huggingface_hub's traceback."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    r = _plan("--model", repo)
    assert r.exit_code == 2, r.output
    assert r.output.startswith(f"error: --model {repo!r}: not a shipped model, a local path "
                               "or a valid HuggingFace repo id (")
    assert "Traceback" not in r.output and r.output.count("\n") == 1


def test_a_snapshot_without_refs_main_is_read(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A repository downloaded at a pinned commit has snapshots/<commit>/ and no refs/main:
    its one snapshot is read; with two snapshots and no ref, one line asks for a path."""
    root = _cache(tmp_path / "hub", REPO, {"config.json": QWEN25_72B})
    folder = root / ("models--" + REPO.replace("/", "--"))
    (folder / "refs" / "main").unlink()
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    assert load_model(REPO).num_layers == 80
    # refs/main naming a snapshot without config.json is not a pinned download: no fallback
    (folder / "refs" / "main").write_text("e" * 40)
    with pytest.raises(ConfigError, match="no config.json for it in the HuggingFace cache"):
        load_model(REPO)
    (folder / "refs" / "main").unlink()
    other = folder / "snapshots" / ("f" * 40)
    other.mkdir()
    (other / "config.json").write_text(json.dumps(QWEN25_72B))
    with pytest.raises(ConfigError, match=r"holds 2 snapshots of it \(0123456789ab, "
                                          r"ffffffffffff\) and no refs/main"):
        load_model(REPO)


def test_cached_modelopt_checkpoint_reads_hf_quant_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    quant = {"producer": {"name": "modelopt"},
             "quantization": {"quant_algo": "NVFP4", "group_size": 16}}
    monkeypatch.setenv("HF_HUB_CACHE", str(_cache(tmp_path, "nvidia/Qwen2.5-72B-NVFP4", {
        "config.json": QWEN25_72B, "hf_quant_config.json": quant})))
    q = load_model("nvidia/Qwen2.5-72B-NVFP4").quant
    assert q is not None and q.method == "modelopt:NVFP4" and q.weight_bits == 4.5


def test_model_folder_with_hf_quant_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(QWEN25_72B))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(
        {"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}))
    spec = load_model(str(tmp_path))
    assert spec.quant is not None and spec.quant.fp8 and spec.source_kind == "file"


def test_local_folder_shadows_a_shipped_name(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A ./qwen3-32b folder is read instead of the shipped qwen3-32b, and the plan says so."""
    folder = tmp_path / "qwen3-32b"
    folder.mkdir()
    text = (resources.files("learn_to_shard") / "data" / "models" / "llama-3.1-8b.json")
    (folder / "config.json").write_text(text.read_text())
    monkeypatch.chdir(tmp_path)
    spec = load_model("qwen3-32b")
    assert spec.source_kind == "file" and spec.hidden_size == 4096
    r = _plan("--model", "qwen3-32b")
    assert r.exit_code == 0, r.output
    source = json.loads(r.stdout)["model_source"]
    assert "shadows the shipped 'qwen3-32b'" in source and "local file" in source
    table = runner.invoke(app, ["plan", "--model", "qwen3-32b", "--cluster", "h100-sxm:8",
                                "--context", "4096", "--method", "megatron-rule", "-q"])
    assert "shadows the shipped 'qwen3-32b'" in table.stdout
    # an empty folder of that name shadows it too, and the error says so
    (tmp_path / "llama-3.1-8b").mkdir()
    with pytest.raises(ConfigError, match=r"config file not found .*; the local "
                                          r"'llama-3.1-8b' shadows the shipped model"):
        load_model("llama-3.1-8b")


def test_default_dtype_is_the_checkpoints_and_overrides_are_stated() -> None:
    """DeepSeek-V3 ships FP8 weights: without --dtype the plan is fp8 (KV stays bf16), and an
    explicit --dtype bf16 is reported as differing from the checkpoint."""
    args = ["--model", "deepseek-v3", "--cluster", "h100-sxm:16", "--phase", "decode",
            "--context", "4096", "--method", "megatron-rule", "--json"]
    r = runner.invoke(app, ["plan", *args])
    assert r.exit_code in (0, 1), r.output
    data = json.loads(r.stdout)
    assert data["workload"]["weight_dtype"] == "fp8" and data["workload"]["kv_dtype"] == "bf16"
    assert data["weights"].startswith("fp8 (fp8 checkpoint)")
    r16 = runner.invoke(app, ["plan", *args, "--dtype", "bf16"])
    data16 = json.loads(r16.stdout)
    assert data16["workload"]["weight_dtype"] == "bf16"
    assert "by --dtype" in data16["weights"] and "fp8" in data16["weights"]

"""The core package runs without the ``rl`` extra; it resolves beside a pinned vLLM.

The no-torch check runs in a subprocess whose import system refuses torch, Stable-Baselines3
and Gymnasium (a ``sys.meta_path`` finder), so it holds whatever this environment has
installed. The resolver check is slow and needs the package index:
``.venv/bin/python -m pytest -q -m slow tests/test_install.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Prepended to every child program: refuse the rl extra's modules.
BLOCKER = textwrap.dedent('''
    import sys
    from importlib.abc import MetaPathFinder

    class _NoRL(MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "stable_baselines3", "gymnasium"):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
            return None

    sys.meta_path.insert(0, _NoRL())
''')


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKER + textwrap.dedent(code)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_plans_without_torch():
    out = _run('''
        import json
        import learn_to_shard
        from learn_to_shard import plan
        from learn_to_shard.search import searcher_names
        res = {}
        for method in ("exact", "megatron", "auto"):
            p = plan("llama-3.1-8b", "h100-sxm:8", "serve", isl=1024, osl=256,
                     tpot_slo_s=0.05, method=method)
            res[method] = [p.method_used, p.best.tokens_per_s_per_device]
        res["names"] = searcher_names()
        res["torch_loaded"] = any(m.split(".")[0] in ("torch", "stable_baselines3",
                                                      "gymnasium") for m in sys.modules)
        print(json.dumps(res))
    ''')
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["exact"][0] == "exact" and res["auto"][0] == "exact"
    assert res["auto"][1] == pytest.approx(res["exact"][1], rel=1e-12)
    assert 0 < res["megatron"][1] <= res["exact"][1] * (1 + 1e-12)
    assert "rl" in res["names"]          # listed; asking for it explains what to install
    assert res["torch_loaded"] is False


def test_rl_without_torch_is_one_line_exit_2():
    out = _run('''
        import sys
        from learn_to_shard.cli import main
        sys.argv = ["l2s", "plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8",
                    "--phase", "serve", "--isl", "1024", "--osl", "256", "--method", "rl",
                    "--budget", "50", "-q"]
        main()
    ''')
    assert out.returncode == 2
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "rl extra" in lines[0] and "Traceback" not in out.stderr


@pytest.mark.slow
def test_core_resolves_beside_pinned_vllm(tmp_path):
    """Metadata-only resolution of ``learn-to-shard`` (core, no extras) with vLLM 0.33.0:
    ``pip install --dry-run --report`` (no install; wheels' metadata only where the index
    serves it). constraints/cpu.txt is not applied: vLLM pins its own torch."""
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
           "--report", str(report), str(ROOT), "vllm==0.33.0"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-2000:]
    got = {i["metadata"]["name"].lower(): i["metadata"]["version"]
           for i in json.loads(report.read_text())["install"]}
    assert got["vllm"] == "0.33.0" and "learn-to-shard" in got
    assert got["torch"].startswith("2.14.0")     # vLLM's pin wins; the core adds none


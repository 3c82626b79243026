"""Regenerate the pinned flag snapshots of the serving engines (``engines/data/*_flags.json``).

Each snapshot lists every option string the engine's own command-line parser accepts, with its
``dest``, ``choices``, whether it takes a value, and whether the engine marks it deprecated.
``l2s``'s exporter is checked against these snapshots in the default test suite
(``tests/test_engine_flags.py``); the slow tests re-parse the exports with the live parsers.

vLLM and SGLang: the parser is built by the engine itself, in a scratch virtual environment that
this script creates (never the planner's own), with the engine wheel installed without its
dependencies plus the pure-Python modules its argument code imports, and CPU torch
(``constraints/cpu.txt``):

* vLLM: ``vllm.entrypoints.common.cli_args.make_arg_parser(FlexibleArgumentParser())``,
  ``vllm serve``'s own parser (the engine's ``EngineArgs`` flags with the front end's:
  ``--host``, ``--port``, ``--headless``, …), with ``VLLM_TARGET_DEVICE=cpu``
  (``DeviceConfig`` cannot infer a device otherwise);
* SGLang: ``sglang.srt.server_args.ServerArgs.add_cli_args(argparse.ArgumentParser())``.

TensorRT-LLM has no installable wheel on PyPI (a stub that downloads from NVIDIA's index) and its
modules import CUDA bindings at import time, so its snapshot is read with ``ast`` from a source
checkout (``--source DIR``): the ``click.option`` declarations of
``tensorrt_llm/commands/serve.py`` and the annotated fields of the ``*LlmArgs`` /
``KvCacheConfig`` pydantic models in ``tensorrt_llm/llmapi/llm_args.py`` (the keys of
``--extra_llm_api_options`` YAML).

Usage::

    python scripts/engine_flags.py vllm          # ~3-6 min (downloads the 336 MB wheel)
    python scripts/engine_flags.py sglang
    python scripts/engine_flags.py trtllm --source /path/to/TensorRT-LLM --commit <sha>
    python scripts/engine_flags.py vllm --check-only --flags "--tensor-parallel-size 8 ..."
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "src" / "learn_to_shard" / "engines" / "data"
CONSTRAINTS = ROOT / "constraints" / "cpu.txt"

#: Pure-Python modules each engine's argument code imports (found by importing it until it
#: loads); installed with their own dependencies, under the project's constraints.
IMPORT_DEPS: dict[str, list[str]] = {
    "vllm": ["torch", "typing_extensions", "packaging", "huggingface_hub", "regex", "pydantic",
             "numpy", "psutil", "sympy", "cbor2", "pyzmq", "urllib3", "transformers",
             "aiohttp", "requests", "openai-harmony", "openai", "msgspec", "cloudpickle",
             "pillow", "pybase64", "cachetools", "uvloop", "py-cpuinfo", "networkx",
             "prometheus_client", "xgrammar", "fastapi", "partial-json-parser", "llguidance"],
    "sglang": ["torch", "triton", "msgspec", "orjson", "IPython", "pydantic", "requests",
               "psutil", "numpy", "packaging", "transformers", "huggingface_hub", "pyzmq",
               "aiohttp", "uvloop", "fastapi", "setproctitle", "pybase64", "tqdm", "pillow"],
}

#: Child program: build the engine's parser, print its actions as JSON.
DUMP = r'''
import argparse, json, os, sys
engine = sys.argv[1]
if engine == "vllm":
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    import vllm
    parser = make_arg_parser(FlexibleArgumentParser())
    version = vllm.__version__
    commit = getattr(__import__("vllm._version", fromlist=["x"]), "commit_id", None)
else:
    from sglang.srt.server_args import ServerArgs
    import sglang.version
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    version = sglang.version.__version__
    commit = None
flags = {}
for a in parser._actions:
    for opt in a.option_strings:
        text = (a.help or "") if a.help is not argparse.SUPPRESS else ""
        flags[opt] = {
            "dest": a.dest,
            "takes_value": a.nargs != 0,
            "choices": sorted(map(str, a.choices)) if a.choices is not None else None,
            "deprecated": bool(getattr(a, "deprecated", False))
                          or "deprecated" in text.lower(),
        }
extra = {}
if len(sys.argv) > 2:            # --check-only: parse an argument string, report the values
    ns = parser.parse_args(json.loads(sys.argv[2]))
    extra["parsed"] = {k: str(v) for k, v in sorted(vars(ns).items())}
print(json.dumps({"version": version, "commit": commit, "flags": flags, **extra}))
'''


def _scratch_env(engine: str, version: str, where: Path) -> Path:
    """Create ``where/venv`` with the engine wheel (no deps) and its import deps; its python."""
    venv.EnvBuilder(with_pip=True).create(where / "venv")
    py = where / "venv" / "bin" / "python"
    pip = [str(py), "-m", "pip", "install", "-q", "-c", str(CONSTRAINTS)]
    subprocess.run(pip + IMPORT_DEPS[engine], check=True)
    subprocess.run(pip + ["--no-deps", f"{engine}=={version}"], check=True)
    return py


def dump_live(engine: str, version: str, argv: list[str] | None = None,
              keep: Path | None = None) -> dict:
    """Build ``engine``'s parser in a scratch environment and return its snapshot dict.

    Args:
        engine: ``vllm`` or ``sglang``.
        version: the pinned version to install.
        argv: optional argument list to parse with the live parser (adds ``parsed``).
        keep: reuse/keep the scratch environment in this folder instead of a temporary one.

    Raises:
        subprocess.CalledProcessError: an install or the parser build failed.
    """
    def run(where: Path) -> dict:
        py = where / "venv" / "bin" / "python"
        if not py.exists():
            py = _scratch_env(engine, version, where)
        args = [str(py), "-c", DUMP, engine] + ([json.dumps(argv)] if argv is not None else [])
        env = dict(os.environ, VLLM_TARGET_DEVICE="cpu")
        out = subprocess.run(args, check=True, capture_output=True, text=True, env=env,
                             cwd=where)
        return json.loads(out.stdout.strip().splitlines()[-1])

    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        return run(keep)
    with tempfile.TemporaryDirectory() as tmp:
        return run(Path(tmp))


def _const(node: ast.AST) -> object:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def dump_trtllm(source: Path) -> dict:
    """TensorRT-LLM's ``trtllm-serve`` click options and ``LlmArgs`` YAML keys, by ``ast``.

    Args:
        source: a TensorRT-LLM checkout (``tensorrt_llm/commands/serve.py`` and
            ``tensorrt_llm/llmapi/llm_args.py`` are read).
    """
    serve = ast.parse((source / "tensorrt_llm/commands/serve.py").read_text())
    flags: dict[str, dict] = {}
    (fn,) = [n for n in serve.body if isinstance(n, ast.FunctionDef) and n.name == "serve"]
    for node in fn.decorator_list:        # the `trtllm-serve` command's own options
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "option"):
            continue
        opts = [a.value for a in node.args if isinstance(a, ast.Constant)
                and isinstance(a.value, str) and a.value.startswith("-")]
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        choices = None
        if "type" in kw and isinstance(kw["type"], ast.Call) and kw["type"].args:
            val = _const(kw["type"].args[0])
            if isinstance(val, (list, tuple)):
                choices = sorted(map(str, val))
        is_flag = "is_flag" in kw and _const(kw["is_flag"]) is True
        help_text = _const(kw["help"]) if "help" in kw else ""
        dest = opts[-1].lstrip("-").replace("-", "_") if opts else ""
        for opt in opts:
            flags[opt] = {"dest": dest, "takes_value": not is_flag, "choices": choices,
                          "deprecated": "deprecated" in str(help_text).lower()}
    args = ast.parse((source / "tensorrt_llm/llmapi/llm_args.py").read_text())
    models: dict[str, list[str]] = {}
    for node in args.body:
        if isinstance(node, ast.ClassDef) and (node.name.endswith("LlmArgs")
                                               or node.name in ("KvCacheConfig",)):
            models[node.name] = sorted(
                s.target.id for s in node.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                and not s.target.id.startswith("_"))
    return {"flags": flags, "yaml_fields": models}


def main() -> None:
    """Command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("engine", choices=["vllm", "sglang", "trtllm"])
    ap.add_argument("--version", help="engine version (default: the profile's pinned one)")
    ap.add_argument("--source", type=Path, help="trtllm: a TensorRT-LLM source checkout")
    ap.add_argument("--commit", help="source commit recorded in the snapshot")
    ap.add_argument("--keep", type=Path, help="keep the scratch environment here")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from learn_to_shard.engines import get_engine

    prof = get_engine(args.engine)
    version = args.version or prof.version
    if args.engine == "trtllm":
        if args.source is None:
            ap.error("trtllm needs --source DIR (a TensorRT-LLM checkout)")
        snap = dump_trtllm(args.source)
        snap.update(version=version, commit=args.commit)
    else:
        snap = dump_live(args.engine, version, keep=args.keep)
    snap["engine"] = args.engine
    snap["source"] = prof.source
    out = DATA / f"{args.engine}_flags.json"
    out.write_text(json.dumps(snap, indent=1, sort_keys=True) + "\n")
    print(f"{out}: {len(snap['flags'])} option strings, version {snap.get('version')}")


if __name__ == "__main__":
    main()

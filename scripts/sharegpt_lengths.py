"""Derive ``src/learn_to_shard/data/sharegpt_lengths.csv``: (prompt, output) token lengths of
ShareGPT's first turns, as the engines' benchmark clients sample them.

Source: ``datasets/sharegpt_opt_text_completion_length.pkl`` of the vLLM paper's artifact
(sosp-ae-39/sosp-ae-astra@3180d2f8c2a2aa1729245f9b0cb75a854746e6a8; its ``datasets/README.md``:
ShareGPT collected in March 2023, the user's first input and ChatGPT's first response of each
conversation, tokenized with the OPT tokenizer; only the lengths are kept). It is a pickle of
a list of ``(input_len, output_len)`` integer pairs; this script reads it with an unpickler
that refuses every global, so no code in the file can run.

The pairs are filtered as ``vllm bench serve``'s ShareGPT sampler does (prompt and output at
least 4 tokens, prompt at most 1,024, prompt + output at most 2,048: the defaults of
``is_valid_sequence``, vllm-project/vllm@f2e97ddaf5902a9727f48b70d001b6117b8b8b12
``vllm/benchmarks/datasets.py``), then a seeded subsample of
:data:`KEEP` pairs is written in a fixed order. Re-running it on the same file reproduces the
committed CSV exactly::

    git clone https://github.com/sosp-ae-39/sosp-ae-astra /tmp/astra
    .venv/bin/python scripts/sharegpt_lengths.py \
        /tmp/astra/datasets/sharegpt_opt_text_completion_length.pkl
"""

from __future__ import annotations

import argparse
import io
import pickle
import sys
from pathlib import Path

import numpy as np

#: Pairs kept (a simulation draws at most a few thousand requests from them).
KEEP = 10_000
#: vLLM's ShareGPT filter: shortest prompt/output, longest prompt, longest prompt + output.
MIN_LEN, MAX_PROMPT, MAX_TOTAL = 4, 1024, 2048
OUT = (Path(__file__).resolve().parents[1] / "src" / "learn_to_shard" / "data"
       / "sharegpt_lengths.csv")


class _NoGlobals(pickle.Unpickler):
    """An unpickler for plain data: lists, tuples and integers only."""

    def find_class(self, module: str, name: str) -> type:
        raise pickle.UnpicklingError(f"refusing global {module}.{name}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pkl", type=Path, help="sharegpt_opt_text_completion_length.pkl")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    pairs = np.asarray(_NoGlobals(io.BytesIO(args.pkl.read_bytes())).load(), dtype=np.int64)
    if pairs.ndim != 2 or pairs.shape[1] != 2:
        print(f"{args.pkl}: expected (input_len, output_len) pairs, got shape {pairs.shape}",
              file=sys.stderr)
        return 2
    isl, osl = pairs[:, 0], pairs[:, 1]
    ok = (isl >= MIN_LEN) & (osl >= MIN_LEN) & (isl <= MAX_PROMPT) & (isl + osl <= MAX_TOTAL)
    kept = pairs[ok]
    idx = np.sort(np.random.default_rng(0).choice(len(kept), size=KEEP, replace=False))
    with args.out.open("w", encoding="utf-8", newline="\n") as fh:
        fh.write("isl,osl\n")
        fh.writelines(f"{a},{b}\n" for a, b in kept[idx])
    print(f"{len(pairs)} pairs, {len(kept)} within vLLM's ShareGPT filter, {KEEP} written to "
          f"{args.out} (mean isl {kept[idx, 0].mean():.1f}, osl {kept[idx, 1].mean():.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

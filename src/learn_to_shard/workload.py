"""The serving workload: phase, sequence lengths, dtypes and latency SLOs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import numpy as np

from .errors import ConfigError
from .units import MIN_DURATION_S

#: Most closed-loop clients ``--concurrency`` accepts (a million; the simulation steps
#: through every request and caps its requests at the same, ``serving.load``).
MAX_CONCURRENCY = 1_000_000


class Phase(str, Enum):
    """What is being optimised.

    * ``decode``: steady decoding at a fixed context length (the paper's setting); objective is
      output tokens/s per device; TPOT SLO applies.
    * ``prefill``: processing prompts of ``isl`` tokens; objective is prompt tokens/s per device;
      TTFT SLO applies.
    * ``serve``: steady-state continuous batching (prefill of new requests interleaved with the
      decode of running ones, see :mod:`learn_to_shard.cost.model`); objective is output
      tokens/s per device; TTFT and TPOT SLOs apply.
    """

    DECODE = "decode"
    PREFILL = "prefill"
    SERVE = "serve"


class DType(str, Enum):
    """Storage / math precision of weights or KV cache."""

    BF16 = "bf16"
    FP8 = "fp8"

    @property
    def bytes(self) -> int:
        """Bytes per element (bf16: 2, fp8: 1)."""
        return 2 if self is DType.BF16 else 1


@dataclass(frozen=True, slots=True)
class Workload:
    """A serving workload.

    Attributes:
        phase: decode, prefill or serve.
        isl: input (prompt) length in tokens.
        osl: output length in tokens (decode: 0 means "context is isl, steady state").
        weight_dtype: weight precision; FP8 also selects FP8 GEMM math.
        kv_dtype: KV-cache precision.
        ttft_slo_s: time-to-first-token limit in seconds, ``None`` for none.
        tpot_slo_s: time-per-output-token limit in seconds, ``None`` for none.
        activation_dtype: activations and communication precision (bf16; DESIGN §3).
        concurrency: serve: closed-loop clients across the whole cluster, when the load is
            known (``--concurrency``); a replica then never runs more than
            ``ceil(concurrency / replicas)`` requests, so larger batches are unattainable and
            the space's ``concurrency`` rule refuses them. ``None``: unbounded.
        images_per_request: images each prompt carries (vision-language wrappers,
            ``--images-per-request``); 0 for text-only prompts.
        tokens_per_image: prompt tokens one image becomes in the language model
            (``ModelSpec.image_tokens`` or ``--image-tokens``); ``isl`` already includes
            ``images_per_request * tokens_per_image`` of them (:attr:`image_prompt_tokens`).
            The vision encoder that produces them is not priced.

    Raises:
        ConfigError: on non-integer or non-positive lengths, or an SLO that is not a positive
            finite number of seconds.
    """

    phase: Phase
    isl: int
    osl: int = 0
    weight_dtype: DType = DType.BF16
    kv_dtype: DType = DType.BF16
    ttft_slo_s: float | None = None
    tpot_slo_s: float | None = None
    activation_dtype: DType = DType.BF16
    concurrency: int | None = None
    images_per_request: int = 0
    tokens_per_image: int = 0

    def __post_init__(self) -> None:
        for name in ("isl", "osl"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ConfigError(f"--{name}: must be a whole number of tokens, got {v!r}")
        for name, flag in (("ttft_slo_s", "--ttft-slo"), ("tpot_slo_s", "--tpot-slo")):
            v = getattr(self, name)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) \
                    or not 0 < v < math.inf:
                raise ConfigError(f"{flag}: {name} must be a positive finite number of "
                                  f"seconds, got {v!r}")
            if v < MIN_DURATION_S:
                raise ConfigError(f"{flag}: {name} {v!r} is under 1 µs, shorter than any GPU "
                                  f"kernel; give at least 1e-6")
        if self.isl <= 0:
            flag = "--context (or --isl)" if self.phase is Phase.DECODE else "--isl"
            raise ConfigError(f"{flag}: must be a positive token count, got {self.isl}")
        if self.phase is Phase.SERVE and self.osl <= 0:
            raise ConfigError(f"--osl: the serve phase needs a positive output length, got "
                              f"{self.osl}")
        if self.osl < 0:
            raise ConfigError(f"--osl: must be >= 0, got {self.osl}")
        if self.concurrency is not None:
            if self.phase is not Phase.SERVE:
                raise ConfigError("--concurrency: a closed-loop load needs --phase serve")
            if isinstance(self.concurrency, bool) or not isinstance(
                    self.concurrency, (int, np.integer)) or not \
                    1 <= self.concurrency <= MAX_CONCURRENCY:
                raise ConfigError(f"--concurrency: must be a whole number of clients in "
                                  f"1..{MAX_CONCURRENCY:,}, got {self.concurrency!r}")

        for name, flag in (("images_per_request", "--images-per-request"),
                           ("tokens_per_image", "--image-tokens")):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ConfigError(f"{flag}: must be a whole number >= 0, got {v!r}")
        # NumPy scalars pass the checks above; the fields hold Python numbers, so a plan's
        # to_dict() is JSON as it stands.
        for name in ("isl", "osl", "concurrency", "images_per_request", "tokens_per_image"):
            v = getattr(self, name)
            if v is not None:
                object.__setattr__(self, name, int(v))
        for name in ("ttft_slo_s", "tpot_slo_s"):
            v = getattr(self, name)
            if v is not None:
                object.__setattr__(self, name, float(v))
        if self.images_per_request and self.phase is Phase.DECODE:
            raise ConfigError("--images-per-request: needs --phase prefill or serve (for "
                              "decode, --context already counts every token in the KV cache)")
        if self.images_per_request and not self.tokens_per_image:
            raise ConfigError("--image-tokens: images need a positive token count each")
        if self.image_prompt_tokens >= self.isl:
            raise ConfigError(f"--isl: {self.isl} prompt tokens cannot hold "
                              f"{self.image_prompt_tokens} image tokens and any text")

    @property
    def image_prompt_tokens(self) -> int:
        """Prompt tokens (of ``isl``) that are images: ``images_per_request *
        tokens_per_image``."""
        return self.images_per_request * self.tokens_per_image

    @property
    def decode_context(self) -> float:
        """Mean KV length (tokens) a decode step attends over.

        decode: ``isl`` (the context is fixed, as in the paper's 16k/32k/64k settings);
        serve: ``isl + osl / 2`` (a running request is on average half-way through its output).
        """
        if self.phase is Phase.SERVE:
            return self.isl + self.osl / 2
        return float(self.isl)

    @property
    def max_context(self) -> int:
        """Longest sequence (tokens) one request reaches: ``isl + osl``."""
        return self.isl + self.osl

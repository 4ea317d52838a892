"""Tiny Qwen3 weights: a seeded random init with Qwen3's real vocabulary, for fast scenarios.

No download: ``build_tiny_qwen3`` instantiates ``Qwen3ForCausalLM`` (dense) or
``Qwen3MoeForCausalLM`` (``num_experts`` > 0) from a ``TinySpec`` and saves a standard Hugging
Face model folder that also holds a copy of the tokenizer files.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from titanflow.assets.tokenizer import QWEN3_ADDED_TOKENS, QWEN_RANKS_COUNT

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TinySpec:
    """Shape of the tiny Qwen3 used by fast scenarios: real vocabulary, toy width and depth.

    Vocabulary, rope_theta, rms_norm_eps and initializer_range are Qwen3's (Qwen3-4B config.json;
    the 2507 releases raise rope_theta to 5e6). The rest is chosen small: about 9.8M parameters,
    of which 9.7M are the tied embedding (151,936 x 64).
    """

    vocab_size: int = 151_936  # Qwen3 config.json; > 151,669 tokenizer ids (padded for sharding)
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    intermediate_size: int = 192
    rope_theta: float = 1e6
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    max_position_embeddings: int = 4096
    initializer_range: float = 0.02  # std of the normal init (transformers' Qwen3 _init_weights)
    seed: int = 0  # torch.manual_seed before the init
    # MoE (Qwen3MoeConfig names); 0 experts = dense Qwen3.
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0

    def __post_init__(self) -> None:
        tokenizer_ids = QWEN_RANKS_COUNT + len(QWEN3_ADDED_TOKENS)
        if self.vocab_size < tokenizer_ids:
            raise ValueError(f"vocab_size {self.vocab_size} < {tokenizer_ids} ids of the Qwen3 tokenizer")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}"
            )
        if self.num_experts and not 0 < self.num_experts_per_tok <= self.num_experts:
            raise ValueError(f"num_experts_per_tok {self.num_experts_per_tok} must be in 1..{self.num_experts}")

    @property
    def model_type(self) -> str:
        """transformers' model_type: "qwen3_moe" with experts, else "qwen3"."""
        return "qwen3_moe" if self.num_experts else "qwen3"

    def config_fields(self) -> dict:
        """The architecture fields of the config.json :func:`build_tiny_qwen3` writes (transformers'
        ``Qwen3Config`` / ``Qwen3MoeConfig`` names; ``model_type`` included): what preflight checks a run against
        before the model is built. The build passes the same fields to the config class, so the two cannot differ.
        """
        moe = {}
        if self.num_experts:
            moe = dict(num_experts=self.num_experts, num_experts_per_tok=self.num_experts_per_tok,
                       moe_intermediate_size=self.moe_intermediate_size, norm_topk_prob=True,
                       decoder_sparse_step=1, mlp_only_layers=[])
        return dict(
            model_type=self.model_type,
            **moe,
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            intermediate_size=self.intermediate_size,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
            rms_norm_eps=self.rms_norm_eps,
            tie_word_embeddings=self.tie_word_embeddings,
            max_position_embeddings=self.max_position_embeddings,
            initializer_range=self.initializer_range,
        )


#: The tiny MoE of the ``moe`` scenario on CPU: Qwen3-30B-A3B's structure (untied head, softmax
#: top-k routing renormalised, every layer MoE) at toy size. The dims are pairwise different
#: (hidden 64, expert FFN 48, 4 heads x head_dim 40 = 160, 8 experts, top-2) so a transposed
#: or mis-split expert or attention tensor cannot pass a load by shape coincidence.
TINY_MOE = TinySpec(
    num_hidden_layers=4, head_dim=40, tie_word_embeddings=False,
    num_experts=8, num_experts_per_tok=2, moe_intermediate_size=48,
)


def build_tiny_qwen3(out_dir: Path, spec: TinySpec, tokenizer_dir: Path) -> Path:
    """Write a standard HF Qwen3 folder: config.json, model.safetensors, generation_config.json + tokenizer.

    Weights are fp32, initialised by ``Qwen3ForCausalLM`` (or ``Qwen3MoeForCausalLM``) after ``torch.manual_seed(spec.seed)``
    (inside ``torch.random.fork_rng``, so the caller's RNG state is untouched); the same spec, torch
    and transformers give the same tensors. With tied embeddings the file has no ``lm_head.weight``.
    ``rope_theta`` is saved the transformers 5.x way, under ``rope_parameters`` (read it back with
    ``titan_cfg.model_spec.rope_theta_of``).
    EOS and PAD ids are read from the tokenizer (<|im_end|> 151645, <|endoftext|> 151643); no BOS.
    Returns ``out_dir``.
    """
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    fields = spec.config_fields()
    del fields["model_type"]  # a class attribute of the config class
    config_class, model_class = Qwen3Config, Qwen3ForCausalLM
    if spec.num_experts:
        config_class, model_class = Qwen3MoeConfig, Qwen3MoeForCausalLM
    config = config_class(
        **fields,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(spec.seed)
            model = model_class(config)
    finally:
        torch.set_default_dtype(default_dtype)

    out_dir = Path(out_dir)
    model.save_pretrained(out_dir)
    for name in sorted(os.listdir(tokenizer_dir)):
        shutil.copy2(Path(tokenizer_dir) / name, out_dir / name)
    log.info("tiny Qwen3 built in %.2f s", time.perf_counter() - start)
    return out_dir

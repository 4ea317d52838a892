"""Peak memory of the validate task's levels against a bare transformers load, per export size (issue 14).

    .venv/bin/python benchmarks/validate_memory.py                       # sizes 0.1, 0.3 and 1 GB
    .venv/bin/python benchmarks/validate_memory.py --source OTHER_TREE   # the levels of another checkout

For each size it makes (once, under ``--work``) a random float32 Qwen3 export with Qwen3's vocabulary:
``build_tiny_qwen3`` at a larger width and depth, saved again by ``save_pretrained`` in about four shards
with their index and the tokenizer, plus the probe file the parity level reads (the model's own logits on
the probe ids, ``titan_cfg.probe``'s format). Then, each in a fresh Python process:

- **validate**: ``titanflow.export.validate.validate_export`` on it (structure, round trip, load, parity) for
  the native scenario, export dtype float32;
- **bare**: ``AutoModelForCausalLM.from_pretrained(dtype=float32)`` and one forward on the probe ids.

Each process reports its own peak resident set, ``VmHWM`` of /proc/self/status (its memory since exec; the
``ru_maxrss`` wait4 returns would also count the parent's, which an exec'd child inherits as a floor), and its
resident set once its imports are done (``imports``: torch, transformers, titanflow, before any file is read).
Columns: export bytes (the safetensors files), each peak, its ratio to the export bytes and whether it is
within issue 14's goal (<= 1.3 x export bytes + 0.1 GB), validate's peak less bare's, validate's imports;
then each peak's least-squares line over the sizes (slope and intercept).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy

REPO = Path(__file__).resolve().parents[1]
GB = 1e9
#: size (GB) -> TinySpec fields: float32 bytes = 4 x (151,936 x hidden + layers x per-layer parameters).
SHAPES = {
    0.1: dict(hidden_size=128, num_hidden_layers=24, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
              intermediate_size=384),
    0.3: dict(hidden_size=384, num_hidden_layers=10, num_attention_heads=6, num_key_value_heads=2, head_dim=64,
              intermediate_size=1152),
    1.0: dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=4, head_dim=128,
              intermediate_size=3072),
}


def _status_bytes(field: str) -> int:
    """``field`` (VmHWM, VmRSS) of /proc/self/status in bytes."""
    return int(re.search(rf"^{field}:\s+(\d+) kB$", Path("/proc/self/status").read_text(), re.M).group(1)) * 1024


def _job_fields(folder: Path) -> dict:
    """The Job the validate level reads (scenario native, float32 export, probe under ``folder/train``)."""
    from titan_cfg.model_spec import qwen3_shape

    export = folder / "export"
    return dict(run_id=folder.name, scenario="native", target="cpu", init="random", weights_dir=str(export),
                shape=qwen3_shape(export), world_size=1, dataset_path="unused", dump_folder=str(folder / "train"),
                steps=1, global_batch_size=1, local_batch_size=1, seq_len=64, lr=1e-3, warmup_steps=1, seed=0,
                export_dtype="float32", compile=False, kernels={}, spmd_backend=None, compile_backend=None,
                activation_checkpoint="none", mixed_precision_param="float32")


def make_export(size_gb: float, folder: Path) -> None:
    """Write ``folder/export`` (sharded HF folder + tokenizer) and ``folder/train/<PROBE_FILE>``."""
    import torch
    from transformers import AutoModelForCausalLM

    from titan_cfg.probe import PROBE_FILE, probe_ids
    from titanflow.assets import ensure_tokenizer
    from titanflow.assets.tiny_qwen3 import TinySpec, build_tiny_qwen3

    tokenizer_dir = ensure_tokenizer()
    with tempfile.TemporaryDirectory(dir=folder.parent) as single:
        build_tiny_qwen3(Path(single), TinySpec(**SHAPES[size_gb]), tokenizer_dir)
        model = AutoModelForCausalLM.from_pretrained(single, dtype=torch.float32)
    export = folder / "export"
    model.save_pretrained(export, max_shard_size=f"{int(size_gb * 1000 / 4)}MB")
    for name in os.listdir(tokenizer_dir):
        (export / name).write_bytes((tokenizer_dir / name).read_bytes())
    ids = probe_ids(tokenizer_dir)
    with torch.no_grad():
        logits = model(ids).logits
    (folder / "train").mkdir()
    torch.save({"input_ids": ids, "logits": logits}, folder / "train" / PROBE_FILE)


def run_validate(folder: Path) -> dict:
    """validate_export on ``folder``'s export, in this process: its peaks and the report's problems."""
    import torch  # noqa: F401  (imported before the baseline, as the levels import it)
    import transformers  # noqa: F401

    from titan_cfg.job import Job
    from titanflow.export.validate import validate_export
    from titanflow.params import Tolerances

    job = Job(**_job_fields(folder))
    imports = _status_bytes("VmRSS")
    report = validate_export(folder / "export", job, Tolerances())
    return {"peak": _status_bytes("VmHWM"), "imports": imports, "problems": report.problems,
            "seconds": report.seconds}


def run_bare(folder: Path) -> dict:
    """``from_pretrained`` + one forward on the probe ids, in this process: its peaks."""
    import torch
    from transformers import AutoModelForCausalLM

    from titan_cfg.probe import PROBE_FILE

    imports = _status_bytes("VmRSS")
    ids = torch.load(folder / "train" / PROBE_FILE)["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(folder / "export", dtype=torch.float32)
    with torch.no_grad():
        finite = bool(torch.isfinite(model(ids).logits).all())
    return {"peak": _status_bytes("VmHWM"), "imports": imports, "finite": finite}


def _child(kind: str, folder: Path, source: Path | None, size_gb: float = 0.0) -> dict:
    """Run this script's ``--child kind`` in a fresh process (titanflow from ``source`` when given); its JSON.

    Raises:
        RuntimeError: the child failed, with its output's tail.
    """
    env = {**os.environ, "PYTHONPATH": str(source or REPO), "DO_NOT_TRACK": "1",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    done = subprocess.run([sys.executable, __file__, "--child", kind, "--folder", str(folder), "--size", str(size_gb)],
                          env=env, cwd=REPO, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{kind} on {folder} exited {done.returncode}: {(done.stdout + done.stderr)[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


#: Where the exports are made (kept for the next run).
WORK = REPO / ".cache" / "benchmarks" / "validate_memory"


def measure_rows(sizes_gb: list[float] | None = None, work: Path = WORK, source: Path | None = None) -> list[dict]:
    """Per export size (GB, default every size of :data:`SHAPES`): ``export_bytes``, ``shards``,
    ``validate_peak_rss_bytes`` (the validate levels of ``source``'s titanflow, default this tree's) and
    ``bare_peak_rss_bytes`` (a bare transformers load and forward), ``imports_bytes`` (validate's process after its
    imports), each measured in a fresh process; the export is made under ``work`` when it is not there yet.

    Raises:
        RuntimeError: a child process failed, or validate found problems in the clean export.
    """
    rows = []
    for size in sizes_gb or sorted(SHAPES):
        folder = work / f"qwen3-{size:g}gb"
        if not (folder / "train").is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            _child("make", folder, None, size)
        shards = list((folder / "export").glob("*.safetensors"))
        validate, bare = _child("validate", folder, source), _child("bare", folder, None)
        if validate["problems"]:
            raise RuntimeError(f"validate found problems in the clean export {folder}: {validate['problems']}")
        print(f"  {folder.name}: validate seconds {validate['seconds']}", flush=True)
        rows.append({"export_bytes": sum(f.stat().st_size for f in shards), "shards": len(shards),
                     "validate_peak_rss_bytes": validate["peak"], "bare_peak_rss_bytes": bare["peak"],
                     "imports_bytes": validate["imports"]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=sorted(SHAPES), choices=sorted(SHAPES))
    parser.add_argument("--work", type=Path, default=WORK, help="where the exports are made (kept for the next run)")
    parser.add_argument("--source", type=Path, help="tree whose titanflow runs the validate levels (default: this)")
    parser.add_argument("--child", choices=("make", "validate", "bare"), help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--size", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = {"make": lambda: make_export(args.size, args.folder) or {},
                  "validate": lambda: run_validate(args.folder), "bare": lambda: run_bare(args.folder)}[args.child]()
        print(json.dumps(result))
        return
    if args.source is not None and not (args.source / "titanflow" / "export" / "validate.py").is_file():
        parser.error(f"--source {args.source}: no titanflow/export/validate.py there; give a titanflow checkout")
    source = (args.source or REPO).resolve()
    print(f"validate levels from {source}; bare load with the same Python ({sys.executable})")
    rows = measure_rows(args.sizes, args.work, source)
    header = ("export GB", "shards", "validate peak GB", "ratio", "<= 1.3x + 0.1 GB", "bare peak GB", "ratio",
              "<= 1.3x + 0.1 GB", "validate - bare GB", "imports GB")
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for row in rows:
        size, goal = row["export_bytes"], 1.3 * row["export_bytes"] + 0.1 * GB
        validate, bare = row["validate_peak_rss_bytes"], row["bare_peak_rss_bytes"]
        cells = (f"{size / GB:.3f}", row["shards"], f"{validate / GB:.3f}", f"{validate / size:.2f}",
                 "yes" if validate <= goal else "no", f"{bare / GB:.3f}", f"{bare / size:.2f}",
                 "yes" if bare <= goal else "no", f"{(validate - bare) / GB:+.3f}", f"{row['imports_bytes'] / GB:.3f}")
        print("| " + " | ".join(map(str, cells)) + " |")
    if len(rows) > 1:
        sizes = [r["export_bytes"] for r in rows]
        for name in ("validate", "bare"):
            slope, intercept = numpy.polyfit(sizes, [r[f"{name}_peak_rss_bytes"] for r in rows], 1)
            print(f"{name}: peak = {slope:.3f} x export bytes + {intercept / GB:.3f} GB (least squares over the sizes)")


if __name__ == "__main__":
    main()

"""The kernel override registry: rope implementations against torchtitan's own, the layout
adapter, and choices refused at config time."""

import pytest
import torch

from titan_cfg import kernels
from titan_cfg.compat.cpu import make_importable_without_triton
from titan_cfg.kernels.layout import call_in_layout, permutation, to_layout

make_importable_without_triton()

from titan_cfg.kernels.check import SHAPE, check_rope  # noqa: E402
from titan_cfg.kernels.rope import KernelRoPE, install  # noqa: E402
from titan_cfg.kernels.rope_cpu import rope_hf  # noqa: E402

AVAILABLE_ROPE = [name for name, impl in kernels.OPS["rope"].implementations.items()
                  if name != "reference" and impl.unavailable() is None]
DEVICE = {"neuron": "neuron", "cpu": "cpu", "cuda": "cuda"}


@pytest.mark.parametrize("name", AVAILABLE_ROPE)
def test_rope_matches_reference_fp32(name):
    """fp32: both the cpu op and the reference compute in fp32 with the same formula, so the
    relative error bound 1e-6 (the issue's) has room to spare; backward goes through the op's own
    autograd formula (rotation by -theta), not autograd of the forward."""
    impl = kernels.implementation("rope", name)
    result = check_rope(impl.load(), impl.layout, device=DEVICE[name])
    assert result.forward < 1e-6 and result.backward < 1e-6, result


@pytest.mark.parametrize("name", AVAILABLE_ROPE)
def test_rope_matches_reference_bf16(name):
    """bf16 inputs: the reference upcasts to fp32 and rounds once to bf16; an implementation that
    computes in bf16 (nkilib's) may differ by a few bf16 ulps. Tolerance 2 ulps of the largest
    value: 2 * 2**-7 = 0.0156 relative (bf16 has 8 significant bits)."""
    impl = kernels.implementation("rope", name)
    result = check_rope(impl.load(), impl.layout, dtype=torch.bfloat16, device=DEVICE[name])
    assert result.forward < 2 * 2**-7 and result.backward < 2 * 2**-7, result


def test_cuda_rope_reports_why_it_cannot_run_here():
    impl = kernels.implementation("rope", "cuda")
    if impl.unavailable() is None:
        pytest.skip("triton and a CUDA device are present: the rope tests above ran the cuda kernel")
    assert impl.unavailable() in ("triton is not installed", "no CUDA device")


def test_neuron_rope_skips_with_reason_without_torch_neuronx():
    impl = kernels.implementation("rope", "neuron")
    if impl.unavailable() is None:
        pytest.skip("torch_neuronx is installed: the rope tests above ran the neuron kernel")
    assert impl.unavailable() == "torch_neuronx is not installed"
    with pytest.raises(RuntimeError, match="rope=neuron cannot run here: torch_neuronx is not installed"):
        impl.load()


def test_cpu_rope_is_a_well_formed_custom_op():
    """torch.library.opcheck: schema, fake (meta) implementation, autograd registration, no mutation."""
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, 5, 8, generator=generator), torch.randn(2, 1, 5, 8, generator=generator)
    cos, sin = torch.randn(1, 1, 5, 8, generator=generator), torch.randn(1, 1, 5, 8, generator=generator)
    torch.library.opcheck(rope_hf, (q.requires_grad_(), k.requires_grad_(), cos, sin))
    q_before = q.detach().clone()
    rope_hf(q, k, cos, sin)
    assert torch.equal(q.detach(), q_before)  # inputs never mutated


def test_layout_permutation_and_inverse():
    x = torch.randn(2, 3, 5, 7)  # B L N H, all different
    assert permutation("BLNH", "BNLH") == (0, 2, 1, 3)
    assert to_layout(x, "BLNH", "BNLH").shape == (2, 5, 3, 7)
    assert torch.equal(to_layout(to_layout(x, "BLNH", "HNBL"), "HNBL", "BLNH"), x)
    with pytest.raises(ValueError, match="same axes"):
        permutation("BLNH", "BLNX")


def _hf_kernel_with_cos_per_position(q_BNLH, k_BNLH, cos_B1LH, sin_B1LH):
    """A test copy of an HF-layout kernel that, like nkilib's, takes cos/sin per position
    ([B, L, H], no head axis) and inserts the head axis itself at dim 1."""
    cos, sin = cos_B1LH[:, 0, None], sin_B1LH[:, 0, None]
    return tuple(x * cos + torch.cat((-x[..., x.shape[-1] // 2:], x[..., :x.shape[-1] // 2]), -1) * sin
                 for x in (q_BNLH, k_BNLH))


def test_planted_layout_bug_is_caught():
    """The same kernel declared in the wrong layout (BLNH: the adapter then hands it torchtitan's
    [B, L, N, H] unpermuted). With as many heads as positions the shapes still broadcast, so only
    the numbers can catch it: the check reports a large error; declared right, it is exact."""
    shape = (2, 6, 6, 6, 8)  # seq == heads == kv heads: the wrong layout broadcasts silently
    right = check_rope(_hf_kernel_with_cos_per_position, "BNLH", shape=shape)
    wrong = check_rope(_hf_kernel_with_cos_per_position, "BLNH", shape=shape)
    assert right.forward < 1e-6 and right.backward < 1e-6
    assert wrong.forward > 0.1 and wrong.backward > 0.1


def test_call_in_layout_permutes_outputs_back():
    q = torch.randn(*SHAPE[:3], SHAPE[4])
    out = call_in_layout(lambda x: x.clone(), "BNLH", q)
    assert out.shape == q.shape and torch.equal(out, q)


def test_kernel_rope_module_equals_torchtitan_cosin_rope():
    """KernelRoPE keeps CosSinRoPE's cache and per-document positions; only the rotation is swapped."""
    from torchtitan.models.common.rope import CosSinRoPE

    reference = CosSinRoPE.Config(dim=24, max_seq_len=64, theta=1e6).build()
    swapped = KernelRoPE.Config(dim=24, max_seq_len=64, theta=1e6, implementation="cpu").build()
    for module in (reference, swapped):
        module._init_self_buffers(buffer_device=torch.device("cpu"))
    generator = torch.Generator().manual_seed(1)
    q, k = torch.randn(3, 10, 4, 24, generator=generator), torch.randn(3, 10, 2, 24, generator=generator)
    positions = torch.randint(0, 60, (3, 10), generator=generator)
    for pos in (None, positions):
        for got, want in zip(swapped(q, k, pos), reference(q, k, pos)):
            torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("kernel_choice, message", [
    ({"rope": "fast"}, "unknown rope implementation 'fast'; fix: pass one of reference, cpu, neuron, cuda"),
    ({"rotary": "cpu"}, "unknown op 'rotary'; fix: pass one of the known ops and implementations: rope: reference, "
                        "cpu, neuron, cuda; attention: flex, sdpa"),
    ({"rope": "neuron"}, "rope=neuron does not run on cpu targets (it runs on neuron); fix: on cpu pass one of "
                         "reference, cpu"),
    ({"attention": "flex"}, "attention=flex does not run on cpu targets"),
])
def test_bad_kernel_choice_fails_at_config_time(kernel_choice, message):
    from pydantic import ValidationError

    from titanflow.params import ScenarioRun

    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ScenarioRun(scenario="moe", target="cpu", kernels=kernel_choice)


def test_kernel_choice_resolution_order():
    """target defaults < scenario's choice for the target < the walkthrough mode's attention < the user's;
    command-line form parsed. trn2 trains the packed row causally (no mask: torch-neuronx's fused kernel)."""
    from titanflow.params import ScenarioRun

    assert ScenarioRun(scenario="native", target="cpu").kernels_resolved == {"rope": "reference", "attention": "sdpa"}
    assert ScenarioRun(scenario="moe", target="cpu").kernels_resolved == {"rope": "cpu", "attention": "sdpa"}
    assert ScenarioRun(scenario="moe", target="trn2").kernels_resolved == {"rope": "neuron", "attention": "causal"}
    assert ScenarioRun(scenario="moe", target="cpu", kernels="rope=reference").kernels_resolved["rope"] == "reference"
    walkthrough = ScenarioRun(scenario="moe", target="cpu", model_spec="walkthrough")
    assert walkthrough.kernels_resolved == {"rope": "cpu", "attention": "causal"}
    assert ScenarioRun(scenario="moe", model_spec="walkthrough", kernels="attention=sdpa").kernels_resolved[
        "attention"] == "sdpa"


def test_rope_override_refused_for_the_transformers_backend():
    """transformers computes RoPE inside its own attention: a rope kernel cannot be swapped in there."""
    from types import SimpleNamespace

    backend_config = SimpleNamespace(model_spec=SimpleNamespace(model=SimpleNamespace()))
    with pytest.raises(kernels.KernelChoiceError, match="fix: pass rope=reference"):
        install(backend_config, "cpu")


def test_readme_kernel_table_is_the_registry():
    """The README's "Kernel overrides" table lists exactly OPS: op, implementation, layout, the device types it runs
    on."""
    from titan_cfg.kernels import ALL_DEVICES, OPS
    from titanflow.paths import REPO_ROOT

    readme = (REPO_ROOT / "README.md").read_text().split("## Kernel overrides", 1)[1].split("\n## ", 1)[0]
    rows = [[cell.strip(" `") for cell in line.strip("|").split("|")] for line in readme.splitlines()
            if line.startswith("| `")]
    listed = {(op, name, layout, tuple(sorted(ALL_DEVICES)) if devices == "all" else
               tuple(sorted(t.strip() for t in devices.split(",")))) for op, name, layout, devices, _ in rows}
    registered = {(op.name, impl.name, impl.layout, tuple(sorted(impl.runs_on)))
                  for op in OPS.values() for impl in op.implementations.values()}
    assert listed == registered

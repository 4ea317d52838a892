"""``rope=neuron`` on this machine: the registered op, its backward and its checks, run against stand-ins of
torch-neuronx, nki and nkilib (tests/stand_ins/neuron/) that keep the documented signatures and compute
the kernel's math in plain torch on cpu tensors. What only a Neuron node can show is listed in
titan_cfg/kernels/rope_neuron.py's docstring."""

import shutil
import sys

import pytest
import torch
from helpers.stand_ins import STAND_INS, stand_ins

from titan_cfg import kernels
from titan_cfg.compat.cpu import make_importable_without_triton
from titan_cfg.kernels.layout import call_in_layout

make_importable_without_triton()

from titan_cfg.kernels.check import SHAPE, check_rope, cos_sin, torchtitan_rope  # noqa: E402 (after the stand-in)

NEURON = kernels.implementation("rope", "neuron")


@pytest.fixture()
def neuron(monkeypatch):
    """titan_cfg.kernels.rope_neuron imported over the stand-ins, at LNC=2 (the trn2 target's)."""
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "2")
    with stand_ins("neuron"):
        NEURON.load()
        yield sys.modules["titan_cfg.kernels.rope_neuron"]


def _kernel_calls(module) -> list[tuple[int, bool]]:
    """(LNC grid, backward) of every launch the stand-in kernel saw (its own record)."""
    return module.nki_rope_hf.func.__globals__["CALLS"]


def test_available_means_the_kernel_module_imports(tmp_path):
    """torch_neuronx alone is not enough: without nkilib, or with an nkilib lacking
    core/embeddings/rope_hf.py (the path the old code imported, nkilib.core.rope, instead), the
    implementation is unavailable and says which module does not import."""
    with stand_ins("neuron"):
        assert NEURON.unavailable() is None
    without_nkilib = tmp_path / "without_nkilib"
    for package in ("torch_neuronx", "nki"):
        shutil.copytree(STAND_INS / "neuron" / package, without_nkilib / package)
    with stand_ins(without_nkilib):
        assert NEURON.unavailable() == "nkilib is not installed"
    wrong_layout = tmp_path / "wrong_layout"
    shutil.copytree(without_nkilib, wrong_layout)
    (wrong_layout / "nkilib" / "core").mkdir(parents=True)
    (wrong_layout / "nkilib" / "__init__.py").touch()
    (wrong_layout / "nkilib" / "core" / "__init__.py").touch()
    (wrong_layout / "nkilib" / "core" / "rope.py").touch()
    with stand_ins(wrong_layout):
        assert NEURON.unavailable() == ("nkilib.core.embeddings.rope_hf does not import: "
                                        "No module named 'nkilib.core.embeddings'")
    assert NEURON.unavailable() == "torch_neuronx is not installed"  # this machine


def test_registered_through_nki_op_and_wrap_nki(neuron):
    """The op is torch-neuronx's custom op (nki_op returns a torch.library CustomOpDef) and the kernel is
    launched through wrap_nki with the LNC grid, not called as a bare @nki.jit function."""
    from torch._library.custom_ops import CustomOpDef

    launches = type(neuron.KERNEL).__call__.__globals__["LAUNCHES"]  # the stand-in torch_neuronx's record
    assert isinstance(neuron.rope_hf, CustomOpDef) and isinstance(neuron.rope_hf_backward, CustomOpDef)
    assert neuron.KERNEL.kernel is neuron.nki_rope_hf
    q, k = torch.randn(1, 2, 256, 8), torch.randn(1, 1, 256, 8)
    cos, sin = torch.randn(1, 1, 256, 8), torch.randn(1, 1, 256, 8)
    before = len(launches)
    torch.ops.titanflow.rope_hf_neuron(q, k, cos, sin)
    assert launches[before:] == [("rope_hf", (2,), {"backward": False})]


@pytest.mark.parametrize("dtype", [torch.float32])
def test_forward_and_backward_equal_the_reference_fp32(neuron, dtype):
    """Through the registry's layout adapter (BLNH -> BNLH -> BLNH), forward and the registered
    backward (the kernel's backward mode) against torchtitan's CosSinRoPE: both compute
    x*cos + rotate_half(x)*sin in fp32, so the relative error is rounding only; 1e-6 is the issue's bound.
    cos/sin per batch row (check_rope's per-document positions): the kernel gets [B, L, H]."""
    result = check_rope(NEURON.load(), NEURON.layout, dtype=dtype)
    assert result.forward < 1e-6 and result.backward < 1e-6, result
    assert _kernel_calls(neuron)[-2:] == [(2, False), (2, True)]


def test_cos_shared_by_the_batch_reaches_the_kernel_as_seq_by_head_dim(neuron):
    """torchtitan's cache without per-document positions is [1, L, 1, H]: the kernel gets [L, H] (its
    2-D form, one angle per position for every batch row), and the result still equals the reference."""
    batch, seq, heads, kv_heads, head_dim = SHAPE
    cos, sin = (t[:1] for t in cos_sin(1, seq, head_dim))
    assert neuron.kernel_cos_sin(cos.permute(0, 2, 1, 3), batch, torch.float32).shape == (seq, head_dim)
    generator = torch.Generator().manual_seed(3)
    q, k = torch.randn(batch, seq, heads, head_dim, generator=generator), torch.randn(batch, seq, kv_heads, head_dim,
                                                                                     generator=generator)
    got = call_in_layout(NEURON.load(), NEURON.layout, q, k, cos, sin)
    want = torchtitan_rope()(q, k, cos.expand(batch, -1, -1, -1), sin.expand(batch, -1, -1, -1))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("after", ["cat", "transpose"])
def test_gradients_arriving_non_contiguous_give_the_reference_result(neuron, after):
    """A torch.cat of q and k (the gradient of each is a strided slice) or a transpose after the op:
    the backward makes the gradients contiguous before the kernel reads them as flat memory."""
    batch, seq, heads, kv_heads, head_dim = SHAPE
    cos, sin = cos_sin(batch, seq, head_dim)
    generator = torch.Generator().manual_seed(5)
    q = torch.randn(batch, seq, heads, head_dim, generator=generator)
    k = torch.randn(batch, seq, kv_heads, head_dim, generator=generator)
    post = {"cat": lambda a, b: torch.cat([a, b], dim=2), "transpose": lambda a, b: a.transpose(1, 3) * 1.5 + b.sum()}
    grads = []
    for rotate in (torchtitan_rope(), lambda *t: call_in_layout(NEURON.load(), NEURON.layout, *t)):
        q_in, k_in = q.clone().requires_grad_(), k.clone().requires_grad_()
        out = post[after](*rotate(q_in, k_in, cos, sin))
        out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(7)))
        grads.append((q_in.grad, k_in.grad))
    for got, want in zip(grads[1], grads[0]):
        assert ((got - want).abs().max() / want.abs().max()).item() < 1e-6


def test_the_stand_in_kernel_reads_strided_operands_as_memory(neuron):
    """Why the test above can fail: handed a transposed view directly, the (stand-in) kernel rotates the
    wrong numbers, as the real kernel's DMA would."""
    q = torch.randn(1, 256, 2, 8).transpose(1, 2)  # [B, N, L, H] view of [B, L, N, H] memory
    k, cos, sin = torch.randn(1, 1, 256, 8), torch.ones(256, 8), torch.zeros(256, 8)  # identity rotation
    q_out, k_out = torch.empty(q.shape), torch.empty(k.shape)
    neuron.KERNEL[(2,)](q, k, q_out, k_out, cos=cos, sin=sin)
    assert torch.equal(k_out, k) and not torch.equal(q_out, q)


def test_the_lnc_degree_is_the_launch_grid(neuron, monkeypatch):
    """NEURON_LOGICAL_NC_CONFIG reaches the kernel as its grid (kernel[lnc]), forward and backward;
    at LNC=1 a 128-long sequence is allowed, at LNC=2 it is not (below)."""
    q, k = torch.randn(1, 2, 128, 8, requires_grad=True), torch.randn(1, 1, 128, 8, requires_grad=True)
    cos, sin = torch.randn(1, 1, 128, 8), torch.randn(1, 1, 128, 8)
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")
    torch.autograd.backward(neuron.rope_hf(q, k, cos, sin), [torch.ones(1, 2, 128, 8), torch.ones(1, 1, 128, 8)])
    assert _kernel_calls(neuron)[-2:] == [(1, False), (1, True)]
    monkeypatch.delenv("NEURON_LOGICAL_NC_CONFIG")
    with pytest.raises(RuntimeError, match="NEURON_LOGICAL_NC_CONFIG is None; set it"):
        neuron.rope_hf(q, k, cos, sin)


def test_the_op_returns_what_the_launch_returns_not_the_buffers_it_handed_in(neuron, monkeypatch):
    """A launch that hands its results back in tensors of its own (as torch-neuronx's wrapped launch may): the op
    returns those, not the output buffers it allocated."""
    q, k = torch.randn(1, 2, 256, 8), torch.randn(1, 1, 256, 8)
    cos, sin = torch.randn(1, 1, 256, 8), torch.randn(1, 1, 256, 8)
    own = (torch.full_like(q, 3.0), torch.full_like(k, 4.0))

    class Launch:
        def __getitem__(self, grid):
            return lambda q_in, k_in, q_out, k_out, **kwargs: own

    monkeypatch.setattr(neuron, "KERNEL", Launch())
    q_rot, k_rot = neuron._launch(q, k, cos, sin, backward=False)
    assert q_rot is own[0] and k_rot is own[1]


def test_seq_len_rule_at_call_time(neuron):
    """128 x LNC=2 = 256: a 384-token sequence is refused by the op before the kernel is launched, with
    the registry's message (the stand-in kernel would refuse it too, less clearly)."""
    calls = len(_kernel_calls(neuron))
    q, k, cos = torch.randn(1, 2, 384, 8), torch.randn(1, 1, 384, 8), torch.randn(1, 1, 384, 8)
    with pytest.raises(kernels.KernelChoiceError, match=r"seq_len: 384 is not a multiple of 256 \(128 x LNC=2\)"):
        neuron.rope_hf(q, k, cos, cos)
    assert len(_kernel_calls(neuron)) == calls


def test_seq_len_rule_at_config_time():
    """The trn2 target's LNC=2: moe with --seq-len 384 fails before anything runs; 512 passes."""
    from pydantic import ValidationError

    from titanflow.params import ScenarioRun

    with pytest.raises(ValidationError, match=r"seq_len: 384 is not a multiple of 256 \(128 x LNC=2\), which "
                                              r"rope=neuron needs"):
        ScenarioRun(scenario="moe", target="trn2", seq_len=384)
    assert ScenarioRun(scenario="moe", target="trn2", seq_len=512).kernels_resolved["rope"] == "neuron"


def test_the_op_is_a_well_formed_custom_op_and_leaves_its_inputs(neuron):
    """torch.library.opcheck: schema, fake implementation (the function itself, as nki_op registers it),
    autograd registration; the inputs are not mutated."""
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, 256, 8, generator=generator), torch.randn(2, 1, 256, 8, generator=generator)
    cos, sin = torch.randn(2, 1, 256, 8, generator=generator), torch.randn(2, 1, 256, 8, generator=generator)
    torch.library.opcheck(neuron.rope_hf, (q.requires_grad_(), k.requires_grad_(), cos, sin))
    before = q.detach().clone()
    neuron.rope_hf(q, k, cos, sin)
    assert torch.equal(q.detach(), before)

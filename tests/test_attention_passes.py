"""The attention core's forward and backward apart (compute.attention_core_backward_factor; device files'
efficiency.attention_backward and attention_triton_backward, derived by benchmarks/device_curves.py)."""

import dataclasses

import pytest

from parasol.model import compute
from parasol.model.errors import ProblemError
from parasol.model.specs import Workload
from parasol.model.training import layer_times
from parasol.solver import library
from parasol.solver.library import load_device, load_model, load_system


@pytest.mark.parametrize("name", ["h100-sxm-80gb", "gb200", "a100-sxm-80gb"])
def test_the_split_keeps_the_measured_forward_plus_backward_time(name):
    """Whatever the split, forward + backward is the curve's time: (1 + 2.5) forwards' FLOPs at its efficiency; the
    backward takes the device's measured share of it, more than the FLOPs ratio gives."""
    model, device = load_model("llama3-8b"), load_device(name)
    flops = compute.attention_core_flops(model, 1, 8192, 1, 1, causal_skip=True)
    forward = compute.attention_core_forward_time_s(model, device, "flash", 1, 8192, 1, 1)
    ratio = compute.attention_core_backward_factor(device, "flash", 8192)
    both = (
        flops
        * (1.0 + compute.FLASH_BACKWARD_FACTOR)
        / (compute.attention_peak_flops(device) * device.attention_efficiency_at(8192))
    )
    assert forward * (1.0 + ratio) == pytest.approx(both)
    assert ratio > compute.FLASH_BACKWARD_FACTOR


def test_a_device_without_a_measured_split_keeps_the_flops_ratio():
    device = dataclasses.replace(load_device("h100-sxm-80gb"), attention_backward_tokens=(), attention_backward_curve=())
    assert compute.attention_core_backward_factor(device, "flash", 4096) == compute.FLASH_BACKWARD_FACTOR
    assert compute.attention_core_backward_factor(device, "standard", 4096) == 2.0
    assert load_device("mi300x").attention_backward_at(4096) == 0.0


def test_hopper_spends_a_larger_share_in_the_backward_at_short_keys():
    """Our H200 measurement: the backward's share falls as calls attend more keys (3.5x the forward at 1K, 2.9x at
    8K), held beyond its ends."""
    h100 = load_device("h100-sxm-80gb")
    ratios = [compute.attention_core_backward_factor(h100, "flash", t) for t in (512, 1024, 8192, 65536)]
    assert ratios[0] == ratios[1] > ratios[2] == ratios[3]


def test_selective_recomputation_redoes_only_the_forwards_share():
    """Recomputing the attention core (selective, core_attn) costs the forward alone: with the measured split it is
    cheaper than with the FLOPs ratio's, and the layer's backward is dearer by as much as its forward is cheaper."""
    model, system = load_model("llama3-8b"), load_system("dgx-h100", 8)
    workload = Workload(kind="training", seq_len=8192, global_batch=8, attention="flash")
    flat = dataclasses.replace(
        system, device=dataclasses.replace(system.device, attention_backward_tokens=(), attention_backward_curve=())
    )
    measured, even = (layer_times(model, s, workload, 1, 1, 1, False, "selective") for s in (system, flat))
    assert measured.recompute < even.recompute
    assert measured.attention_fwd + measured.attention_bwd == pytest.approx(even.attention_fwd + even.attention_bwd)
    assert measured.attention_bwd / measured.attention_fwd == pytest.approx(system.device.attention_backward_at(8192))


@pytest.mark.parametrize(
    "old, new",
    [
        ("    ratio:  [3.52, 3.13, 3.15, 2.90]", "    ratio:  [3.52, 3.13, 3.15, -2.90]"),
        ("    tokens: [1024, 2048, 4096, 8192]\n    ratio", "    tokens: [1024, 4096, 2048, 8192]\n    ratio"),
        ("    ratio:  [3.52, 3.13, 3.15, 2.90]", "    ratios: [3.52, 3.13, 3.15, 2.90]"),
    ],
)
def test_a_bad_split_names_its_field(tmp_path, old, new):
    src = (library.library_root() / "systems" / "devices" / "h100-sxm-80gb.yaml").read_text()
    bad = src.replace(old, new)
    assert bad != src
    path = tmp_path / "dev.yaml"
    path.write_text(bad)
    with pytest.raises(ProblemError) as err:
        library.load_device(str(path))
    assert err.value.field.startswith("efficiency.attention_backward") and "dev.yaml" in str(err.value)

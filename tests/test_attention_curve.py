"""A device file's training flash-attention curve by key length (``efficiency.attention_by_tokens``,
``DeviceSpec.attention_efficiency_at``) and the measurement it comes from (benchmarks/calibrate.py
--attention: cuDNN, causal, forward+backward on the lent H200)."""

import dataclasses
import statistics
import sys

import pytest
import yaml
from conftest import REPO, training_problem, write_yaml

from parasol.model.errors import ProblemError
from parasol.model.training_step import evaluate_training
from parasol.solver import library
from parasol.solver.problem import parse_problem

CURVE = {"tokens": [1024, 2048, 4096, 8192], "efficiency": [0.319, 0.402, 0.444, 0.479]}


def _device_with(tmp_path, curve):
    """dgx-h100 whose device file gives ``curve`` (None: no curve, the single value)."""
    device = yaml.safe_load((REPO / "problems" / "systems" / "devices" / "h100-sxm-80gb.yaml").read_text())
    device.pop("name", None)
    device["efficiency"].pop("attention_by_tokens", None)
    if curve is not None:
        device["efficiency"]["attention_by_tokens"] = curve
    write_yaml(tmp_path / "h100-curve.yaml", device)
    system = yaml.safe_load((REPO / "problems" / "systems" / "dgx-h100.yaml").read_text())
    system["device"] = {"file": "h100-curve.yaml"}
    return library.system_from_path(write_yaml(tmp_path / "sys.yaml", system), 8)


def test_the_curve_interpolates_in_log_tokens_and_holds_beyond_its_ends(tmp_path):
    device = _device_with(tmp_path, CURVE).device
    assert device.attention_efficiency_at(512) == 0.319 and device.attention_efficiency_at(131072) == 0.479
    assert device.attention_efficiency_at(2048) == pytest.approx(0.402)
    assert device.attention_efficiency_at(2896.3) == pytest.approx((0.402 + 0.444) / 2, rel=1e-3)  # sqrt(2048·4096)
    plain = _device_with(tmp_path, None).device  # no curve: the single value, everywhere
    assert plain.attention_efficiency_at(1024) == plain.attention_efficiency_at(131072) == plain.attention_efficiency


def test_training_flash_attention_runs_at_the_curves_efficiency_for_seq_over_cp_keys(tmp_path):
    system = _device_with(tmp_path, CURVE)
    data = training_problem(
        "llama3-8b", num_gpus=8, seq_len=16384, global_batch=8, mapping={"tp": 1, "pp": 1, "dp": 4, "cp": 2, "micro_batch": 1}
    )
    problem = parse_problem(data, source="t.yaml")
    mapping = problem.fixed_mapping()
    plain = evaluate_training(problem.model, _device_with(tmp_path, None), problem.workload, mapping).breakdown["time_s"]
    curved = evaluate_training(problem.model, system, problem.workload, mapping).breakdown["time_s"]
    library_file = evaluate_training(problem.model, problem.system(), problem.workload, mapping).breakdown["time_s"]
    assert library_file == curved  # the library's H100 file holds the measured curve
    # 16,384 tokens over cp 2: calls of 8,192 keys, at 0.479 against the file's single 0.415
    assert curved["compute/attention"] == pytest.approx(plain["compute/attention"] * 0.415 / 0.479, rel=1e-9)
    assert curved["compute/gemm"] == plain["compute/gemm"]


@pytest.mark.parametrize(
    "curve,words",
    [
        ({"tokens": [4096, 1024], "efficiency": [0.4, 0.3]}, "increasing tokens"),
        ({"tokens": [1024, 2048], "efficiency": [0.3, 1.4]}, "(0, 1]"),
        ({"flops": [1, 2], "efficiency": [0.3, 0.4]}, "flops"),
        ([0.4, 0.5], "{tokens, efficiency}"),
    ],
)
def test_a_bad_curve_is_one_line_naming_the_file_and_field(tmp_path, curve, words):
    with pytest.raises(
        ProblemError, match=words.replace("(", r"\(").replace(")", r"\)").replace("{", r"\{").replace("}", r"\}")
    ) as exc:
        _device_with(tmp_path, curve)
    assert exc.value.field.startswith("efficiency.attention_by_tokens") and exc.value.source.endswith("h100-curve.yaml")


def test_the_measured_curve_rises_with_the_sequence_and_its_median_is_the_files_value():
    """The H200 cuDNN measurements (16 causal shapes, 1K-8K tokens): the per-length medians rise with the
    sequence, and the median over every shape is the single efficiency the H100-class files hold."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from calibrate import attention_curve  # noqa: PLC0415

    seqs, effs = attention_curve()
    assert seqs == (1024, 2048, 4096, 8192)
    assert list(effs) == sorted(effs) and effs[-1] > 1.4 * effs[0]
    measurement = yaml.safe_load((library.library_root() / "measurements" / "h200-microbench.yaml").read_text())
    overall = measurement["attention"]["summary"]["cudnn_causal"]["median_fwd_bwd_efficiency"]
    assert statistics.median(effs) == pytest.approx(overall, abs=0.01)
    assert dataclasses.asdict(library.load_device("h100-sxm-80gb"))["attention_efficiency"] == pytest.approx(overall, abs=0.001)


def test_the_hopper_and_blackwell_files_hold_the_measured_curve():
    """The device files that carry ``attention_by_tokens`` hold what calibrate.py --attention prints from
    the H200 measurement: the Hopper files all of it, grown past its 8K by cuDNN's published H200 rows; Blackwell its
    measured part (no Blackwell measurement of our own; past 8K its own family's cuDNN rows, tests/test_device_curves.py),
    Blackwell Ultra (B300, GB300) faster by its softmax rate (benchmarks/device_curves.py)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import calibrate  # noqa: PLC0415  benchmarks/calibrate.py
    import device_curves  # noqa: PLC0415  benchmarks/device_curves.py

    tokens, efficiency = calibrate.attention_curve_extended()
    published = yaml.safe_load(device_curves.PUBLISHED.read_text())["blackwell_ultra_softmax"]
    ultra = device_curves.softmax_speedups(published).training
    measured = len(calibrate.attention_curve()[0])  # Blackwell's points past it: tests/test_device_curves.py
    kept = device_curves.blackwell_over_hopper(yaml.safe_load(device_curves.PUBLISHED.read_text())["cudnn_sdpa_training"])
    for name in ("h100-sxm-80gb", "h200-sxm-141gb", "h800-sxm-80gb", "b200", "b300", "gb200", "gb300"):
        device = library.load_device(name)
        assert device.attention_tokens == tuple(float(t) for t in tokens), name
        hopper = name in device_curves.HOPPER_DEVICES
        held = len(tokens) if hopper else measured
        scale = [
            (1.0 if hopper else device_curves.ratio_at(kept, t)) * (ultra if name in device_curves.BLACKWELL_ULTRA else 1.0)
            for t in tokens[:held]
        ]
        assert device.attention_curve[:held] == pytest.approx(tuple(e * f for e, f in zip(efficiency[:held], scale)), abs=5e-4), (
            name
        )


def test_beyond_the_measurement_the_curve_grows_as_cudnns_published_h200_rows_do():
    """Past our own measurement's 8K keys the curve takes cuDNN's published H200 gain (Llama 3.1 405B's grouped heads,
    causal, bf16 forward + backward: 1.064x at 16K, 1.073x at 32K, the FLOPs over the rows' times); the gain is
    counted from the published milliseconds, not restated, and is small, positive and saturating."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import calibrate  # noqa: PLC0415  benchmarks/calibrate.py

    rows = yaml.safe_load((library.library_root() / "measurements" / "published_kernels.yaml").read_text())
    h200 = rows["cudnn_sdpa_training"]["grouped"]["h200"]
    growth = calibrate.attention_growth_beyond(8192)
    assert set(growth) == {16384, 32768}
    assert growth[16384] == pytest.approx(4 * sum(h200[8192][:2]) / sum(h200[16384][:2]))
    assert 1.0 < growth[16384] < growth[32768] < 1.1
    tokens, efficiency = calibrate.attention_curve_extended()
    assert tokens == (1024, 2048, 4096, 8192, 16384, 32768) and list(efficiency) == sorted(efficiency)
    h100 = library.load_device("h100-sxm-80gb")
    assert h100.attention_efficiency_at(131072) == h100.attention_efficiency_at(32768) == efficiency[-1]

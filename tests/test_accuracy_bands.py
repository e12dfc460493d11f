"""Every plan reports the model's out-of-sample error for its regime (solver/accuracy_bands.py).

The bands file is written by ``python benchmarks/accuracy.py --write-bands`` from the validation runs; the first test
holds it to what the runs give now, so a model change that moves an out-of-sample figure fails here until the file
is rewritten."""

import json

import pytest
import yaml
from conftest import REPO, run_main, write_yaml

from parasol.model.choices import Architecture, WorkloadKind
from parasol.model.errors import ProblemError
from parasol.solver import accuracy_bands, library
from parasol.solver.accuracy_bands import AccuracyBand, Regime, bands_document, bands_from_errors, load_bands
from parasol.solver.problem import load_problem

EXAMPLES = REPO / "problems" / "examples"
HOPPER_MOE = Regime(WorkloadKind.TRAINING, "moe", Architecture.HOPPER)


def test_bands_file_matches_the_out_of_sample_runs():
    """The file is what the runs give now: same regimes, counts, worst runs, families, errors to 0.01 of a point."""
    measured, stored = bands_document(accuracy_bands.measured_bands()), bands_document(load_bands())
    errors = ("mean_abs_error", "mean_error", "worst_error")
    assert [{k: v for k, v in b.items() if k not in errors} for b in measured] == [
        {k: v for k, v in b.items() if k not in errors} for b in stored
    ]
    for new, old in zip(measured, stored):
        assert all(abs(new[k] - old[k]) < 1e-4 for k in errors), (new, old)


def test_bands_cover_the_out_of_sample_families_and_no_reserved_set():
    bands = load_bands()
    families = {f for b in bands for f in b.families}
    assert all(f.endswith("(out of sample)") or "(out of sample)" in f for f in families), families
    assert {"MLPerf Training (out of sample)", "BLOOM 02-28 benchmarks (out of sample)"} <= families
    assert not any("reserved" in f.lower() for f in families)
    # one band per regime and figure, and every band's worst run is at least its mean
    keys = [(b.regime, b.metric) for b in bands]
    assert len(keys) == len(set(keys))
    assert all(abs(b.worst_error) >= b.mean_abs_error >= abs(b.mean_error) for b in bands)


def test_bands_from_errors_groups_and_averages():
    dense = Regime(WorkloadKind.TRAINING, "dense", Architecture.AMPERE)
    rows = [
        (dense, "step_time_s", "a", "F1", 0.10),
        (HOPPER_MOE, "step_time_s", "b", "F2", -0.30),
        (dense, "step_time_s", "c", "F3", -0.20),
        (dense, "step_time_s", "d", "F1", 0.04),
    ]
    first, second = bands_from_errors(rows)
    assert first.regime == dense and first.runs == 3 and first.families == ("F1", "F3")
    assert first.mean_abs_error == pytest.approx(0.34 / 3) and first.mean_error == pytest.approx(-0.02)
    assert (first.worst_error, first.worst_run) == (-0.20, "c")
    assert second.regime == HOPPER_MOE and second.runs == 1 and second.worst_error == -0.30


def test_every_library_device_states_its_architecture():
    for path in sorted((REPO / "problems" / "systems" / "devices").glob("*.yaml")):
        assert isinstance(library.load_device(path.stem).architecture, Architecture), path.name
    assert library.load_device("gb300").architecture == Architecture.BLACKWELL_ULTRA
    assert library.load_device("gb200").architecture == Architecture.BLACKWELL


def test_plan_accuracy_of_the_examples():
    moe = accuracy_bands.plan_accuracy(load_problem(str(EXAMPLES / "deepseek-v3-h800.yaml")))
    assert moe["regime"] == "MoE training on hopper" and "note" not in moe
    assert [b["metric"] for b in moe["out_of_sample"]] == ["step_time_s"]
    assert moe["out_of_sample"][0] == bands_document(accuracy_bands.bands_for(HOPPER_MOE))[0]
    serving = accuracy_bands.plan_accuracy(load_problem(str(EXAMPLES / "llama3-70b-serving.yaml")))
    assert serving["regime"].startswith("dense serving on ")
    dense = accuracy_bands.plan_accuracy(load_problem(str(EXAMPLES / "gpt3-175b-a100.yaml")))
    assert dense["regime"] == "dense training on ampere" and dense["out_of_sample"][0]["runs"] >= 10


def test_a_regime_without_published_runs_says_its_error_is_unknown():
    problem = load_problem(str(EXAMPLES / "gpt3-175b-a100.yaml"))
    regime = accuracy_bands.regime_of(problem)
    out = accuracy_bands.plan_accuracy(problem, bands=())
    assert out["out_of_sample"] == [] and "unknown" in out["note"] and regime.label() in out["note"]
    lines = accuracy_bands.accuracy_lines(problem, bands=())
    assert len(lines) == 2 and "unknown" in lines[1]
    # a band of another architecture does not stand in for it
    other = AccuracyBand(
        Regime(WorkloadKind.TRAINING, "dense", Architecture.HOPPER), "step_time_s", 3, 0.1, 0.1, 0.2, "x", ("F",)
    )
    assert accuracy_bands.plan_accuracy(problem, bands=(other,))["out_of_sample"] == []


def test_evaluate_and_solve_report_the_band():
    text = run_main(["evaluate", EXAMPLES / "gpt3-175b-a100.yaml"])
    assert text.returncode == 0 and "accuracy (out of sample, dense training on ampere" in text.stdout
    (band,) = accuracy_bands.bands_for(Regime(WorkloadKind.TRAINING, "dense", Architecture.AMPERE))
    assert text.stdout.rstrip().endswith("  " + band.line())
    doc = json.loads(run_main(["evaluate", EXAMPLES / "gpt3-175b-a100.yaml", "--json"]).stdout)
    assert doc["accuracy"]["regime"] == "dense training on ampere"
    solved = json.loads(run_main(["solve", EXAMPLES / "which-gpu-llama3-70b.yaml", "--json", "--quiet"]).stdout)
    best = library.load_system(solved["system"], 128).device.architecture
    assert solved["accuracy"]["regime"] == f"dense training on {best}"


def _problem_on_device(folder, device: dict, name: str):
    """gpt3-175b-a100.yaml's problem on a DGX A100 whose device file is ``device``, all three written to ``folder``."""
    write_yaml(folder / f"{name}.yaml", device)
    system = yaml.safe_load((REPO / "problems" / "systems" / "dgx-a100.yaml").read_text())
    system["device"] = {"file": f"{name}.yaml"}
    write_yaml(folder / f"{name}-system.yaml", system)
    problem = yaml.safe_load((EXAMPLES / "gpt3-175b-a100.yaml").read_text())
    problem["system"]["name"] = {"file": str(folder / f"{name}-system.yaml")}
    return write_yaml(folder / f"{name}-problem.yaml", problem)


def test_a_device_file_without_architecture_reports_unknown(tmp_path):
    device = yaml.safe_load((REPO / "problems" / "systems" / "devices" / "a100-sxm-80gb.yaml").read_text())
    del device["architecture"]
    doc = json.loads(run_main(["evaluate", _problem_on_device(tmp_path, device, "anon"), "--json"]).stdout)
    assert doc["accuracy"]["out_of_sample"] == [] and "states no architecture" in doc["accuracy"]["note"]
    device["architecture"] = "volta"
    bad = run_main(["evaluate", _problem_on_device(tmp_path, device, "volta")])
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert "architecture" in bad.stderr and "'volta' is not allowed" in bad.stderr and "blackwell-ultra" in bad.stderr


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda rows: rows[0].update(architecture="volta"), "bands[0].architecture"),
        (lambda rows: rows[1].update(metric="mfu"), "bands[1].metric"),
        (lambda rows: rows[0].update(runs=0), "bands[0].runs"),
        (lambda rows: rows[0].pop("families"), "bands[0]."),
        (lambda rows: rows[0].update(worst_error="big"), "bands[0].worst_error"),
    ],
)
def test_a_bad_bands_file_is_one_line(tmp_path, change, field):
    rows = bands_document(load_bands())
    change(rows)
    path = write_yaml(tmp_path / "bands.yaml", {"bands": rows})
    with pytest.raises(ProblemError) as err:
        load_bands(str(path))
    assert field in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_bands_file_without_bands_is_refused(tmp_path):
    path = write_yaml(tmp_path / "bands.yaml", {"rows": []})
    with pytest.raises(ProblemError, match="--write-bands"):
        load_bands(str(path))


def test_the_html_report_holds_the_band(tmp_path):
    page = tmp_path / "report.html"
    assert run_main(["report", EXAMPLES / "gpt3-175b-a100.yaml", "--evaluate", "--output", page]).returncode == 0
    html = page.read_text()
    (band,) = accuracy_bands.bands_for(Regime(WorkloadKind.TRAINING, "dense", Architecture.AMPERE))
    section = html.split('<div id="accuracy">', 1)[1]
    assert "dense training on ampere" in section and f"{band.runs} published runs" in section


def test_the_python_api_gives_the_cli_block():
    import parasol  # noqa: PLC0415

    cli = json.loads(run_main(["evaluate", EXAMPLES / "gpt3-175b-a100.yaml", "--json"]).stdout)["accuracy"]
    assert parasol.accuracy(EXAMPLES / "gpt3-175b-a100.yaml") == cli
    on_mi300x = {
        "model": "llama3-8b",
        "system": {"name": "mi300x", "num_gpus": 8},
        "workload": {"kind": "training", "seq_len": 8192, "global_batch": 64, "precision": "bf16"},
        "objective": "throughput",
    }
    out = parasol.accuracy(on_mi300x)
    assert out["regime"] == "dense training on cdna3" and out["out_of_sample"] == [] and "unknown" in out["note"]

"""Bad input: every user mistake ends as ONE line on stderr, ``parasol: <file>: <field>: ...``,
exit status 2, no traceback (architecture.md "Errors"; issue 2 section 5).

Each case is written to a file under a temporary folder and run through the real command line
(``python -m parasol evaluate FILE``; a subset also through the ``parasol`` script and through
``solve``). The subprocesses are started concurrently once per session to keep the suite fast.
"""

from __future__ import annotations

import copy
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml
from conftest import run_cli

BASE = {
    "model": "gpt3-175b",
    "system": {"name": "dgx-a100", "num_gpus": 64},
    "workload": {"kind": "training", "seq_len": 2048, "global_batch": 64, "precision": "bf16"},
    "mapping": {"tp": 8, "pp": 8, "dp": 1, "micro_batch": 1},
}
TINY = {"layers": 8, "hidden": 256, "heads": 8, "ffn": 1024, "vocab": 1000}  # runs BASE's tp 8 x pp 8


def edit(*changes, delete=()):
    """BASE with ``(path, value)`` changes applied (path = 'workload.seq_len') and keys deleted."""
    d = copy.deepcopy(BASE)
    for path, value in changes:
        *head, last = path.split(".")
        cur = d
        for k in head:
            cur = cur.setdefault(k, {})
        cur[last] = value
    for path in delete:
        *head, last = path.split(".")
        cur = d
        for k in head:
            cur = cur[k]
        del cur[last]
    return d


INF = {  # an inference problem (issue 6) that evaluates
    "model": "llama3.1-8b",
    "system": {"name": "dgx-h100", "num_gpus": 4},
    "workload": {"kind": "inference", "input_len": 512, "output_len": 64, "batch": 16, "precision": "fp8", "serving": "static"},
    "mapping": {"tp": 2, "pp": 1, "dp": 2},
}


def inf(*changes, delete=()):
    """INF with changes and deletions, as ``edit`` does for BASE."""
    global BASE
    saved, BASE = BASE, INF
    try:
        return edit(*changes, delete=delete)
    finally:
        BASE = saved


DISAGG = {
    **INF,
    "workload": {**INF["workload"], "serving": "disaggregated"},
    "mapping": {"prefill": {"tp": 1, "dp": 2}, "decode": {"tp": 2, "dp": 1}},
}

# (id, file content: dict or raw text or None for a missing file, field the message must name or None)
CASES = [
    ("malformed-yaml", "model: [unclosed\nsystem: {name: dgx-a100\n", None),
    ("top-level-list", "- model\n- system\n", None),
    ("top-level-scalar", "just a string\n", None),
    ("empty-file", "", None),
    ("missing-file", None, None),
    ("unknown-top-key", {**BASE, "hardware": "a100"}, "hardware"),
    ("unknown-model", edit(("model", "gpt-99b")), "model"),
    ("model-int", edit(("model", 5)), "model"),
    pytest.param("model-list", edit(("model", ["gpt3-175b"])), "model"),
    ("missing-model", edit(delete=["model"]), "model"),
    ("unknown-system", edit(("system.name", "dgx-z900")), "system.name"),
    ("system-not-mapping", edit(("system", "dgx-a100")), "system"),
    ("missing-num-gpus", edit(delete=["system.num_gpus"]), "system.num_gpus"),
    ("unknown-system-key", edit(("system.gpus", 8)), "system.gpus"),
    ("missing-workload", edit(delete=["workload"]), "workload"),
    ("workload-not-mapping", edit(("workload", [2048])), "workload"),
    ("missing-seq-len", edit(delete=["workload.seq_len"]), "workload.seq_len"),
    ("missing-global-batch", edit(delete=["workload.global_batch"]), "workload.global_batch"),
    ("missing-kind", edit(delete=["workload.kind"]), "workload.kind"),
    ("unknown-kind", edit(("workload.kind", "finetune")), "workload.kind"),
    ("unknown-workload-key", edit(("workload.batch", 8)), "workload.batch"),
    ("seq-len-string", edit(("workload.seq_len", "2048")), "workload.seq_len"),
    ("seq-len-zero", edit(("workload.seq_len", 0)), "workload.seq_len"),
    ("global-batch-bool", edit(("workload.global_batch", True)), "workload.global_batch"),
    ("unknown-precision", edit(("workload.precision", "fp7")), "workload.precision"),
    ("precision-int", edit(("workload.precision", 16)), "workload.precision"),
    pytest.param("fp8-on-a100", edit(("workload.precision", "fp8")), "workload.precision"),
    ("unknown-attention", edit(("workload.attention", "paged")), "workload.attention"),
    ("overlap-not-bool", edit(("workload.overlap_dp", "yes")), "workload.overlap_dp"),
    ("a2a-overlap-not-bool", edit(("workload.moe_a2a_overlap", 1)), "workload.moe_a2a_overlap"),
    ("train-tokens-negative", edit(("workload.train_tokens", -5)), "workload.train_tokens"),
    ("constraints-not-mapping", edit(("constraints", 5)), "constraints"),
    ("unknown-constraint", edit(("constraints.max_gpus", 5)), "constraints.max_gpus"),
    ("constraint-not-positive", edit(("constraints.max_capex_usd", 0)), "constraints.max_capex_usd"),
    ("run-hours-without-tokens", edit(("constraints.max_run_hours", 100)), "constraints.max_run_hours"),
    ("num-gpus-range-inverted", edit(("system.num_gpus", {"min": 64, "max": 8})), "system.num_gpus.max"),
    ("num-gpus-range-unknown-key", edit(("system.num_gpus", {"min": 8, "max": 64, "by": 8})), "system.num_gpus.by"),
    ("gpu-hour-price-negative", edit(("system.gpu_hour_usd", -2)), "system.gpu_hour_usd"),
    ("chiplets-zero", edit(("system.chiplets", [0, 2])), "system.chiplets"),
    ("unknown-dispatcher", edit(("workload.moe_dispatcher", "nccl")), "workload.moe_dispatcher"),
    ("num-gpus-float", edit(("system.num_gpus", 64.0)), "system.num_gpus"),
    ("num-gpus-negative", edit(("system.num_gpus", -64)), "system.num_gpus"),
    ("tp-string", edit(("mapping.tp", "8")), "mapping.tp"),
    ("tp-negative", edit(("mapping.tp", -8)), "mapping.tp"),
    ("tp-float", edit(("mapping.tp", 8.0)), "mapping.tp"),
    ("tp-bool", edit(("mapping.tp", True)), "mapping.tp"),
    ("tp-null", edit(("mapping.tp", None)), "mapping.tp"),
    ("pp-zero", edit(("mapping.pp", 0)), "mapping.pp"),
    ("micro-batch-zero", edit(("mapping.micro_batch", 0)), "mapping.micro_batch"),
    ("sp-string", edit(("mapping.sp", "yes")), "mapping.sp"),
    ("zero-bool", edit(("mapping.zero", True)), "mapping.zero"),
    ("zero-five", edit(("mapping.zero", 5)), "mapping.zero"),
    ("recompute-unknown", edit(("mapping.recompute", "partial")), "mapping.recompute"),
    ("first-stage-negative", edit(("mapping.first_stage_layers", -1)), "mapping.first_stage_layers"),
    ("unknown-mapping-key", edit(("mapping.fsdp", 2)), "mapping.fsdp"),
    ("mapping-not-mapping", edit(("mapping", [8, 8, 1])), "mapping"),
    ("empty-list", edit(("mapping.tp", [])), "mapping.tp"),
    ("objective-unknown", {**BASE, "objective": "fastest"}, "objective"),
    # divisibility and grid rules
    ("tp-not-dividing-heads", edit(("system.num_gpus", 80), ("mapping.tp", 5), ("mapping.pp", 16)), "mapping.tp"),
    (
        "tp-not-dividing-kv-heads",
        edit(("model", "llama2-70b"), ("system.num_gpus", 16), ("mapping.tp", 16), ("mapping.pp", 1)),
        "mapping.tp",
    ),
    ("grid-product", edit(("mapping.dp", 2)), "mapping"),
    ("global-batch-not-divisible-by-dp", edit(("workload.global_batch", 60), ("mapping.pp", 1), ("mapping.dp", 8)), "mapping.dp"),
    (
        "global-batch-not-divisible-by-dp-mb",
        edit(("mapping.pp", 1), ("mapping.dp", 8), ("mapping.micro_batch", 3)),
        "mapping.micro_batch",
    ),
    ("pp-exceeds-layers", edit(("model", "llama2-7b"), ("mapping.tp", 1), ("mapping.pp", 64)), "mapping.pp"),
    ("vpp-without-pp", edit(("mapping.pp", 1), ("mapping.dp", 8), ("mapping.vpp", 2)), "mapping.vpp"),
    ("vpp-exceeds-stage", edit(("mapping.vpp", 13)), "mapping.vpp"),
    ("vpp-not-splitting-stages", edit(("mapping.vpp", 5)), "mapping.vpp"),  # 12 layers per stage
    ("ep-on-dense", edit(("mapping.ep", 2)), "mapping.ep"),
    ("first-without-last", edit(("mapping.first_stage_layers", 11)), "mapping"),
    ("bad-stage-split", edit(("mapping.first_stage_layers", 5), ("mapping.last_stage_layers", 5)), "mapping.pp"),
    # placement (model/placement.py): a Megatron-Core rank order string
    ("placement-missing-dimension", edit(("mapping.placement", "tp-dp-pp")), "mapping.placement"),
    ("placement-repeated-dimension", edit(("mapping.placement", "tp-cp-ep-dp-tp")), "mapping.placement"),
    ("placement-int", edit(("mapping.placement", 5)), "mapping.placement"),
    ("placement-as-list-of-names", edit(("mapping.placement", ["tp", "cp", "ep", "dp", "pp"])), "mapping.placement"),
    ("placement-list-to-evaluate", edit(("mapping.placement", ["tp-cp-ep-dp-pp", "cp-tp-ep-dp-pp"])), "mapping.placement"),
    (
        "placement-moe-pp-not-last",
        edit(
            ("model", "mixtral-8x7b"),
            ("mapping.tp", 2),
            ("mapping.pp", 4),
            ("mapping.dp", 8),
            ("mapping.ep", 8),
            ("mapping.placement", "tp-cp-pp-ep-dp"),
        ),
        "mapping.placement",
    ),
    (
        "num-gpus-not-a-torus-slice",
        edit(
            ("system", {"name": "tpu-v5p-torus", "num_gpus": 31}),
            ("workload.global_batch", 62),
            ("mapping.tp", 1),
            ("mapping.pp", 1),
            ("mapping.dp", 31),
        ),
        "system.num_gpus",
    ),
    # evaluate needs one concrete mapping
    ("list-to-evaluate", edit(("mapping.tp", [4, 8])), "mapping.tp"),
    ("num-gpus-list-to-evaluate", edit(("system.num_gpus", [64, 128])), "system.num_gpus"),
    ("missing-tp-for-evaluate", edit(delete=["mapping.tp"]), "mapping.tp"),
    # inline models
    ("inline-missing-hidden", edit(("model", {k: v for k, v in TINY.items() if k != "hidden"})), "model.hidden"),
    ("inline-unknown-key", edit(("model", {**TINY, "experts": 8})), "model.experts"),
    ("inline-layers-bool", edit(("model", {**TINY, "layers": True})), "model.layers"),
    ("inline-layers-string", edit(("model", {**TINY, "layers": "4"})), "model.layers"),
    ("inline-activation", edit(("model", {**TINY, "activation": "relu"})), "model.activation"),
    ("inline-heads-not-dividing-hidden", edit(("model", {**TINY, "heads": 7})), "model.head_dim"),
    ("inline-kv-heads", edit(("model", {**TINY, "kv_heads": 3})), "model.kv_heads"),
    ("inline-tied-not-bool", edit(("model", {**TINY, "tied_embeddings": "no"})), "model.tied_embeddings"),
    pytest.param("inline-params-b-string", edit(("model", {**TINY, "params_b": "seven"})), "model.params_b"),
    pytest.param("inline-name-list", edit(("model", {**TINY, "name": ["tiny"]})), "model.name"),
    # inference problems (issue 6)
    ("inf-unknown-serving", inf(("workload.serving", "batched")), "workload.serving"),
    ("inf-unknown-precision", inf(("workload.precision", "fp7")), "workload.precision"),
    ("inf-fp8-on-a100", inf(("system.name", "dgx-a100")), "workload.precision"),
    ("inf-fp4-on-h100", inf(("workload.precision", "fp4")), "workload.precision"),
    ("inf-kv-precision", inf(("workload.kv_precision", "int4")), "workload.kv_precision"),
    ("inf-weight-precision", inf(("workload.weight_precision", "int3")), "workload.weight_precision"),
    ("inf-input-len-zero", inf(("workload.input_len", 0)), "workload.input_len"),
    ("inf-output-len-string", inf(("workload.output_len", "64")), "workload.output_len"),
    ("inf-missing-input-len", inf(delete=["workload.input_len"]), "workload.input_len"),
    ("inf-training-key", inf(("workload.seq_len", 2048)), "workload.seq_len"),
    ("inf-batch-zero", inf(("workload.batch", 0)), "workload.batch"),
    ("inf-slo-not-mapping", inf(("workload.slo", 2.0)), "workload.slo"),
    ("inf-slo-unknown-key", inf(("workload.slo", {"itl_s": 0.05})), "workload.slo.itl_s"),
    ("inf-slo-negative", inf(("workload.slo", {"ttft_s": -1})), "workload.slo.ttft_s"),
    ("inf-decode-attention", inf(("workload.decode_attention", "paged")), "workload.decode_attention"),
    ("inf-unknown-engine", inf(("workload.engine", "vllm-9")), "workload.engine"),
    ("inf-engine-not-covering-device", inf(("workload.engine", "trtllm-0.5"), ("system.name", "hgx-h200")), "workload.engine"),
    ("inf-micro-batch-key", inf(("mapping.micro_batch", 2)), "mapping.micro_batch"),
    ("inf-objective", {**INF, "objective": "step_time"}, "objective"),
    ("inf-grid-product", inf(("mapping.dp", 4)), "mapping"),
    ("inf-tp-heads", inf(("system.num_gpus", 3), ("mapping.tp", 3), ("mapping.dp", 1)), "mapping.tp"),
    ("inf-batch-not-in-pp", inf(("mapping.pp", 2), ("mapping.tp", 1), ("workload.batch", 15)), "workload.batch"),
    ("inf-ep-on-dense", inf(("mapping.ep", 2)), "mapping.ep"),
    ("inf-batch-conflict", inf(("mapping.batch", [8, 32])), "mapping.batch"),
    ("inf-missing-batch-for-evaluate", inf(delete=["workload.batch"]), "workload.batch"),
    ("inf-missing-tp-for-evaluate", inf(delete=["mapping.tp"]), "mapping.tp"),
    ("inf-pools-without-disaggregation", inf(("mapping", {"prefill": {"tp": 1}, "decode": {"tp": 1}})), "mapping.decode"),
    ("inf-disagg-top-level-tp", {**DISAGG, "mapping": {"tp": 2, "dp": 2}}, "mapping.dp"),
    ("inf-disagg-pool-not-mapping", {**DISAGG, "mapping": {"prefill": 2, "decode": {"tp": 2, "dp": 1}}}, "mapping.prefill"),
    (
        "inf-disagg-pool-key",
        {**DISAGG, "mapping": {"prefill": {"tp": 1, "dp": 2, "cp": 2}, "decode": {"tp": 2, "dp": 1}}},
        "mapping.prefill.cp",
    ),
    ("inf-disagg-split", {**DISAGG, "mapping": {"prefill": {"tp": 1, "dp": 3}, "decode": {"tp": 2, "dp": 1}}}, "mapping"),
]

# cases also run as real subprocesses: `python -m parasol evaluate`, the `parasol` script, `solve`
MODULE_SUBSET = [
    "malformed-yaml",
    "top-level-list",
    "missing-file",
    "unknown-model",
    "tp-bool",
    "tp-not-dividing-heads",
    "list-to-evaluate",
    "unknown-precision",
    "recompute-unknown",
    "grid-product",
]
PARASOL_SUBSET = ["malformed-yaml", "unknown-model", "tp-string", "list-to-evaluate"]
SOLVE_SUBSET = [
    "unknown-system",
    "tp-negative",
    "inline-missing-hidden",
    "objective-unknown",
    "inf-unknown-serving",
    "inf-slo-negative",
    "placement-missing-dimension",
    "num-gpus-not-a-torus-slice",
]


def _case_id(case) -> str:
    return case.values[0] if hasattr(case, "values") else case[0]


def _case_tuple(case):
    return case.values if hasattr(case, "values") else case


def _field(cid):
    return next(_case_tuple(c)[2] for c in CASES if _case_id(c) == cid)


@pytest.fixture(scope="session")
def bad_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bad problems")  # a space in the path on purpose
    files = {}
    for case in CASES:
        cid, content, _ = _case_tuple(case)
        path = folder / f"{cid}.yaml"
        if content is not None:
            path.write_text(content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False))
        files[cid] = path
    return files


@pytest.fixture(scope="session")
def bad_runs(bad_files):
    """{(entry, command, case id): (path, CompletedProcess)} for the subprocess subsets, run concurrently."""
    jobs = [("module", "evaluate", cid) for cid in MODULE_SUBSET]
    jobs += [("script", "evaluate", cid) for cid in PARASOL_SUBSET]
    jobs += [("module", "solve", cid) for cid in SOLVE_SUBSET]

    def run(job):
        entry, command, cid = job
        args = [command, str(bad_files[cid])] + (["--time-limit", "5"] if command == "solve" else [])
        return job, (bad_files[cid], run_cli(args, entry=entry, timeout=60))

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(run, jobs))


def check_one_line_error(path, proc, field):
    err = proc.stderr
    assert "Traceback" not in err + proc.stdout, err
    assert proc.returncode == 2, f"exit {proc.returncode}; stderr: {err}"
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0], f"expected one line on stderr, got {len(lines)}: {err!r}"
    line = lines[0]
    assert line.startswith("parasol:"), line
    assert str(path) in line, f"the message does not name the file {path}: {line}"
    if field is not None:
        assert f": {field}:" in line, f"the message does not name the field {field!r}: {line}"
    assert proc.stdout == "", proc.stdout


@pytest.mark.parametrize("cid,content,field", CASES, ids=[_case_id(c) for c in CASES])
def test_evaluate_bad_input(cid, content, field, bad_files, capsys):
    """Every case through the CLI entry point in-process (parasol.solver.cli.main, what both
    `parasol` and `python -m parasol` call): an exception escaping main() would be a traceback."""
    from parasol.solver.cli import main

    path = bad_files[cid]
    try:
        code = main(["evaluate", str(path)])
    except SystemExit as exc:  # pragma: no cover - main returns its status
        code = exc.code
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"uncaught {type(exc).__name__}: {exc} (the CLI would print a traceback)")
    out = capsys.readouterr()
    check_one_line_error(path, subprocess.CompletedProcess([], code, out.out, out.err), field)


@pytest.mark.parametrize("cid", MODULE_SUBSET)
@pytest.mark.slow
def test_evaluate_bad_input_python_m_parasol(cid, bad_runs):
    path, proc = bad_runs[("module", "evaluate", cid)]
    check_one_line_error(path, proc, _field(cid))


@pytest.mark.parametrize("cid", PARASOL_SUBSET)
@pytest.mark.slow
def test_evaluate_bad_input_parasol_script(cid, bad_runs):
    path, proc = bad_runs[("script", "evaluate", cid)]
    check_one_line_error(path, proc, _field(cid))


@pytest.mark.parametrize("cid", SOLVE_SUBSET)
@pytest.mark.slow
def test_solve_bad_input(cid, bad_runs):
    path, proc = bad_runs[("module", "solve", cid)]
    check_one_line_error(path, proc, _field(cid))


@pytest.mark.slow
def test_model_list_subprocess_has_no_traceback(bad_files):
    proc = run_cli(["evaluate", str(bad_files["model-list"])])
    check_one_line_error(bad_files["model-list"], proc, "model")


def test_messages_say_what_is_allowed(bad_files, capsys):
    """The one line names what is allowed, not only what is wrong."""
    from parasol.solver.cli import main

    def err(cid):
        main(["evaluate", str(bad_files[cid])])
        return capsys.readouterr().err

    e = err("unknown-model")
    assert "gpt-99b" in e and "llama2-7b" in e
    e = err("unknown-system")
    assert "dgx-z900" in e and "dgx-h100" in e
    e = err("unknown-precision")
    assert "bf16" in e
    e = err("recompute-unknown")
    assert "selective" in e
    e = err("grid-product")
    assert "num_gpus" in e
    e = err("malformed-yaml")
    assert "line" in e
    e = err("placement-missing-dimension")
    assert "tp-dp-pp" in e and "tp-cp-ep-dp-pp" in e and "once" in e
    e = err("placement-moe-pp-not-last")
    assert "ending with pp" in e


@pytest.mark.parametrize(
    "args",
    [
        ["solve", "x.yaml", "--top", "0"],
        ["frobnicate"],
        ["solve", "x.yaml", "--time-limit", "-1"],
        ["enumerate", "x.yaml", "--objective", "fastest"],
        [],
        ["cost"],
        ["cost", "--system", "dgx-h100", "--chiplets", "0"],
        ["cost", "--system", "dgx-h100", "--num-gpus", "x"],
    ],
)
def test_bad_command_line_arguments(args, capsys):
    """argparse mistakes are one line and exit 2 as well."""
    from parasol.solver.cli import main

    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("parasol:"), err


def test_located_error_keeps_the_bare_message():
    """Re-placing an error in a file or field keeps its message whole, even one holding ': '."""
    from parasol.model.errors import ProblemError

    inner = ProblemError("ring: needs 2 ranks, got 1", field="topology.levels")
    moved = inner.located(source="p.yaml")
    assert str(moved) == "p.yaml: topology.levels: ring: needs 2 ranks, got 1"
    assert str(moved.located(field="system.name")) == "p.yaml: system.name: ring: needs 2 ranks, got 1"
    assert str(moved.located(source=None, field=None)) == "ring: needs 2 ranks, got 1" == moved.message

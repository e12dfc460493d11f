"""Copy Megatron-Bridge 25.11's pre-training table from the reference into the validation set.

    python benchmarks/import_mbridge_runs.py [--write]

Reads ../shared/reference/calibration_runs.yaml (ids ``mbridge2511-*``), translates each row into a
validation entry of problems/validation/training_runs.yaml (model and system names of the library,
the data-parallel size num_gpus / (tp·pp·cp), Megatron FSDP as ZeRO-3) and adds what the table does
not print from the release's recipes (``RECIPES``: read in Megatron-Bridge's
scripts/performance/configs, cited per entry). Without --write it prints the entries; with it, it
replaces the 25.11 entries of the validation file (the other entries are kept as they are). A run the
model cannot express yet carries ``not_expressible`` with the reason (solver/validation.py skips it,
and a test checks that it is still rejected).
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT.parent / "shared" / "reference" / "calibration_runs.yaml"
RUNS = ROOT / "problems" / "validation" / "training_runs.yaml"
PREFIX = "mbridge2511"

MODELS = {
    "LLAMA3_8B": "llama3-8b",
    "LLAMA3_70B": "llama3-70b",
    "LLAMA3.1_405B": "llama3.1-405b",
    "DeepSeekV3": "deepseek-v3",
    "GPT OSS 120B": "gpt-oss-120b",
    "Qwen3_30B_a3B": "qwen3-30b-a3b",
    "Qwen3_235B_a22B": "qwen3-235b-a22b",
}
SYSTEMS = {"GB300": "gb300-nvl72", "GB200": "gb200-nvl72", "B200": "dgx-b200", "H100": "dgx-h100"}
PRECISIONS = {"BF16": "bf16", "FP8-CS": "fp8", "FP8-MX": "fp8"}
LOW_PRECISION_RECIPES = {"FP8-CS": "tensorwise", "FP8-MX": "mxfp8"}  # workload.low_precision_recipe (Megatron's names)
RECIPE_NOTE = {
    "FP8-CS": "FP8 GEMMs with per-tensor current scaling (Transformer Engine Float8CurrentScaling), bf16 attention",
    "FP8-MX": "MXFP8 GEMMs (Transformer Engine MXFP8BlockScaling: 1x32 blocks, E8M0 scales), bf16 attention",
    "BF16": "bf16 GEMMs and attention",
}


def recipe(model: str, gpu: str, precision: str, recipes: dict | None = None) -> dict:
    """A copy of the recipe settings the table does not print (``recipes``, the 25.11 release's ``RECIPES`` by
    default), most specific match first; entries share no lists (no YAML aliases)."""
    recipes = RECIPES if recipes is None else recipes
    for key in ((model, gpu, precision), (model, gpu), (model,)):
        if key in recipes:
            return copy.deepcopy(recipes[key])
    return {}


SELECTIVE = "selective"  # Megatron-Core's recompute_granularity selective, recomputing workload.recompute_modules
HYBRIDEP = {"moe_dispatcher": "deepep"}  # flex dispatcher, HybridEP backend: node-deduplicated like DeepEP
A2A_OVERLAP = {"moe_a2a_overlap": True}  # overlap_moe_expert_parallel_comm with delay_wgrad_compute
# recipes/deepseek/deepseek_v3.py: use_precision_aware_optimizer with exp_avg_dtype and exp_avg_sq_dtype bf16
BF16_MOMENTS = {"adam_moment_bytes": 2}
# the BF16 recipes' use_precision_aware_optimizer with fp32 dtypes: store_param_remainders (Megatron-Core's default)
MASTER_REMAINDERS = {"master_weight_bytes": 2}
PAO = "use_precision_aware_optimizer with fp32 dtypes (master weights kept as 16-bit remainders)"
# recipes/gpt_oss: recompute_modules layernorm and moe_act (selective) with the precision-aware optimizer
GPT_OSS_MEMORY = {**MASTER_REMAINDERS, "recompute_modules": ["layernorm", "moe_act"]}
GPT_OSS_RECOMPUTE = "recompute_modules layernorm and moe_act"
CONFIGS = "Megatron-Bridge scripts/performance/configs"
# the Llama recipes' CommOverlapConfig(tp_comm_overlap=True) with a userbuffers configuration (v0.2.0)
TP_OVERLAP = {"tp_comm_overlap": True}
TP_OVERLAP_READ = "tp_comm_overlap on (Transformer Engine userbuffers: ring-exchange all-gathers, bulk dgrad/wgrad overlaps)"

# (model[, gpu[, precision]]) -> settings read from Megatron-Bridge's performance recipes (branch r0.2.0,
# the 25.11 release, and the commits its table was refreshed from: PR #1669, branch gaod/r0.2.0_test,
# main e940d997d). Settings that the model does not represent are listed as assumptions.
RECIPES: dict[tuple, dict] = {
    ("llama3-8b", "H100"): {
        "assumptions": [f"{CONFIGS}/llama: recompute_num_layers 5 (full, block) is not modelled: no recomputation"],
    },
    ("llama3-70b", "GB300"): {
        "mapping": {"offload_layers": 20},
        "assumptions": [f"{CONFIGS}/llama (main e940d997d, _V2): Megatron FSDP with cpu_offloading_num_layers 20 (activations)"],
    },
    ("llama3-70b", "GB200"): {
        "mapping": {"offload_layers": 40},
        "assumptions": [f"{CONFIGS}/llama (main e940d997d, _V2): Megatron FSDP with cpu_offloading_num_layers 40 (activations)"],
    },
    ("llama3-70b", "H100"): {
        "mapping": TP_OVERLAP,
        "assumptions": [f"{CONFIGS}/llama3/llama3_llm_pretrain.py: {TP_OVERLAP_READ}"],
    },
    ("llama3.1-405b",): {
        "mapping": TP_OVERLAP,
        "assumptions": [
            f"{CONFIGS}/llama: account_for_embedding/loss_in_pipeline_split (the default split); "
            f"llama31/llama31_llm_pretrain.py: {TP_OVERLAP_READ} (off only for NVFP4)"
        ],
    },
    ("deepseek-v3", "GB300"): {
        "workload": {**HYBRIDEP, **BF16_MOMENTS, "recompute_modules": ["mlp", "moe_act"]},
        "mapping": {
            "recompute": SELECTIVE,
            "uneven_chunks": True,
            "first_stage_layers": list(range(26, 36)),
            "last_stage_layers": list(range(26, 36)),
        },
        "assumptions": [
            f"{CONFIGS}/deepseek (branch gaod/r0.2.0_test): hybridep dispatcher, recompute_modules mlp and moe_act, "
            "TE CUDA graphs on the router, no MTP; its layout string has 16 chunks, which pp 2 x vpp 4 cannot hold: "
            "the layout run is not published, the best split of the listed values (chunks of unequal size) is taken"
        ],
    },
    ("deepseek-v3", "GB200", "BF16"): {
        "workload": {**HYBRIDEP, **BF16_MOMENTS, "recompute_modules": ["mla_up_proj"]},
        "mapping": {"recompute": SELECTIVE, "uneven_chunks": True, "first_stage_layers": 15, "last_stage_layers": 14},
        "assumptions": [
            f"{CONFIGS}/deepseek (branch gaod/r0.2.0_test): hybridep dispatcher, recompute_modules mla_up_proj, "
            "layout Et*3|(t*4|)*14ttL (stages of 15, 16, 16, 14 layers), no MTP"
        ],
    },
    ("deepseek-v3", "GB200", "FP8-MX"): {
        "workload": {**HYBRIDEP, **BF16_MOMENTS, "recompute_modules": ["mla_up_proj"]},
        "mapping": {
            "recompute": SELECTIVE,
            "uneven_chunks": True,
            "first_stage_layers": list(range(4, 10)),
            "last_stage_layers": list(range(4, 10)),
        },
        "assumptions": [
            f"{CONFIGS}/deepseek: no configuration with pp 8 x vpp 4 found; the GB200 BF16 settings (hybridep, "
            "recompute mla_up_proj, no MTP) are assumed and the best valid split of the listed values is taken"
        ],
    },
    ("deepseek-v3", "B200"): {
        "workload": {"mtp_layers": 1, **BF16_MOMENTS, "recompute_modules": ["mla_up_proj"]},
        "mapping": {"recompute": SELECTIVE, "first_stage_layers": 4, "last_stage_layers": 1},
        "assumptions": [
            f"{CONFIGS}/deepseek (r0.2.0): alltoall dispatcher, recompute_modules mla_up_proj, layout "
            "[E + 4 layers] + 14 x [4 layers] + [1 layer + MTP + loss], mtp_num_layers 1"
        ],
    },
    ("gpt-oss-120b", "GB300"): {
        "workload": MASTER_REMAINDERS,
        "assumptions": [f"{CONFIGS}/gpt_oss (branch gaod/r0.2.0_test): alltoall dispatcher, TE CUDA graphs, no recompute; {PAO}"],
    },
    ("gpt-oss-120b", "H100"): {
        "workload": GPT_OSS_MEMORY,
        "mapping": {"recompute": SELECTIVE, "micro_batch": 1},
        "assumptions": [
            f"{CONFIGS}/gpt_oss (v0.2.0, v0.2.1): alltoall dispatcher, {GPT_OSS_RECOMPUTE}, {PAO}; micro_batch_size 1 "
            "as the recipe sets it: the table's mb 4 contradicts its own grad accumulation 2 (512 / (dp 16 x 4) = 8)"
        ],
    },
    ("gpt-oss-120b", "GB200"): {
        "workload": {**HYBRIDEP, **GPT_OSS_MEMORY},
        "mapping": {"recompute": SELECTIVE},
        "assumptions": [f"{CONFIGS}/gpt_oss (branch gaod/r0.2.0_test): hybridep dispatcher, {GPT_OSS_RECOMPUTE}, {PAO}"],
    },
    ("gpt-oss-120b",): {
        "workload": GPT_OSS_MEMORY,
        "mapping": {"recompute": SELECTIVE},
        "assumptions": [f"{CONFIGS}/gpt_oss (r0.2.0): alltoall dispatcher, {GPT_OSS_RECOMPUTE}, {PAO}"],
    },
    ("qwen3-30b-a3b", "GB300"): {
        "workload": HYBRIDEP,
        "assumptions": [f"{CONFIGS}/qwen: hybridep dispatcher, TE CUDA graphs on the router, no recompute"],
    },
    ("qwen3-30b-a3b", "GB200"): {
        "workload": HYBRIDEP,
        "assumptions": [f"{CONFIGS}/qwen: hybridep dispatcher, TE CUDA graphs on the router, no recompute"],
    },
    ("qwen3-30b-a3b", "B200"): {
        "assumptions": [f"{CONFIGS}/qwen: alltoall dispatcher, TE CUDA graphs on the router, no recompute"]
    },
    ("qwen3-30b-a3b", "H100"): {
        "workload": A2A_OVERLAP,
        "assumptions": [f"{CONFIGS}/qwen: alltoall dispatcher with moe_a2a_overlap (the table's vpp 24 and mb 2 are not in it)"],
    },
    ("qwen3-235b-a22b", "GB300"): {
        "workload": HYBRIDEP,
        "assumptions": [f"{CONFIGS}/qwen (main e940d997d, _V2): hybridep dispatcher, TE CUDA graphs on the router, no recompute"],
    },
    ("qwen3-235b-a22b", "GB200"): {
        "workload": HYBRIDEP,
        "assumptions": [f"{CONFIGS}/qwen: hybridep dispatcher, no recompute (the table's vpp 3 and ep 32 are not in it)"],
    },
    ("qwen3-235b-a22b", "B200"): {
        "workload": A2A_OVERLAP,
        "assumptions": [f"{CONFIGS}/qwen (r0.2.0): alltoall with moe_a2a_overlap, no recompute (the table's vpp 2 is not in it)"],
    },
    ("qwen3-235b-a22b", "H100"): {
        "workload": A2A_OVERLAP,
        "assumptions": [f"{CONFIGS}/qwen: alltoall with moe_a2a_overlap, no recompute, tp_comm_overlap off"],
    },
}


def table_mapping(num_gpus: int, tp: int, pp: int, cp: int, micro_batch: int, vpp: int, fsdp: bool, recompute="none") -> dict:
    """The mapping a Megatron-Bridge performance-table row states: data parallelism the rest of the GPUs, sequence
    parallelism with tp > 1, Megatron FSDP as ZeRO-3 and the distributed optimizer (ZeRO-1) otherwise."""
    return {
        "tp": tp,
        "pp": pp,
        "dp": num_gpus // (tp * pp * cp),
        "cp": cp,
        "micro_batch": micro_batch,
        "vpp": vpp,
        "sp": tp > 1,
        "recompute": recompute,
        "zero": 3 if fsdp else 1,
    }


def entry(run: dict) -> dict:
    par, hw, meas = run["parallel"], run["hardware"], run["measured"]
    model = MODELS[run["model"]["name"]]
    gpu = hw["gpu"].split()[0].split("-")[0]
    tp, pp, cp = par["tp"], par["pp"], par["cp"] or 1
    n = hw["num_gpus"]
    mapping = table_mapping(n, tp, pp, cp, par["micro_batch"], par["vpp"] or 1, bool(par["fsdp"]))
    if par["ep"] and par["ep"] > 1:
        mapping["ep"] = par["ep"]
    workload = {
        "kind": "training",
        "seq_len": run["model"]["seq_len"],
        "global_batch": par["global_batch"],
        "precision": PRECISIONS[par["precision"]],
        **(
            {"low_precision_recipe": LOW_PRECISION_RECIPES[par["precision"]]} if par["precision"] in LOW_PRECISION_RECIPES else {}
        ),
        "attention": "flash",
        # every recipe: DistributedDataParallelConfig(grad_reduce_in_fp32=False), gradients held and reduced in bf16
        "grad_bytes": 2,
    }
    assumptions = [RECIPE_NOTE[par["precision"]], "gradients held and reduced in bf16 (grad_reduce_in_fp32 False)"]
    settings = recipe(model, gpu, par["precision"])
    workload.update(settings.get("workload", {}))
    mapping.update(settings.get("mapping", {}))
    assumptions += settings.get("assumptions", [])
    reason = settings.get("not_expressible")
    if "ep" in mapping:
        assumptions.append(
            "MoE: expert tensor parallelism 1, forced load balance (balanced routing), dropless, as the table states"
        )
    assumptions.append(
        "Megatron FSDP (ZeRO-3 sharding)" if par["fsdp"] else "distributed optimizer (ZeRO-1), the recipes' default"
    )
    if run.get("unverified_fields"):
        assumptions.append("unverified in the reference: " + ", ".join(run["unverified_fields"]))
    source = f"{run['source']['title']}, {run['source']['location']} ({run['source']['url']})"
    verification = run["verification"]
    return table_entry(
        run["id"], source, verification, model, gpu, n, workload, mapping, meas["tokens_per_s_per_gpu"], assumptions, reason
    )


def table_entry(
    run_id: str,
    source: str,
    verification: str,
    model: str,
    gpu: str,
    num_gpus: int,
    workload: dict,
    mapping: dict,
    tokens_per_s_per_gpu: float,
    assumptions: list,
    not_expressible: str | None = None,
) -> dict:
    """A validation entry of one Megatron-Bridge table row: its step time is the global batch in tokens over the
    table's tokens per second per GPU times the GPUs."""
    tokens = workload["global_batch"] * workload["seq_len"]
    return {
        "id": run_id,
        "source": source,
        "verification": verification,
        "model": model,
        "system": SYSTEMS[gpu],
        "num_gpus": num_gpus,
        "workload": workload,
        "mapping": mapping,
        "measured": {
            "step_time_s": round(tokens / (num_gpus * tokens_per_s_per_gpu), 4),
            "derived_from": f"global_batch x seq_len / (num_gpus x tokens_per_s_per_gpu {tokens_per_s_per_gpu})",
        },
        "assumptions": assumptions,
        **({"not_expressible": not_expressible} if not_expressible else {}),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"replace the {PREFIX} entries of {RUNS.relative_to(ROOT)}")
    args = parser.parse_args()
    reference = yaml.safe_load(REFERENCE.read_text())["runs"]
    entries = [entry(r) for r in reference if r["id"].startswith(PREFIX)]
    text = yaml.safe_dump(entries, sort_keys=False, width=140, allow_unicode=True)
    if not args.write:
        sys.stdout.write(text)
        return 0
    lines = RUNS.read_text().splitlines(keepends=True)
    kept, skipping = [], False
    for line in lines:
        if line.startswith("- id: "):
            skipping = line[len("- id: ") :].startswith(PREFIX)
        if not skipping:
            kept.append(line)
    RUNS.write_text("".join(kept) + text)
    print(f"{len(entries)} entries written to {RUNS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``--emit``: a plan as its framework's launch configuration (command-line arguments, TOML or JSON).

One emitter per ``Emitter`` (the profile's ``emitter:`` key, problems/frameworks/*.yaml). Each turns the
plan's mapping into the framework's own names; the flag and key names they may write are recorded per
release in problems/frameworks/flags/ (benchmarks/framework_flags.py) and tests/test_frameworks.py checks
every emitted name against them. A plan a framework cannot express never reaches an emitter (the
profile restricts the planner's space, solver/frameworks.py); an emitter that meets one anyway raises
``Unexpressible``, a bug, not a user error.
"""

from __future__ import annotations

import json
import math
import shlex
from enum import StrEnum

from parasol.model.choices import Allocator, CpComm, MoeDispatcher
from parasol.model.errors import ProblemError
from parasol.model.inference import attention_dp_ranks, longest_sequence_tokens, pass_token_budget
from parasol.model.pipeline import stage_layer_counts
from parasol.model.specs import DEFAULT_PLACEMENT, TP_PP_DP_PLACEMENT
from parasol.model.training import mapping_cp_hierarchy

from . import frameworks


class Emitter(StrEnum):
    MEGATRON = "megatron"
    TORCHTITAN = "torchtitan"
    DEEPSPEED = "deepspeed"
    VLLM = "vllm"
    TRTLLM = "trtllm"
    SGLANG = "sglang"


class Unexpressible(AssertionError):
    """The plan holds a value its framework cannot express: the profile's restriction failed."""


def _longest_sequence(w) -> int:
    """An engine's longest sequence, whole tokens (``inference.longest_sequence_tokens``)."""
    return math.ceil(longest_sequence_tokens(w) - 1e-9)


def _pass_budget(w, m, prefill_only: bool = False) -> int:
    """The plan's token budget of one pass (``inference.pass_token_budget`` at its micro-batch, ``m.batch / pp``)."""
    return pass_token_budget(w, m.batch / m.decode.pp, prefill_only)


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise Unexpressible(what)


def command_line(program: list[str], args: list[tuple[str, object]]) -> str:
    """``program`` and its (flag, value) pairs, one flag a line (value None: a switch; a list: nargs)."""
    lines = [" ".join(program)]
    for flag, value in args:
        if value is None:
            lines.append(flag)
        elif isinstance(value, (list, tuple)):
            lines.append(" ".join([flag, *(shlex.quote(str(v)) for v in value)]))
        else:
            lines.append(f"{flag} {shlex.quote(str(value))}")
    return " \\\n    ".join(lines)


# --- Megatron-LM -------------------------------------------------------------------------------------


def _chunks(layers: int, vpp: int, first: bool, last: bool, mtp: int) -> list[str]:
    """One pipeline stage's ``vpp`` model chunks as Megatron layout items ('E' embedding, 't' layer,
    'm' MTP layer, 'L' loss): the transformer layers, plus as few of the stage's other modules as
    make the chunks equal (``model.pipeline.vpp_splits_stage``), split as evenly as possible."""
    pre, post = (["E"] if first else []), (["m"] * mtp + ["L"] if last else [])
    slots = len(pre) + len(post)
    counted = next((s for s in range(slots + 1) if (layers + s) % vpp == 0), 0)
    take_pre = min(counted, len(pre))
    take_post = counted - take_pre
    seq = pre[:take_pre] + ["t"] * layers + (post[len(post) - take_post :] if take_post else [])
    size, extra = divmod(len(seq), vpp)
    chunks, at = [], 0
    for v in range(vpp):
        n = size + (1 if v < extra else 0)
        chunks.append("".join(seq[at : at + n]))
        at += n
    chunks[0] = "".join(pre[take_pre:]) + chunks[0]
    chunks[-1] = chunks[-1] + "".join(post[: len(post) - take_post])
    return chunks


def megatron_layout(layers: int, pp: int, vpp: int, first: int, last: int, mtp: int = 0) -> str:
    """--pipeline-model-parallel-layout: the pp x vpp chunks in model order (virtual stage v of rank r
    is chunk v * pp + r), '|' between chunks (megatron/core/transformer/pipeline_parallel_layer_layout.py)."""
    counts = stage_layer_counts(layers, pp, first, last)
    per_rank = [_chunks(n, vpp, r == 0, r == pp - 1, mtp) for r, n in enumerate(counts)]
    _require(all(c for chunks in per_rank for c in chunks), "an empty pipeline chunk")
    return "|".join(per_rank[r][v] for v in range(vpp) for r in range(pp))


def megatron_model_args(model) -> list[tuple[str, object]]:
    """The model's architecture as Megatron-LM arguments (core_v0.15.3 megatron/training/arguments.py): sizes,
    grouped-query and multi-latent attention, the MLP's kind, norms, positions, embeddings, windows, experts."""
    args = [
        ("--num-layers", model.layers),
        ("--hidden-size", model.hidden),
        ("--ffn-hidden-size", model.ffn),
        ("--num-attention-heads", model.heads),
        ("--max-position-embeddings", model.max_seq_len),
        ("--vocab-size", model.vocab),
    ]
    if model.mla is not None:  # MLATransformerConfig: qk_head_dim is the part without RoPE
        mla = model.mla
        args += [("--multi-latent-attention", None), ("--kv-lora-rank", mla.kv_lora_rank)]
        args += [("--q-lora-rank", mla.q_lora_rank)] if mla.q_lora_rank else []
        args += [("--qk-head-dim", mla.qk_nope_head_dim), ("--qk-pos-emb-head-dim", mla.qk_rope_head_dim)]
        args += [("--v-head-dim", mla.v_head_dim)]
    else:
        if model.kv_heads < model.heads:
            args += [("--group-query-attention", None), ("--num-query-groups", model.kv_heads)]
        if model.head_dim != model.hidden // model.heads:
            args.append(("--kv-channels", model.head_dim))
    if model.activation == "swiglu":
        args.append(("--swiglu", None))
    if model.norm == "rmsnorm":
        args += [("--normalization", "RMSNorm")]
    if model.position_embedding == "rope":
        args += [("--position-embedding-type", "rope")]
    if not model.tied_embeddings:
        args.append(("--untie-embeddings-and-output-weights", None))
    if not model.bias:
        args.append(("--disable-bias-linear", None))
    if not model.dropout:
        args += [("--attention-dropout", 0.0), ("--hidden-dropout", 0.0)]
    if model.sliding_window:  # tuple_type "left,right"; every N-th layer full attention (moe_freq_type N)
        args.append(("--window-size", f"{model.sliding_window},0"))
        if model.sliding_window_share < 1:
            args.append(("--window-attn-skip-freq", max(2, round(1 / (1 - model.sliding_window_share)))))
    moe = model.moe
    if moe is not None:
        args += [("--num-experts", moe.experts), ("--moe-router-topk", moe.top_k), ("--moe-ffn-hidden-size", moe.expert_ffn)]
        if moe.shared_experts:
            args.append(("--moe-shared-expert-intermediate-size", moe.shared_experts * moe.shared_expert_ffn))
        if moe.first_dense_layers:  # moe_freq_type: a Python list expression, 0 dense, 1 MoE
            dense, sparse = moe.first_dense_layers, model.layers - moe.first_dense_layers
            args.append(("--moe-layer-freq", f"([0]*{dense}+[1]*{sparse})"))
    return args


def megatron_args(problem, num_gpus: int, m) -> list[tuple[str, object]]:
    model, w = problem.model, m.chosen_workload(problem.workload)
    args = [
        *megatron_model_args(model),
        ("--seq-length", w.seq_len),
        ("--micro-batch-size", m.micro_batch),
        ("--global-batch-size", w.global_batch),
        ("--tensor-model-parallel-size", m.tp),
        ("--pipeline-model-parallel-size", m.pp),
    ]
    counts = stage_layer_counts(model.layers, m.pp, m.first_stage_layers, m.last_stage_layers)
    plain = len(set(counts)) == 1 and (m.vpp == 1 or counts[0] % m.vpp == 0) and not m.uneven_chunks
    if problem.pipeline_layout is not None:  # the problem's own layout, which fixed pp's split and vpp
        args.append(("--pipeline-model-parallel-layout", problem.pipeline_layout))
    elif m.pp > 1 and not plain:
        args.append(
            (
                "--pipeline-model-parallel-layout",
                megatron_layout(model.layers, m.pp, m.vpp, m.first_stage_layers, m.last_stage_layers, w.mtp_layers),
            )
        )
    elif m.vpp > 1:
        args.append(("--num-layers-per-virtual-pipeline-stage", counts[0] // m.vpp))
    if w.mtp_layers:
        args.append(("--mtp-num-layers", w.mtp_layers))
    if m.cp > 1:
        args += [
            ("--context-parallel-size", m.cp),
            ("--cp-comm-type", "p2p" if m.cp_comm == CpComm.RING else m.cp_comm),  # the ring is Megatron's p2p
        ]
        levels = mapping_cp_hierarchy(problem.system(num_gpus), m)
        if levels is not None:  # the all-to-all level first (Megatron-Core's create_hierarchical_groups)
            args.append(("--hierarchical-context-parallel-sizes", list(levels)))
    if model.moe is not None:
        args += [("--expert-model-parallel-size", m.ep), ("--expert-tensor-parallel-size", m.etp)]
        if w.moe_dispatcher == MoeDispatcher.DEEPEP:
            args += [("--moe-token-dispatcher-type", "flex"), ("--moe-enable-deepep", None)]
        else:
            args.append(("--moe-token-dispatcher-type", "alltoall"))
        if m.a2a_overlapped(w):  # Megatron-Core's merged forward-backward schedule (combined_1f1b.py)
            args.append(("--overlap-moe-expert-parallel-comm", None))
    else:
        _require(m.ep == 1 and m.etp == 1, "expert parallelism without experts")
    if m.sp:
        args.append(("--sequence-parallel", None))
    if m.tp_comm_overlap:
        args.append(("--tp-comm-overlap", None))
    _require(m.zero in (0, 1), f"ZeRO-{m.zero} (Megatron-LM's distributed optimizer is ZeRO-1)")
    if m.zero == 1:
        args.append(("--use-distributed-optimizer", None))
        if w.overlap_dp:
            args += [("--overlap-grad-reduce", None), ("--overlap-param-gather", None)]
    elif w.overlap_dp:
        args.append(("--overlap-grad-reduce", None))
    if m.recompute == "selective":
        args += [("--recompute-granularity", "selective"), ("--recompute-modules", list(w.recompute_modules))]
    elif m.recompute == "full":
        args += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"), ("--recompute-num-layers", 1)]
    if m.optimizer_offload > 0:
        args += [("--optimizer-cpu-offload", None), ("--optimizer-offload-fraction", m.optimizer_offload)]
    _require(not m.weight_offload and m.offload_layers == 0, "offloading Megatron-LM cannot express")
    _require(not m.module_offload, "fine-grained activation offloading (no flag in the recorded release)")
    _require(not m.dualpipe, "the DualPipe schedule (Megatron-LM runs 1F1B)")
    _require(m.placement in (DEFAULT_PLACEMENT, TP_PP_DP_PLACEMENT), f"rank order {m.placement}")
    if m.placement == TP_PP_DP_PLACEMENT:
        args.append(("--use-tp-pp-dp-mapping", None))
    args.append(("--fp16", None) if w.precision == "fp16" else ("--bf16", None))
    if w.precision == "fp8":
        args += [("--fp8-format", "hybrid"), ("--fp8-recipe", w.low_precision_recipe)]
        if w.fp8_param_gather and m.zero == 1:  # without the distributed optimizer no parameter is gathered
            args.append(("--fp8-param-gather", None))
        _require(not w.fp8_output_proj, "the MXFP8 output layer (no flag in the recorded release)")
    elif w.precision == "fp4":
        args += [("--fp4-format", "e2m1"), ("--fp4-recipe", w.low_precision_recipe)]
    _require(not w.fp8_attention, "FP8 attention (no flag in the recorded release)")
    _require(not w.fused_grouped_mlp, "the fused grouped MLP (no flag in the recorded release)")
    if w.nccl_max_ctas.any():
        args.append(("--nccl-communicator-config-path", NCCL_CONFIG_FILE))
    return args


# the file --nccl-communicator-config-path reads, written beside the launch (``nccl_config_heredoc``)
NCCL_CONFIG_FILE = "nccl_communicator_config.yaml"
# Megatron-Core's process groups each cap of workload.nccl_max_ctas covers (parallel_state.py get_nccl_options):
# the data-parallel gradient traffic runs on dp, or on dp_cp with context parallelism
MEGATRON_COMMUNICATORS = {"tp": ("tp",), "cp": ("cp",), "dp": ("dp", "dp_cp"), "pp": ("pp",)}


def nccl_config_heredoc(problem) -> str:
    """The shell lines writing the NCCL communicator config of workload.nccl_max_ctas ({process group: {max_ctas:
    n}}, as Megatron-Core's get_nccl_options reads it), or nothing without caps."""
    caps = problem.workload.nccl_max_ctas
    if not caps.any():
        return ""
    lines = [
        f"{group}: {{max_ctas: {getattr(caps, key)}}}"
        for key, groups in MEGATRON_COMMUNICATORS.items()
        if getattr(caps, key) is not None
        for group in groups
    ]
    return f"cat > {NCCL_CONFIG_FILE} <<'EOF'\n" + "\n".join(lines) + "\nEOF\n"


# the environment PyTorch reads for workload.allocator expandable (choices.Allocator), set before the launch
EXPANDABLE_SEGMENTS = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"


def allocator_env(problem) -> list[str]:
    """The environment assignment the plan's allocator setting needs: none for PyTorch's default."""
    return [EXPANDABLE_SEGMENTS] if problem.workload.allocator == Allocator.EXPANDABLE else []


# the environment Transformer Engine reads for workload.nvfp4_hadamard false (common/recipe/__init__.py NVFP4BlockScaling)
NO_HADAMARD = "NVTE_NVFP4_DISABLE_RHT=1"


def recipe_env(problem) -> list[str]:
    """The environment assignment the plan's low-precision recipe needs: none but for NVFP4 without its random
    Hadamard transform."""
    return [] if problem.workload.nvfp4_hadamard else [NO_HADAMARD]


def env_comment(problem) -> str:
    """A first line naming that environment, for launch files that are configurations, not commands."""
    return "".join(f"# launch with {env} (workload.allocator)\n" for env in allocator_env(problem))


def emit_megatron(problem, num_gpus: int, m) -> str:
    _require(m.tp * m.pp * m.cp * m.dp == num_gpus, "degrees that do not multiply to the GPU count")
    program = [*allocator_env(problem), *recipe_env(problem), "torchrun", "${DISTRIBUTED_ARGS[@]}", "pretrain_gpt.py"]
    return nccl_config_heredoc(problem) + command_line(program, megatron_args(problem, num_gpus, m))


# --- torchtitan (TOML job config) ---------------------------------------------------------------------


def toml_text(sections: dict) -> str:
    """A TOML document of ``{section: {key: int | float | bool | str}}``."""

    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        return json.dumps(v) if isinstance(v, (str, list)) else repr(v)

    blocks = [f"[{name}]\n" + "\n".join(f"{k} = {value(v)}" for k, v in keys.items()) for name, keys in sections.items()]
    return "\n\n".join(blocks)


def torchtitan_model_parts(layers: int, pp: int, vpp: int, first: int, last: int) -> list[list[str]]:
    """parallelism.module_fqns_per_model_part: the module names of each (virtual) stage in model order, the
    same chunks as ``megatron_layout`` (torchtitan/distributed/pipeline_parallel.py: tok_embeddings,
    layers.i, norm and output)."""
    parts, at = [], 0
    for chunk in megatron_layout(layers, pp, vpp, first, last).split("|"):
        names = []
        for item in chunk:
            if item == "E":
                names.append("tok_embeddings")
            elif item == "t":
                names.append(f"layers.{at}")
                at += 1
            else:
                _require(item == "L", "multi-token prediction layers (not in torchtitan's Llama)")
                names += ["norm", "output"]
        parts.append(names)
    return parts


def torchtitan_sections(problem, num_gpus: int, m) -> dict:
    model, w = problem.model, m.chosen_workload(problem.workload)
    _require(m.zero in (0, 3), f"ZeRO-{m.zero} (FSDP2 shards as ZeRO-3, DDP is ZeRO-0)")
    _require(m.sp or m.tp == 1, "tensor parallelism without sequence parallelism (torchtitan's TP plan shards norms)")
    _require(m.recompute in ("none", "full") and m.cp_comm == "ring", "a recompute or CP mode torchtitan lacks")
    _require(m.optimizer_offload == 0 and not m.weight_offload and m.offload_layers == 0 and not m.module_offload, "offloading")
    _require(not m.dualpipe, "the DualPipe schedule")
    _require(not m.a2a_overlapped(w), "the expert all-to-all overlap (torchtitan's runs only under its DualPipeV schedule)")
    parallelism = {
        "data_parallel_replicate_degree": m.dp if m.zero == 0 else 1,
        "data_parallel_shard_degree": m.dp if m.zero == 3 else 1,
        "tensor_parallel_degree": m.tp,
        "pipeline_parallel_degree": m.pp,
        "context_parallel_degree": m.cp,
        "expert_parallel_degree": m.ep,
        "expert_tensor_parallel_degree": m.etp,
        "enable_async_tensor_parallel": m.tp_comm_overlap,
    }
    training = {"seq_len": w.seq_len, "global_batch_size": w.global_batch, "mixed_precision_param": "bfloat16"}
    if m.pp > 1:
        parallelism["pipeline_parallel_schedule"] = "Interleaved1F1B" if m.vpp > 1 else "1F1B"
        parallelism["module_fqns_per_model_part"] = torchtitan_model_parts(
            model.layers, m.pp, m.vpp, m.first_stage_layers, m.last_stage_layers
        )
        parallelism["pipeline_parallel_microbatch_size"] = m.micro_batch
        training["local_batch_size"] = w.global_batch // m.dp  # split into micro-batches by the schedule
    else:
        training["local_batch_size"] = m.micro_batch  # gradient accumulation up to global_batch_size
    if model.moe is not None:
        parallelism["expert_parallel_comm_backend"] = "deepep" if w.moe_dispatcher == MoeDispatcher.DEEPEP else "standard"
    checkpointing = {"mode": m.recompute}
    if m.recompute == "full" and w.checkpoint_early_stop:  # off in torchtitan's job config unless set
        checkpointing["early_stop"] = True
    return {"training": training, "parallelism": parallelism, "activation_checkpoint": checkpointing}


def emit_torchtitan(problem, num_gpus: int, m) -> str:
    _require(m.tp * m.pp * m.cp * m.dp == num_gpus, "degrees that do not multiply to the GPU count")
    return env_comment(problem) + toml_text(torchtitan_sections(problem, num_gpus, m))


# --- DeepSpeed (ds_config JSON) -----------------------------------------------------------------------


def deepspeed_config(problem, num_gpus: int, m) -> dict:
    w = problem.workload
    _require(m.tp == m.pp == m.cp == m.vpp == 1 and m.ep == 1, "model parallelism (not in a ds_config)")
    _require(m.dp == num_gpus and m.offload_layers == 0 and not m.module_offload, "a plan the ds_config cannot hold")
    _require(not m.weight_offload or m.zero == 3, "offload_param without ZeRO-3")
    _require(w.precision in ("bf16", "fp16"), f"{w.precision} training")
    zero = {"stage": m.zero}
    if m.optimizer_offload > 0:
        zero["offload_optimizer"] = {"device": "cpu", "ratio": m.optimizer_offload}
    if m.weight_offload:
        zero["offload_param"] = {"device": "cpu"}
    return {
        "train_batch_size": w.global_batch,
        "train_micro_batch_size_per_gpu": m.micro_batch,
        "gradient_accumulation_steps": w.global_batch // (m.micro_batch * m.dp),
        w.precision: {"enabled": True},
        "zero_optimization": zero,
    }


def emit_deepspeed(problem, num_gpus: int, m) -> str:
    text = json.dumps(deepspeed_config(problem, num_gpus, m), indent=2)
    if m.recompute != "none":
        _require(m.recompute == "full", f"recompute {m.recompute}")
        text = "# recompute full: activation checkpointing from the model code (deepspeed.checkpointing.checkpoint)\n" + text
    return env_comment(problem) + text


# --- serving: one server per replica (dp copies behind a load balancer) ---------------------------------


def _replicas(pool, text: str, role: str = "") -> str:
    """``text`` behind the line that says how many copies of the server the pool runs: one per replica, or one per
    expert-parallel group of ``inference.attention_dp_ranks`` replicas."""
    note = f"# {role}: " if role else "# "
    ranks = attention_dp_ranks(pool.tp, pool.ep)
    copies = pool.dp // ranks
    what = f"dp {pool.dp}" if ranks == 1 else f"dp {pool.dp} in groups of {ranks} attention data-parallel ranks"
    head = f"{note}{copies} copies of this server behind a load balancer ({what})\n" if copies > 1 else ""
    return head + text


def _balance_note(w, ranks: int) -> str:
    return (
        f"# {ranks} attention data-parallel ranks share the experts; the plan assumes their tokens a step balanced to "
        f"{w.attention_dp_balance:g} (workload.attention_dp_balance)\n"
    )


def _serving_pools(m) -> list[tuple[str, object]]:
    return [("", m.decode)] if m.prefill is None else [("prefill", m.prefill), ("decode", m.decode)]


VLLM_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp8": "bfloat16"}  # fp8 GEMMs: bf16 activations + --quantization fp8


def emit_vllm(problem, num_gpus: int, m) -> str:
    w = problem.workload
    _require(m.prefill is None, "a disaggregated plan (vLLM profile: continuous only)")
    pool = m.decode
    _require(pool.ep == 1, "expert parallelism (no flag in this vLLM release)")
    args = [
        ("--tensor-parallel-size", pool.tp),
        ("--pipeline-parallel-size", pool.pp),
        ("--max-num-seqs", m.batch),
        ("--max-model-len", _longest_sequence(w)),
        ("--max-num-batched-tokens", _pass_budget(w, m)),
        ("--dtype", VLLM_DTYPE[w.precision]),
    ]
    if w.weight_precision == "fp8":
        args.append(("--quantization", "fp8"))
    if w.kv_precision == "fp8":
        args.append(("--kv-cache-dtype", "fp8"))
    if w.kv_block_tokens in (8, 16, 32, 64, 128):
        args.append(("--block-size", w.kv_block_tokens))
    return _replicas(pool, command_line(["vllm", "serve", problem.model.name], args))


def emit_trtllm(problem, num_gpus: int, m) -> str:
    w = problem.workload
    _require(m.prefill is None, "a disaggregated plan (trtllm profile: static or continuous)")
    pool = m.decode
    ranks = attention_dp_ranks(pool.tp, pool.ep)
    if ranks > 1:
        _require(pool.tp == 1 and pool.pp == 1, "attention data parallelism over replicas of tp or pp > 1 (one rank each)")
    args = [("--tp_size", pool.tp * ranks), ("--pp_size", pool.pp)]
    if pool.ep > 1:
        args.append(("--ep_size", pool.ep))
    args += [
        # per micro-batch (the engine holds pp of them in flight); under attention data parallelism per rank
        ("--max_batch_size", m.batch // pool.pp),
        ("--max_seq_len", _longest_sequence(w)),
        ("--max_num_tokens", _pass_budget(w, m)),
        ("--kv_cache_free_gpu_memory_fraction", w.kv_cache_memory_fraction),
    ]
    head = ""
    if ranks > 1:  # LLM API options only a YAML file carries (TensorRT-LLM docs: "attention data parallelism")
        args.append(("--extra_llm_api_options", "attention_dp.yaml"))
        head = _balance_note(w, ranks) + "cat > attention_dp.yaml <<'EOF'\nenable_attention_dp: true\nEOF\n"
    text = head + command_line(["trtllm-serve", problem.model.name], args)
    if {w.precision, w.weight_precision, w.kv_precision} - {"bf16", "fp16"}:
        text = (
            f"# a checkpoint quantized for {w.weight_precision} weights, {w.precision} GEMMs, {w.kv_precision} KV cache "
            "(TensorRT Model Optimizer): trtllm-serve reads the precision from the checkpoint\n" + text
        )
    return _replicas(pool, text)


SGLANG_KV = {"bf16": "bf16", "fp16": "auto", "fp8": "fp8_e4m3", "fp4": "fp4_e2m1"}
SGLANG_WEIGHTS = {"fp8": "fp8", "fp4": "modelopt_fp4"}


def emit_sglang(problem, num_gpus: int, m) -> str:
    w = problem.workload
    texts = []
    for role, pool in _serving_pools(m):
        ranks = attention_dp_ranks(pool.tp, pool.ep)
        args = [("--model-path", problem.model.name), ("--tp-size", pool.tp * ranks), ("--pp-size", pool.pp)]
        if pool.ep > 1:
            args.append(("--ep-size", pool.ep))
        if ranks > 1:  # the server's tp-size GPUs as dp-size attention groups of tp each
            args += [("--enable-dp-attention", None), ("--dp-size", ranks)]
        if role:
            args.append(("--disaggregation-mode", role))
        if role != "prefill":  # the server's whole: each attention data-parallel worker takes its dp-size-th
            args.append(("--max-running-requests", m.batch * ranks))
        # SGLang's budgets count prompt tokens only; its chunk size bounds a pass's prompt tokens too
        budget = pass_token_budget(w) if role == "prefill" else _pass_budget(w, m, prefill_only=True)
        args += [
            ("--context-length", _longest_sequence(w)),
            ("--max-prefill-tokens", budget),
            ("--chunked-prefill-size", budget),
        ]
        if w.weight_precision in SGLANG_WEIGHTS:
            args.append(("--quantization", SGLANG_WEIGHTS[w.weight_precision]))
        _require(w.weight_precision != "int4", "int4 weights (not in the SGLang profile)")
        args.append(("--kv-cache-dtype", SGLANG_KV[w.kv_precision]))
        note = _balance_note(w, ranks) if ranks > 1 else ""
        texts.append(_replicas(pool, note + command_line(["python", "-m", "sglang.launch_server"], args), role))
    return "\n\n".join(texts)


EMITTERS = {
    Emitter.MEGATRON: emit_megatron,
    Emitter.TORCHTITAN: emit_torchtitan,
    Emitter.DEEPSPEED: emit_deepspeed,
    Emitter.VLLM: emit_vllm,
    Emitter.TRTLLM: emit_trtllm,
    Emitter.SGLANG: emit_sglang,
}


def emit(problem, num_gpus: int, mapping, check_only: bool = False) -> str | None:
    """The launch configuration of the plan (``num_gpus``, ``mapping``) for the problem's framework
    (``check_only``: only the ProblemError when the problem names no framework or it has no emitter)."""
    framework = problem.framework
    if framework is None:
        raise ProblemError(
            f"--emit needs workload.framework; allowed: {', '.join(frameworks.names())}",
            source=problem.source,
            field="workload.framework",
        )
    emitter = EMITTERS.get(Emitter(framework.emitter))
    if emitter is None:
        raise ProblemError(f"no emitter for {framework.label} yet", source=problem.source, field="workload.framework")
    if framework.flags is None:
        raise ProblemError(
            f"{framework.label} has no recorded launch flags (see its profile); allowed releases are listed there",
            source=problem.source,
            field="workload.framework",
        )
    if check_only:
        return None
    return emitter(problem, num_gpus, mapping)


def as_json(value) -> str:
    return json.dumps(value, indent=2)

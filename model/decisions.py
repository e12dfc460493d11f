"""The names of the decisions a composition reads (``ops.Ops.decision``, ``ops.Factor.keys``).

A mapping's own choices, and the quantities that follow from them which the planner carries as
decisions too (the micro-batch count, the layers of a middle stage, where each parallel group
sits): the model derives them from a mapping (``training_step.mapping_decisions``,
``serving_step.plan_decisions``), the planner tabulates them over its space.
"""

from __future__ import annotations

from enum import StrEnum


class TrainingDecision(StrEnum):
    NUM_GPUS = "num_gpus"
    TP = "tp"
    PP = "pp"
    DP = "dp"
    CP = "cp"
    CP_COMM = "cp_comm"  # ring (p2p K/V blocks), a2a (Ulysses) or allgather (Llama 3): choices.CpComm
    EP = "ep"
    ETP = "etp"  # expert tensor parallelism: each routed expert split over etp ranks
    TP_COMM_OVERLAP = "tp_comm_overlap"  # TP collectives overlapped with their GEMMs (needs sp)
    MICRO_BATCH = "micro_batch"
    VPP = "vpp"
    SP = "sp"
    RECOMPUTE = "recompute"
    ZERO = "zero"
    FIRST_STAGE_LAYERS = "first_stage_layers"
    LAST_STAGE_LAYERS = "last_stage_layers"
    PLACEMENT = "placement"
    UNEVEN_CHUNKS = "uneven_chunks"  # interleaved chunks of unequal size allowed (a pipeline layout)
    OFFLOAD_LAYERS = "offload_layers"  # layers per stage whose activations are offloaded to host memory
    OPTIMIZER_OFFLOAD = "optimizer_offload"  # share of the owned optimizer state held and stepped on the host
    WEIGHT_OFFLOAD = "weight_offload"  # ZeRO-3's weight shard held on the host
    DUALPIPE = "dualpipe"  # DeepSeek-V3's bidirectional pipeline schedule (else 1F1B, interleaved when vpp > 1)
    MODULE_OFFLOAD = "module_offload"  # workload.offload_modules' saved inputs kept in host memory (fine-grained offloading)
    MOE_DISPATCHER = "moe_dispatcher"  # how routed tokens reach their experts (choices.MoeDispatcher; MoE models only)
    MOE_A2A_OVERLAP = "moe_a2a_overlap"  # the expert all-to-all hidden behind another micro-batch's compute (ep > 1 only)
    # the modules selective recomputation redoes (a tuple of choices.RecomputeModule; None: the workload's, recompute_modules)
    RECOMPUTE_MODULES = "recompute_modules"
    # derived from the choices above
    MICROBATCHES = "microbatches"  # micro-batches per step, global_batch / (dp x micro_batch)
    MIDDLE_STAGE_LAYERS = "middle_stage_layers"  # layers of each middle stage (0 when pp < 3)
    INTERLEAVED = "interleaved"  # vpp > 1 (the interleaved schedule)
    SINGLE_STAGE = "single_stage"  # pp = 1: one stage holds the embedding, every layer and the output layer
    TP_GROUP = "tp_group"  # where each parallel group sits (placement.Layout)
    CP_GROUP = "cp_group"
    EP_GROUP = "ep_group"
    DP_GROUP = "dp_group"
    EDP_GROUP = "edp_group"
    PP_GROUP = "pp_group"
    ETP_GROUP = "etp_group"


# the decisions a training mapping states (the rest follow from them)
TRAINING_MAPPING_KEYS = (
    TrainingDecision.TP,
    TrainingDecision.PP,
    TrainingDecision.DP,
    TrainingDecision.CP,
    TrainingDecision.EP,
    TrainingDecision.MICRO_BATCH,
    TrainingDecision.VPP,
    TrainingDecision.SP,
    TrainingDecision.RECOMPUTE,
    TrainingDecision.ZERO,
    TrainingDecision.FIRST_STAGE_LAYERS,
    TrainingDecision.LAST_STAGE_LAYERS,
    TrainingDecision.PLACEMENT,
    TrainingDecision.UNEVEN_CHUNKS,
    TrainingDecision.OFFLOAD_LAYERS,
    TrainingDecision.CP_COMM,
    TrainingDecision.ETP,
    TrainingDecision.TP_COMM_OVERLAP,
    TrainingDecision.OPTIMIZER_OFFLOAD,
    TrainingDecision.WEIGHT_OFFLOAD,
    TrainingDecision.DUALPIPE,
    TrainingDecision.MODULE_OFFLOAD,
    TrainingDecision.MOE_DISPATCHER,
    TrainingDecision.MOE_A2A_OVERLAP,
    TrainingDecision.RECOMPUTE_MODULES,
)
# the parallel groups and the Layout key each one's placement is carried under
GROUP_KEYS = {
    "tp": TrainingDecision.TP_GROUP,
    "cp": TrainingDecision.CP_GROUP,
    "ep": TrainingDecision.EP_GROUP,
    "dp": TrainingDecision.DP_GROUP,
    "edp": TrainingDecision.EDP_GROUP,
    "pp": TrainingDecision.PP_GROUP,
    "etp": TrainingDecision.ETP_GROUP,
}


class ServingDecision(StrEnum):
    NUM_GPUS = "num_gpus"  # all GPUs of the plan (both pools when disaggregated)
    TP = "tp"  # the decode (or only) pool
    PP = "pp"
    EP = "ep"
    DP = "dp"
    BATCH = "batch"  # requests per (decode) replica
    PREFILL_TP = "prefill.tp"  # the prefill pool of disaggregated serving
    PREFILL_PP = "prefill.pp"
    PREFILL_EP = "prefill.ep"
    PREFILL_DP = "prefill.dp"
    # derived
    POOL_GPUS = "pool_gpus"  # GPUs of the decode (or only) pool
    PREFILL_GPUS = "prefill_gpus"
    MICRO_BATCH = "micro_batch"  # sequences per pipeline micro-batch, batch / pp
    TP_GROUP = "tp_group"  # where the decode pool's groups sit (placement.Layout)
    EP_GROUP = "ep_group"
    PP_GROUP = "pp_group"
    PREFILL_TP_GROUP = "prefill.tp_group"
    PREFILL_EP_GROUP = "prefill.ep_group"
    PREFILL_PP_GROUP = "prefill.pp_group"
    KV_LINK = "kv_link"  # where the KV cache crosses from the prefill to the decode pool

"""Fine-grained activation offloading (Megatron-Core's --fine-grained-activation-offloading --offload-modules,
``workload.offload_modules`` and the planner's ``mapping.module_offload``): what one layer's listed modules move
to host memory and back, what the copies leave exposed beside its compute, and when it cannot run.

Megatron-Core: docs/user-guide/features/fine_grained_activation_offloading.md and TransformerConfig's checks
(megatron/core/transformer/transformer_config.py); the bytes themselves: ``memory.offloaded_input_bytes``.
"""

from __future__ import annotations

from . import memory
from .choices import LowPrecisionRecipe, OffloadModule, Recompute, RecomputeModule
from .precision import training_recipe
from .specs import DeviceSpec, ModelSpec, Workload

# the mapping's choices that put something in host memory
HOST_MAPPING_KEYS = ("optimizer_offload", "weight_offload", "module_offload", "offload_layers")


def offloads(mapping) -> bool:
    """Whether ``mapping`` keeps anything in host memory (``HOST_MAPPING_KEYS``)."""
    return any(getattr(mapping, key) for key in HOST_MAPPING_KEYS)


def offload_copy_exposed_s(device: DeviceSpec, activation_bytes: float, compute_s: float) -> float:
    """Seconds one copy of ``activation_bytes`` between device and host memory leaves exposed beside
    ``compute_s`` of compute on another stream: what the copy at the device's host link
    (``host_bytes_per_s``, each direction) takes beyond it. Zero without a host link."""
    if device.host_bytes_per_s <= 0:
        return 0.0
    return max(0.0, activation_bytes / device.host_bytes_per_s - compute_s)


def offloaded_activation_bytes(
    model: ModelSpec, workload: Workload, layer: memory.LayerTokens, recompute: str, module_offload: bool
) -> memory.OffloadedBytes:
    """What fine-grained offloading (``mapping.module_offload`` of ``workload.offload_modules``) moves of one
    layer's saved activations for one micro-batch (``memory.offloaded_input_bytes``, with the modules
    selective recomputation redoes and the recipe's FC1 input); nothing under full recomputation, which
    keeps only the layer input."""
    if not module_offload or not workload.offload_modules or recompute == Recompute.FULL:
        return memory.OffloadedBytes(0.0, 0.0)
    recipe = training_recipe(workload.precision, workload.low_precision_recipe)
    return memory.offloaded_input_bytes(
        model,
        layer,
        workload.offload_modules,
        recomputed=workload.recompute_modules if recompute == Recompute.SELECTIVE else (),
        # Megatron-Core keeps FC1's 16-bit input where the recipe quantises per tensor (moe/experts.py)
        fc1_saves_original=recipe is not None and recipe not in (LowPrecisionRecipe.MXFP8, LowPrecisionRecipe.NVFP4),
    )


def module_offload_problem(
    model: ModelSpec,
    device: DeviceSpec,
    modules: tuple,
    offload_layers: int = 0,
    recompute: str = Recompute.NONE,
    recompute_modules: tuple = (),
) -> str | None:
    """Why fine-grained activation offloading of ``modules`` cannot run here, or None when it can: it
    needs a link to host memory; the routed-expert modules need an MoE model; it cannot run beside
    whole-layer offloading (Megatron-Core asserts "fine_grained_activation_offloading cannot be enabled
    with cpu_offloading") nor offload the routed experts' inputs while selective recomputation redoes
    the whole MoE block (TransformerConfig: "Cannot offload ... while recomputing the entire MoE
    layer"); under full recomputation, which keeps only each layer's input, it has nothing to move."""
    if not modules:
        return None
    if device.host_bytes_per_s <= 0:
        return f"device {device.name} gives no host_bytes_per_s (its link to host memory), which offloading needs"
    experts = [m for m in modules if m in (OffloadModule.EXPERT_FC1, OffloadModule.MOE_ACT)]
    if experts and model.moe is None:
        return f"{', '.join(experts)} offload the routed experts' inputs, and {model.name} has no MoE layers"
    if offload_layers:
        return "offload_modules cannot run beside mapping.offload_layers (Megatron-Core refuses both); drop one"
    if recompute == Recompute.FULL:
        return "full recomputation keeps only each layer's input: nothing for offload_modules to move; use recompute none or selective"
    if experts and recompute == Recompute.SELECTIVE and RecomputeModule.MOE in recompute_modules:
        return (
            f"{', '.join(experts)} cannot be offloaded while recompute_modules holds moe (the whole MoE block is "
            "recomputed; Megatron-Core refuses both): drop one"
        )
    return None

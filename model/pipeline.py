"""Pipeline parallelism: stage partitioning and schedule time.

Schedules: 1F1B (PipeDream-Flush; Narayanan et al. 2021) and Megatron's interleaved 1F1B with
v model chunks per stage (Narayanan et al. SC'21, Sec. 2.2.2), whose bubble is (p-1)/v of one
stage's forward+backward time per micro-batch.
"""

from __future__ import annotations

import math

from .choices import Recompute
from .errors import ProblemError
from .goodput import BASIS_POINTS
from .ops import FloatOps, Rounding


def default_edge_stage_layers(layers: int, pp: int) -> tuple[int, int]:
    """Layers on the first and last stage when the problem does not fix them.

    An even split when pp divides the layer count; otherwise the middle stages take ceil(L/p)
    layers and the first and last share the rest, as Megatron-Bridge does for Llama 3.1 405B
    (126 layers on 8 stages: 15, 16 x 6, 15; --decoder-first/last-pipeline-num-layers).
    """
    if pp == 1:
        return layers, layers
    if layers % pp == 0:
        return layers // pp, layers // pp
    base = math.ceil(layers / pp)
    rest = layers - base * (pp - 2)
    if rest < 2:  # too few layers left for the edges (e.g. 80 on 32 stages): floor instead
        base = layers // pp
        rest = layers - base * (pp - 2)
    last = rest // 2
    return rest - last, last


def split_stages(layers: int, pp: int, first: int, last: int) -> tuple[list[int] | None, str, str]:
    """(stage layer counts, or None with the reason and the field to blame) for explicit edges."""
    if pp == 1:
        if first != layers or last != layers:
            return None, f"with pp 1 the only stage holds all {layers} layers", "mapping.first_stage_layers"
        return [layers], "", ""
    if first < 1 or last < 1:
        return (
            None,
            (
                f"the first and last stage need at least one layer of {layers}; "
                "set mapping.first_stage_layers and last_stage_layers"
            ),
            "mapping.pp",
        )
    middle_total = layers - first - last
    if pp == 2:
        if middle_total != 0:
            return (
                None,
                (f"first_stage_layers {first} + last_stage_layers {last} must equal the {layers} layers with pp 2"),
                "mapping.first_stage_layers",
            )
        return [first, last], "", ""
    if middle_total < pp - 2 or middle_total % (pp - 2):
        return (
            None,
            (
                f"{middle_total} layers left for {pp - 2} middle stages do not split evenly "
                f"(layers {layers}, first {first}, last {last}, pp {pp})"
            ),
            "mapping.pp",
        )
    return [first] + [middle_total // (pp - 2)] * (pp - 2) + [last], "", ""


def last_stage_options(layers: int, pp: int, first: int) -> range:
    """The last-stage layer counts ``split_stages`` accepts after a first stage of ``first`` layers,
    largest first: with pp 2 the rest, with pp >= 3 those leaving each of the pp - 2 middle stages the
    same whole number (at least one) of layers; with pp 1 the whole model."""
    if pp == 1:
        return range(layers, layers - 1, -1) if first == layers else range(0)
    if pp == 2:
        return range(layers - first, layers - first - 1, -1) if 1 <= first < layers else range(0)
    return range(layers - first - (pp - 2), 0, -(pp - 2)) if first >= 1 else range(0)


def stage_layer_counts(layers: int, pp: int, first: int = 0, last: int = 0) -> list[int]:
    """Transformer layers held by each pipeline stage, first to last.

    ``first``/``last`` = 0 take ``default_edge_stage_layers``; the middle stages share the rest
    evenly and it must divide. Raises ProblemError for an impossible split, naming the fields
    that set it.
    """
    if first == 0 and last == 0:
        first, last = default_edge_stage_layers(layers, pp)
    elif first == 0 or last == 0:
        raise ProblemError("give both first_stage_layers and last_stage_layers, or neither", field="mapping")
    counts, reason, field = split_stages(layers, pp, first, last)
    if counts is None:
        raise ProblemError(reason, field=field)
    return counts


def vpp_splits_stage(layers: int, vpp: int, slots: int, uneven: bool = False) -> bool:
    """Whether ``vpp`` model chunks can split a stage of ``layers`` transformer layers.

    Megatron-Core's default rule for the interleaved schedule: equal chunks. ``slots`` are the
    modules besides transformer layers that the stage may count as layers (any number of them, in
    order): the embedding on the
    first stage, the loss and the multi-token-prediction layers on the last
    (--account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split; Megatron-Bridge
    runs Llama 3.1 405B as 15, 16 x 6, 15 layers with vpp 8). With ``uneven`` (an explicit
    --pipeline-model-parallel-layout, as Megatron-Bridge's DeepSeek-V3 recipes set: 61 layers as
    ``Et*3|(t*4|)*14ttL``) the chunks may differ in size; each holds at least one layer or module.
    The pipeline's bubble is then that of the mean chunk (``pipeline_parts``): with chunks as even as
    possible the largest holds at most one layer more."""
    if vpp == 1:
        return True
    even = (layers % vpp == 0 and layers >= vpp) or any((layers + s) % vpp == 0 for s in range(1, slots + 1))
    return even or (uneven and layers >= 1 and layers + slots >= vpp)


def stage_slots(stage: int, pp: int, mtp_layers: int) -> int:
    """Modules besides transformer layers that stage ``stage`` of ``pp`` may count in its chunk split
    (``vpp_splits_stage``): the embedding on the first, the loss and the MTP layers on the last."""
    return (1 if stage == 0 else 0) + (1 + mtp_layers if stage == pp - 1 else 0)


def edge_stage_slots(mtp_layers: int) -> tuple[int, int]:
    """(first, last) stage's ``stage_slots`` when they are two stages (pp > 1)."""
    return stage_slots(0, 2, mtp_layers), stage_slots(1, 2, mtp_layers)


def vpp_divides_stages(stage_layers: list[int], vpp: int, mtp_layers: int = 0, uneven: bool = False) -> bool:
    """Whether ``vpp`` model chunks split every stage (``vpp_splits_stage``)."""
    pp = len(stage_layers)
    return all(vpp_splits_stage(n, vpp, stage_slots(i, pp, mtp_layers), uneven) for i, n in enumerate(stage_layers))


def layers_held(o, pp, first, last, middle):
    """Layers the stages of a pipeline hold, written against ``ops``: the first, the last and the
    pp - 2 middle ones (one stage holds all of them when pp = 1, counted once). A partition is valid
    only where this equals the model's layer count."""
    return o.where(o.equals(pp, 1), first, first + last + o.product(pp - 2, middle))


def pipeline_parts(o, microbatches, slowest, stages_sum, vpp):
    """(busy, bubble) time of ``microbatches`` micro-batches passing forward and backward through the
    pipeline, written against ``ops`` (``o``), seconds.

    ``slowest`` is the slowest stage's forward + backward time for one micro-batch (all its chunks),
    ``stages_sum`` the sum over all stages. The slowest stage works m times (busy); the others' work
    before and after it fills the bubble, cut by v with interleaving: T = m·max + (sum - max)/v. For
    p equal stages this is Megatron's (m + (p-1)/v)·t (Narayanan SC'21, Sec. 2.2.1 and 2.2.2). The
    slowest is one of the stages, so the bubble is never negative (the max with 0 says so to an
    integer backend, whose rounded stage times could disagree by a unit).
    """
    busy = o.product(microbatches, slowest)
    bubble = o.quotient(o.maximum(0, stages_sum - slowest), vpp, Rounding.DOWN)
    return busy, bubble


def exposed_dp_traffic(o, traffic, window, vpp, pp, first_chunk_extra=0):
    """Seconds of one step's data-parallel traffic (``traffic``: the gradients' reduction, or the weights' gather)
    that the step exposes when Megatron overlaps it chunk by chunk, written against ``ops`` (``o``).

    ``window`` is the first stage's backward (for the gradients; its forward for the gather) of one micro-batch,
    all its chunks. Without interleaving the reduction starts in the last micro-batch's backward, bucket by bucket
    (--overlap-grad-reduce) and hides behind it: max(0, R - b). With v chunks per rank each chunk reduces its own
    1/v of the gradients as soon as its last micro-batch's backward is done (Megatron-Core's
    forward_backward_pipelining_with_interleaving, backward_step_helper_postprocess: grad_sync_func of the chunk
    whose last micro-batch it was; forward_step_helper_preprocess: param_sync_func of the next chunk, in
    megatron/core/pipeline_parallel/schedules.py), and chunk c's is
    done c·p chunk-steps of b/v before the first chunk's (the cooldown runs the chunks' last p micro-batches in turn:
    Narayanan et al., SC'21, Sec. 2.2.2). One link takes the chunks' reductions in turn, so the last ends at
    max over c of (c+1)·R/v - (c·p + 1)·b/v after the backward: max(0, (R - b)/v, R - ((v-1)·p + 1)·b/v), which is
    max(0, R - b) at v = 1. The gather mirrors it over the warm-up's forwards (--overlap-param-gather: chunk c's
    weights are first needed c·p chunk-steps after the first chunk's). The chunks share the traffic equally but for
    ``first_chunk_extra`` (E, of ``traffic``: the input embedding's), which the first chunk, the last to reduce
    and the first to gather, carries besides: the last chunk's term becomes (R - E - b)/v + E."""
    steps = o.product(vpp - 1, pp) + 1  # chunk-steps of the cooldown the reductions start within
    # max(0, (R - E - b)/v + E), over one denominator so that the quotient never takes a negative numerator
    last_chunk = o.quotient(o.maximum(0, traffic + o.product(vpp - 1, first_chunk_extra) - window), vpp, Rounding.DOWN)
    beyond = o.quotient(o.maximum(0, o.product(vpp, traffic) - o.product(steps, window)), vpp, Rounding.DOWN)
    return o.maximum(last_chunk, beyond)


# Computation slows while a collective runs beside it: the collective's kernels hold SMs and share the memory
# system. Over GPT and Llama training layers overlapped with their collectives on four GPUs (A100, H100, MI250,
# MI210), the computation ran 18.9 % slower on average than with no communication beside it, 40.0 % at most
# (Lee et al., "Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning",
# arXiv 2507.03114, abstract). sigma, dimensionless.
OVERLAP_COMPUTE_SLOWDOWN = 0.189
# what a collective of A seconds overlapped with computation adds at least: A·sigma/(1 + sigma), in basis points of A
OVERLAP_CONTENTION_BP = round(BASIS_POINTS * OVERLAP_COMPUTE_SLOWDOWN / (1.0 + OVERLAP_COMPUTE_SLOWDOWN))


def contended_exposure(o, exposed, traffic):
    """Seconds that data-parallel traffic of ``traffic`` seconds adds to the step when it runs beside computation that
    hides all but ``exposed`` of it (``exposed_dp_traffic``; ZeRO-3's max(0, A - C)), written against ``ops`` (``o``).
    The computation beside it runs at 1/(1 + sigma) of its rate (``OVERLAP_COMPUTE_SLOWDOWN``): C of computation with
    A of traffic takes max(A, C + A·sigma/(1 + sigma)), so the traffic adds max(A - C, A·sigma/(1 + sigma)), the more
    so the more of the computation it overlaps: max(exposed, A·sigma/(1 + sigma)). Traffic that runs after the
    computation (no overlap) is charged in full elsewhere and slows nothing."""
    return o.maximum(exposed, o.quotient(o.product(traffic, OVERLAP_CONTENTION_BP), BASIS_POINTS, Rounding.DOWN))


def zero3_microbatch_exposure(o, gather, grads, fwd, bwd, gather_after_gradients: bool):
    """Seconds ZeRO-3's traffic adds to one micro-batch of a stage, written against ``ops`` (``o``): its weights
    gathered (``gather`` seconds) in the forward pass under the forward computation ``fwd``, and in the backward
    pass again with the gradients reduce-scattered (``grads``) beside the backward computation ``bwd``, each
    overlapped part slowing the computation beside it (``contended_exposure``). When the backward pass gathers
    the next block only after the current block's gradients (``gather_after_gradients``: FSDP's BACKWARD_POST,
    ``choices.BackwardPrefetch``), the next block's computation waits for its gather, and only the reduce-scatters run
    under computation (PyTorch's BackwardPrefetch documentation: "this overlaps the current reduce-scatter and the
    next gradient computation"). FSDP issues that gather and the current block's reduce-scatter together (its
    post-backward hook prefetches, then reduces, on two streams), so the gather shares the link with the
    reduce-scatter while both run [assumption: an equal share]: it ends after its own time plus as much of the
    reduce-scatter's, min(gather, grads), and what is left of the reduce-scatter runs under the next block."""
    forward = contended_exposure(o, o.maximum(0, gather - fwd), gather)
    if gather_after_gradients:
        shared = o.minimum(gather, grads)
        return forward + gather + shared + contended_exposure(o, o.maximum(0, grads - shared - bwd), grads - shared)
    return forward + contended_exposure(o, o.maximum(0, gather + grads - bwd), gather + grads)


def dualpipe_problem(pp: int, vpp: int, microbatches: int) -> str | None:
    """Why DualPipe cannot run this pipeline, or None. Its step splits the micro-batches between the two
    directions and folds the ranks in half: an even pp, an even micro-batch count of at least 2·pp
    (deepseek-ai/DualPipe dualpipe/dualpipe.py, DualPipe.step's asserts, at 030ce432), and no interleaving
    (each rank's two chunks are its stages of the two directions)."""
    if pp < 2 or pp % 2:
        return f"DualPipe needs an even pp of at least 2, got pp {pp}"
    if vpp > 1:
        return f"DualPipe runs two chunks per rank of its own (the two directions), not vpp {vpp}"
    if microbatches % 2 or microbatches < 2 * pp:
        return f"DualPipe needs an even number of micro-batches per step, at least 2·pp = {2 * pp}; got {microbatches}"
    return None


def a2a_overlap_problem(pp: int, vpp: int, dualpipe: bool, recompute: str, recompute_modules, mtp_layers: int) -> str | None:
    """Why the expert all-to-all cannot be overlapped with another micro-batch's compute here, or None.
    The overlap merges one micro-batch's forward with another's backward, layer by layer: DualPipe does so
    in its own schedule, Megatron-Core in its 1F1B without a pipeline or in the interleaved one, never in
    the plain 1F1B of pp > 1 stages, and not beside full recomputation, a recomputed MoE block or more than
    one MTP layer (TransformerConfig.__post_init__'s asserts for overlap_moe_expert_parallel_comm,
    NVIDIA/Megatron-LM core_v0.15.3 and main; the MoE block's since main)."""
    if pp > 1 and vpp == 1 and not dualpipe:
        return f"the all-to-all overlap needs the interleaved schedule (vpp > 1) or DualPipe at pp {pp}"
    if recompute == Recompute.FULL:
        return "the all-to-all overlap cannot run beside full recomputation (Megatron-Core asserts)"
    if recompute == Recompute.SELECTIVE and "moe" in recompute_modules:
        return "the all-to-all overlap cannot run while the MoE block is recomputed (recompute_modules moe)"
    if mtp_layers > 1:
        return f"the all-to-all overlap runs with at most one MTP layer, got {mtp_layers}"
    return None


def dualpipe_bubble_share(recompute: str) -> float:
    """DualPipe's bubble per (p/2 - 1) stages, as a share of the mean stage's F + B, dimensionless:
    Table 2's (F&B + B - 3W) with F&B = F + B (the overlap of a forward and a backward chunk hides
    communication, not compute) and W = F (a backward's weight gradients are half its GEMMs, which
    are twice the forward's: Narayanan et al. SC'21), i.e. (F + 2B - 3W) / (F + B). Without
    recomputation B = 2F: 2/3. Under full recomputation the backward redoes the forward first,
    B = 3F: 1, half as much again. Selective recomputation redoes a few cheap modules: taken as none."""
    backward = 3.0 if recompute == Recompute.FULL else 2.0  # B in units of F; W = F
    return (1.0 + 2.0 * backward - 3.0) / (1.0 + backward)


def dualpipe_parts(o, microbatches, edge_pair, middle, stages_sum, pp, bubble_share_bp):
    """(busy, bubble) time of DualPipe (DeepSeek-V3, arXiv 2412.19437 Sec. 3.2.1 and Table 2), written
    against ``ops``, seconds. Rank i holds stage i of the forward direction and stage p-1-i of the reverse,
    and runs half the micro-batches through each: its work is m times the mean of its two stages, so
    the ranks holding the first and the last stage work m·``edge_pair`` ((first + last) / 2) and the
    others m·``middle``. The bubble is (p/2 - 1)(F&B + B - 3W) (Table 2): (p/2 - 1) mean stages
    (``stages_sum`` / p) times ``dualpipe_bubble_share``, carried in basis points (``bubble_share_bp``),
    i.e. (p - 2)·stages_sum·share / (2p)."""
    busy = o.product(microbatches, o.maximum(edge_pair, middle))
    stages = o.quotient(o.product(pp - 2, stages_sum), 2 * pp, Rounding.DOWN)
    bubble = o.quotient(o.product(stages, bubble_share_bp), BASIS_POINTS, Rounding.DOWN)
    return busy, bubble


def pipeline_time_s(stage_times_s: list[float], microbatches: int, vpp: int) -> float:
    """``pipeline_parts`` on plain numbers: the pipeline's time for per-stage times, seconds."""
    busy, bubble = pipeline_parts(FloatOps(None, {}), microbatches, max(stage_times_s), sum(stage_times_s), vpp)
    return busy + bubble


def warmup_passes(stage: int, pp: int, microbatches: int, vpp: int) -> int:
    """Forward passes stage ``stage`` of ``pp`` runs before its first backward, as many backwards ending it
    (the flush): pp - stage - 1 in 1F1B, 2(pp - stage - 1) + (vpp - 1)·pp chunks interleaved, at most all of
    them (megatron/core/pipeline_parallel/schedules.py, get_pp_rank_microbatches)."""
    total = microbatches * vpp
    return min(pp - stage - 1 if vpp == 1 else 2 * (pp - stage - 1) + (vpp - 1) * pp, total)


def schedule_order(stage: int, pp: int, microbatches: int, vpp: int) -> list[tuple[str, int, int]]:
    """The order in which stage ``stage`` of ``pp`` runs its passes, as (``"F"`` or ``"B"``,
    micro-batch, model chunk): Megatron-Core's 1F1B (``vpp`` = 1; warm-up of pp - stage - 1
    forwards) and interleaved 1F1B (warm-up of 2(pp - stage - 1) + (vpp - 1)·pp forwards; micro-
    batches in groups of pp through chunks 0..vpp-1 forward, vpp-1..0 backward), then one forward
    and one backward in turn, then the remaining backwards (megatron/core/pipeline_parallel/
    schedules.py, forward_backward_pipelining_with/without_interleaving; Narayanan et al. SC'21)."""
    groups = [range(g, min(g + pp, microbatches)) for g in range(0, microbatches, pp)]
    fwd = [(mb, c) for grp in groups for c in range(vpp) for mb in grp]
    bwd = [(mb, c) for grp in groups for c in reversed(range(vpp)) for mb in grp]
    total = len(fwd)
    warm = warmup_passes(stage, pp, microbatches, vpp)
    order = [("F", *fwd[k]) for k in range(warm)]
    for k in range(total - warm):
        order += [("F", *fwd[warm + k]), ("B", *bwd[k])]
    return order + [("B", *bwd[k]) for k in range(total - warm, total)]


def pipeline_schedule(
    fwd_s: list[float],
    bwd_s: list[float],
    microbatches: int,
    vpp: int = 1,
    transfer_s: float = 0.0,
    overlapped: bool = False,
    overlapped_warmup_flush: bool = False,
) -> list[tuple]:
    """The 1F1B / interleaved schedule played out: (stage, "F"/"B", micro-batch, chunk, start s,
    end s) of every pass, each stage running ``schedule_order`` and a pass starting when its stage is
    free and its input is ready (a forward: the previous stage's forward of the same chunk, or the
    last stage's forward of the previous chunk; a backward: the next stage's backward, or the first
    stage's backward of the next chunk, or the last chunk's forward on the last stage). ``fwd_s`` /
    ``bwd_s``: each stage's forward / backward time per micro-batch over all its chunks (a chunk
    takes 1/vpp of it). With equal stages the last pass ends at (m + (p-1)/v)·(f + b) for v = 1 as
    ``pipeline_time_s`` says; the idle time is the bubble.

    ``transfer_s``: one boundary activation (or its gradient) passing to the neighbouring stage. Sent
    synchronously (Megatron-Core's 1F1B, and the interleaved schedule with --no-overlap-p2p-communication)
    the sender waits for it after each pass that sends, as ``compose`` charges it (vpp sends each way per
    micro-batch in every stage's time). ``overlapped`` (the interleaved schedule's overlap_p2p_comm, on in
    Megatron-LM unless --no-overlap-p2p-communication) posts the steady state's sends and receives beside the
    next pass, waited for before the pass that reads them, so they delay only that pass; the warm-up's forwards
    and the flush's backwards still send synchronously unless ``overlapped_warmup_flush``
    (--overlap-p2p-communication-warmup-flush; megatron/core/pipeline_parallel/schedules.py). The report's Gantt
    plays the model's sends out synchronously (``html_report.schedule_svg``); no composition overlaps them
    (``benchmarks/pipeline_overlap.py`` compares the schedules: docs/accuracy.md, a trial not adopted)."""
    pp = len(fwd_s)
    orders = [schedule_order(s, pp, microbatches, vpp) for s in range(pp)]
    done, free, nxt, out = {}, [0.0] * pp, [0] * pp, []

    def ready(s, kind, mb, c):
        if kind == "F":
            dep = ("F", s - 1, mb, c) if s > 0 else (("F", pp - 1, mb, c - 1) if c > 0 else None)
        elif s < pp - 1:
            dep = ("B", s + 1, mb, c)
        else:
            dep = ("B", 0, mb, c + 1) if c < vpp - 1 else ("F", pp - 1, mb, vpp - 1)
        if dep is None:
            return 0.0
        at = done.get(dep)
        crosses = dep[1] != s  # the last stage's own last forward feeds its first backward without a send
        return at + transfer_s if at is not None and crosses else at

    def sends(s, kind, c):
        """Whether stage s's pass sends its output to another stage."""
        if kind == "F":
            return s < pp - 1 or c < vpp - 1
        return s > 0 or c > 0

    def hidden(s, k):
        """Whether stage s's k-th pass sends beside its next pass (the interleaved schedule only): in the steady
        state when overlapped, in the warm-up and the flush too when those are."""
        if not overlapped or vpp == 1:
            return False
        warm = 0 if overlapped_warmup_flush else warmup_passes(s, pp, microbatches, vpp)
        return warm <= k < len(orders[s]) - warm

    while any(nxt[s] < len(orders[s]) for s in range(pp)):
        moved = False
        for s in range(pp):
            while nxt[s] < len(orders[s]):
                kind, mb, c = orders[s][nxt[s]]
                at = ready(s, kind, mb, c)
                if at is None:
                    break
                start = max(free[s], at)
                end = start + (fwd_s[s] if kind == "F" else bwd_s[s]) / vpp
                done[(kind, s, mb, c)] = end
                free[s] = end if hidden(s, nxt[s]) or not sends(s, kind, c) else end + transfer_s
                out.append((s, kind, mb, c, start, end))
                nxt[s] += 1
                moved = True
        if not moved:
            raise ValueError(f"the schedule of {microbatches} micro-batches on {pp} stages with vpp {vpp} does not run")
    return out

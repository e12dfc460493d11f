"""Megatron-Core's pipeline layout (``--pipeline-model-parallel-layout``): what each model chunk of each
pipeline rank holds, written as a string.

Grammar (megatron/core/transformer/pipeline_parallel_layer_layout.py, ``parse_str_to_list`` and
``validate_layer_layout``): ``|`` separates the pp x vpp chunks in model order (chunk c is virtual stage
c // pp of rank c % pp); within a chunk ``E`` is the embedding, ``t`` a transformer layer, ``m`` a
multi-token-prediction layer and ``L`` the loss; ``X*n`` repeats one item and ``(...)*n`` a group;
commas are cosmetic. The embedding comes first and the loss last, each once; the MTP layers follow
every transformer layer, all in one rank's last chunk. DeepSeek-V3's MLPerf Training v6.0 configs run
61 layers on pp 4 as ``Et*4|(t*4|)*14tmL``.

The model holds a stage partition as first, middle and last stage layers (``pipeline.stage_layer_counts``),
with the MTP layers on the last stage: a layout the model cannot hold is refused, naming why.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from .errors import ProblemError

FIELD = "mapping.pipeline_layout"
ITEMS = {"E": "the embedding", "t": "a transformer layer", "m": "an MTP layer", "L": "the loss"}
GROUP = re.compile(r"\(([^)]+)\)\*(\d+)")  # (...)*n, unrolled first, as Megatron-Core does
REPEAT = re.compile(r"(.)\*(\d+)")  # X*n


class PipelineLayout(NamedTuple):
    """What a layout places, in the model's terms."""

    vpp: int  # model chunks per rank
    stage_layers: tuple  # transformer layers per rank, first to last
    uneven: bool  # some rank's chunks differ in size (mapping.uneven_chunks)
    mtp_layers: int


def unrolled_chunks(text: str) -> list[str]:
    """The layout's chunks in model order, repetitions unrolled (``parse_str_to_list``)."""
    if not isinstance(text, str) or not text.strip():
        raise ProblemError(f"must be a layout string such as 'Et*4|(t*4|)*14tmL'; items: {', '.join(ITEMS)}", field=FIELD)
    flat = text.replace(",", "").replace(" ", "")
    for pattern in (GROUP, REPEAT):
        flat = pattern.sub(lambda match: match.group(1) * int(match.group(2)), flat)
    bad = sorted(set(flat) - set(ITEMS) - {"|"})
    if bad:
        raise ProblemError(
            f"{''.join(bad)!r} is no layout item; allowed: "
            + ", ".join(f"{k} ({v})" for k, v in ITEMS.items())
            + ", | between chunks",
            field=FIELD,
        )
    return flat.split("|")


def parse_pipeline_layout(text: str, pp: int) -> PipelineLayout:
    """The ranks' layers, chunks per rank and MTP layers of a layout on ``pp`` ranks; ProblemError
    (``mapping.pipeline_layout``) for one Megatron-Core would reject or the model cannot hold."""
    chunks = unrolled_chunks(text)
    if len(chunks) % pp:
        raise ProblemError(f"has {len(chunks)} chunks, not a multiple of pp {pp}", field=FIELD)
    vpp = len(chunks) // pp
    empty = [c for c, chunk in enumerate(chunks) if not chunk]
    if empty:
        raise ProblemError(f"chunk {empty[0]} is empty (every chunk holds a layer or a module)", field=FIELD)
    flat = "".join(chunks)
    if flat.count("E") != 1 or not flat.startswith("E"):
        raise ProblemError("must begin with the embedding E and hold it once", field=FIELD)
    if flat.count("L") != 1 or not flat.endswith("L"):
        raise ProblemError("must end with the loss L and hold it once", field=FIELD)
    mtp = flat.count("m")
    if mtp and ("t" in flat[flat.index("m") :] or chunks[-1].count("m") != mtp):
        raise ProblemError(
            "places MTP layers the model cannot hold: they follow every transformer layer, all in the last rank's last chunk",
            field=FIELD,
        )
    per_rank = [[chunks[v * pp + r] for v in range(vpp)] for r in range(pp)]
    return PipelineLayout(
        vpp=vpp,
        stage_layers=tuple(sum(chunk.count("t") for chunk in rank) for rank in per_rank),
        uneven=any(len({len(chunk) for chunk in rank}) > 1 for rank in per_rank),
        mtp_layers=mtp,
    )

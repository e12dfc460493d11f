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
GROUP = re.compile(r"\(([^)]+)\)\*(\d{1,9})")  # (...)*n, unrolled first, as Megatron-Core does
REPEAT = re.compile(r"(.)\*(\d{1,9})")  # X*n
MAX_ITEMS = 100_000  # items a layout may unroll to: far above any model's layers and chunks
MAX_CHARS = 10_000  # characters of the layout as written


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
    if len(text) > MAX_CHARS:
        raise ProblemError(f"is {len(text):,} characters long, more than {MAX_CHARS:,}", field=FIELD)
    flat = text.replace(",", "")  # commas are cosmetic; a space is refused, as Megatron-Core refuses it
    for pattern in (GROUP, REPEAT):
        flat = _unrolled(pattern, flat)
    bad = sorted(set(flat) - set(ITEMS) - {"|"})
    if bad:
        raise ProblemError(
            f"{''.join(bad)!r} is no layout item; allowed: "
            + ", ".join(f"{k} ({v})" for k, v in ITEMS.items())
            + ", | between chunks",
            field=FIELD,
        )
    return flat.split("|")


def _unrolled(pattern: re.Pattern, text: str) -> str:
    """``text`` with every repetition ``pattern`` finds written out, refused before the whole would grow
    past ``MAX_ITEMS`` (a layout of any real model is a few hundred items)."""
    parts, at, size = [], 0, len(text)
    for match in pattern.finditer(text):
        body, times = match.group(1), int(match.group(2))
        size += len(body) * times - len(match.group(0))
        if size > MAX_ITEMS:
            raise ProblemError(f"unrolls to more than {MAX_ITEMS:,} items", field=FIELD)
        parts += [text[at : match.start()], body * times]
        at = match.end()
    return "".join(parts) + text[at:]


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

"""NCCL channels: the thread blocks a collective runs on, and the floor a run's cap on them puts under its time.

NCCL splits a collective over channels, one thread block (CTA) each, and rates a channel by its topology search
(src/graph/search.cc, ``ncclTopoCompute`` and ``ncclTopoDupChannels``; NCCL 2.2x): on an NVSwitch system it fits as
many rings as the GPU's NVLink bandwidth holds at the fastest speed of its table, then doubles them at half the
rate. H100: 18 NVLink4 links rated 20.6 GB/s (``SM90_NVLINK_BW``), 370.8 GB/s, 6 rings at 60 GB/s, then 12 channels
at 30 GB/s. Blackwell: 18 NVLink5 links at 40.1 GB/s (``SM100_NVLINK_BW``), 721.8 GB/s, 8 rings at 90 GB/s, then 16
at 45 GB/s. A100: 12 links at 20 GB/s, 6 rings at 40 GB/s, then 12 at 20 GB/s. Each device file gives its rate as
``nccl_channel_bytes_per_s``.

A run may cap the thread blocks of a communicator (Megatron-Core's --nccl-communicator-config-path, ``max_ctas`` per
process group; the workload's ``nccl_max_ctas``). NVIDIA's MLPerf Training submissions do this: 8 for the
data-parallel and tensor-parallel groups, 1 for the context-parallel group and 2 for the pipeline
(``conf/nccl/custom_communicator_cta.yaml``). The communicator then has at most that many channels, each at its rate.
That is a floor under the collective: the bytes one GPU sends over channels x rate. A point-to-point exchange, in
which every rank sends and receives at once (ring attention's K/V step, a pipeline stage's send-and-receive), runs
both on the same channels: NCCL's send/receive kernel splits a block's warps between its send and its receive
(src/device/sendrecv.h, nSendWarpPerWork and nRecvWarpPerWork), and unbatched the two run one after the other, so
each direction moves at half the channels' rate.
[assumption: a channel moves what NCCL's search rates it at. No measurement of a capped communicator is at hand. A
channel that crosses the scale-out network is held to the same rate.]
"""

from __future__ import annotations

from .errors import ProblemError
from .specs import CommunicatorCtas, DeviceSpec

# the communicators a run may cap (``CommunicatorCtas``), by the parallel group each one carries
CAPPED_GROUPS = ("tp", "cp", "dp", "pp")
MAX_NCCL_CTAS = 64  # channels NCCL allocates at most (MAXCHANNELS, src/include/device.h)


def search_channel_rate(nvlink_bytes_per_s: float, speeds: tuple, compute_capability: int, max_channels: int) -> float:
    """The rate NCCL's topology search gives each ring channel on an NVSwitch system, bytes/s, from the GPU's
    NVLink bandwidth as NCCL counts it (links x its per-link rate, topo.h ``SMxx_NVLINK_BW``) and its speed table
    for the GPU's generation (search.cc ``speedArrayIntra``, ``sm90SpeedArrayIntra``, ``sm100SpeedArrayIntra``;
    ``speeds`` in bytes/s, fastest first). Pass 1 takes the fastest speed the links carry and as many rings as fit
    (at most ``max_channels``). ``ncclTopoDupChannels`` then doubles them at half the speed, unless the speed is
    under 25 GB/s, or under 50 GB/s with more than 4 rings past compute capability 8.0. Pass 2 raises the speed
    through the table while that many channels still fit."""
    gb = 1e9
    speed = next((s for s in speeds if s <= nvlink_bytes_per_s), speeds[-1])
    channels = max(1, min(int(nvlink_bytes_per_s // speed), max_channels))
    if not (speed < 25 * gb or (compute_capability > 80 and speed < 50 * gb and channels > 4)):
        doubled = min(2 * channels, max_channels)
        speed, channels = speed / -(-doubled // channels), doubled
    for faster in sorted(s for s in speeds if s > speed):
        if channels * faster > nvlink_bytes_per_s:
            break
        speed = faster
    return speed


def sent_bytes(op: str, nbytes: float, ranks: int) -> float:
    """Bytes one GPU sends in ``op`` over ``ranks`` ranks, for a buffer of ``nbytes`` as nccl-tests counts it. A
    ring all-reduce sends 2(n-1)/n of it. A reduce-scatter, an all-gather and an all-to-all send (n-1)/n. A
    point-to-point transfer sends all of it."""
    if op == "p2p":
        return nbytes
    share = (ranks - 1) / ranks
    return 2.0 * share * nbytes if op == "allreduce" else share * nbytes


def channel_floor_s(op: str, nbytes: float, ranks: int, ctas: int | None, device: DeviceSpec) -> float:
    """The least time ``op`` on ``nbytes`` over ``ranks`` ranks takes on at most ``ctas`` channels, seconds:
    ``sent_bytes`` / (ctas x ``device.nccl_channel_bytes_per_s``), half that rate for a point-to-point exchange (p2p:
    the module docstring). 0 without a cap (None)."""
    if ctas is None or ranks <= 1 or nbytes <= 0:
        return 0.0
    if device.nccl_channel_bytes_per_s <= 0 or ctas < 1:
        reason = _no_rate(device) if ctas >= 1 else f"a communicator needs at least one thread block, got {ctas}"
        raise ProblemError(reason, field="workload.nccl_max_ctas")
    rate = ctas * device.nccl_channel_bytes_per_s
    if op == "p2p":  # an exchange: each channel's block sends and receives, half its warps each way
        rate /= 2.0
    return sent_bytes(op, nbytes, ranks) / rate


def cta_caps_problem(device: DeviceSpec, caps: CommunicatorCtas) -> str | None:
    """Why ``caps`` cannot be timed on ``device``, or None when it can: a capped communicator needs the device
    file's ``nccl_channel_bytes_per_s``."""
    return _no_rate(device) if caps.any() and device.nccl_channel_bytes_per_s <= 0 else None


def _no_rate(device: DeviceSpec) -> str:
    return f"device {device.name} gives no nccl_channel_bytes_per_s, so capped NCCL communicators cannot be timed on it"

"""Sliding-window (local) attention layers (issue 13): GPT-OSS alternates 128-token windows with full
attention. Flash attention skips the blocks outside the window, a decoding query reads only the
window's cache, and the cache of a local layer holds only the window."""

import dataclasses

import pytest

from parasol.model import compute, kv_cache
from parasol.model.errors import ProblemError
from parasol.solver import library
from parasol.solver.library import model_from_dict


@pytest.fixture(scope="module")
def gpt_oss():
    return library.load_model("gpt-oss-120b")


def test_the_attended_share_counts_the_query_key_pairs(gpt_oss):
    s, w = 8192, 128
    local = (s * w - w * w / 2) / (s * s / 2)  # each query past the first w attends w keys
    assert gpt_oss.attended_share(s) == pytest.approx(0.5 + 0.5 * local)
    assert gpt_oss.attended_share(100) == 1.0  # shorter than the window: every layer attends all
    full = dataclasses.replace(gpt_oss, sliding_window=0)
    assert full.attended_share(s) == 1.0 and full.attended_context(s) == s
    assert gpt_oss.attended_context(s) == pytest.approx(0.5 * s + 0.5 * w)


def test_flash_attention_time_falls_with_the_window_and_a_materialised_one_does_not(gpt_oss):
    device = library.load_device("h100-sxm-80gb")
    full = dataclasses.replace(gpt_oss, sliding_window=0)
    args = (device, "flash", 1, 8192, 1, 1)
    ratio = compute.attention_core_forward_time_s(gpt_oss, *args) / compute.attention_core_forward_time_s(full, *args)
    assert ratio == pytest.approx(gpt_oss.attended_share(8192))
    standard = (device, "standard", 1, 8192, 1, 1)
    assert compute.attention_core_forward_time_s(gpt_oss, *standard) == compute.attention_core_forward_time_s(full, *standard)


def test_a_local_layer_caches_only_its_window(gpt_oss):
    full = dataclasses.replace(gpt_oss, sliding_window=0)
    long = kv_cache.kv_bytes_per_sequence(gpt_oss, "bf16", 1, 36, 32_768, 16)
    assert long / kv_cache.kv_bytes_per_sequence(full, "bf16", 1, 36, 32_768, 16) == pytest.approx(0.5 + 0.5 * 144 / 32_768)
    assert kv_cache.kv_bytes_per_sequence(gpt_oss, "bf16", 1, 36, 64, 16) == kv_cache.kv_bytes_per_sequence(
        full, "bf16", 1, 36, 64, 16
    )


@pytest.mark.parametrize(
    ("key", "value"), [("sliding_window", -1), ("sliding_window", 1.5), ("sliding_window_share", 0), ("sliding_window_share", 2)]
)
def test_bad_window_fields_name_the_field(key, value):
    data = {"name": "x", "layers": 2, "hidden": 256, "heads": 4, "ffn": 512, "vocab": 1000, key: value}
    with pytest.raises(ProblemError) as info:
        model_from_dict(data, "m.yaml")
    assert key in str(info.value.field)

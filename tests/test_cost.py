"""Cost model (issue 7, first part): each chiplet and system cost term against hand-computed values,
the Chiplet Actuary trends, chiplet-count scaling, the `parasol cost` contract and bad cost input."""

from __future__ import annotations

import functools
import json
import math
import re
import shutil
from dataclasses import replace

import numpy as np
import pytest
import yaml
from conftest import REPO, rel_close, run_cli, write_yaml

from parasol.model.chiplet_cost import (
    ChipletSpec,
    DieGroup,
    Wafer,
    chip_last_losses_usd,
    device_cost,
    die_nre_usd,
    die_yield,
    dies_per_wafer,
    hbm_stack_cost_usd,
    kgd_cost_usd,
    organic_layer_factor,
    organic_losses_usd,
    raw_die_cost_usd,
    scale_chiplets,
    scale_device,
    split_die_area_mm2,
)
from parasol.model.errors import ProblemError
from parasol.model.system_cost import (
    Prices,
    amortised_usd_per_hour,
    energy_usd_per_hour,
    fat_tree_links,
    fat_tree_switches,
    fat_tree_tiers,
    power_w,
    system_cost,
)
from parasol.solver import cost_library, library
from parasol.solver.cli import main

PARAMS = cost_library.load_cost_parameters()
BARE = Wafer(diameter_mm=300, scribe_lane_mm=0, edge_loss_mm=0, clustering=10)
N5 = PARAMS.nodes["5nm"]


# ------------------------------------------------------------------ die terms, hand-computed


def test_dies_per_wafer_textbook_100mm2():
    # pi 150^2 / 100 - pi 300 / sqrt(200) = 706.858 - 66.643 = 640.215 (no scribe lane, no edge loss)
    assert rel_close(dies_per_wafer(100, BARE), 640.215103, 1e-6)
    # Chiplet Actuary constants: A' = (10 + 0.2)^2 = 104.04; pi 145^2 / 104.04 - pi 290 / sqrt(208.08) = 634.874 - 63.162
    assert rel_close(dies_per_wafer(100, PARAMS.wafer), 571.712434, 1e-6)


def test_dies_per_wafer_too_large_is_an_error():
    with pytest.raises(ProblemError, match="does not fit"):
        dies_per_wafer(20000, PARAMS.wafer)


def test_die_yield_values_and_limits():
    # (1 + 100 x 0.1 / (100 x 10))^-10 = 1.01^-10
    assert rel_close(die_yield(100, 0.1, 10), 0.905286955, 1e-8)
    assert rel_close(die_yield(100, 0.1, 1), 1 / 1.1, 1e-12)  # alpha = 1: Seeds, 1 / (1 + A D0)
    assert abs(die_yield(100, 0.1, 1e7) - math.exp(-0.1)) < 1e-7  # alpha -> infinity: Poisson exp(-A D0)
    assert die_yield(500, 0.0, 10) == 1.0


def test_die_yield_monotone_in_area_and_defect_density():
    areas = np.linspace(10, 850, 50)
    for d0 in (0.05, 0.09, 0.11, 0.2):
        ys = [die_yield(a, d0, 10) for a in areas]
        assert all(a > b for a, b in zip(ys, ys[1:]))
    for area in (50, 300, 814):
        ys = [die_yield(area, d0, 10) for d0 in (0.02, 0.07, 0.11, 0.2, 0.5)]
        assert all(a > b for a, b in zip(ys, ys[1:]))
    # more clustering (smaller alpha) is kinder to large dies
    assert die_yield(800, 0.11, 2) > die_yield(800, 0.11, 10) > die_yield(800, 0.11, 1e6)


def test_raw_and_known_good_die_cost():
    # 5 nm wafer $16,988 / 571.712 dies = $29.714; yield 1.011^-10 = 0.896 -> KGD $33.149
    assert rel_close(raw_die_cost_usd(100, N5, PARAMS.wafer), 29.7142391, 1e-6)
    assert rel_close(kgd_cost_usd(100, N5, PARAMS.wafer, 0.0), 33.1494380, 1e-6)
    # the probe cost is paid for every die tested: (raw + 0.02 x 100) / yield
    assert rel_close(kgd_cost_usd(100, N5, PARAMS.wafer, 0.02), (29.7142391 + 2.0) / 1.011**-10, 1e-6)


def test_kgd_cost_per_mm2_grows_with_area_and_node():
    """Chiplet Actuary's cost-per-area trend: larger dies and newer nodes cost more per good mm2."""
    for name in ("5nm", "7nm", "14nm"):
        per_mm2 = [kgd_cost_usd(a, PARAMS.nodes[name], PARAMS.wafer, 0.0) / a for a in (50, 100, 200, 400, 800)]
        assert all(a < b for a, b in zip(per_mm2, per_mm2[1:])), name
    by_node = [kgd_cost_usd(400, PARAMS.nodes[n], PARAMS.wafer, 0.0) for n in ("55nm", "28nm", "14nm", "7nm", "5nm", "3nm")]
    assert all(a < b for a, b in zip(by_node, by_node[1:]))


def test_die_nre():
    # at the reference area the design NRE is the node NRE: 0.8 x NRE x 300/300 + 0.2 x NRE
    assert rel_close(die_nre_usd(300, N5, PARAMS.nre), 5.42e8, 1e-12)
    # half the area: 0.8 x 5.42e8 / 2 + 0.2 x 5.42e8 = 3.252e8
    assert rel_close(die_nre_usd(150, N5, PARAMS.nre), 3.252e8, 1e-12)


def test_split_die_area():
    assert split_die_area_mm2(800, 1, 0.1) == 800
    assert rel_close(split_die_area_mm2(800, 4, 0.1), 220.0, 1e-12)


# ------------------------------------------------------------------ package terms


def test_chip_last_losses():
    # interposer $100, substrate $50, chips $1,000; y1 0.5, y2 0.9, y3 0.99
    defect, wasted = chip_last_losses_usd(100, 50, 1000, 0.5, 0.9, 0.99)
    assert rel_close(defect, 100 * (1 / (0.5 * 0.9 * 0.99) - 1) + 50 * (1 / 0.99 - 1), 1e-12)
    assert rel_close(defect, 124.9719416, 1e-8) and rel_close(wasted, 122.3344557, 1e-8)
    assert chip_last_losses_usd(100, 50, 1000, 1.0, 1.0, 1.0) == (0.0, 0.0)
    defect, wasted = organic_losses_usd(40, 1000, 0.99**2)
    assert rel_close(wasted, 1000 * (1 / 0.9801 - 1), 1e-12) and rel_close(defect, 40 * (1 / 0.9801 - 1), 1e-12)


def test_organic_layer_factor():
    sub = PARAMS.substrate
    assert organic_layer_factor(5000, 1, sub) == 1.0
    assert organic_layer_factor(17**2, 2, sub) == 1.5
    assert organic_layer_factor(30**2, 2, sub) == 1.75
    assert organic_layer_factor(30**2 + 1, 3, sub) == 2.0


def test_hbm_stack_cost():
    assert hbm_stack_cost_usd(PARAMS.hbm["hbm3"], 16) == 250.0  # the legitlads example: 5 stacks $1,250


def _design(area, count, node="5nm", packaging="organic", stacks=0):
    return ChipletSpec(
        compute=DieGroup("compute", split_die_area_mm2(area, count, PARAMS.d2d_area_fraction), node, count),
        hbm_generation="hbm3",
        hbm_stacks=stacks,
        hbm_stack_gb=16,
        packaging=packaging,
    )


def _re_cost(spec):
    c = device_cost(spec, PARAMS)
    return c.kgd_cost_usd + c.packaging_cost_usd


@pytest.mark.parametrize("node,packagings", [("5nm", ("organic", "fanout", "cowos-s")), ("7nm", ("organic", "fanout"))])
def test_chiplet_actuary_trend_large_die_splits_cheaper(node, packagings):
    """Feng & Ma (DAC 2022), RE cost of SoC vs multi-chip: for a large (800 mm2) die on an advanced node,
    2-4 chiplets lower KGD + packaging cost. At 7 nm the silicon interposer eats the saving of a 2-way
    split (its yield on ~1,000 mm2), so only organic and fan-out are asserted there."""
    mono = _re_cost(_design(800, 1, node))
    for k in (2, 3, 4):
        for packaging in packagings:
            assert _re_cost(_design(800, k, node, packaging)) < mono, (k, packaging)


@pytest.mark.parametrize("node", ["5nm", "7nm", "14nm"])
def test_chiplet_actuary_trend_small_die_does_not_split(node):
    mono = _re_cost(_design(100, 1, node))
    for k in (2, 3, 4):
        for packaging in ("organic", "fanout", "cowos-s"):
            assert _re_cost(_design(100, k, node, packaging)) > mono, (k, packaging)


def test_device_cost_adds_up():
    c = device_cost(cost_library.load_chiplets(library.load_device("h100-sxm-80gb")), PARAMS)
    assert rel_close(c.manufacturing_cost_usd, c.kgd_cost_usd + c.hbm_cost_usd + c.packaging_cost_usd + c.test_cost_usd, 1e-12)
    assert rel_close(c.device_cost_usd, c.manufacturing_cost_usd + c.nre_share_usd, 1e-12)
    pk = c.packaging
    parts = (
        pk["interposer_usd"]
        + pk["bridges_usd"]
        + pk["substrate_usd"]
        + pk["chip_bumps_usd"]
        + pk["defect_package_usd"]
        + pk["wasted_chips_usd"]
    )
    assert rel_close(parts, c.packaging_cost_usd, 1e-12)
    assert c.hbm_cost_usd == 1250.0 and pk["interposer_mm2"] == 2500
    assert rel_close(pk["bonding_yield"], 0.95**6, 1e-12)  # one die + five HBM stacks bonded


def test_bridges_default_rule_and_override():
    spec = cost_library.load_chiplets(library.load_device("b200"))
    assert device_cost(spec, PARAMS).packaging["bridges"] == 1 + 8  # one die-to-die edge + one per HBM stack
    fewer = device_cost(replace(spec, bridges=2), PARAMS)
    assert fewer.packaging["bridges"] == 2 and fewer.packaging_cost_usd < device_cost(spec, PARAMS).packaging_cost_usd


# ------------------------------------------------------------------ chiplet-count scaling


def test_scale_device_h100_two_dies():
    dev = library.load_device("h100-sxm-80gb")
    spec = cost_library.load_chiplets(dev)
    assert scale_device(dev, spec, 1) is dev
    two = scale_device(dev, spec, 2)
    assert two.peak_flops["bf16"] == 2 * dev.peak_flops["bf16"] and two.peak_flops["fp8"] == 2 * dev.peak_flops["fp8"]
    assert two.hbm_bytes == 2 * dev.hbm_bytes and two.hbm_bytes_per_s == 2 * dev.hbm_bytes_per_s and two.tdp_w == 1400
    assert two.gemm_efficiency == dev.gemm_efficiency
    scaled = scale_chiplets(spec, 2, PARAMS.hbm["hbm3"].footprint_mm2)
    assert scaled.hbm_stacks == 10 and scaled.compute.count == 2
    assert rel_close(scaled.interposer_mm2, 2500 * (2 * 814 + 10 * 121) / (814 + 5 * 121), 1e-12)


def test_scale_device_b200_and_mi300x_round_up():
    b200 = library.load_device("b200")
    one = scale_device(b200, cost_library.load_chiplets(b200), 1)
    assert one.peak_flops["fp4"] == b200.peak_flops["fp4"] / 2 and one.hbm_bytes == b200.hbm_bytes / 2
    assert one.sms == b200.sms // 2 == 74  # each die's SMs go with it
    mi = cost_library.load_chiplets(library.load_device("mi300x"))
    three = scale_chiplets(mi, 3, 121)
    assert (three.compute.count, three.io.count, three.hbm_stacks) == (3, 2, 3)  # 4 x 3/8 = 1.5 -> 2 IODs


def test_cost_scales_with_chiplet_count():
    spec = cost_library.load_chiplets(library.load_device("b200"))
    costs = [device_cost(scale_chiplets(spec, k, 121), PARAMS) for k in (1, 2, 3, 4)]
    for a, b in zip(costs, costs[1:]):
        assert b.manufacturing_cost_usd > a.manufacturing_cost_usd and b.hbm_cost_usd > a.hbm_cost_usd
    # logic dies are identical: KGD cost is linear in the count; the package is super-linear (more chips to bond)
    assert rel_close(costs[3].kgd_cost_usd, 4 * costs[0].kgd_cost_usd, 1e-12)
    assert costs[3].packaging_cost_usd > 4 * costs[0].packaging_cost_usd
    # the die design is the same whatever the count: only the package NRE grows
    assert costs[3].dies[0].nre_usd == costs[0].dies[0].nre_usd
    assert (
        costs[3].nre_usd - costs[0].nre_usd == costs[3].packaging["nre_package_usd"] - costs[0].packaging["nre_package_usd"] > 0
    )


def test_scale_rejects_bad_counts():
    spec = cost_library.load_chiplets(library.load_device("b200"))
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ProblemError):
            scale_chiplets(spec, bad, 121)


# ------------------------------------------------------------------ system terms


def test_fat_tree_counts():
    assert [fat_tree_tiers(n, 64) for n in (0, 8, 64, 65, 2048, 2049, 65536, 65537)] == [0, 1, 1, 2, 2, 3, 3, 4]
    assert fat_tree_switches(1024, 64, 2) == 32 + 16  # 32 leaves + 16 spines
    assert fat_tree_switches(64, 64, 1) == 1
    assert fat_tree_switches(2048, 64, 2) == 64 + 32
    assert fat_tree_switches(4096, 64, 3) == 2 * 128 + 64  # (2L - 1) N / k = 5 x 64
    assert fat_tree_links(1024, 2) == 2048
    assert fat_tree_tiers(4096, 8) == 6  # radix 8: 2 x 4^5 = 2,048 < 4,096 <= 2 x 4^6 = 8,192


PRICES = Prices(
    device_usd=28000,
    host_usd_per_node=50000,
    nic_usd_per_gpu=2000,
    switch_usd=13500,
    switch_radix=64,
    link_usd=700,
    host_w_per_node=2000,
    switch_w=1000,
    utilisation=0.8,
    pue=1.58,
    energy_usd_per_kwh=0.0806,
    lifetime_years=4,
)


def test_power_and_hourly_terms():
    # (8 x 700 + 2,000) x 0.8 x 1.58 = 9,606.4 W
    assert rel_close(power_w(8, 700, 1, 0, PRICES), 9606.4, 1e-12)
    assert rel_close(amortised_usd_per_hour(290000, 4), 290000 / 35040, 1e-12)
    assert rel_close(energy_usd_per_hour(9606.4, 0.0806), 0.77427584, 1e-9)


def test_system_cost_one_node_and_a_fat_tree():
    one = system_cost(8, 8, 8, 700, PRICES)
    assert one.capex_usd == 8 * 28000 + 50000 + 8 * 2000 and one.breakdown["switches"] == 0
    assert rel_close(one.cost_per_hour_usd, 290000 / 35040 + 0.77427584, 1e-9)
    big = system_cost(1024, 8, 8, 700, PRICES)
    assert big.breakdown["switches"] == 48 and big.breakdown["links"] == 2048 and big.breakdown["nodes"] == 128
    assert big.capex_usd == 1024 * 28000 + 128 * 50000 + 1024 * 2000 + 48 * 13500 + 2048 * 700
    rented = system_cost(2048, 8, 8, 700, replace(PRICES, gpu_hour_usd=2.0))
    assert rented.cost_per_hour_usd == 4096.0  # DeepSeek-V3's $2 per H800-hour on 2,048 GPUs


def test_node_price_replaces_devices_hosts_and_nics():
    sc = system_cost(16, 8, 8, 400, replace(PRICES, node_usd=199000))
    assert set(sc.breakdown["capex_usd_by_item"]) == {"nodes", "switches", "links"}
    assert sc.breakdown["capex_usd_by_item"]["nodes"] == 2 * 199000


# ------------------------------------------------------------------ library data

NO_PUBLISHED_DIE_DATA = {"tpu-v5p"}  # Google publishes no die area or package bill for TPU v5p


def test_every_device_file_loads_and_has_chiplets():
    for name in library.names("systems/devices"):
        dev = library.load_device(name)
        spec = cost_library.load_chiplets(dev)
        if name in NO_PUBLISHED_DIE_DATA:
            assert spec is None, name
            continue
        assert spec is not None, name
        cost = device_cost(spec, PARAMS)
        assert 1000 < cost.manufacturing_cost_usd < 50000, (name, cost.manufacturing_cost_usd)
        # the chiplet description agrees with the device's memory (raw stack capacity >= usable bytes, within 10 %)
        assert 0.9 <= spec.hbm_stacks * spec.hbm_stack_gb * 1e9 / dev.hbm_bytes <= 1.1, name


def test_every_cost_number_has_a_source_comment():
    """architecture.md: every number in problems/ carries its source in a comment."""
    files = sorted((REPO / "problems" / "cost").glob("*.yaml")) + sorted(
        (REPO / "problems" / "systems" / "devices").glob("*.yaml")
    )
    for path in files:
        lines = path.read_text().splitlines()
        start = next((i for i, line in enumerate(lines) if line.startswith("chiplets:")), None) if "devices" in str(path) else 0
        if path.stem in NO_PUBLISHED_DIE_DATA:
            continue
        assert start is not None, f"{path.name} has no chiplets: section"
        for line in lines[start:]:
            body = line.split("#")[0]
            if re.search(r":\s*[-+0-9.]", body) or re.search(r"\{.*\d", body):
                assert "#" in line, f"{path.name}: no source comment on {line!r}"


# ------------------------------------------------------------------ parasol cost

COST_KEYS = (
    "die_area_mm2",
    "dies_per_wafer",
    "die_yield",
    "kgd_cost_usd",
    "packaging_cost_usd",
    "hbm_cost_usd",
    "nre_share_usd",
    "device_cost_usd",
)


def _cli(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.slow
def test_cost_json_contract_subprocess():
    proc = run_cli(["cost", "--system", "dgx-h100", "--json"])
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout)
    for key in COST_KEYS:
        assert isinstance(doc[key], float) and doc[key] > 0, key
    assert doc["die_area_mm2"] == 814.0 and 0 < doc["die_yield"] < 1
    assert rel_close(
        doc["device_cost_usd"],
        doc["kgd_cost_usd"] + doc["packaging_cost_usd"] + doc["hbm_cost_usd"] + doc["test_cost_usd"] + doc["nre_share_usd"],
        1e-12,
    )
    for key in ("capex_usd", "power_w", "cost_per_hour_usd"):
        assert isinstance(doc["system"][key], float) and doc["system"][key] > 0, key
    assert doc["num_gpus"] == 8 and doc["system_name"] == "dgx-h100"


def test_cost_table(capsys):
    code, out, err = _cli(["cost", "--system", "dgx-b200"], capsys)
    assert code == 0 and err == ""
    for text in (
        "dies per wafer",
        "die yield",
        "KGD cost",
        "packaging",
        "HBM",
        "NRE share",
        "device cost",
        "capex",
        "power",
        "cost per hour",
        "cowos-l",
    ):
        assert text in out, text
    assert "{" not in out


@pytest.mark.parametrize("system", library.names("systems"))
def test_cost_every_library_system(system, capsys):
    code, out, err = _cli(["cost", "--system", system, "--json"], capsys)
    if library.load_system(system, 1).device.name in NO_PUBLISHED_DIE_DATA:  # no die data and no price: one line, exit 2
        assert code == 2 and "chiplets" in err and err.count("\n") == 1
        return
    assert code == 0, err
    doc = json.loads(out)
    assert doc["device_cost_usd"] > doc["manufacturing_cost_usd"] > 0 and doc["system"]["capex_usd"] > 0


def test_cost_options(capsys):
    base = json.loads(_cli(["cost", "--system", "dgx-b200", "--json"], capsys)[1])
    one = json.loads(_cli(["cost", "--system", "dgx-b200", "--json", "--chiplets", "1"], capsys)[1])
    assert one["chiplet_count"] == 1 and one["device"]["peak_flops"]["bf16"] == base["device"]["peak_flops"]["bf16"] / 2
    assert one["device_cost_usd"] < base["device_cost_usd"] and one["device_price_usd"] < base["device_price_usd"]
    assert one["system"]["power_w"] < base["system"]["power_w"]
    big = json.loads(_cli(["cost", "--system", "dgx-h100", "--json", "--num-gpus", "1024"], capsys)[1])
    assert big["system"]["switches"] == 48 and big["system"]["nodes"] == 128
    rent = json.loads(_cli(["cost", "--system", "dgx-h800", "--json", "--num-gpus", "2048", "--gpu-hour-usd", "2"], capsys)[1])
    assert rent["system"]["cost_per_hour_usd"] == 4096.0


def test_cost_system_file_with_cost_section(tmp_path, capsys):
    data = yaml.safe_load((REPO / "problems" / "systems" / "dgx-h100.yaml").read_text())
    data["cost"] = {"device_usd": 20000, "pue": 1.1}
    path = write_yaml(tmp_path / "my-h100.yaml", data)
    doc = json.loads(_cli(["cost", "--system", str(path), "--json"], capsys)[1])
    assert doc["device_price_usd"] == 20000 and doc["system"]["pue"] == 1.1
    assert doc["system"]["capex_usd_by_item"]["devices"] == 8 * 20000


def _one_line_error(code, out, err, *needles):
    assert code == 2 and out == "" and "Traceback" not in err
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("parasol: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.mark.slow
def test_cost_unknown_system_subprocess():
    proc = run_cli(["cost", "--system", "dgx-z900"])
    _one_line_error(
        proc.returncode, proc.stdout, proc.stderr, "parasol: dgx-z900: system: unknown; allowed: ", "dgx-h100", "mi300x"
    )


BAD_SYSTEM_FILES = [
    ("cost-unknown-key", {"cost": {"pue_factor": 1.2}}, "cost.pue_factor"),
    ("cost-pue-below-one", {"cost": {"pue": 0.5}}, "cost.pue"),
    ("cost-utilisation", {"cost": {"utilisation": 1.5}}, "cost.utilisation"),
    ("cost-radix-odd", {"cost": {"switch_radix": 63}}, "cost.switch_radix"),
    ("cost-not-mapping", {"cost": [1, 2]}, "cost"),
    ("device-unknown", {"device": "h900"}, "device"),
    ("device-list", {"device": ["h100-sxm-80gb"]}, "device"),
    ("gpus-per-node-string", {"gpus_per_node": "8"}, "gpus_per_node"),
    ("unknown-top-key", {"gpus": 8}, "gpus"),
    ("straggler-above-one", {"straggler": 1.5}, "straggler"),
    ("straggler-text", {"straggler": "low"}, "straggler"),
]


@pytest.mark.parametrize("cid,change,field", BAD_SYSTEM_FILES, ids=[c[0] for c in BAD_SYSTEM_FILES])
def test_cost_bad_system_file(cid, change, field, tmp_path, capsys):
    data = {**yaml.safe_load((REPO / "problems" / "systems" / "dgx-h100.yaml").read_text()), **change}
    path = write_yaml(tmp_path / f"{cid}.yaml", data)
    _one_line_error(*_cli(["cost", "--system", str(path)], capsys), str(path), f": {field}:")


def test_cost_missing_file(tmp_path, capsys):
    """(bad `parasol cost` arguments are in test_problem_errors.test_bad_command_line_arguments)"""
    _one_line_error(*_cli(["cost", "--system", str(tmp_path / "nope.yaml")], capsys), "not found")


def test_cost_without_chiplet_data(monkeypatch, tmp_path, capsys):
    """A device without chiplets: is priced from the price list (device fields null); with no price
    either, one line naming the device file and `chiplets`, exit 2."""
    from parasol.solver import costing

    monkeypatch.setattr(costing, "load_chiplets", lambda device: None)
    costing._priced_system.cache_clear()
    monkeypatch.setattr(costing, "_priced_system", functools.lru_cache(maxsize=None)(costing._priced_system.__wrapped__))
    code, out, err = _cli(["cost", "--system", "dgx-h100", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["device_cost_usd"] is None and doc["device_price_usd"] == 28000 and doc["system"]["capex_usd"] > 0
    code, out, err = _cli(["cost", "--system", "dgx-h100"], capsys)
    assert code == 0 and "no chiplets: section" in out
    data = yaml.safe_load((REPO / "problems" / "systems" / "dgx-a100.yaml").read_text())  # A100: priced only as a DGX node
    path = write_yaml(tmp_path / "a100-box.yaml", {**data, "name": "a100-box"})
    _one_line_error(*_cli(["cost", "--system", str(path)], capsys), "a100-sxm-80gb.yaml", ": chiplets:")
    _one_line_error(*_cli(["cost", "--system", "dgx-h100", "--chiplets", "2"], capsys), ": chiplets:")


# ------------------------------------------------------------------ bad chiplets: sections and cost files

GOOD_CHIPLETS = {
    "compute": {"area_mm2": 800, "node": "5nm", "count": 2},
    "hbm": {"generation": "hbm3e", "stacks": 8, "stack_gb": 24},
    "packaging": "cowos-l",
}
BAD_CHIPLETS = [
    ({"compute": {"area_mm2": 800, "node": "4nm", "count": 2}}, "chiplets.compute.node", "5nm"),
    ({"compute": {"area_mm2": -1, "node": "5nm", "count": 2}}, "chiplets.compute.area_mm2", None),
    ({"compute": {"area_mm2": 800, "node": "5nm", "count": 0}}, "chiplets.compute.count", None),
    ({"compute": {"area_mm2": 800, "node": "5nm"}}, "chiplets.compute.count", None),
    ({"hbm": {"generation": "hbm4", "stacks": 8, "stack_gb": 24}}, "chiplets.hbm.generation", "hbm3e"),
    ({"hbm": {"generation": "hbm3e", "stacks": 8.5, "stack_gb": 24}}, "chiplets.hbm.stacks", None),
    ({"packaging": "emib"}, "chiplets.packaging", "cowos-s"),
    ({"bridges": -1}, "chiplets.bridges", None),
    ({"dies": 3}, "chiplets.dies", "compute"),
    ({"compute": "800 mm2"}, "chiplets.compute", None),
]


@pytest.mark.parametrize("change,field,allowed", BAD_CHIPLETS, ids=[c[1] + str(i) for i, c in enumerate(BAD_CHIPLETS)])
def test_bad_chiplets_section(change, field, allowed):
    with pytest.raises(ProblemError) as exc:
        cost_library.chiplets_from_dict({**GOOD_CHIPLETS, **change}, "dev.yaml", PARAMS)
    msg = str(exc.value)
    assert msg.startswith(f"dev.yaml: {field}: ") and "\n" not in msg, msg
    if allowed:
        assert allowed in msg, msg
    with pytest.raises(ProblemError, match="chiplets.compute: is required"):
        cost_library.chiplets_from_dict({k: v for k, v in GOOD_CHIPLETS.items() if k != "compute"}, "dev.yaml", PARAMS)


@pytest.fixture
def cost_copy(tmp_path, monkeypatch):
    """A copy of problems/ whose cost files a test may break; the caches are cleared around it."""
    root = tmp_path / "lib"
    shutil.copytree(REPO / "problems", root, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(library, "library_root", lambda: root)
    cost_library.load_cost_parameters.cache_clear()
    cost_library.load_price_list.cache_clear()
    yield root / "cost"
    cost_library.load_cost_parameters.cache_clear()
    cost_library.load_price_list.cache_clear()


@pytest.mark.parametrize(
    "file,old,new,field",
    [
        ("packaging.yaml", "bonding_yield: 0.95 ", "bonding_yield: 1.95 ", "technologies.cowos-s.bonding_yield"),
        ("packaging.yaml", "kind: organic", "kind: flipchip", "technologies.organic.kind"),
        ("process_nodes.yaml", "wafer_cost_usd: 16988", "wafer_cost_usd: lots", "nodes.5nm.wafer_cost_usd"),
        ("memory.yaml", "usd_per_gb: 12.5", "usd_per_gb: -1", "generations.hbm2e.usd_per_gb"),
        ("prices.yaml", "pue: 1.58", "pue: 0.9", "defaults.pue"),
        ("prices.yaml", "  b200: 35000", "  b200: [35000]", "devices.b200"),
    ],
)
def test_bad_cost_files(cost_copy, file, old, new, field, capsys):
    path = cost_copy / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    _one_line_error(*_cli(["cost", "--system", "dgx-b200"], capsys), str(path), f": {field}:")


@pytest.mark.slow
def test_parasol_script_cost_runs():
    proc = run_cli(["cost", "--system", "mi300x", "--json"], entry="script")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["dies"][1]["role"] == "io"

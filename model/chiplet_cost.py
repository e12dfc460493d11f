"""Chiplet and device manufacturing cost, after Chiplet Actuary (Feng & Ma, DAC 2022).

One function per term; every docstring gives the unit and the source. "CA" below is the Chiplet Actuary
repository (Yinxiao-Feng/chiplet-actuary: ``chiplet_actuary/chip.py``, ``package.py``, ``parameter.ini``) as
quoted in ``../shared/reference/hardware_cost_conventions.md`` Sec 11.1. Parameters are data
(``problems/cost/*.yaml``), loaded by ``solver.cost_library`` into the frozen dataclasses below.

Units: lengths in mm, areas in mm², money in USD, defect densities in defects per cm², bytes and bytes/s.
Assembly is chip-last: dies are tested (known-good dies, KGD) and bonded onto a finished interposer; a package
that fails after bonding throws away every KGD and HBM stack on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from .errors import ProblemError
from .specs import DeviceSpec

# ------------------------------------------------------------------ parameters (from problems/cost/*.yaml)


@dataclass(frozen=True)
class Wafer:
    diameter_mm: float
    scribe_lane_mm: float
    edge_loss_mm: float
    clustering: float  # negative-binomial clustering parameter (CA's "critical level") for logic dies


@dataclass(frozen=True)
class ProcessNode:
    name: str
    defect_density_per_cm2: float
    wafer_cost_usd: float
    nre_usd: float  # design + IP + mask set of a reference-area chip, first tapeout included


@dataclass(frozen=True)
class NreRule:
    module_fraction: float  # share of the node NRE that scales with area (module design)
    chip_fraction: float  # share that scales with area (chip integration)
    reference_area_mm2: float  # area the node NRE refers to
    volume_units: float  # default amortisation volume


@dataclass(frozen=True)
class Bridge:
    """A local silicon bridge die embedded in an RDL interposer (CoWoS-L, EMIB-like)."""

    area_mm2: float
    wafer_cost_usd: float
    defect_density_per_cm2: float
    clustering: float
    bonding_yield: float  # embedding yield per bridge


@dataclass(frozen=True)
class PackageTech:
    """One packaging technology: ``organic`` (dies flip-chipped on the substrate) or ``interposer``
    (2.5D: RDL or silicon interposer on a substrate, optionally with bridges)."""

    name: str
    kind: str
    bonding_yield: float  # per chip bonded (dies and HBM stacks)
    chip_bump_usd_per_mm2: float  # bumps on each bonded chip
    nre_usd_per_mm2: float
    nre_fixed_usd: float
    interposer_area_factor: float = 0.0
    interposer_wafer_cost_usd: float = 0.0
    interposer_defect_density_per_cm2: float = 0.0
    interposer_clustering: float = 1.0
    bridge: Bridge | None = None


@dataclass(frozen=True)
class Substrate:
    area_factor: float  # substrate area / die (or interposer) area
    usd_per_mm2: float
    c4_bump_usd_per_mm2: float
    bonding_yield: float  # y3: die on organic, or interposer on substrate
    layer_factors: tuple  # (single die, side <= 17 mm, side <= 30 mm, larger)


@dataclass(frozen=True)
class HbmGeneration:
    name: str
    bytes_per_s_per_stack: float
    bytes_per_stack: float
    usd_per_gb: float
    footprint_mm2: float


@dataclass(frozen=True)
class CostParameters:
    """Everything in problems/cost/{process_nodes,packaging,memory}.yaml."""

    wafer: Wafer
    nodes: dict  # name -> ProcessNode
    nre: NreRule
    substrate: Substrate
    packages: dict  # name -> PackageTech
    hbm: dict  # name -> HbmGeneration
    wafer_probe_usd_per_mm2: float
    final_test_usd: float
    d2d_area_fraction: float


# ------------------------------------------------------------------ a device as chiplets


@dataclass(frozen=True)
class DieGroup:
    """``count`` identical dies of one design."""

    role: str  # "compute" or "io"
    area_mm2: float
    node: str
    count: int


@dataclass(frozen=True)
class ChipletSpec:
    """A package: compute dies (scaled by ``scale_device``), optional I/O or base dies, HBM stacks, packaging."""

    compute: DieGroup
    hbm_generation: str
    hbm_stacks: int
    hbm_stack_gb: float
    packaging: str
    io: DieGroup | None = None
    interposer_mm2: float | None = None  # measured interposer area; None = CA's rule (factor x chip area)
    bridges: int | None = None  # bridge dies (bridge packaging); None = (dies - 1) + HBM stacks
    d2d_bytes_per_s: float | None = None  # die-to-die bandwidth (reported; not used by the time model yet)
    volume_units: float | None = None  # NRE amortisation volume; None = the parameters' default
    source: str | None = field(default=None, compare=False)

    @property
    def dies(self) -> tuple:
        return (self.compute,) if self.io is None else (self.compute, self.io)

    @property
    def chips_bonded(self) -> int:
        """Chips bonded onto the interposer or substrate: every die and HBM stack."""
        return sum(d.count for d in self.dies) + self.hbm_stacks


# ------------------------------------------------------------------ die terms


def dies_per_wafer(area_mm2: float, wafer: Wafer) -> float:
    """Gross dies per wafer (expected count, not floored, as CA's ``N_die_total``):
    N = pi (d/2 - e)^2 / A' - pi (d - 2e) / sqrt(2 A'), with A' = A + 2 s sqrt(A) + s^2 the die plus
    its scribe lane s, d the wafer diameter and e the edge loss (mm). With s = e = 0 this is the textbook
    pi (d/2)^2 / A - pi d / sqrt(2 A) (de Vries, IEEE Trans. Semicond. Manuf. 2005). Unit: dies.
    ProblemError when the area is too large for one to fit."""
    a = area_mm2 + 2 * wafer.scribe_lane_mm * math.sqrt(area_mm2) + wafer.scribe_lane_mm**2
    radius = wafer.diameter_mm / 2 - wafer.edge_loss_mm
    n = math.pi * radius**2 / a - math.pi * 2 * radius / math.sqrt(2 * a)
    if not n >= 1:
        raise ProblemError(
            f"a {area_mm2:,.0f} mm2 die or interposer does not fit on a {wafer.diameter_mm:g} mm wafer "
            f"(formula gives {n:.2f} per wafer)",
            field="area_mm2",
        )
    return n


def die_yield(area_mm2: float, defect_density_per_cm2: float, clustering: float) -> float:
    """Negative-binomial die yield Y = (1 + A D0 / (100 alpha))^(-alpha), A in mm², D0 in defects per cm²
    (so A D0 / 100 is the expected defects per die), alpha the clustering parameter (CA ``die_yield``;
    Stapper 1983). alpha -> infinity gives Poisson exp(-A D0 / 100). Unit: fraction."""
    return (1 + defect_density_per_cm2 * area_mm2 / (100 * clustering)) ** (-clustering)


def raw_die_cost_usd(area_mm2: float, node: ProcessNode, wafer: Wafer) -> float:
    """Wafer cost / gross dies per wafer (CA ``cost_raw_die``). Unit: USD per die."""
    return node.wafer_cost_usd / dies_per_wafer(area_mm2, wafer)


def kgd_cost_usd(area_mm2: float, node: ProcessNode, wafer: Wafer, probe_usd_per_mm2: float) -> float:
    """Known-good-die cost: (raw die + wafer-probe test) / yield — every die is made and probed, only good
    ones ship (CA ``cost_KGD`` = wafer cost / (N Y), plus the probe cost, which CA has not). Unit: USD."""
    return (raw_die_cost_usd(area_mm2, node, wafer) + probe_usd_per_mm2 * area_mm2) / die_yield(
        area_mm2, node.defect_density_per_cm2, wafer.clustering
    )


def die_nre_usd(area_mm2: float, node: ProcessNode, rule: NreRule) -> float:
    """NRE of one die design: (module + chip fractions) x node NRE x A / A_ref + the fixed rest
    (1 - module - chip) x node NRE (CA ``Module.NRE`` + ``Chip.NRE``; design, IP and mask set). Unit: USD."""
    per_area = (rule.module_fraction + rule.chip_fraction) * node.nre_usd / rule.reference_area_mm2
    return per_area * area_mm2 + (1 - rule.module_fraction - rule.chip_fraction) * node.nre_usd


def split_die_area_mm2(area_mm2: float, count: int, d2d_area_fraction: float) -> float:
    """Area of each of ``count`` chiplets cut from a monolithic design of ``area_mm2``: A / k x (1 + D2D
    fraction) for k > 1, A for k = 1 (CA exploration.py adds a D2D PHY of 10 % to each chiplet). Unit: mm²."""
    return area_mm2 if count == 1 else area_mm2 / count * (1 + d2d_area_fraction)


# ------------------------------------------------------------------ package terms


def interposer_area_mm2(chips_area_mm2: float, tech: PackageTech) -> float:
    """Interposer area = factor x area of the chips on it (CA ``interposer_area``: 1.2 fan-out, 1.1 silicon).
    Unit: mm²."""
    return tech.interposer_area_factor * chips_area_mm2


def organic_layer_factor(substrate_mm2: float, chips: int, substrate: Substrate) -> float:
    """Substrate layer-count factor: 1 for a single die; 1.5 / 1.75 / 2 for a substrate of side <= 17,
    <= 30, > 30 mm (CA ``OS.cost_raw_package``). Unit: dimensionless."""
    single, side_17, side_30, larger = substrate.layer_factors
    if chips == 1:
        return single
    return side_17 if substrate_mm2 <= 17**2 else side_30 if substrate_mm2 <= 30**2 else larger


def substrate_cost_usd(substrate_mm2: float, substrate: Substrate, layer_factor: float = 1.0) -> float:
    """Organic substrate: area x $/mm² x layer factor (CA ``cost_substrate``). Unit: USD."""
    return substrate_mm2 * substrate.usd_per_mm2 * layer_factor


def interposer_cost_usd(area_mm2: float, tech: PackageTech, wafer: Wafer, substrate: Substrate) -> float:
    """Raw interposer: interposer wafer / interposers per wafer + C4 bumps to the substrate
    (CA ``cost_interposer``). Unit: USD."""
    return tech.interposer_wafer_cost_usd / dies_per_wafer(area_mm2, wafer) + area_mm2 * substrate.c4_bump_usd_per_mm2


def bridge_cost_usd(bridge: Bridge, wafer: Wafer) -> float:
    """One known-good bridge die: wafer / (dies per wafer x yield) (the KGD formula of CA ``cost_KGD``
    applied to a bridge; bridges are not in CA). Unit: USD."""
    return bridge.wafer_cost_usd / (
        dies_per_wafer(bridge.area_mm2, wafer) * die_yield(bridge.area_mm2, bridge.defect_density_per_cm2, bridge.clustering)
    )


def hbm_stack_cost_usd(generation: HbmGeneration, stack_gb: float) -> float:
    """One HBM stack: capacity x $/GB (hardware_cost_conventions.md Sec 11.3 prices). Unit: USD."""
    return generation.usd_per_gb * stack_gb


def chip_last_losses_usd(
    interposer_usd: float,
    substrate_usd: float,
    chips_usd: float,
    interposer_yield: float,
    bonding_yield: float,
    substrate_yield: float,
) -> tuple[float, float]:
    """Chip-last yield losses of a 2.5D package (CA ``Advanced.cost_RE``, chip_last = 1), with y1 the
    interposer yield, y2 the chip bonding yield (per-chip yield ^ chips), y3 interposer-on-substrate:
    defect package = interposer x (1/(y1 y2 y3) - 1) + substrate x (1/y3 - 1);
    wasted chips = chips x (1/(y2 y3) - 1). Unit: USD, (defect package, wasted chips)."""
    defect_package = interposer_usd * (1 / (interposer_yield * bonding_yield * substrate_yield) - 1) + substrate_usd * (
        1 / substrate_yield - 1
    )
    return defect_package, chips_usd * (1 / (bonding_yield * substrate_yield) - 1)


def organic_losses_usd(substrate_usd: float, chips_usd: float, bonding_yield: float) -> tuple[float, float]:
    """Yield losses of dies flip-chipped on an organic substrate (CA ``OS.cost_RE``), y = per-chip bonding
    yield ^ chips: defect package = substrate x (1/y - 1); wasted chips = chips x (1/y - 1).
    Unit: USD, (defect package, wasted chips)."""
    loss = 1 / bonding_yield - 1
    return substrate_usd * loss, chips_usd * loss


def package_nre_usd(area_mm2: float, tech: PackageTech, layer_factor: float = 1.0) -> float:
    """Package NRE = $/mm² x area (x layer factor for organic) + fixed (CA ``OS.NRE``, ``Advanced.NRE``;
    area = substrate for organic, interposer for 2.5D). Unit: USD."""
    return area_mm2 * tech.nre_usd_per_mm2 * layer_factor + tech.nre_fixed_usd


# ------------------------------------------------------------------ the device


@dataclass(frozen=True)
class DieCost:
    role: str
    node: str
    count: int
    area_mm2: float
    dies_per_wafer: float
    die_yield: float
    kgd_cost_usd: float  # one die
    nre_usd: float  # one design

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class DeviceCost:
    """Per-package cost breakdown; ``manufacturing_cost_usd`` = KGDs + HBM + packaging + final test,
    ``device_cost_usd`` = manufacturing + NRE share."""

    dies: tuple  # DieCost per die group (compute first)
    kgd_cost_usd: float  # all logic dies of the package
    hbm_cost_usd: float
    packaging_cost_usd: float
    test_cost_usd: float  # final (package) test; wafer probe is inside the KGD cost
    nre_usd: float  # dies + package designs
    nre_share_usd: float
    packaging: dict  # breakdown of packaging_cost_usd and the yields

    @property
    def manufacturing_cost_usd(self) -> float:
        return self.kgd_cost_usd + self.hbm_cost_usd + self.packaging_cost_usd + self.test_cost_usd

    @property
    def device_cost_usd(self) -> float:
        return self.manufacturing_cost_usd + self.nre_share_usd


def _lookup(table: dict, name: str, what: str, field_name: str):
    if name not in table:
        raise ProblemError(f"unknown {what} {name!r}; allowed: {', '.join(table)}", field=field_name)
    return table[name]


def die_cost(group: DieGroup, params: CostParameters) -> DieCost:
    """Cost terms of one die design on its node (dies per wafer, yield, KGD cost, NRE)."""
    node = _lookup(params.nodes, group.node, "process node", f"chiplets.{group.role}.node")
    return DieCost(
        role=group.role,
        node=group.node,
        count=group.count,
        area_mm2=group.area_mm2,
        dies_per_wafer=dies_per_wafer(group.area_mm2, params.wafer),
        die_yield=die_yield(group.area_mm2, node.defect_density_per_cm2, params.wafer.clustering),
        kgd_cost_usd=kgd_cost_usd(group.area_mm2, node, params.wafer, params.wafer_probe_usd_per_mm2),
        nre_usd=die_nre_usd(group.area_mm2, node, params.nre),
    )


def device_cost(chiplets: ChipletSpec, params: CostParameters) -> DeviceCost:
    """Manufacturing cost and NRE share of one package (CA ``Package.cost_RE`` and the NRE apportioned over
    the volume, ``utils.system_total_apporitioned_NRE_cost``), plus HBM and test."""
    tech = _lookup(params.packages, chiplets.packaging, "packaging", "chiplets.packaging")
    gen = _lookup(params.hbm, chiplets.hbm_generation, "HBM generation", "chiplets.hbm.generation")
    sub = params.substrate
    dies = tuple(die_cost(g, params) for g in chiplets.dies)
    kgd = sum(d.kgd_cost_usd * d.count for d in dies)
    hbm = chiplets.hbm_stacks * hbm_stack_cost_usd(gen, chiplets.hbm_stack_gb)
    chips_area = chips_area_mm2(chiplets, gen.footprint_mm2)
    bumps = chips_area * tech.chip_bump_usd_per_mm2
    chips = kgd + hbm + bumps  # what a failed bond throws away (CA: raw + defect chips, bumps included)
    bonding = tech.bonding_yield**chiplets.chips_bonded
    out = {"bonding_yield": bonding, "chip_bumps_usd": bumps}
    if tech.kind == "organic":
        substrate_mm2 = sub.area_factor * chips_area
        layer = organic_layer_factor(substrate_mm2, chiplets.chips_bonded, sub)
        substrate = substrate_cost_usd(substrate_mm2, sub, layer)
        defect, wasted = organic_losses_usd(substrate, chips, bonding)
        nre_pkg = package_nre_usd(substrate_mm2, tech, layer)
        out.update(interposer_mm2=0.0, interposer_yield=1.0, interposer_usd=0.0, bridges=0, bridges_usd=0.0)
    else:
        area = chiplets.interposer_mm2 or interposer_area_mm2(chips_area, tech)
        substrate_mm2 = sub.area_factor * area
        interposer = interposer_cost_usd(area, tech, params.wafer, sub)
        y1 = die_yield(area, tech.interposer_defect_density_per_cm2, tech.interposer_clustering)
        n_bridges, bridges = 0, 0.0
        if tech.bridge is not None:
            n_bridges = chiplets.bridges if chiplets.bridges is not None else sum(d.count for d in dies) - 1 + chiplets.hbm_stacks
            bridges = n_bridges * bridge_cost_usd(tech.bridge, params.wafer)
            y1 *= tech.bridge.bonding_yield**n_bridges
            interposer += bridges
        substrate = substrate_cost_usd(substrate_mm2, sub)
        defect, wasted = chip_last_losses_usd(interposer, substrate, chips, y1, bonding, sub.bonding_yield)
        nre_pkg = package_nre_usd(area, tech)
        out.update(
            interposer_mm2=area, interposer_yield=y1, interposer_usd=interposer - bridges, bridges=n_bridges, bridges_usd=bridges
        )
    out.update(substrate_mm2=substrate_mm2, substrate_usd=substrate, defect_package_usd=defect, wasted_chips_usd=wasted)
    packaging = out["interposer_usd"] + out["bridges_usd"] + substrate + bumps + defect + wasted
    nre = sum(d.nre_usd for d in dies) + nre_pkg
    volume = chiplets.volume_units or params.nre.volume_units
    out["nre_package_usd"] = nre_pkg
    return DeviceCost(
        dies=dies,
        kgd_cost_usd=kgd,
        hbm_cost_usd=hbm,
        packaging_cost_usd=packaging,
        test_cost_usd=params.final_test_usd,
        nre_usd=nre,
        nre_share_usd=nre / volume,
        packaging=out,
    )


# ------------------------------------------------------------------ scaling a device with its chiplet count


def _scaled_count(base: int, count: int, base_compute: int) -> int:
    return math.ceil(base * count / base_compute - 1e-9)


def chips_area_mm2(chiplets: ChipletSpec, hbm_footprint_mm2: float) -> float:
    """Area of the chips on the package: dies plus HBM stack footprints. Unit: mm²."""
    return sum(d.area_mm2 * d.count for d in chiplets.dies) + chiplets.hbm_stacks * hbm_footprint_mm2


def scale_chiplets(chiplets: ChipletSpec, count: int, hbm_footprint_mm2: float) -> ChipletSpec:
    """The package with ``count`` compute dies: I/O dies and HBM stacks scale in proportion (rounded up);
    a measured interposer area scales with the chips' area (``chips_area_mm2``); bridges fall back to the
    default rule. The base description is returned unchanged for its own count."""
    base = chiplets.compute.count
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ProblemError(f"must be a positive integer, got {count!r}", field="chiplets")
    if count == base:
        return chiplets
    io = None if chiplets.io is None else replace(chiplets.io, count=_scaled_count(chiplets.io.count, count, base))
    scaled = replace(
        chiplets,
        compute=replace(chiplets.compute, count=count),
        io=io,
        bridges=None,
        hbm_stacks=_scaled_count(chiplets.hbm_stacks, count, base),
    )
    if chiplets.interposer_mm2 is None:
        return scaled
    ratio = chips_area_mm2(scaled, hbm_footprint_mm2) / chips_area_mm2(chiplets, hbm_footprint_mm2)
    return replace(scaled, interposer_mm2=chiplets.interposer_mm2 * ratio)


def scale_device(device: DeviceSpec, chiplets: ChipletSpec, count: int) -> DeviceSpec:
    """The DeviceSpec of the package with ``count`` compute dies: peak FLOP/s, TDP and the SM count
    scale with the compute dies (count / base; assumption: power is dominated by the compute dies), HBM
    capacity and bandwidth with the HBM stacks of ``scale_chiplets``. Efficiency curves are kept. Pure."""
    scaled = scale_chiplets(chiplets, count, 0.0)
    if scaled is chiplets:
        return device
    f = count / chiplets.compute.count
    m = scaled.hbm_stacks / chiplets.hbm_stacks if chiplets.hbm_stacks else 1.0
    return replace(
        device,
        name=f"{device.name}-x{count}",
        peak_flops={k: v * f for k, v in device.peak_flops.items()},
        hbm_bytes=device.hbm_bytes * m,
        hbm_bytes_per_s=device.hbm_bytes_per_s * m,
        tdp_w=device.tdp_w * f,
        sms=round(device.sms * f),
    )

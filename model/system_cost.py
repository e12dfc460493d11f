"""System cost: capital cost, power and hourly cost of a cluster (devices, hosts, NICs, a fat-tree
scale-out network), or a rental price per GPU-hour.

One function per term, unit and source in each docstring. Prices and operating parameters are data
(``problems/cost/prices.yaml`` and a system file's ``cost:`` section), loaded by ``solver.cost_library``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HOURS_PER_YEAR = 8760.0  # 365 days x 24 h


@dataclass(frozen=True)
class Prices:
    """Prices and operating parameters of one system (USD, W)."""

    device_usd: float  # per device (buyer's price, or the modelled device cost)
    host_usd_per_node: float
    nic_usd_per_gpu: float
    switch_usd: float
    switch_radix: int
    link_usd: float  # one cable with its optics
    host_w_per_node: float
    switch_w: float
    utilisation: float  # average power / rated power
    pue: float
    energy_usd_per_kwh: float
    lifetime_years: float
    node_usd: float | None = None  # list price of a whole node (devices, host, NICs); replaces those lines
    gpu_hour_usd: float | None = None  # rental price; replaces the amortised hourly cost


def fat_tree_tiers(endpoints: int, radix: int) -> int:
    """Tiers L of the smallest full-bisection folded-Clos (fat tree) of radix-k switches with at least
    ``endpoints`` ports: the least L >= 1 with 2 (k/2)^L >= endpoints (Al-Fares et al., SIGCOMM 2008:
    a 3-tier k-ary fat tree serves k^3/4 hosts; a single switch serves k). 0 when there are no endpoints.
    Unit: tiers."""
    if endpoints <= 0:
        return 0
    if radix < 4:
        raise ValueError(f"a fat tree needs switches of radix >= 4, got {radix}")  # k/2 = 1 never grows
    tiers = 1
    while 2 * (radix / 2) ** tiers < endpoints:
        tiers += 1
    return tiers


def fat_tree_switches(endpoints: int, radix: int, tiers: int) -> int:
    """Switches of an L-tier full-bisection fat tree for N endpoints: each of the L - 1 lower tiers uses
    half its ports down, ceil(N / (k/2)) switches per tier; the top tier uses all ports down, ceil(N / k)
    switches. Total (L - 1) ceil(2N/k) + ceil(N/k), about (2L - 1) N / k (a 1,024-GPU two-tier NDR tree of
    64-port switches: 32 leaves + 16 spines = 48). Unit: switches."""
    if tiers == 0:
        return 0
    return (tiers - 1) * math.ceil(2 * endpoints / radix) + math.ceil(endpoints / radix)


def fat_tree_links(endpoints: int, tiers: int) -> int:
    """Cables of a full-bisection fat tree: N endpoint-to-leaf links plus N links between each pair of
    adjacent tiers, L N in all. Unit: cables."""
    return tiers * endpoints


def nodes_for(num_gpus: int, gpus_per_node: int) -> int:
    """Servers (or compute trays) holding ``num_gpus`` devices. Unit: nodes."""
    return math.ceil(num_gpus / gpus_per_node)


def scale_out_endpoints(num_gpus: int, scale_up_domain: int) -> int:
    """Ports on the scale-out fabric: one NIC per GPU once the system spans more than one scale-up
    domain (DGX/HGX: one 400 Gb/s NIC per GPU, hardware_cost_conventions.md Sec 10 NICs); none inside a
    single domain. Unit: endpoints."""
    return num_gpus if num_gpus > scale_up_domain else 0


def capex_usd(num_gpus: int, nodes: int, switches: int, links: int, prices: Prices) -> dict:
    """Capital cost by item: devices, hosts, NICs (or whole nodes at ``node_usd``), switches, cables.
    Unit: USD per item."""
    if prices.node_usd is not None:
        items = {"nodes": nodes * prices.node_usd}
    else:
        items = {
            "devices": num_gpus * prices.device_usd,
            "hosts": nodes * prices.host_usd_per_node,
            "nics": num_gpus * prices.nic_usd_per_gpu,
        }
    return items | {"switches": switches * prices.switch_usd, "links": links * prices.link_usd}


def power_w(num_gpus: int, tdp_w: float, nodes: int, switches: int, prices: Prices) -> float:
    """Facility power: (GPUs x TDP + nodes x host power + switches x switch power) x utilisation x PUE
    (PUE = facility / IT power, The Green Grid 2007). Unit: W."""
    it = num_gpus * tdp_w + nodes * prices.host_w_per_node + switches * prices.switch_w
    return it * prices.utilisation * prices.pue


def amortised_usd_per_hour(capex: float, lifetime_years: float) -> float:
    """Straight-line depreciation of the capital over its lifetime. Unit: USD per hour."""
    return capex / (lifetime_years * HOURS_PER_YEAR)


def energy_usd_per_hour(watts: float, usd_per_kwh: float) -> float:
    """Electricity bill at a constant draw. Unit: USD per hour."""
    return watts / 1000.0 * usd_per_kwh


@dataclass(frozen=True)
class SystemCost:
    capex_usd: float
    power_w: float
    cost_per_hour_usd: float
    breakdown: dict

    def as_dict(self) -> dict:
        return {
            "capex_usd": self.capex_usd,
            "power_w": self.power_w,
            "cost_per_hour_usd": self.cost_per_hour_usd,
            **self.breakdown,
        }


def system_cost(num_gpus: int, gpus_per_node: int, scale_up_domain: int, tdp_w: float, prices: Prices) -> SystemCost:
    """Capex, power and hourly cost of ``num_gpus`` devices: the amortised capital plus energy, or
    ``gpu_hour_usd`` x GPUs when a rental price is given (it includes power and the rest)."""
    nodes = nodes_for(num_gpus, gpus_per_node)
    endpoints = scale_out_endpoints(num_gpus, scale_up_domain)
    tiers = fat_tree_tiers(endpoints, prices.switch_radix)
    switches = fat_tree_switches(endpoints, prices.switch_radix, tiers)
    links = fat_tree_links(endpoints, tiers)
    items = capex_usd(num_gpus, nodes, switches, links, prices)
    capex = sum(items.values())
    watts = power_w(num_gpus, tdp_w, nodes, switches, prices)
    amortised = amortised_usd_per_hour(capex, prices.lifetime_years)
    energy = energy_usd_per_hour(watts, prices.energy_usd_per_kwh)
    rental = None if prices.gpu_hour_usd is None else prices.gpu_hour_usd * num_gpus
    hourly = rental if rental is not None else amortised + energy
    breakdown = {
        "num_gpus": num_gpus,
        "nodes": nodes,
        "fat_tree_tiers": tiers,
        "switches": switches,
        "links": links,
        "capex_usd_by_item": items,
        "amortised_usd_per_hour": amortised,
        "energy_usd_per_hour": energy,
        "rental_usd_per_hour": rental,
    }
    return SystemCost(capex_usd=capex, power_w=watts, cost_per_hour_usd=hourly, breakdown=breakdown)


def run_cost_metrics(system_cost_row: dict, tokens_per_s: float, train_tokens: float | None, goodput: float = 1.0) -> dict:
    """A plan's cost metrics from its system's {capex_usd, power_w, cost_per_hour_usd}, its
    throughput and the run's ``goodput`` (the share of wall-clock time that trains, model/goodput.py):
    the run trains at tokens/s x goodput over its wall-clock time, so ``usd_per_million_tokens`` =
    $/hour / (tokens/s x goodput x 3600) x 1e6, ``tokens_per_usd`` its inverse per token, and with a
    run length of ``train_tokens``: ``run_hours`` = train_tokens / (tokens/s x goodput) / 3600 and
    ``run_cost_usd`` = run_hours x $/hour. Units as named."""
    hourly = system_cost_row["cost_per_hour_usd"]
    useful = tokens_per_s * goodput
    out = dict(system_cost_row)
    out["goodput"] = goodput
    out["usd_per_million_tokens"] = hourly / (useful * 3600.0) * 1e6
    out["tokens_per_usd"] = useful * 3600.0 / hourly
    if train_tokens is not None:
        out["run_hours"] = train_tokens / useful / 3600.0
        out["run_cost_usd"] = out["run_hours"] * hourly
    return out


def step_time_limit_s(max_run_hours: float, train_tokens: float, tokens_per_step: float) -> float:
    """The step time that a run of ``train_tokens`` within ``max_run_hours`` allows: run hours =
    train_tokens / tokens_per_step x step / 3600, solved for the step. Seconds."""
    return max_run_hours * 3600.0 * tokens_per_step / train_tokens

"""Cost of a training plan: the system's capex, power and hourly cost (model/system_cost.py, priced by
``priced_system``: the device's modelled cost or list price, the price list and the system file's
``cost:`` section) joined with the model's throughput, and the cost limits of a problem
(``constraints: {max_capex_usd, max_power_w, max_run_hours}``). A problem resolves the costs of
every device count it allows when it is loaded (``problem.Problem.costs``).

Metrics added to a plan (all floats): ``capex_usd``, ``power_w``, ``cost_per_hour_usd``,
``usd_per_million_tokens`` = cost per hour / (tokens/s x 3600) x 1e6, ``tokens_per_usd``, and with
``workload.train_tokens``: ``run_hours`` = train_tokens / tokens/s / 3600 and ``run_cost_usd`` =
run_hours x cost per hour.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from parasol.model.chiplet_cost import ChipletSpec, DeviceCost, device_cost, scale_chiplets, scale_device
from parasol.model.errors import ProblemError
from parasol.model.goodput import run_goodput
from parasol.model.specs import SystemSpec
from parasol.model.system_cost import Prices, SystemCost, run_cost_metrics, step_time_limit_s
from parasol.model.system_cost import system_cost as system_lines

from . import library
from .cost_library import load_chiplets, load_cost_parameters, load_cost_system, load_reliability, prices_for

CONSTRAINT_KEYS = ("max_capex_usd", "max_power_w", "max_run_hours")
COST_OBJECTIVES = ("cost", "tokens_per_usd")
COST_ROW_KEYS = ("capex_usd", "power_w", "cost_per_hour_usd")


@dataclass(frozen=True)
class PricedSystem:
    """A system as priced: its spec (device rescaled to the chiplet count asked for; one scale-up
    domain of GPUs), its ``chiplets:`` data rescaled likewise and the modelled device cost (None
    without chiplet data), its prices and where the device price came from."""

    system: SystemSpec
    chiplets: ChipletSpec | None
    device_cost: DeviceCost | None
    prices: Prices
    price_origin: str


def priced_system(system_name: str, chiplets: int | None = None, gpu_hour_usd: float | None = None) -> PricedSystem:
    """``system_name`` (a library name or a system file) priced: a device without a ``chiplets:``
    section is priced from the price list (ProblemError when it has no price either); ``chiplets``
    rescales the package (``model.chiplet_cost.scale_device``), which needs chiplet data. Computed
    once per library (a problem prices every device count it allows)."""
    return _priced_system(library.library_root(), system_name, chiplets, gpu_hour_usd)


@functools.lru_cache(maxsize=256)
def _priced_system(root, system_name: str, chiplets: int | None, gpu_hour_usd: float | None) -> PricedSystem:
    system, overrides = load_cost_system(system_name)
    params = load_cost_parameters()
    spec = load_chiplets(system.device)
    library_device = system.device.name  # the price list's entry, before any rescaling
    cost, price_scale = None, 1.0
    if spec is None:
        if chiplets is not None:
            raise ProblemError(
                "has no chiplets: section, so the chiplet count cannot rescale it", source=system.device.source, field="chiplets"
            )
    else:
        count = chiplets if chiplets is not None else spec.compute.count
        if chiplets is not None:
            _check_chiplet_count(spec, params, count, library_device)
        scaled = scale_chiplets(spec, count, params.hbm[spec.hbm_generation].footprint_mm2)
        if scaled is not spec:
            price_scale = device_cost(scaled, params).device_cost_usd / device_cost(spec, params).device_cost_usd
            system = replace(system, device=scale_device(system.device, spec, count))
        spec, cost = scaled, device_cost(scaled, params)
    prices, origin = prices_for(
        system, overrides, library_device, None if cost is None else cost.device_cost_usd, gpu_hour_usd, price_scale
    )
    return PricedSystem(system, spec, cost, prices, origin)


def _package_fits(spec, params, count: int) -> bool:
    """Whether a package of ``count`` compute dies can be built: each die and its interposer fit on a wafer."""
    try:
        device_cost(scale_chiplets(spec, count, params.hbm[spec.hbm_generation].footprint_mm2), params)
    except ProblemError as exc:
        if exc.field != "area_mm2":  # only the wafer's limit; other cost-data errors are the device file's
            raise
        return False
    return True


def _check_chiplet_count(spec, params, count: int, device: str) -> None:
    """ProblemError (``system.chiplets``; the caller places it: the problem file, or ``cost --chiplets``) naming
    the count, the device and the largest count whose package a wafer holds, when ``count`` is past it."""
    if _package_fits(spec, params, count):
        return
    largest = next((c for c in range(count - 1, 0, -1) if _package_fits(spec, params, c)), 0)
    raise ProblemError(
        f"{count} compute dies per {device} package: a die or its interposer does not fit on a wafer; allowed: 1 to {largest}",
        field="system.chiplets",
    )


def system_cost_lines(
    system_name: str, num_gpus: int, chiplets: int | None = None, gpu_hour_usd: float | None = None
) -> SystemCost:
    """Capex by item, power and hourly cost of the system with ``num_gpus`` devices (``model.system_cost``)."""
    ps = priced_system(system_name, chiplets, gpu_hour_usd)
    s = ps.system
    return system_lines(num_gpus, s.gpus_per_node, s.scale_up_domain, s.device.tdp_w, ps.prices)


def system_cost(system_name: str, num_gpus: int, chiplets: int | None, gpu_hour_usd: float | None) -> dict:
    """{capex_usd, power_w, cost_per_hour_usd} of the system with ``num_gpus`` devices of ``chiplets``
    compute dies (None: the device as described)."""
    lines = system_cost_lines(system_name, num_gpus, chiplets, gpu_hour_usd).as_dict()
    return {k: lines[k] for k in COST_ROW_KEYS}


def resolve_costs(system_name: str, counts: tuple, chiplets: tuple, gpu_hour_usd: float | None, needed: bool) -> dict | None:
    """{(num_gpus, chiplets): system cost row} of every device and chiplet count a problem allows;
    None when the system has no cost data and the problem needs none (else that ProblemError)."""
    try:
        return {(n, c): system_cost(system_name, n, c, gpu_hour_usd) for c in chiplets for n in counts}
    except ProblemError:
        if needed:
            raise
        return None


def system_with_chiplets(system_name: str, num_gpus: int, chiplets: int | None) -> SystemSpec:
    """The library system with its device rescaled to ``chiplets`` compute dies (None: as described)."""
    system = library.load_system(system_name, num_gpus)
    if chiplets is None:
        return system
    spec = load_chiplets(system.device)
    if spec is None:
        raise ProblemError(
            "has no chiplets: section, so system.chiplets cannot rescale it", source=system.device.source, field="chiplets"
        )
    _check_chiplet_count(spec, load_cost_parameters(), chiplets, system.device.name)
    return replace(system, device=scale_device(system.device, spec, chiplets))


def cost_metrics(system_cost_row: dict, tokens_per_s: float, train_tokens: float | None, goodput=1.0) -> dict:
    """The plan's cost metrics (model.system_cost.run_cost_metrics)."""
    return run_cost_metrics(system_cost_row, tokens_per_s, train_tokens, goodput)


def goodput(problem, num_gpus: int) -> float:
    """The share of a run's wall-clock time that trains on ``num_gpus`` GPUs: the problem's
    workload.goodput, else model.goodput.run_goodput on the library's reliability numbers."""
    if problem.workload.goodput is not None:
        return problem.workload.goodput
    try:
        return run_goodput(num_gpus, load_reliability())
    except ProblemError as exc:
        raise exc.located(source=problem.source) from None


def cost_limits_message(problem, rows: dict) -> str | None:
    """Why no allowed (num_gpus, chiplets) meets max_capex_usd / max_power_w, or None if some does.
    ``rows`` maps (num_gpus, chiplets) to its system cost."""
    limits = problem.constraints
    for key, metric in (("max_capex_usd", "capex_usd"), ("max_power_w", "power_w")):
        if key in limits and all(r[metric] > limits[key] for r in rows.values()):
            (n, c), least = min(rows.items(), key=lambda kv: kv[1][metric])
            what = f"{n} GPUs" + (f" of {c} chiplets" if c is not None else "")
            unit = "$" if metric == "capex_usd" else ""
            value = f"{unit}{least[metric]:,.0f}" + (" W" if metric == "power_w" else "")
            return f"{key} binds: the cheapest allowed system ({what}) needs {value}, over the limit {limits[key]:,.0f}"
    return None


def within_limits(problem, row: dict) -> bool:
    """Whether a system's capex and power meet the problem's limits."""
    limits = problem.constraints
    return all(
        not (key in limits and row[metric] > limits[key])
        for key, metric in (("max_capex_usd", "capex_usd"), ("max_power_w", "power_w"))
    )


def max_step_time_s(problem) -> float | None:
    """The step time that max_run_hours allows (model.system_cost.step_time_limit_s), or None."""
    hours = problem.constraints.get("max_run_hours")
    if hours is None:
        return None
    wl = problem.workload
    return step_time_limit_s(hours, wl.train_tokens, wl.global_batch * wl.seq_len)

"""Cost of a training plan: the system's capex, power and hourly cost (model/system_cost.py, priced by
``solver.cost_report.cost_document``) joined with the model's throughput, and the cost limits of a
problem (``constraints: {max_capex_usd, max_power_w, max_run_hours}``).

Metrics added to a plan (all floats): ``capex_usd``, ``power_w``, ``cost_per_hour_usd``,
``usd_per_million_tokens`` = cost per hour / (tokens/s x 3600) x 1e6, ``tokens_per_usd``, and with
``workload.train_tokens``: ``run_hours`` = train_tokens / tokens/s / 3600 and ``run_cost_usd`` =
run_hours x cost per hour.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from parasol.model.chiplet_cost import scale_device
from parasol.model.system_cost import run_cost_metrics, step_time_limit_s
from parasol.model.errors import ProblemError
from parasol.model.specs import SystemSpec

from . import library
from .cost_library import load_chiplets
from .cost_report import cost_document

CONSTRAINT_KEYS = ("max_capex_usd", "max_power_w", "max_run_hours")
COST_OBJECTIVES = ("cost", "tokens_per_usd")


@functools.lru_cache(maxsize=None)
def system_cost(system_name: str, num_gpus: int, chiplets: int | None, gpu_hour_usd: float | None) -> dict:
    """{capex_usd, power_w, cost_per_hour_usd} of the system with ``num_gpus`` devices of ``chiplets``
    compute dies (None: the device as described)."""
    doc = cost_document(system_name, num_gpus=num_gpus, chiplets=chiplets, gpu_hour_usd=gpu_hour_usd)
    return {k: doc["system"][k] for k in ("capex_usd", "power_w", "cost_per_hour_usd")}


def system_with_chiplets(system_name: str, num_gpus: int, chiplets: int | None) -> SystemSpec:
    """The library system with its device rescaled to ``chiplets`` compute dies (None: as described)."""
    system = library.load_system(system_name, num_gpus)
    if chiplets is None:
        return system
    spec = load_chiplets(system.device)
    if spec is None:
        raise ProblemError("has no chiplets: section, so system.chiplets cannot rescale it", source=system.device.source,
                           field="chiplets")
    return replace(system, device=scale_device(system.device, spec, chiplets))


def cost_metrics(system_cost_row: dict, tokens_per_s: float, train_tokens: float | None) -> dict:
    """The plan's cost metrics (model.system_cost.run_cost_metrics)."""
    return run_cost_metrics(system_cost_row, tokens_per_s, train_tokens)


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
    return all(not (key in limits and row[metric] > limits[key])
               for key, metric in (("max_capex_usd", "capex_usd"), ("max_power_w", "power_w")))


def max_step_time_s(problem) -> float | None:
    """The step time that max_run_hours allows (model.system_cost.step_time_limit_s), or None."""
    hours = problem.constraints.get("max_run_hours")
    if hours is None:
        return None
    wl = problem.workload
    return step_time_limit_s(hours, wl.train_tokens, wl.global_batch * wl.seq_len)

"""Cost data: ``problems/cost/*.yaml``, a device file's ``chiplets:`` section and a system file's ``cost:``
section, loaded into the frozen parameters of ``model.chiplet_cost`` and ``model.system_cost``. Every mistake
is a one-line ``ProblemError`` naming the file, the field and what is allowed.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from parasol.model import checks
from parasol.model.chiplet_cost import (
    Bridge,
    ChipletSpec,
    CostParameters,
    DieGroup,
    HbmGeneration,
    NreRule,
    PackageTech,
    ProcessNode,
    Substrate,
    Wafer,
)
from parasol.model.errors import ProblemError
from parasol.model.goodput import Reliability
from parasol.model.specs import DeviceSpec, SystemSpec
from parasol.model.system_cost import Prices

from . import library

_REQUIRED = object()
# check name -> (test, what the message says is allowed)
_CHECKS = {
    "positive": (lambda v: v > 0, "a positive number"),
    "nonneg": (lambda v: v >= 0, "a non-negative number"),
    "fraction": (lambda v: 0 < v <= 1, "a number in (0, 1]"),
    "below_one": (lambda v: 0 <= v < 1, "a number in [0, 1)"),
    "pue": (lambda v: v >= 1, "a number >= 1"),
}

MAX_SWITCH_RADIX = 4096  # ports per switch: a sanity limit on the input (a cap, not a device fact)


def _num(data: dict, key: str, src: str, prefix: str, check: str = "positive", default=_REQUIRED) -> float:
    """A checked number from a YAML mapping (``default`` when absent, if given)."""
    if key not in data and default is not _REQUIRED:
        return default
    if key not in data:
        raise ProblemError("is required", source=src, field=prefix + key)
    value = checks.as_float(data[key])
    test, allowed = _CHECKS[check]
    if value is None or not test(value):
        raise ProblemError(f"must be {allowed}, got {data[key]!r}", source=src, field=prefix + key)
    return value


def _int(data: dict, key: str, src: str, prefix: str, default=_REQUIRED, minimum: int = 1) -> int:
    if key not in data and default is not _REQUIRED:
        return default
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ProblemError(f"must be an integer >= {minimum}, got {value!r}", source=src, field=prefix + key)
    return value


def _mapping(data, src: str, field: str, keys: tuple, required: tuple = ()) -> dict:
    if not isinstance(data, dict):
        raise ProblemError("must be a mapping", source=src, field=field.rstrip("."))
    checks.keys(data, keys, required, src, field)
    return data


def _file(name: str) -> tuple[str, dict]:
    path = library.library_root() / "cost" / name
    return str(path), library.read_yaml(path, "cost file")


# ------------------------------------------------------------------ problems/cost/{process_nodes,packaging,memory}.yaml


def _process_nodes() -> tuple[Wafer, NreRule, dict]:
    src, data = _file("process_nodes.yaml")
    checks.keys(data, ("wafer", "nre", "nodes"), ("wafer", "nre", "nodes"), src, "")
    w = _mapping(
        data["wafer"],
        src,
        "wafer.",
        ("diameter_mm", "scribe_lane_mm", "edge_loss_mm", "clustering"),
        ("diameter_mm", "scribe_lane_mm", "edge_loss_mm", "clustering"),
    )
    wafer = Wafer(
        diameter_mm=_num(w, "diameter_mm", src, "wafer."),
        scribe_lane_mm=_num(w, "scribe_lane_mm", src, "wafer.", "nonneg"),
        edge_loss_mm=_num(w, "edge_loss_mm", src, "wafer.", "nonneg"),
        clustering=_num(w, "clustering", src, "wafer."),
    )
    keys = ("module_fraction", "chip_fraction", "reference_area_mm2", "volume_units")
    n = _mapping(data["nre"], src, "nre.", keys, keys)
    nre = NreRule(
        module_fraction=_num(n, "module_fraction", src, "nre.", "fraction"),
        chip_fraction=_num(n, "chip_fraction", src, "nre.", "fraction"),
        reference_area_mm2=_num(n, "reference_area_mm2", src, "nre."),
        volume_units=_num(n, "volume_units", src, "nre."),
    )
    if nre.module_fraction + nre.chip_fraction > 1:
        raise ProblemError("module_fraction + chip_fraction must not exceed 1", source=src, field="nre.chip_fraction")
    nodes = {}
    for name, entry in _mapping(data["nodes"], src, "nodes.", tuple(map(str, data["nodes"] or ()))).items():
        p = f"nodes.{name}."
        keys = ("defect_density_per_cm2", "wafer_cost_usd", "nre_usd")
        entry = _mapping(entry, src, p, keys, keys)
        nodes[str(name)] = ProcessNode(
            name=str(name),
            defect_density_per_cm2=_num(entry, keys[0], src, p, "nonneg"),
            wafer_cost_usd=_num(entry, keys[1], src, p),
            nre_usd=_num(entry, keys[2], src, p, "nonneg"),
        )
    if not nodes:
        raise ProblemError("needs at least one process node", source=src, field="nodes")
    return wafer, nre, nodes


PACKAGE_KINDS = ("organic", "interposer")
TECH_KEYS = (
    "kind",
    "bonding_yield",
    "chip_bump_usd_per_mm2",
    "nre_usd_per_mm2",
    "nre_fixed_usd",
    "interposer_area_factor",
    "interposer_wafer_cost_usd",
    "interposer_defect_density_per_cm2",
    "interposer_clustering",
    "bridge",
)
INTERPOSER_KEYS = TECH_KEYS[5:9]
BRIDGE_KEYS = ("area_mm2", "wafer_cost_usd", "defect_density_per_cm2", "clustering", "bonding_yield")


def _technology(name: str, entry, src: str) -> PackageTech:
    p = f"technologies.{name}."
    entry = _mapping(entry, src, p, TECH_KEYS, TECH_KEYS[:5])
    kind = checks.choice(entry["kind"], tuple(PACKAGE_KINDS), p + "kind", src)
    extra = {}
    if kind == "interposer":
        checks.keys(entry, TECH_KEYS, INTERPOSER_KEYS, src, p)
        extra = {k: _num(entry, k, src, p, "nonneg" if "defect" in k else "positive") for k in INTERPOSER_KEYS}
        if "bridge" in entry:
            b = _mapping(entry["bridge"], src, p + "bridge.", BRIDGE_KEYS, BRIDGE_KEYS)
            extra["bridge"] = Bridge(
                **{
                    k: _num(
                        b,
                        k,
                        src,
                        p + "bridge.",
                        "fraction" if k == "bonding_yield" else "nonneg" if "defect" in k else "positive",
                    )
                    for k in BRIDGE_KEYS
                }
            )
    elif set(entry) & set(INTERPOSER_KEYS + ("bridge",)):
        raise ProblemError(
            "an organic package has no interposer or bridge",
            source=src,
            field=p + sorted(set(entry) & set(INTERPOSER_KEYS + ("bridge",)))[0],
        )
    return PackageTech(
        name=name,
        kind=kind,
        bonding_yield=_num(entry, "bonding_yield", src, p, "fraction"),
        chip_bump_usd_per_mm2=_num(entry, "chip_bump_usd_per_mm2", src, p, "nonneg"),
        nre_usd_per_mm2=_num(entry, "nre_usd_per_mm2", src, p, "nonneg"),
        nre_fixed_usd=_num(entry, "nre_fixed_usd", src, p, "nonneg"),
        **extra,
    )


def _packaging() -> tuple[Substrate, dict, float, float, float]:
    src, data = _file("packaging.yaml")
    top = ("substrate", "d2d_area_fraction", "test", "technologies")
    checks.keys(data, top, top, src, "")
    keys = ("area_factor", "usd_per_mm2", "c4_bump_usd_per_mm2", "bonding_yield", "layer_factors")
    s = _mapping(data["substrate"], src, "substrate.", keys, keys)
    layer_keys = ("single_die", "side_17mm", "side_30mm", "larger")
    layers = _mapping(s["layer_factors"], src, "substrate.layer_factors.", layer_keys, layer_keys)
    substrate = Substrate(
        area_factor=_num(s, "area_factor", src, "substrate."),
        usd_per_mm2=_num(s, "usd_per_mm2", src, "substrate.", "nonneg"),
        c4_bump_usd_per_mm2=_num(s, "c4_bump_usd_per_mm2", src, "substrate.", "nonneg"),
        bonding_yield=_num(s, "bonding_yield", src, "substrate.", "fraction"),
        layer_factors=tuple(_num(layers, k, src, "substrate.layer_factors.") for k in layer_keys),
    )
    t = _mapping(
        data["test"], src, "test.", ("wafer_probe_usd_per_mm2", "final_test_usd"), ("wafer_probe_usd_per_mm2", "final_test_usd")
    )
    techs = _mapping(data["technologies"], src, "technologies.", tuple(map(str, data["technologies"] or ())))
    packages = {str(name): _technology(str(name), entry, src) for name, entry in techs.items()}
    if not packages:
        raise ProblemError("needs at least one packaging technology", source=src, field="technologies")
    return (
        substrate,
        packages,
        _num(data, "d2d_area_fraction", src, "", "below_one"),
        _num(t, "wafer_probe_usd_per_mm2", src, "test.", "nonneg"),
        _num(t, "final_test_usd", src, "test.", "nonneg"),
    )


def _memory() -> dict:
    src, data = _file("memory.yaml")
    checks.keys(data, ("generations",), ("generations",), src, "")
    gens = _mapping(data["generations"], src, "generations.", tuple(map(str, data["generations"] or ())))
    keys = ("bytes_per_s_per_stack", "bytes_per_stack", "usd_per_gb", "footprint_mm2")
    out = {}
    for name, entry in gens.items():
        p = f"generations.{name}."
        entry = _mapping(entry, src, p, keys, keys)
        out[str(name)] = HbmGeneration(
            name=str(name), **{k: _num(entry, k, src, p, "nonneg" if k == "usd_per_gb" else "positive") for k in keys}
        )
    if not out:
        raise ProblemError("needs at least one HBM generation", source=src, field="generations")
    return out


@functools.cache
def load_cost_parameters() -> CostParameters:
    """The chiplet cost parameters of problems/cost/."""
    wafer, nre, nodes = _process_nodes()
    substrate, packages, d2d, probe, final = _packaging()
    return CostParameters(
        wafer=wafer,
        nodes=nodes,
        nre=nre,
        substrate=substrate,
        packages=packages,
        hbm=_memory(),
        wafer_probe_usd_per_mm2=probe,
        final_test_usd=final,
        d2d_area_fraction=d2d,
    )


# ------------------------------------------------------------------ a device's chiplets: section

CHIPLET_KEYS = ("compute", "io", "hbm", "packaging", "interposer_mm2", "bridges", "d2d_bytes_per_s", "volume_units")
DIE_KEYS = ("area_mm2", "node", "count")
HBM_KEYS = ("generation", "stacks", "stack_gb")


def chiplets_from_dict(data, src: str, params: CostParameters, prefix: str = "chiplets.") -> ChipletSpec:
    """A ChipletSpec from a ``chiplets:`` mapping, its names checked against the cost parameters."""
    data = _mapping(data, src, prefix, CHIPLET_KEYS, ("compute", "hbm", "packaging"))

    def die(role: str) -> DieGroup:
        p = f"{prefix}{role}."
        d = _mapping(data[role], src, p, DIE_KEYS, DIE_KEYS)
        return DieGroup(
            role=role,
            area_mm2=_num(d, "area_mm2", src, p),
            node=checks.choice(str(d["node"]), tuple(params.nodes), p + "node", src),
            count=_int(d, "count", src, p),
        )

    h = _mapping(data["hbm"], src, prefix + "hbm.", HBM_KEYS, HBM_KEYS)
    gen = checks.choice(h["generation"], tuple(params.hbm), prefix + "hbm.generation", src)
    return ChipletSpec(
        compute=die("compute"),
        io=die("io") if "io" in data else None,
        hbm_generation=gen,
        hbm_stacks=_int(h, "stacks", src, prefix + "hbm.", minimum=0),
        hbm_stack_gb=_num(h, "stack_gb", src, prefix + "hbm."),
        packaging=checks.choice(data["packaging"], tuple(params.packages), prefix + "packaging", src),
        interposer_mm2=_num(data, "interposer_mm2", src, prefix, default=None),
        bridges=_int(data, "bridges", src, prefix, default=None, minimum=0),
        d2d_bytes_per_s=_num(data, "d2d_bytes_per_s", src, prefix, default=None),
        volume_units=_num(data, "volume_units", src, prefix, default=None),
        source=src,
    )


def load_chiplets(device: DeviceSpec) -> ChipletSpec | None:
    """The ``chiplets:`` section of the device's file, or None when it has none."""
    if device.source is None:
        return None
    data = library.read_yaml(device.source, "device file")
    if data.get("chiplets") is None:
        return None
    return chiplets_from_dict(data["chiplets"], device.source, load_cost_parameters())


# ------------------------------------------------------------------ systems and prices

PRICE_KEYS = (
    "host_usd_per_node",
    "nic_usd_per_gpu",
    "switch_usd",
    "switch_radix",
    "link_usd",
    "host_w_per_node",
    "switch_w",
    "utilisation",
    "pue",
    "energy_usd_per_kwh",
    "lifetime_years",
)
OVERRIDE_KEYS = PRICE_KEYS + ("node_usd", "device_usd", "gpu_hour_usd")
_PRICE_CHECKS = {
    "utilisation": "fraction",
    "pue": "pue",
    "host_w_per_node": "nonneg",
    "switch_w": "nonneg",
    "energy_usd_per_kwh": "nonneg",
    "nic_usd_per_gpu": "nonneg",
    "link_usd": "nonneg",
    "switch_usd": "nonneg",
    "host_usd_per_node": "nonneg",
    "node_usd": "nonneg",
    "device_usd": "nonneg",
    "gpu_hour_usd": "nonneg",
}


def _price_values(data, src: str, prefix: str, keys: tuple, required: tuple = ()) -> dict:
    data = _mapping(data, src, prefix, keys, required)
    out = {k: _num(data, k, src, prefix, _PRICE_CHECKS.get(k, "positive")) for k in data}
    if "switch_radix" in out:
        radix = data["switch_radix"]
        if isinstance(radix, bool) or not isinstance(radix, int) or not 4 <= radix <= MAX_SWITCH_RADIX or radix % 2:
            raise ProblemError(
                f"must be an even integer from 4 to {MAX_SWITCH_RADIX} (a fat tree of radix-2 switches never grows), "
                f"got {radix!r}",
                source=src,
                field=prefix + "switch_radix",
            )
    return out


@functools.cache
def load_price_list() -> tuple[str, dict, dict, dict]:
    """(source, defaults, device prices, per-system overrides) of problems/cost/prices.yaml."""
    src, data = _file("prices.yaml")
    checks.keys(data, ("defaults", "devices", "systems"), ("defaults",), src, "")
    defaults = _price_values(data["defaults"], src, "defaults.", PRICE_KEYS, PRICE_KEYS)
    devices = _mapping(data.get("devices") or {}, src, "devices.", tuple(map(str, data.get("devices") or ())))
    devices = {str(k): _num(devices, k, src, "devices.", "nonneg") for k in devices}
    systems = _mapping(data.get("systems") or {}, src, "systems.", tuple(map(str, data.get("systems") or ())))
    systems = {str(k): _price_values(v, src, f"systems.{k}.", OVERRIDE_KEYS) for k, v in systems.items()}
    return src, defaults, devices, systems


def is_path(name: str) -> bool:
    """Whether a --system argument names a file rather than a library system."""
    return library.is_system_path(name)


def load_cost_system(name: str, num_gpus: int | None = None) -> tuple[SystemSpec, dict]:
    """(SystemSpec, the file's ``cost:`` overrides, checked) for a library name or a system YAML path;
    ``num_gpus`` defaults to one scale-up domain."""
    if is_path(name):
        system = library.system_from_path(name, 1)
    else:
        if name not in library.names("systems"):
            raise ProblemError(f"unknown; allowed: {', '.join(library.names('systems'))}", source=name, field="system")
        system = library.load_system(name, 1)
    data = library.read_yaml(system.source, "system file")
    overrides = _price_values(data["cost"], system.source, "cost.", OVERRIDE_KEYS) if data.get("cost") is not None else {}
    return replace(system, num_gpus=num_gpus if num_gpus is not None else system.scale_up_domain), overrides


def prices_for(
    system: SystemSpec,
    overrides: dict,
    device_name: str,
    model_device_usd: float | None,
    gpu_hour_usd: float | None = None,
    price_scale: float = 1.0,
) -> tuple[Prices, str]:
    """Prices of ``system``: prices.yaml defaults, then its ``systems:`` entry, then the system file's
    ``cost:`` section, then a rental ``gpu_hour_usd``. The device price is, in that order: ``device_usd``
    of an override, the price list's entry for the device (x ``price_scale``, the modelled cost ratio of a
    rescaled package), or the modelled device cost. ``device_name`` is the library device (before rescaling). Returns (Prices, where the device price came from)."""
    src, defaults, devices, systems = load_price_list()
    values = {**defaults, **systems.get(system.name, {}), **overrides}
    if gpu_hour_usd is not None:
        values["gpu_hour_usd"] = gpu_hour_usd
    if "device_usd" in values:
        origin = "system file cost: section" if "device_usd" in overrides else f"price list systems.{system.name}"
    elif device_name in devices:
        values["device_usd"] = devices[device_name] * price_scale
        origin = "price list" + ("" if price_scale == 1.0 else " x modelled cost ratio of the rescaled package")
    elif model_device_usd is not None:
        values["device_usd"], origin = model_device_usd, "modelled device cost (no price in the price list)"
    elif values.get("node_usd") is None:
        raise ProblemError(
            f"no chiplet data to model a cost and no price under devices: in {src}; add a chiplets: "
            "section (problems/README.md) or a price",
            source=system.device.source,
            field="chiplets",
        )
    else:
        values["device_usd"], origin = 0.0, "in node_usd"
    if values.get("node_usd") is not None:
        origin = "node_usd (devices, host and NICs)"
    values["switch_radix"] = int(values["switch_radix"])
    return Prices(**values), origin


@functools.cache
def load_reliability() -> Reliability:
    """The training cluster's reliability (problems/cost/reliability.yaml, written by
    benchmarks/goodput.py from the Llama 3 report) for the goodput of whole runs."""
    src, data = _file("reliability.yaml")
    keys = ("failures_per_gpu_hour", "checkpoint_stall_s", "restart_s")
    _mapping(data, src, "", keys, keys)
    return Reliability(
        failures_per_gpu_hour=_num(data, "failures_per_gpu_hour", src, ""),
        checkpoint_stall_s=_num(data, "checkpoint_stall_s", src, "", "nonneg"),
        restart_s=_num(data, "restart_s", src, "", "nonneg"),
        source=src,
    )

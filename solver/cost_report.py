"""`parasol cost`: the per-device cost breakdown (model.chiplet_cost) and the system lines
(model.system_cost) of a library system or a system file, as a JSON document or a readable table."""

from __future__ import annotations

from .cost_library import load_cost_parameters, load_cost_system
from .costing import priced_system, system_cost_lines

DIE_FIELDS = {"die_area_mm2": "area_mm2", "dies_per_wafer": "dies_per_wafer", "die_yield": "die_yield"}  # of the compute die
DEVICE_FIELDS = (
    "kgd_cost_usd",
    "packaging_cost_usd",
    "hbm_cost_usd",
    "test_cost_usd",
    "manufacturing_cost_usd",
    "nre_usd",
    "nre_share_usd",
    "device_cost_usd",
)


def cost_document(
    system_name: str, num_gpus: int | None = None, chiplets: int | None = None, gpu_hour_usd: float | None = None
) -> dict:
    """Everything `parasol cost --json` prints (``costing.priced_system``, ``costing.system_cost_lines``);
    ``num_gpus`` defaults to one scale-up domain."""
    ps = priced_system(system_name, chiplets, gpu_hour_usd)
    system, spec, cost, prices = ps.system, ps.chiplets, ps.device_cost, ps.prices
    n = num_gpus if num_gpus is not None else system.scale_up_domain
    params = load_cost_parameters()
    doc = {"system_name": system.name, "device_name": load_cost_system(system_name)[0].device.name, "num_gpus": n}
    doc.update(
        dict.fromkeys(
            (
                "chiplet_count",
                "node",
                "packaging_type",
                *DIE_FIELDS,
                *DEVICE_FIELDS,
                "dies",
                "hbm",
                "packaging",
                "volume_units",
                "d2d_bytes_per_s",
            )
        )
    )
    if spec is not None:
        doc.update(
            chiplet_count=spec.compute.count,
            node=spec.compute.node,
            packaging_type=spec.packaging,
            hbm={"generation": spec.hbm_generation, "stacks": spec.hbm_stacks, "stack_gb": spec.hbm_stack_gb},
            volume_units=spec.volume_units or params.nre.volume_units,
            d2d_bytes_per_s=spec.d2d_bytes_per_s,
        )
        doc.update({key: getattr(cost.dies[0], name) for key, name in DIE_FIELDS.items()})
        doc.update({key: getattr(cost, key) for key in DEVICE_FIELDS})
        doc.update(dies=[d.as_dict() for d in cost.dies], packaging=cost.packaging)
    doc.update(
        {
            "device": {
                "peak_flops": system.device.peak_flops,
                "hbm_bytes": system.device.hbm_bytes,
                "hbm_bytes_per_s": system.device.hbm_bytes_per_s,
                "tdp_w": system.device.tdp_w,
            },
            "device_price_usd": prices.device_usd if prices.node_usd is None else None,
            "device_price_source": ps.price_origin,
        }
    )
    sc = system_cost_lines(system_name, n, chiplets, gpu_hour_usd)
    doc["system"] = sc.as_dict() | {
        "lifetime_years": prices.lifetime_years,
        "pue": prices.pue,
        "utilisation": prices.utilisation,
        "energy_usd_per_kwh": prices.energy_usd_per_kwh,
    }
    return doc


def _usd(x: float) -> str:
    return f"${x:,.0f}"


def cost_table(doc: dict) -> str:
    """The readable report of `parasol cost`."""
    lines = [f"{doc['device_name']} in {doc['system_name']}: {doc['num_gpus']} GPUs"]
    if doc["device_cost_usd"] is None:
        lines += ["", "device: no chiplets: section in its file; priced from the price list"]
    else:
        pk, hbm = doc["packaging"], doc["hbm"]
        rows = [
            ("compute die", f"{doc['die_area_mm2']:,.0f} mm2 on {doc['node']} x {doc['chiplet_count']}"),
            ("dies per wafer", f"{doc['dies_per_wafer']:,.1f}"),
            ("die yield", f"{100 * doc['die_yield']:.1f} %"),
        ]
        for d in doc["dies"][1:]:
            rows.append(
                (
                    f"{d['role']} die",
                    f"{d['area_mm2']:,.0f} mm2 on {d['node']} x {d['count']}: {d['dies_per_wafer']:,.1f} per wafer, "
                    f"yield {100 * d['die_yield']:.1f} %, KGD {_usd(d['kgd_cost_usd'])} each",
                )
            )
        inter = (
            f"{pk['interposer_mm2']:,.0f} mm2 interposer, yield {100 * pk['interposer_yield']:.1f} %, "
            if pk["interposer_mm2"]
            else ""
        )
        rows += [
            ("KGD cost", f"{_usd(doc['kgd_cost_usd']):>9}  (all logic dies, wafer probe included)"),
            (
                "packaging",
                f"{_usd(doc['packaging_cost_usd']):>9}  ({doc['packaging_type']}: {inter}bonding yield "
                f"{100 * pk['bonding_yield']:.1f} %; defects {_usd(pk['defect_package_usd'])}, wasted KGD+HBM "
                f"{_usd(pk['wasted_chips_usd'])})",
            ),
            ("HBM", f"{_usd(doc['hbm_cost_usd']):>9}  ({hbm['stacks']} x {hbm['generation']} {hbm['stack_gb']:g} GB)"),
            ("final test", f"{_usd(doc['test_cost_usd']):>9}"),
            ("manufacturing", f"{_usd(doc['manufacturing_cost_usd']):>9}"),
            (
                "NRE share",
                f"{_usd(doc['nre_share_usd']):>9}  (${doc['nre_usd'] / 1e6:,.0f}M of design, IP and masks over {doc['volume_units']:,.0f} units)",
            ),
            ("device cost", f"{_usd(doc['device_cost_usd']):>9}"),
        ]
        width = max(len(k) for k, _ in rows)
        lines += ["", "device (one package)"] + [f"  {k:<{width}}  {v}" for k, v in rows]
    s = doc["system"]
    price = (
        "" if doc["device_price_usd"] is None else f"{_usd(doc['device_price_usd'])} per device ({doc['device_price_source']})"
    )
    items = ", ".join(f"{k} {_usd(v)}" for k, v in s["capex_usd_by_item"].items())
    rows = [
        ("devices", price or doc["device_price_source"]),
        ("nodes", f"{s['nodes']}; fat tree {s['fat_tree_tiers']} tiers, {s['switches']} switches, {s['links']} links"),
        ("capex", f"{_usd(s['capex_usd'])}  ({items})"),
        ("power", f"{s['power_w']:,.0f} W  (utilisation {s['utilisation']:g}, PUE {s['pue']:g})"),
        (
            "cost per hour",
            f"${s['cost_per_hour_usd']:,.2f}  "
            + (
                f"(rental ${s['rental_usd_per_hour']:,.2f})"
                if s["rental_usd_per_hour"] is not None
                else f"(capex over {s['lifetime_years']:g} years ${s['amortised_usd_per_hour']:,.2f} + energy at "
                f"${s['energy_usd_per_kwh']:g}/kWh ${s['energy_usd_per_hour']:,.2f})"
            ),
        ),
    ]
    width = max(len(k) for k, _ in rows)
    lines += ["", "system"] + [f"  {k:<{width}}  {v}" for k, v in rows]
    return "\n".join(lines)

"""``parasol list``: what the built-in library holds, each entry loaded (so validated) by its own loader.

One row per file of ``problems/<kind>/``: its name, the facts a user picks it by, and the first line
of its header comment (what it is, where it comes from).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from parasol.model.choices import plain

# the parser imports this module for LISTS' names: the library (numpy, YAML) is imported where it is read

GIB = 2**30


@dataclass(frozen=True)
class Catalogue:
    """One part of the library: its folder under problems/ and the facts of one entry."""

    folder: str
    facts: Callable[[str], dict]
    names: Callable[[], list] | None = None  # the entries' names (default: every YAML file's stem)

    def entries(self) -> list:
        from . import library  # noqa: PLC0415

        return self.names() if self.names is not None else library.names(self.folder)


def _model_facts(name: str) -> dict:
    from parasol.model.params import total_params  # noqa: PLC0415 (the parser imports this module: kept light)

    from . import library  # noqa: PLC0415

    model = library.load_model(name)
    facts = {"params_b": round(total_params(model) / 1e9, 2), "layers": model.layers, "hidden": model.hidden}
    if model.moe is not None:
        facts["experts"] = model.moe.experts
        facts["active_params_b"] = round(total_params(model, active=True) / 1e9, 2)
    return facts


def _system_facts(name: str) -> dict:
    from . import library  # noqa: PLC0415

    system = library.load_system(name, 1)
    return {"device": system.device.name, "gpus_per_node": system.gpus_per_node, "scale_up_domain": system.scale_up_domain}


def _device_facts(name: str) -> dict:
    from . import library  # noqa: PLC0415

    device = library.load_device(name)
    bf16 = device.peak_flops.get("bf16")
    return {
        "architecture": plain(device.architecture) or "",
        "memory_gib": round(device.hbm_bytes / GIB, 1),
        "bf16_tflops": None if bf16 is None else round(bf16 / 1e12),
        "precisions": ",".join(device.peak_flops),
    }


def _engine_facts(name: str) -> dict:
    from . import library  # noqa: PLC0415

    return {"devices": ",".join(library.load_engine(name))}


def _framework_facts(name: str) -> dict:
    from . import frameworks, library  # noqa: PLC0415

    newest = frameworks.load(name)  # its loader checks the profile (the newest release is the default)
    data = library.read_yaml(newest.source, "framework profile")
    return {"kind": newest.kind, "releases": ",".join(str(r["release"]) for r in data["releases"])}


def _suite_facts(name: str) -> dict:
    from .suites import Tier, load_suite  # noqa: PLC0415 (reads every instance's problem: only for this list)

    suite = load_suite(name)
    tiers = {str(t): len(suite.select((t,))) for t in Tier}
    return {"instances": len(suite.instances), **tiers, "recorded": len(suite.known)}


def _suite_names() -> list:
    from .suites import suite_names  # noqa: PLC0415

    return suite_names()


LISTS = {
    "models": Catalogue("models", _model_facts),
    "systems": Catalogue("systems", _system_facts),
    "devices": Catalogue("systems/devices", _device_facts),
    "engines": Catalogue("engines", _engine_facts),
    "frameworks": Catalogue("frameworks", _framework_facts),
    "suites": Catalogue("suites", _suite_facts, _suite_names),
}


def _summary(path: Path) -> str:
    """The first comment line of a library file (its header says what it is)."""
    for line in path.read_text().splitlines():
        text = line.strip()
        if text.startswith("#"):
            text = text.lstrip("#").strip()
            if text:
                return text
        elif text:
            break
    return ""


def catalogue_json(what: str) -> list:
    """[{name, <facts>, summary}] of every entry of one part of the library, sorted by name."""
    from . import library  # noqa: PLC0415

    part = LISTS[what]
    folder = library.library_root() / part.folder
    return [{"name": name, **part.facts(name), "summary": _summary(folder / f"{name}.yaml")} for name in part.entries()]


def catalogue_table(what: str) -> str:
    from . import library  # noqa: PLC0415

    rows = catalogue_json(what)
    if not rows:
        return f"no {what} in the library ({library.library_root() / LISTS[what].folder})"
    columns = [c for c in dict.fromkeys(k for r in rows for k in r) if c != "summary"]
    cells = [[("" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)) + "  summary"]
    for row, r in zip(cells, rows):
        summary = r["summary"] if len(r["summary"]) <= 90 else r["summary"][:87] + "..."
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths)) + "  " + summary)
    return "\n".join(lines)

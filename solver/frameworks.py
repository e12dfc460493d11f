"""Framework profiles (problems/frameworks/*.yaml): what a training or serving framework can run.

A problem names one with ``workload.framework: NAME`` or ``NAME@RELEASE`` (the profile's first
release, its newest, when none is named). The profile's ``mapping`` lists, per mapping key, the
values that release can express; ``restrict`` intersects the problem's mapping with them, so the
planner only ever searches plans the framework can launch, and a value the user lists that the
framework lacks is a ProblemError naming the field, the framework and the allowed values. Its
``workload`` lists the allowed values of workload keys (checked, not searched). ``defaults`` records
what the framework does when a flag is absent (documentation, and what the emitters leave out).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from parasol.model import checks
from parasol.model.choices import plain
from parasol.model.errors import ProblemError

from . import library

PROFILE_KEYS = ("name", "kind", "emitter", "engine_profiles", "releases")
RELEASE_KEYS = ("release", "source", "flags", "mapping", "workload", "defaults", "engine", "sequence_parallel_with_tp")


@dataclass(frozen=True)
class Framework:
    """One release of a framework profile."""

    name: str
    release: str
    kind: str  # training | inference
    emitter: str  # solver.launch.Emitter value
    mapping: dict = field(default_factory=dict)  # key -> allowed values (tuple)
    workload: dict = field(default_factory=dict)  # workload key -> allowed values (tuple)
    defaults: dict = field(default_factory=dict)
    flags: str | None = None  # recorded flag list, relative to problems/frameworks/
    engine: str | None = None  # serving: the engine efficiency profile (problems/engines/) of this release
    # sequence parallelism exactly when tp > 1 (torchtitan's TP plan always shards the norms): the training
    # space keeps only those (tp, sp) rows (solver/training_space.py)
    sequence_parallel_with_tp: bool = False
    source: str = ""

    @property
    def label(self) -> str:
        return f"{self.name}@{self.release}"


def names() -> list[str]:
    return library.names("frameworks")


def load(spec, source: str | None = None, fld: str = "workload.framework") -> Framework:
    """The release ``spec`` ('NAME' or 'NAME@RELEASE') of a framework profile."""
    if not isinstance(spec, str) or not spec:
        raise ProblemError(f"must be a framework name; allowed: {', '.join(names())}", source=source, field=fld)
    name, at, release = spec.partition("@")
    if at and not release:
        raise ProblemError(f"{spec!r} names no release after '@'; give NAME or NAME@RELEASE", source=source, field=fld)
    if name not in names():
        raise ProblemError(f"unknown framework {name!r}; allowed: {', '.join(names())}", source=source, field=fld)
    path = library.library_root() / "frameworks" / f"{name}.yaml"
    data = library.read_yaml(path, "framework profile")
    src = str(path)
    unknown = sorted(set(data) - set(PROFILE_KEYS))
    if unknown or not isinstance(data.get("releases"), list) or not data["releases"]:
        raise ProblemError("a profile needs name, kind, emitter and a non-empty releases list", source=src)
    releases = {str(r.get("release")): r for r in data["releases"]}
    if release and release not in releases:
        raise ProblemError(f"{name} has no release {release!r}; allowed: {', '.join(releases)}", source=source, field=fld)
    entry = releases[release] if release else data["releases"][0]
    bad = sorted(set(entry) - set(RELEASE_KEYS))
    if bad:
        raise ProblemError(f"unknown key {bad[0]!r}; allowed: {', '.join(RELEASE_KEYS)}", source=src, field="releases")

    def lists(d):  # a list-valued key (offload_modules) lists its allowed lists, held as tuples as the Workload holds them
        return {
            k: tuple(tuple(x) if isinstance(x, list) else x for x in (v if isinstance(v, list) else [v]))
            for k, v in (d or {}).items()
        }

    return Framework(
        name=name,
        release=str(entry["release"]),
        kind=data["kind"],
        emitter=data["emitter"],
        mapping=lists(entry.get("mapping")),
        workload=lists(entry.get("workload")),
        defaults=dict(entry.get("defaults") or {}),
        flags=entry.get("flags"),
        engine=entry.get("engine"),
        sequence_parallel_with_tp=checks.flag(entry.get("sequence_parallel_with_tp", False), "sequence_parallel_with_tp", src),
        source=src,
    )


def _shown(values) -> str:
    return ", ".join(_one(v) for v in values)


def _one(value) -> str:
    """One value as the problem file writes it: true/false, [a, b] for a list, else as is."""
    if isinstance(value, bool):
        return str(value).lower()
    return f"[{', '.join(map(str, value))}]" if isinstance(value, tuple) else str(value)


def _value(value) -> str:
    """A refused value as the problem file writes it: true/false, or the quoted value."""
    return _one(value) if isinstance(value, (bool, tuple)) else repr(plain(value))


def _same(a, b) -> bool:
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def restrict(framework: Framework, mapping: dict, source: str, disaggregated: bool = False) -> dict:
    """``mapping`` ({key: allowed values}) intersected with what ``framework`` can express; a listed
    value it cannot express is a ProblemError on that key. A disaggregated serving plan's pool keys
    (``prefill.tp``, ``decode.ep``, ...) take the profile's restriction of the bare key."""
    out = dict(mapping)
    pools = ("prefill.", "decode.") if disaggregated else ("",)
    for bare, allowed in framework.mapping.items():
        for key in (p + bare for p in pools):
            if key in mapping:
                for value in mapping[key]:
                    if not any(_same(value, a) for a in allowed):
                        raise ProblemError(
                            f"{_value(value)} is not supported by {framework.label}; allowed: {_shown(allowed)}",
                            source=source,
                            field=f"mapping.{key}",
                        )
            else:
                out[key] = tuple(allowed)
    # keys a run may list in its mapping for solve to choose (moe_dispatcher, moe_a2a_overlap)
    for key in framework.workload.keys() & mapping.keys():
        for value in mapping[key]:
            if not any(_same(value, a) for a in framework.workload[key]):
                raise ProblemError(
                    f"{_value(value)} is not supported by {framework.label}; allowed: {_shown(framework.workload[key])}",
                    source=source,
                    field=f"mapping.{key}",
                )
    return out


def check_workload(framework: Framework, workload, source: str) -> None:
    """Each workload value the profile restricts is one the framework supports."""
    for key, allowed in framework.workload.items():
        value = getattr(workload, key, None)
        if key == CTA_CAPS_KEY:  # the profile allows caps (true) or not (false)
            value = value.any()
            if value not in allowed:
                raise ProblemError(
                    f"capped NCCL communicators are not supported by {framework.label} (no per-communicator NCCL "
                    f"options in its configuration); remove it",
                    source=source,
                    field=f"workload.{key}",
                )
            continue
        if key == "serving" or value is not None:
            if value not in allowed:
                raise ProblemError(
                    f"{_value(value)} is not supported by {framework.label}; allowed: {_shown(allowed)}",
                    source=source,
                    field=f"workload.{key}",
                )


CTA_CAPS_KEY = "nccl_max_ctas"  # a profile lists [false] where the framework cannot cap a communicator's NCCL channels
IMPLIED_KEYS = ("zero3_gather",)  # workload keys a profile's single allowed value sets when a problem omits them


def implied_workload(framework: Framework, workload, given: dict):
    """``workload`` with each ``IMPLIED_KEYS`` key the problem left out that the profile allows one value
    of set to that value (DeepSpeed's ``zero3_gather: [module]``): what the framework does is what the
    model counts. Only keys nothing else derives a default from (a serving mode or a precision stays
    the problem's to state)."""
    implied = {
        key: allowed[0]
        for key, allowed in framework.workload.items()
        if key in IMPLIED_KEYS and len(allowed) == 1 and key not in given and getattr(workload, key, allowed[0]) != allowed[0]
    }
    return dataclasses.replace(workload, **implied) if implied else workload


def check_kind(framework: Framework, kind: str, source: str) -> None:
    if framework.kind != kind:
        allowed = [n for n in names() if load(n).kind == kind]
        raise ProblemError(
            f"{framework.name} is a {framework.kind} framework; allowed for {kind}: {', '.join(allowed)}",
            source=source,
            field="workload.framework",
        )


def recorded_flags(framework: Framework) -> set[str]:
    """The flag or key names recorded for the framework's release (problems/frameworks/flags/)."""
    if framework.flags is None:
        return set()
    path = library.library_root() / "frameworks" / framework.flags
    return {line.strip() for line in path.read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")}

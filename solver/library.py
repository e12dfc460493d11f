"""The built-in library (problems/ shipped as the package data ``solver.data``) and YAML loading.

Every loader turns a YAML mapping into a frozen spec from ``model.specs`` and converts any
mistake into a one-line ``ProblemError`` naming the file and the field.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

import yaml

from model.errors import ProblemError
from model.specs import DeviceSpec, MLASpec, ModelSpec, MoESpec, NetworkTier, SystemSpec


def library_root() -> Path:
    """Folder holding models/, systems/ and examples/ however parasol was installed."""
    return Path(str(resources.files("solver.data")))


def read_yaml(path: Path | str, what: str = "file") -> dict:
    """Parse a YAML file into a mapping; ProblemError on a missing file or bad syntax."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ProblemError(f"{what} not found", source=str(path)) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise ProblemError(f"cannot read {what}: {exc.__class__.__name__}", source=str(path)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ProblemError(f"malformed YAML{where}: {getattr(exc, 'problem', None) or exc}", source=str(path)) from None
    if not isinstance(data, dict):
        raise ProblemError(f"the {what} must be a YAML mapping (key: value), got {type(data).__name__}", source=str(path))
    return data


def names(kind: str) -> list[str]:
    """Names available in the library for ``kind`` ('models', 'systems', 'systems/devices')."""
    return sorted(p.stem for p in (library_root() / kind).glob("*.yaml"))


def _library_file(kind: str, name, field: str, source: str | None) -> Path:
    if not isinstance(name, str) or not name:
        raise ProblemError(f"must be a name from the library, got {name!r}", source=source, field=field)
    path = library_root() / kind / f"{name}.yaml"
    if not path.is_file():
        raise ProblemError(f"unknown name {name!r}; allowed: {', '.join(names(kind))}", source=source, field=field)
    return path


def _read_library_entry(kind: str, name, field: str, allowed: tuple, required: tuple) -> tuple[str, dict]:
    """(path, mapping) of a library file, its keys checked."""
    path = _library_file(kind, name, field, None)
    data = read_yaml(path, f"{kind.split('/')[-1].rstrip('s')} file")
    check_keys(data, allowed, required, str(path), "")
    return str(path), data


def check_keys(data: dict, allowed: tuple, required: tuple, source: str | None, prefix: str) -> None:
    """ProblemError for unknown or missing keys of a YAML mapping."""
    unknown = sorted(set(map(str, data)) - set(allowed))
    if unknown:
        raise ProblemError(f"unknown key {unknown[0]!r}; allowed: {', '.join(allowed)}", source=source, field=f"{prefix}{unknown[0]}")
    for key in required:
        if key not in data:
            raise ProblemError("is required", source=source, field=f"{prefix}{key}")


def _build(cls, kwargs: dict, source: str | None, prefix: str, with_source: bool = True):
    """Construct a spec; turn a wrong type into a ProblemError naming the field."""
    try:
        return cls(**kwargs, source=source) if with_source else cls(**kwargs)
    except ProblemError as exc:
        if exc.field and not exc.field.startswith(prefix):
            raise ProblemError(str(exc).split(": ", 2)[-1], source=source, field=prefix + exc.field) from None
        raise
    except TypeError as exc:
        raise ProblemError(f"bad value: {exc}", source=source, field=prefix.rstrip(".")) from None


MODEL_KEYS = ("name", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "activation", "head_dim",
              "tied_embeddings", "position_embedding", "max_seq_len", "norm", "bias", "dropout", "params_b",
              "active_params_b", "moe", "mla")
MOE_KEYS = ("experts", "top_k", "expert_ffn", "shared_experts", "shared_expert_ffn", "first_dense_layers",
            "capacity_factor", "load_imbalance", "max_nodes_per_token")
MLA_KEYS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "q_lora_rank")
MODEL_REQUIRED = ("layers", "hidden", "heads", "ffn", "vocab")


def model_from_dict(data: dict, source: str | None, prefix: str = "model.") -> ModelSpec:
    """A ModelSpec from a library file or an inline ``model:`` mapping."""
    check_keys(data, MODEL_KEYS, MODEL_REQUIRED, source, prefix)
    kwargs = dict(data)
    kwargs.setdefault("name", "inline")
    kwargs.setdefault("kv_heads", kwargs["heads"])
    kwargs.setdefault("head_dim", 0)
    for key in ("tied_embeddings", "bias", "dropout"):
        if key in kwargs and not isinstance(kwargs[key], bool):
            raise ProblemError(f"must be true or false, got {kwargs[key]!r}", source=source, field=prefix + key)
    if not isinstance(kwargs["name"], str):
        raise ProblemError(f"must be a string, got {kwargs['name']!r}", source=source, field=prefix + "name")
    for key in ("params_b", "active_params_b"):
        if kwargs.get(key) is not None:
            value = as_float(kwargs[key])
            if value is None or value <= 0:
                raise ProblemError(f"must be a positive number of billions, got {kwargs[key]!r}", source=source, field=prefix + key)
            kwargs[key] = value
    for key, spec, keys, required in (("moe", MoESpec, MOE_KEYS, ("experts", "top_k", "expert_ffn")),
                                      ("mla", MLASpec, MLA_KEYS, ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))):
        if kwargs.get(key) is not None:
            block = kwargs[key]
            if not isinstance(block, dict):
                raise ProblemError("must be a mapping", source=source, field=prefix + key)
            check_keys(block, keys, required, source, f"{prefix}{key}.")
            for name, value in block.items():
                ok = value is None if name == "capacity_factor" and value is None else (
                    isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0)
                if not ok:
                    raise ProblemError(f"must be a non-negative number, got {value!r}", source=source, field=f"{prefix}{key}.{name}")
            kwargs[key] = _build(spec, block, source, f"{prefix}{key}.", with_source=False)
    return _build(ModelSpec, kwargs, source, prefix)


@functools.lru_cache(maxsize=None)
def load_model(name: str) -> ModelSpec:
    """A model from problems/models/."""
    path = _library_file("models", name, "model", None)
    return model_from_dict(read_yaml(path, "model file"), str(path), prefix="")


def as_float(value):
    """A YAML number as float. PyYAML (YAML 1.1) reads ``312.0e12`` (no exponent sign) as a
    string, so numeric strings are accepted; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _number(data: dict, key: str, source: str, prefix: str) -> float:
    value = as_float(data.get(key))
    if value is None or value < 0:
        raise ProblemError(f"must be a non-negative number, got {data.get(key)!r}", source=source, field=prefix + key)
    return value


@functools.lru_cache(maxsize=None)
def load_device(name: str) -> DeviceSpec:
    """A device from problems/systems/devices/."""
    src, data = _read_library_entry("systems/devices", name, "device", ("name", "peak_flops", "hbm_bytes", "hbm_bytes_per_s", "tdp_w", "efficiency",
                                                                        "chiplets"),
                                    ("peak_flops", "hbm_bytes", "hbm_bytes_per_s", "efficiency"))
    peaks = data["peak_flops"]
    if not isinstance(peaks, dict) or not peaks:
        raise ProblemError("must map precisions to FLOP/s", source=src, field="peak_flops")
    peaks = {k: _number(peaks, k, src, "peak_flops.") for k in peaks if peaks[k] is not None}
    eff = data["efficiency"]
    check_keys(eff, ("gemm", "gemm_fp8", "gemm_fp4", "attention", "memory", "moe_expert", "moe_overlap"),
               ("gemm", "attention", "memory"), src, "efficiency.")
    xs, ys = _curve(eff["gemm"], src, "efficiency.gemm")
    low = tuple((key[5:], *_curve(eff[key], src, f"efficiency.{key}")) for key in ("gemm_fp8", "gemm_fp4") if key in eff)
    return DeviceSpec(
        name=data.get("name", name), peak_flops=peaks, hbm_bytes=_number(data, "hbm_bytes", src, ""),
        hbm_bytes_per_s=_number(data, "hbm_bytes_per_s", src, ""), gemm_efficiency_flops=xs, gemm_efficiency=ys,
        attention_efficiency=_number(eff, "attention", src, "efficiency."),
        memory_efficiency=_number(eff, "memory", src, "efficiency."),
        tdp_w=float(data.get("tdp_w", 0.0)),
        **{f"{key}_efficiency": _fraction(eff, key, src) for key in ("moe_expert", "moe_overlap") if key in eff},
        low_precision_gemm=low, source=src,
    )


def _fraction(data: dict, key: str, src: str) -> float:
    """An efficiency in (0, 1]."""
    value = as_float(data.get(key))
    if value is None or not 0 < value <= 1:
        raise ProblemError(f"must be a fraction in (0, 1], got {data.get(key)!r}", source=src, field=f"efficiency.{key}")
    return value


def _curve(gemm, src: str, field: str) -> tuple[tuple, tuple]:
    """An efficiency curve {flops: [...], efficiency: [...]}: increasing sizes, values in (0, 1]."""
    if not isinstance(gemm, dict):
        raise ProblemError("must be a mapping {flops, efficiency}", source=src, field=field)
    check_keys(gemm, ("flops", "efficiency"), ("flops", "efficiency"), src, f"{field}.")
    xs, ys = tuple(map(as_float, gemm["flops"])), tuple(map(as_float, gemm["efficiency"]))
    if None in xs or None in ys or len(xs) != len(ys) or len(xs) < 2 or list(xs) != sorted(xs) or not all(0 < y <= 1 for y in ys):
        raise ProblemError("needs matching, increasing flops and efficiencies in (0, 1]", source=src, field=field)
    return xs, ys


def _tier(data, name: str, src: str) -> NetworkTier:
    if not isinstance(data, dict):
        raise ProblemError("must be a mapping", source=src, field=name)
    check_keys(data, ("domain_size", "bandwidth_bytes_per_s", "latency_s", "efficiency"),
               ("bandwidth_bytes_per_s", "latency_s", "efficiency"), src, f"{name}.")
    return NetworkTier(name=name, bandwidth_bytes_per_s=_number(data, "bandwidth_bytes_per_s", src, f"{name}."),
                       latency_s=_number(data, "latency_s", src, f"{name}."), efficiency=_number(data, "efficiency", src, f"{name}."))


SYSTEM_KEYS = ("name", "device", "gpus_per_node", "memory_reserve_bytes", "scale_up", "scale_out", "cost")
SYSTEM_REQUIRED = ("device", "gpus_per_node", "scale_up", "scale_out")


def _system_parts(src: str, data: dict) -> tuple:
    """(source, device, gpus per node, scale-up domain, tiers, reserve) of a system mapping. ``cost:`` is
    read by solver.cost_library."""
    device = load_device(data["device"])
    domain = data["scale_up"].get("domain_size", data["gpus_per_node"]) if isinstance(data["scale_up"], dict) else None
    return (src, device, int(data["gpus_per_node"]), int(domain or data["gpus_per_node"]), _tier(data["scale_up"], "scale_up", src),
            _tier(data["scale_out"], "scale_out", src), float(data.get("memory_reserve_bytes", 0.0)))


@functools.lru_cache(maxsize=None)
def _system_file(name: str) -> tuple:
    return _system_parts(*_read_library_entry("systems", name, "system.name", SYSTEM_KEYS, SYSTEM_REQUIRED))


def _spec(name: str, parts: tuple, num_gpus: int) -> SystemSpec:
    src, device, per_node, domain, up, out, reserve = parts
    return SystemSpec(name=name, device=device, num_gpus=num_gpus, gpus_per_node=per_node, scale_up_domain=domain,
                      scale_up=up, scale_out=out, memory_reserve_bytes=reserve, source=src)


def load_system(name: str, num_gpus: int) -> SystemSpec:
    """A system from problems/systems/ with ``num_gpus`` devices."""
    return _spec(name, _system_file(name), num_gpus)


def system_from_path(path: str | Path, num_gpus: int) -> SystemSpec:
    """A system from a YAML file outside the library (its device named from the library)."""
    data = read_yaml(path, "system file")
    src = str(path)
    check_keys(data, SYSTEM_KEYS, SYSTEM_REQUIRED, src, "")
    if not isinstance(data["device"], str):
        raise ProblemError(f"must be a device name; allowed: {', '.join(names('systems/devices'))}", source=src, field="device")
    for key, value in (("gpus_per_node", data["gpus_per_node"]),
                       ("scale_up.domain_size", data["scale_up"].get("domain_size", 1) if isinstance(data["scale_up"], dict) else 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProblemError(f"must be a positive integer, got {value!r}", source=src, field=key)
    if "memory_reserve_bytes" in data:
        _number(data, "memory_reserve_bytes", src, "")
    try:
        parts = _system_parts(src, data)
    except ProblemError as exc:
        if exc.source is None:
            raise ProblemError(str(exc).split(": ", 1)[-1], source=src, field=exc.field) from None
        raise
    return _spec(str(data.get("name", Path(path).stem)), parts, num_gpus)

"""The inference half of the problem-file contract (``workload: {kind: inference, ...}``).

```yaml
workload: {kind: inference, input_len: 2048, output_len: 128, batch: 64, precision: fp8, kv_precision: fp8,
           weight_precision: fp8, serving: static, slo: {ttft_s: 2.0, tpot_s: 0.05}}
mapping: {tp: 2, pp: 1, ep: 1, dp: 4}           # static | continuous; dp = replicas, tp·pp·dp = num_gpus
mapping: {prefill: {tp: 2, dp: 2}, decode: {tp: 4, dp: 1}}   # disaggregated
objective: throughput                           # throughput | ttft | tpot | latency
```
``batch`` (requests per replica) absent means the planner chooses it; it may also be listed in
``mapping.batch`` (as ``solve`` reports it). Every mistake is a one-line ``ProblemError``.
"""

from __future__ import annotations

from parasol.model.errors import ProblemError
from parasol.model.inference import check_serving
from parasol.model.precision import INFERENCE_PRECISIONS, KV_PRECISIONS, WEIGHT_PRECISIONS
from parasol.model.specs import DECODE_ATTENTION_KERNELS, SERVING_MODES, InferenceWorkload, PoolMapping, ServingMapping

from . import library

INFERENCE_WORKLOAD_KEYS = ("kind", "input_len", "output_len", "batch", "precision", "kv_precision", "weight_precision",
                           "serving", "slo", "kv_block_tokens", "max_prefill_tokens", "decode_attention",
                           "kv_cache_memory_fraction", "engine")
INFERENCE_OBJECTIVES = ("throughput", "ttft", "tpot", "latency")
POOL_KEYS = ("tp", "pp", "ep", "dp")
COLOCATED_MAPPING_KEYS = POOL_KEYS + ("batch", "num_gpus")
DISAGGREGATED_MAPPING_KEYS = ("prefill", "decode", "batch", "num_gpus")
# what each objective minimises, as a metric name and a sign (+1 minimise, -1 maximise)
OBJECTIVE_METRICS = {"throughput": ("tokens_per_s", -1), "ttft": ("ttft_s", 1), "tpot": ("tpot_s", 1),
                     "latency": ("e2e_latency_s", 1)}


def _positive_int(value, src: str, fld: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ProblemError(f"must be a positive integer, got {value!r}", source=src, field=fld)
    return value


def _positive_number(value, src: str, fld: str) -> float:
    number = library.as_float(value)
    if number is None or not number > 0:
        raise ProblemError(f"must be a positive number of seconds, got {value!r}", source=src, field=fld)
    return number


def _fraction(value, src: str, fld: str) -> float:
    number = library.as_float(value)
    if number is None or not 0 < number <= 1:
        raise ProblemError(f"must be a fraction in (0, 1], got {value!r}", source=src, field=fld)
    return number


def _choice(value, allowed: tuple, src: str, fld: str):
    if value not in allowed:
        raise ProblemError(f"{value!r} is not allowed; allowed: {', '.join(allowed)}", source=src, field=fld)
    return value


def parse_inference_workload(data: dict, src: str) -> InferenceWorkload:
    """An InferenceWorkload from ``workload:`` (kind inference)."""
    library.check_keys(data, INFERENCE_WORKLOAD_KEYS, ("kind", "input_len", "output_len"), src, "workload.")
    precision = _choice(data.get("precision", "bf16"), INFERENCE_PRECISIONS, src, "workload.precision")
    slo = data.get("slo") or {}
    if not isinstance(slo, dict):
        raise ProblemError("must be a mapping {ttft_s, tpot_s}", source=src, field="workload.slo")
    library.check_keys(slo, ("ttft_s", "tpot_s"), (), src, "workload.slo.")
    batch = data.get("batch")
    return InferenceWorkload(
        input_len=_positive_int(data["input_len"], src, "workload.input_len"),
        output_len=_positive_int(data["output_len"], src, "workload.output_len"),
        batch=None if batch is None else _positive_int(batch, src, "workload.batch"),
        precision=precision,
        kv_precision=_choice(data.get("kv_precision", precision), KV_PRECISIONS, src, "workload.kv_precision"),
        weight_precision=_choice(data.get("weight_precision", precision), WEIGHT_PRECISIONS, src, "workload.weight_precision"),
        serving=_choice(data.get("serving", "static"), SERVING_MODES, src, "workload.serving"),
        ttft_slo_s=_positive_number(slo["ttft_s"], src, "workload.slo.ttft_s") if "ttft_s" in slo else None,
        tpot_slo_s=_positive_number(slo["tpot_s"], src, "workload.slo.tpot_s") if "tpot_s" in slo else None,
        kv_block_tokens=_positive_int(data.get("kv_block_tokens", 16), src, "workload.kv_block_tokens"),
        max_prefill_tokens=_positive_int(data.get("max_prefill_tokens", 8192), src, "workload.max_prefill_tokens"),
        decode_attention=_choice(data.get("decode_attention", "grouped"), DECODE_ATTENTION_KERNELS, src,
                                 "workload.decode_attention"),
        kv_cache_memory_fraction=_fraction(data.get("kv_cache_memory_fraction", 0.9), src, "workload.kv_cache_memory_fraction"),
        engine=None if data.get("engine") is None else _choice(data["engine"], tuple(library.names("engines")), src, "workload.engine"),
        source=src)


def _values(value, src: str, fld: str) -> tuple:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise ProblemError("an empty list allows nothing", source=src, field=fld)
    return tuple(dict.fromkeys(_positive_int(v, src, fld) for v in values))


def parse_inference_mapping(data, workload: InferenceWorkload, src: str) -> dict:
    """``mapping:`` of an inference problem as {key: allowed values}; pool keys of a disaggregated
    plan are 'prefill.tp', 'decode.dp', … ."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ProblemError("must be a mapping of choices", source=src, field="mapping")
    disaggregated = workload.serving == "disaggregated"
    allowed = DISAGGREGATED_MAPPING_KEYS if disaggregated else COLOCATED_MAPPING_KEYS
    unknown = sorted(set(map(str, data)) - set(allowed))
    if unknown:
        hint = ("; disaggregated serving takes a prefill and a decode pool" if disaggregated and unknown[0] in POOL_KEYS else
                "; prefill and decode pools are for serving: disaggregated" if unknown[0] in ("prefill", "decode") else "")
        raise ProblemError(f"unknown key {unknown[0]!r}; allowed: {', '.join(allowed)}{hint}", source=src,
                           field=f"mapping.{unknown[0]}")
    out = {}
    for key, value in data.items():
        if key in ("prefill", "decode"):
            if not isinstance(value, dict):
                raise ProblemError("must be a mapping {tp, pp, ep, dp}", source=src, field=f"mapping.{key}")
            library.check_keys(value, POOL_KEYS, (), src, f"mapping.{key}.")
            for sub, v in value.items():
                out[f"{key}.{sub}"] = _values(v, src, f"mapping.{key}.{sub}")
        else:
            out[key] = _values(value, src, f"mapping.{key}")
    if workload.batch is not None:
        if "batch" in out and workload.batch not in out["batch"]:
            raise ProblemError(f"mapping.batch {list(out['batch'])} does not allow workload.batch {workload.batch}",
                               source=src, field="mapping.batch")
        out["batch"] = (workload.batch,)
    return out


def check_inference_objective(objective, src: str) -> str:
    if objective not in INFERENCE_OBJECTIVES:
        raise ProblemError(f"{objective!r} is not allowed for inference; allowed: {', '.join(INFERENCE_OBJECTIVES)}",
                           source=src, field="objective")
    return objective


def fixed_serving_mapping(problem) -> ServingMapping:
    """The one serving plan ``evaluate`` runs: tp (each pool's tp and dp when disaggregated) and
    the batch given; pp and ep default to 1, dp to num_gpus/(tp·pp)."""
    src, m = problem.source, problem.mapping
    if len(problem.num_gpus) != 1:
        raise ProblemError("evaluate needs a single device count", source=src, field="system.num_gpus")

    def one(key, default=None):
        values = m.get(key)
        if values is None:
            if default is None:
                raise ProblemError("evaluate needs this key as a scalar", source=src, field=f"mapping.{key}")
            return default
        if len(values) != 1:
            raise ProblemError(f"evaluate needs one value, got the list {list(values)}", source=src, field=f"mapping.{key}")
        return values[0]

    if "batch" not in m:
        raise ProblemError("evaluate needs the batch (requests per replica)", source=src, field="workload.batch")
    batch = one("batch")
    if problem.workload.serving == "disaggregated":
        pools = [PoolMapping(tp=one(f"{p}.tp"), pp=one(f"{p}.pp", 1), ep=one(f"{p}.ep", 1), dp=one(f"{p}.dp"))
                 for p in ("prefill", "decode")]
        mapping = ServingMapping(batch=batch, decode=pools[1], prefill=pools[0])
    else:
        tp, pp = one("tp"), one("pp", 1)
        mapping = ServingMapping(batch=batch, decode=PoolMapping(tp=tp, pp=pp, ep=one("ep", 1),
                                                                 dp=one("dp", max(1, problem.num_gpus[0] // (tp * pp)))))
    try:
        check_serving(problem.model, problem.system(), problem.workload, mapping)
    except ProblemError as exc:
        raise exc.located(source=src) from None
    return mapping

"""Trial files: the pydantic schema, loading, error reporting and conversion for the core.

A trial file (TOML or JSON) is read into :class:`Trial`, whose fields hold SI integers
(bits per second, nanoseconds, bytes) parsed by :mod:`cctestbed.units`. Every model forbids
unknown keys. :func:`load_trial` collects *every* problem at once and raises
:class:`ConfigError`, whose ``problems`` each read ``field: value: what is valid``.

:meth:`Trial.to_core` produces the JSON structure the simulator core takes (flow groups, and a
workload's arrivals and sizes drawn by :mod:`cctestbed.workload` from the seed,
expanded to one entry per flow); :meth:`Trial.to_toml` writes the normalised trial file
saved beside the results.
"""

import dataclasses
import functools
import json
import math
import re
import sys
import typing
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Optional, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PlainSerializer,
    Strict,
    StrictBool,
    Tag,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from . import _core, traces, units, workload

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on older interpreters only
    import tomli as tomllib

__all__ = ["ConfigError", "Trial", "Link", "FlowGroup", "Loss", "Aqm", "load_trial", "parse_trial", "algorithms"]


class ConfigError(ValueError):
    """A trial that cannot run. ``problems`` lists each as ``field: value: what is valid``."""

    def __init__(self, problems: list[str], source: str | None = None):
        self.problems = list(problems)
        self.source = source
        head = f"invalid trial{f' {source}' if source else ''}: {len(self.problems)} problem(s)"
        super().__init__("\n".join([head, *("  " + p for p in self.problems)]))


#: A flow group's ``cc`` naming a BPF congestion control (an object file), on either backend.
BPF_PREFIX = "bpf:"


def sim_problems(trial: "Trial") -> list[str]:
    """What in a valid trial the simulator cannot run: a ``bpf:`` object that cannot be read,
    or ``params`` it has no read-only global for (the core then checks the object itself)."""
    from .kernel import bpfcc

    problems: list[str] = []
    for i, g in enumerate(trial.flows):
        if g.cc is not None and g.cc.startswith(BPF_PREFIX):
            problems += bpfcc.user_object(g.cc, g.params, i)[1]
    return problems


def _bpf_object_hex(cc: str, params: dict[str, float], index: int) -> str:
    """A ``bpf:`` group's object as the core loads it (see :func:`kernel.bpfcc.patched_object`)."""
    from .kernel import bpfcc

    data, problems = bpfcc.patched_object(cc, params, index)
    if data is None:
        raise ConfigError(problems)
    return data.hex()


@functools.lru_cache(maxsize=None)
def algorithms() -> dict[str, dict[str, float]]:
    """Congestion-control algorithms the core provides: name -> {parameter: default}."""
    return {name: dict(params) for name, params in _core.algorithms().items()}


#: The core's defaults for the settings a trial writes out in full (sampling, MTU and MSS, a
#: flow's initial window, delayed ACKs, captures, the datagram headers), taken from the core
#: so that both sides hold one value; the disciplines' come with :data:`DISCIPLINES`.
CORE_DEFAULTS: dict[str, Any] = _core.defaults()


# --- field types ------------------------------------------------------------------------------

#: What the simulator core can represent. It counts time in i64 nanoseconds and adds a few
#: times together (now + delays + timers), so a single time stays below 2^63 / 8: 10^18 ns,
#: about 31.7 years. Rates and sizes are u64 in the core; 10^18 leaves its 128-bit token and
#: serialisation arithmetic room. Counts (flows, windows, ACK settings) are u32, seeds u64.
MAX_TIME_NS = 10**18
MAX_RATE_BPS = 10**18
MAX_SIZE_BYTES = 10**18
U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1


def _range(lo: int, hi: int, fmt: Any = str) -> Any:
    """A check that ``lo <= v <= hi``, saying the valid range when it fails."""

    def check(v: int) -> int:
        if v < lo:
            raise ValueError("must be > 0" if lo > 0 else "must be >= 0")
        if v > hi:
            raise ValueError(f"out of range; valid are {fmt(lo)} to {fmt(hi)}")
        return v

    return check


def _int_range(lo: int, hi: int) -> Any:
    def check(v: int) -> int:
        if not lo <= v <= hi:
            raise ValueError(f"must be a whole number from {lo} to {hi}")
        return v

    return check


def _probability(v: float) -> float:
    if not 0.0 <= v <= 1.0:
        raise ValueError("must be between 0% and 100% (a fraction between 0 and 1)")
    return v


def _positive_finite(v: float) -> float:
    if not (math.isfinite(v) and v > 0):
        raise ValueError("must be a finite number > 0")
    return v


Rate = Annotated[int, BeforeValidator(units.parse_rate), PlainSerializer(units.format_rate, return_type=str)]
Time = Annotated[int, BeforeValidator(units.parse_time), PlainSerializer(units.format_time, return_type=str)]
Size = Annotated[int, BeforeValidator(units.parse_size), PlainSerializer(units.format_size, return_type=str)]
PositiveRate = Annotated[Rate, AfterValidator(_range(1, MAX_RATE_BPS, units.format_rate))]
PositiveTime = Annotated[Time, AfterValidator(_range(1, MAX_TIME_NS, units.format_time))]
NonNegativeTime = Annotated[Time, AfterValidator(_range(0, MAX_TIME_NS, units.format_time))]
PositiveSize = Annotated[Size, AfterValidator(_range(1, MAX_SIZE_BYTES, units.format_size))]
#: Integers are strict: ``count = "2"`` or ``count = 2.0`` is refused, not converted.
U32 = Annotated[int, Strict(), AfterValidator(_int_range(0, U32_MAX))]
PositiveU32 = Annotated[int, Strict(), AfterValidator(_int_range(1, U32_MAX))]
Probability = Annotated[
    float,
    BeforeValidator(units.parse_fraction),
    AfterValidator(_probability),
    PlainSerializer(units.format_percent, return_type=str),
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=False)


class TokenBucket(_Model):
    """A token bucket: ``rate`` of refill and ``burst`` (bucket size)."""

    rate: PositiveRate
    burst: PositiveSize


class CapacityChange(_Model):
    """From time ``at`` on, the bottleneck runs at ``capacity``."""

    at: NonNegativeTime
    capacity: PositiveRate


LOSS_MODELS = ("none", "bernoulli", "gilbert-elliott")


def _loss_shorthand(v: Any) -> Any:
    """``loss = "1%"`` (or 0.01) is Bernoulli loss; ``"0%"`` is none; tables pass through."""
    if isinstance(v, dict):
        if isinstance(v.get("model"), str):
            v = {**v, "model": v["model"].replace("_", "-")}
        return v
    p = units.parse_fraction(v)
    return {"model": "none"} if p == 0 else {"model": "bernoulli", "p": v}


class Loss(_Model):
    """Random loss on the bottleneck, before the queue (netem ``loss``)."""

    model: Literal["none", "bernoulli", "gilbert-elliott"] = "none"
    p: Optional[Probability] = None
    r: Optional[Probability] = None
    loss_good: Optional[Probability] = None
    loss_bad: Optional[Probability] = None

    @model_validator(mode="after")
    def _fields_fit_model(self) -> "Loss":
        given = {k for k in ("p", "r", "loss_good", "loss_bad") if getattr(self, k) is not None}
        need = {"none": set(), "bernoulli": {"p"}, "gilbert-elliott": {"p", "r"}}[self.model]
        allowed = {"none": set(), "bernoulli": {"p"}, "gilbert-elliott": {"p", "r", "loss_good", "loss_bad"}}[
            self.model
        ]
        if need - given:
            raise _field_error(
                ",".join(sorted(need - given)), None, f"required for loss model '{self.model}'"
            )
        if given - allowed:
            raise _field_error(
                ",".join(sorted(given - allowed)),
                None,
                f"not used by loss model '{self.model}'; it takes {', '.join(sorted(allowed)) or 'nothing'}",
            )
        return self

    def to_core(self) -> dict[str, Any]:
        if self.model == "none":
            return {"kind": "none"}
        if self.model == "bernoulli":
            return {"kind": "bernoulli", "p": self.p}
        return {
            "kind": "gilbert_elliott",
            "p": self.p,
            "r": self.r,
            "loss_good": 0.0 if self.loss_good is None else self.loss_good,
            "loss_bad": 1.0 if self.loss_bad is None else self.loss_bad,
        }

    def describe(self) -> str:
        if self.model == "none":
            return "no random loss"
        if self.model == "bernoulli":
            return f"loss {units.format_percent(self.p or 0.0)}"
        return f"Gilbert-Elliott loss p={units.format_percent(self.p or 0)} r={units.format_percent(self.r or 0)}"


#: The queue disciplines the core offers besides drop-tail, as it declares them (each in its own
#: module of the core's ``qdisc``): name -> ``{"doc", "params", "rules"}``, each parameter with its
#: name in trial files (``tc``'s), its key in the core's JSON, its kind (``time``, ``size``,
#: ``rate``, ``count``, ``whole``, ``real``, ``fraction``, ``flag``), its range (``min``,
#: ``min_open``, ``max``: None for what the kind holds), its ``default``, ``unit`` and ``doc``;
#: ``rules`` as ``("below", a, b)``. The schema of ``link.aqm`` is built from it.
DISCIPLINES: dict[str, Any] = _core.disciplines()


def _aqm_shorthand(v: Any) -> Any:
    """``aqm = "fq_codel"`` is the discipline with Linux's defaults, ``aqm = "none"`` drop-tail
    (so that a sweep can put drop-tail beside the AQMs); tables pass through."""
    if v == "none":
        return None
    return {"kind": v} if isinstance(v, str) else v


#: How a trial file writes each kind of parameter, and the largest value the core holds of it.
_PARAM_TYPES: dict[str, Any] = {
    "time": (Time, MAX_TIME_NS, units.format_time),
    "size": (Size, MAX_SIZE_BYTES, units.format_size),
    "rate": (Rate, MAX_RATE_BPS, units.format_rate),
    "count": (Annotated[int, Strict()], U32_MAX, str),
    "whole": (float, None, str),
    "real": (float, None, str),
    "fraction": (Probability, None, str),
    "flag": (StrictBool, None, str),
}


def _spec_words(spec: dict[str, Any], kind: str | None = None) -> str:
    """The unit of a parameter's range, as its message adds it: ``(Hz)``, or with the discipline
    whose own range it is, ``(Hz, as tc-dualpi2)``."""
    words = [w for w in (spec["unit"], kind and f"as tc-{kind}") if w]
    return f" ({', '.join(words)})" if words else ""


def _spec_check(spec: dict[str, Any], kind: str | None = None) -> Any:
    """The range check of a parameter as the core declares it, raising the message that says
    what is valid; ``kind`` when the range is that discipline's own (the same name has another
    range in another discipline)."""
    lo, hi, is_open, what = spec["min"], spec["max"], spec["min_open"], spec["kind"]
    unit = _spec_words(spec, kind)
    if what in ("time", "size", "rate", "count"):
        first = int(lo) + 1 if is_open else int(lo)
        if what == "count" or (what == "size" and hi is not None):
            plain = _int_range(first, int(hi) if hi is not None else U32_MAX)
        else:
            plain = _range(first, int(hi) if hi is not None else _PARAM_TYPES[what][1], _PARAM_TYPES[what][2])

        def whole_in_range(v: int) -> int:
            try:
                return plain(v)
            except ValueError as e:
                raise ValueError(f"{e}{unit}") from None

        return whole_in_range

    def number_in_range(v: Any) -> Any:
        if what == "flag":
            return v
        x = float(v)
        bounds = (x > lo if is_open else x >= lo) if lo is not None else True
        if hi is not None:
            bounds = bounds and x <= hi
        if what == "whole" and not (x.is_integer() and bounds):
            raise ValueError(f"must be a whole number from {lo:g} to {hi:g}{unit}")
        if not (math.isfinite(x) and bounds):
            if hi is None:
                raise ValueError(f"must be {'>' if is_open else '>='} {lo:g}{unit}")
            if is_open:
                raise ValueError(f"must be > {lo:g} and at most {hi:g}{unit}")
            raise ValueError(f"must be from {lo:g} to {hi:g}{unit}")
        return v

    return number_in_range


def _same_spec(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(a[k] == b[k] for k in ("kind", "min", "min_open", "max", "unit"))


def _aqm_fields(disciplines: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The fields of ``link.aqm``: one per parameter name across the disciplines, in the order
    they are first declared, typed by its kind; a range every discipline with that name shares
    is checked on the field, the others once the discipline is known (returned by name, then
    discipline)."""
    specs: dict[str, dict[str, dict[str, Any]]] = {}
    for kind, d in disciplines.items():
        for spec in d["params"]:
            specs.setdefault(spec["name"], {})[kind] = spec
    fields: dict[str, Any] = {}
    per_kind: dict[str, dict[str, Any]] = {}
    for name, by_kind in specs.items():
        first = next(iter(by_kind.values()))
        kinds = {s["kind"] for s in by_kind.values()}
        if len(kinds) > 1 and not kinds <= {"whole", "real"}:
            raise TypeError(f"link.aqm.{name} is a {' and a '.join(sorted(kinds))}: one name, one kind of value")
        base = _PARAM_TYPES[first["kind"]][0]
        if all(_same_spec(first, s) for s in by_kind.values()):
            fields[name] = (Optional[Annotated[base, AfterValidator(_spec_check(first))]], None)
        else:
            fields[name] = (Optional[base], None)
            per_kind[name] = by_kind
    return fields, per_kind


def _core_value(spec: dict[str, Any], v: Any) -> Any:
    """A parameter's value as the core's JSON holds it."""
    if spec["kind"] == "real" or spec["kind"] == "fraction":
        return float(v)
    return v if spec["kind"] == "flag" else int(v)


class _AqmBase(_Model):
    """Active queue management at the bottleneck (``link.aqm``); ``link.queue`` stays the hard
    limit. Its parameters are the fields of :data:`Aqm`, made from :data:`DISCIPLINES`."""

    #: The disciplines it takes, and the ranges that are one discipline's own (by name, then kind).
    disciplines: ClassVar[dict[str, Any]] = {}
    own_ranges: ClassVar[dict[str, dict[str, Any]]] = {}

    kind: str

    @model_validator(mode="before")
    @classmethod
    def _no_limit(cls, v: Any) -> Any:
        if isinstance(v, dict) and "limit" in v:
            raise _field_error(
                "limit", v["limit"], "the hard limit of every discipline is link.queue; give it there"
            )
        return v

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: str) -> str:
        if v not in cls.disciplines:
            raise ValueError(
                f"unknown queue discipline; valid are {', '.join(cls.disciplines)} (leave aqm out for drop-tail)"
            )
        return v

    @model_validator(mode="after")
    def _fields_fit_kind(self) -> "_AqmBase":
        if self.kind not in self.disciplines:
            return self
        params = self.disciplines[self.kind]["params"]
        allowed = [p["name"] for p in params]
        given = {k: getattr(self, k) for k in type(self).model_fields if k != "kind" and getattr(self, k) is not None}
        wrong = [k for k in given if k not in allowed]
        if wrong:
            raise _field_errors(
                [(k, None, f"not a parameter of {self.kind}; it takes {', '.join(allowed)}") for k in wrong]
            )
        for name, v in given.items():
            spec = self.own_ranges.get(name, {}).get(self.kind)
            if spec is not None:
                try:
                    _spec_check(spec, self.kind)(v)
                except ValueError as e:
                    raise _field_error(name, v, str(e)) from None
        by_key = {p["key"]: p for p in params}
        for rule, a, b in self.disciplines[self.kind]["rules"]:
            first, second = by_key[a], by_key[b]
            x, y = given.get(first["name"]), given.get(second["name"])
            if rule == "below" and x is not None and y is not None and x >= y:
                shown = _PARAM_TYPES[first["kind"]][2]
                raise _field_error(first["name"], shown(x), f"must be below {second['name']} ({shown(y)})")
        return self

    def to_core(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        for spec in self.disciplines[self.kind]["params"]:
            v = getattr(self, spec["name"])
            if v is not None:
                out[spec["key"]] = _core_value(spec, v)
        return out

    def describe(self) -> str:
        extra = [f"{k} {units.format_time(getattr(self, k))}" for k in ("target", "interval") if getattr(self, k, None)]
        return self.kind + (f" ({', '.join(extra)})" if extra else "")


def aqm_model(disciplines: dict[str, Any]) -> type[_AqmBase]:
    """The model of ``link.aqm`` for ``disciplines`` as the core exports them: ``kind`` and every
    discipline's parameters, each kind taking its own."""
    fields, own_ranges = _aqm_fields(disciplines)
    model = create_model("Aqm", __base__=_AqmBase, __module__=__name__, **fields)
    model.__doc__ = _AqmBase.__doc__
    model.disciplines, model.own_ranges = disciplines, own_ranges
    return model


if typing.TYPE_CHECKING:
    Aqm = _AqmBase
else:
    Aqm = aqm_model(DISCIPLINES)


class QueueSize(str):
    """``link.queue``, parsed once: its canonical text (``"2bdp"``, ``"100pkts"``, ``"300KB"``),
    which is how it reads, compares and is written, with the parsed ``kind`` (``bdp``,
    ``packets``, ``bytes``) and ``amount`` it stands for."""

    kind: str
    amount: float

    def __new__(cls, text: str, kind: str, amount: float) -> "QueueSize":
        q = super().__new__(cls, text)
        q.kind, q.amount = kind, amount
        return q

    @classmethod
    def parse(cls, v: Any) -> "QueueSize":
        if isinstance(v, QueueSize):
            return v
        kind, amount = units.parse_queue(v)
        if amount <= 0:
            raise ValueError("must be > 0 (and hold at least one packet)")
        if kind == "packets" and amount > MAX_SIZE_BYTES:
            raise ValueError(f"out of range; valid are 1pkts to {MAX_SIZE_BYTES}pkts")
        if kind == "bytes" and amount > MAX_SIZE_BYTES:
            raise ValueError(f"out of range; valid are 1B to {units.format_size(MAX_SIZE_BYTES)}")
        if kind == "bdp":
            text = f"{Decimal(repr(amount)).normalize():f}bdp"
        elif kind == "packets":
            text = f"{int(amount)}pkts"
        else:
            text = units.format_size(int(amount))
        return cls(text, kind, amount)

    def limits(self, capacity: int, rtprop_ns: int) -> tuple[Optional[int], Optional[int]]:
        """(limit_bytes, limit_packets); a BDP multiple is of ``capacity`` over ``rtprop_ns``,
        rounded to the byte."""
        if self.kind == "packets":
            return None, int(self.amount)
        if self.kind == "bytes":
            return int(self.amount), None
        exact = Fraction(Decimal(repr(self.amount))) * capacity * rtprop_ns / (8 * 10**9)
        return int(exact + Fraction(1, 2)), None

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_plain_validator_function(
            cls.parse, serialization=core_schema.plain_serializer_function_ser_schema(str)
        )


class _Delays(_Model):
    """Propagation delay given as ``rtt``, ``delay`` (each way) or ``delay_fwd`` + ``delay_rev``."""

    rtt: Optional[NonNegativeTime] = None
    delay: Optional[NonNegativeTime] = None
    delay_fwd: Optional[NonNegativeTime] = None
    delay_rev: Optional[NonNegativeTime] = None

    @model_validator(mode="after")
    def _one_delay(self):  # type: ignore[no-untyped-def]
        forms = [
            name
            for name, given in (
                ("rtt", self.rtt is not None),
                ("delay", self.delay is not None),
                ("delay_fwd/delay_rev", self.delay_fwd is not None or self.delay_rev is not None),
            )
            if given
        ]
        if len(forms) != 1:
            raise _field_error(
                "rtt",
                None,
                "give exactly one of rtt (round trip), delay (each direction), or delay_fwd and delay_rev"
                + (f"; got {', '.join(forms)}" if forms else ""),
            )
        if (self.delay_fwd is None) != (self.delay_rev is None):
            raise _field_error("delay_fwd", None, "give both delay_fwd and delay_rev")
        return self

    @property
    def delays_ns(self) -> tuple[int, int]:
        """One-way propagation delay (forward, reverse)."""
        if self.rtt is not None:
            fwd = self.rtt // 2
            return fwd, self.rtt - fwd
        if self.delay is not None:
            return self.delay, self.delay
        assert self.delay_fwd is not None and self.delay_rev is not None
        return self.delay_fwd, self.delay_rev


class DelayChange(_Delays):
    """From time ``at`` on, packets entering either path take the new delays (a route change)."""

    at: NonNegativeTime


class AckAggregation(_Model):
    """ACKs held on their way back and released in bursts (Wi-Fi, cellular, cable uplinks).

    ``periodic``: every ACK waits for the next multiple of ``interval`` and all waiting ones
    leave together. ``wifi``: the first waiting ACK starts a channel access of random length,
    uniform in [0, ``interval``), after which up to ``max_acks`` waiting ACKs leave together
    (one aggregate; 64 is 802.11n/ac's block-ack window) and the rest wait for the next access.
    """

    model: Literal["periodic", "wifi"] = "periodic"
    interval: PositiveTime
    max_acks: Optional[PositiveU32] = None

    @model_validator(mode="after")
    def _max_acks_for_wifi(self) -> "AckAggregation":
        if self.model == "periodic" and self.max_acks is not None:
            raise _field_error("max_acks", self.max_acks, "only the wifi model caps a burst; periodic releases every waiting ACK")
        return self

    def to_core(self) -> dict[str, Any]:
        if self.model == "periodic":
            return {"model": "periodic", "interval_ns": self.interval}
        return {"model": "wifi", "interval_ns": self.interval, "max_acks": self.max_acks or 64}


class ReceiverNic(_Model):
    """The receiving hosts' NIC (Linux's defaults, the core's): GRO, and interrupt coalescing.

    ``coalesce`` is ``ethtool -C rx-usecs``: the NAPI poll comes that long after the first frame
    of a batch and takes up to ``budget`` frames per poll; with ``gro`` on, in-order segments of
    a flow in one poll reach TCP as one skb and get one ACK decision (``docs/config.md``).
    """

    gro: StrictBool = CORE_DEFAULTS["receiver_nic"]["gro"]
    coalesce: NonNegativeTime = CORE_DEFAULTS["receiver_nic"]["coalesce_ns"]
    budget: PositiveU32 = CORE_DEFAULTS["receiver_nic"]["budget"]

    def to_core(self) -> dict[str, Any]:
        return {"gro": self.gro, "coalesce_ns": self.coalesce, "budget": self.budget}


class ReverseLink(_Model):
    """The reverse path's own bottleneck (``link.reverse``): what goes right to left, the reverse
    flows' data and the forward flows' ACKs, queues here, on the same router model as the
    forward link (rate, hard limit, random loss, queue discipline)."""

    capacity: PositiveRate
    queue: QueueSize
    loss: Annotated[Loss, BeforeValidator(_loss_shorthand)] = Field(default_factory=Loss)
    aqm: Annotated[Optional[Aqm], BeforeValidator(_aqm_shorthand)] = None

    def describe(self) -> str:
        extra = [d for d in (self.aqm.describe() if self.aqm else "",
                             self.loss.describe() if self.loss.model != "none" else "") if d]
        return f"reverse {units.human_rate(self.capacity)}, queue {self.queue}" + "".join(f", {d}" for d in extra)


class Link(_Delays):
    """The bottleneck: capacity, propagation delay, queue, loss and optional extras."""

    capacity: PositiveRate
    queue: QueueSize
    loss: Annotated[Loss, BeforeValidator(_loss_shorthand)] = Field(default_factory=Loss)
    shaper: Optional[TokenBucket] = None
    policer: Optional[TokenBucket] = None
    schedule: list[CapacityChange] = Field(default_factory=list)
    delay_schedule: list[DelayChange] = Field(default_factory=list)
    access_rate: Optional[PositiveRate] = None
    jitter: NonNegativeTime = 0
    aqm: Annotated[Optional[Aqm], BeforeValidator(_aqm_shorthand)] = None
    #: A link trace (Mahimahi's format, :mod:`cctestbed.traces`): the capacity over time, as an
    #: absolute path; ``capacity`` is then the trace's mean rate.
    trace: Optional[str] = None
    ack_aggregation: Optional[AckAggregation] = None
    #: The reverse path's own bottleneck; absent, that path is unconstrained (a plain delay).
    reverse: Optional[ReverseLink] = None
    #: The receiving hosts' NIC: GRO and interrupt coalescing.
    receiver_nic: ReceiverNic = Field(default_factory=ReceiverNic)

    @model_validator(mode="before")
    @classmethod
    def _capacity_from_trace(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("trace"), str):
            return data
        path = traces.resolve(data["trace"], None)
        try:
            mean = traces.mean_rate_bps(traces.load_trace(path))
        except traces.TraceError as e:
            raise _field_error("trace", data["trace"], str(e)) from None
        data = {**data, "trace": path}
        cap = data.get("capacity")
        if cap is None:
            return {**data, "capacity": mean}
        try:
            given = units.parse_rate(cap)
        except (ValueError, TypeError):
            return data  # the capacity field reports its own error
        if given != mean:
            raise _field_error(
                "capacity", cap,
                f"a trace link's capacity is its trace's mean rate ({units.format_rate(mean)}); leave capacity out",
            )
        return data

    @model_validator(mode="after")
    def _trace_alone(self) -> "Link":
        if self.trace is not None:
            clash = [n for n, v in (("schedule", self.schedule), ("shaper", self.shaper)) if v]
            if clash:
                raise _field_error(clash[0], None, "a trace sets the capacity over time; it takes no schedule and no shaper")
        return self

    def trace_opportunities(self) -> Optional[tuple[int, ...]]:
        """The trace's opportunity times (ms), when the link has one."""
        return None if self.trace is None else traces.load_trace(self.trace)

    @property
    def rtprop_ns(self) -> int:
        fwd, rev = self.delays_ns
        return fwd + rev

    def bdp_bytes(self) -> float:
        """Bandwidth-delay product in IP bytes at the initial capacity and the base RTprop."""
        return self.capacity * self.rtprop_ns / 8e9

    def queue_limits(self) -> tuple[Optional[int], Optional[int]]:
        """(limit_bytes, limit_packets) for the core."""
        return self.queue.limits(self.capacity, self.rtprop_ns)

    def reverse_queue_limits(self) -> tuple[Optional[int], Optional[int]]:
        """The reverse bottleneck's (limit_bytes, limit_packets); a BDP multiple is of the
        reverse capacity over the same RTprop. (None, None) without ``link.reverse``."""
        if self.reverse is None:
            return None, None
        return self.reverse.queue.limits(self.reverse.capacity, self.rtprop_ns)


class DelayedAck(_Model):
    """Receiver delayed ACKs (Linux defaults, the core's); ``delayed_ack = false`` turns them off."""

    enabled: StrictBool = CORE_DEFAULTS["delayed_ack"]["enabled"]
    timeout: PositiveTime = CORE_DEFAULTS["delayed_ack"]["timeout_ns"]
    segments_per_ack: PositiveU32 = CORE_DEFAULTS["delayed_ack"]["segments_per_ack"]
    quickacks: U32 = CORE_DEFAULTS["delayed_ack"]["quickacks"]


def _delack_shorthand(v: Any) -> Any:
    return {"enabled": v} if isinstance(v, bool) else v


def _arrivals_shorthand(v: Any) -> Any:
    """``arrivals = ["1s", "2.5s"]``: flows starting at those times."""
    return {"model": "fixed", "times": v} if isinstance(v, list) else v


class Arrivals(_Model):
    """When a workload group's flows start: a Poisson process from the group's ``start`` to
    ``until`` at ``rate`` flows per second, or at the rate that offers ``load`` of the link's
    payload capacity with the group's mean size; or the listed ``times``."""

    model: Literal["poisson", "fixed"]
    rate: Optional[Annotated[float, Strict(), AfterValidator(_positive_finite)]] = None
    load: Optional[Probability] = None
    until: Optional[PositiveTime] = None
    times: Optional[list[NonNegativeTime]] = None

    @model_validator(mode="after")
    def _fields_fit_model(self) -> "Arrivals":
        shown = self.model_dump(mode="json")
        problems: list[tuple[str, Any, str]] = []
        if self.model == "poisson":
            if (self.rate is None) == (self.load is None):
                problems.append(("rate", None, "a poisson arrival process takes exactly one of rate (flows per second) "
                                               "and load (a fraction of the link's capacity)"))
            if self.load is not None and self.load <= 0:
                problems.append(("load", shown["load"], "must be > 0"))
            if self.times is not None:
                problems.append(("times", None, "only fixed arrivals list times; poisson takes rate or load"))
        else:
            for k in ("rate", "load", "until"):
                if getattr(self, k) is not None:
                    problems.append((k, shown[k], "not used by fixed arrivals; they take times"))
            if not self.times:
                problems.append(("times", None, "missing: fixed arrivals list at least one start time"))
        if problems:
            raise _field_errors(problems)
        return self


def _size_shorthand(v: Any) -> Any:
    """``size = "websearch"`` (a shipped CDF's name) is ``{dist = "cdf", file = "websearch"}``."""
    if isinstance(v, str) and v.strip() in workload.SHIPPED_CDFS:
        return {"dist": "cdf", "file": v.strip()}
    return v


class SizeDist(_Model):
    """Flow sizes drawn per flow: ``exponential`` (``mean``), ``pareto`` (``shape`` and one of
    ``scale`` or ``mean``), ``cdf`` (``file``: a CDF file or a shipped CDF's name); ``max`` cuts
    exponential and Pareto draws."""

    dist: Literal["exponential", "pareto", "cdf"]
    mean: Optional[PositiveSize] = None
    scale: Optional[PositiveSize] = None
    shape: Optional[Annotated[float, AfterValidator(_positive_finite)]] = None
    max: Optional[PositiveSize] = None
    file: Optional[str] = None

    @model_validator(mode="after")
    def _fields_fit_dist(self) -> "SizeDist":
        shown = self.model_dump(mode="json")
        takes = {"exponential": ("mean", "max"), "pareto": ("mean", "scale", "shape", "max"), "cdf": ("file",)}[self.dist]
        problems: list[tuple[str, Any, str]] = [
            (k, shown[k], f"not used by the {self.dist} distribution; it takes {', '.join(takes)}")
            for k in ("mean", "scale", "shape", "max", "file") if getattr(self, k) is not None and k not in takes
        ]
        if self.dist == "exponential" and self.mean is None:
            problems.append(("mean", None, "missing: the exponential distribution needs its mean"))
        if self.dist == "pareto":
            if self.shape is None:
                problems.append(("shape", None, "missing: the Pareto distribution needs its shape (alpha, e.g. 1.2)"))
            if (self.mean is None) == (self.scale is None):
                problems.append(("scale", None, "give exactly one of scale (the smallest size, x_m) and mean"))
            elif self.mean is not None and self.shape is not None and self.shape <= 1:
                problems.append(("shape", self.shape, "must be > 1 when the mean is given (a Pareto of shape <= 1 "
                                                      "has no mean); give scale instead"))
        if self.dist == "cdf":
            if self.file is None:
                problems.append(("file", None, f"missing: a CDF file, or one of {', '.join(workload.SHIPPED_CDFS)}"))
            else:
                try:
                    workload.load_cdf(workload.cdf_path(self.file))
                except workload.CdfError as e:
                    problems.append(("file", self.file, f"{e}; or name a shipped CDF: "
                                                        f"{', '.join(workload.SHIPPED_CDFS)}"))
        if problems:
            raise _field_errors(problems)
        return self

    def distribution(self) -> "workload.SizeDistribution":
        cap = None if self.max is None else float(self.max)
        if self.dist == "exponential":
            assert self.mean is not None
            return workload.SizeDistribution("exponential", mean=float(self.mean), cap=cap)
        if self.dist == "pareto":
            assert self.shape is not None
            scale = self.scale if self.scale is not None else (self.mean or 0) * (self.shape - 1) / self.shape
            return workload.SizeDistribution("pareto", scale=float(scale), shape=self.shape, cap=cap)
        assert self.file is not None
        return workload.SizeDistribution("cdf", points=workload.load_cdf(workload.cdf_path(self.file)))


#: Discriminator tags of ``size``: one size, or a distribution. They are left out of the
#: paths in error messages (``flows[0].size``, ``flows[0].size.mean``).
SIZE_TAGS = ("<one size>", "<distribution>")
FlowSize = Annotated[
    Union[Annotated[PositiveSize, Tag(SIZE_TAGS[0])], Annotated[SizeDist, Tag(SIZE_TAGS[1])]],
    Discriminator(lambda v: SIZE_TAGS[1] if isinstance(v, (dict, SizeDist)) else SIZE_TAGS[0]),
    BeforeValidator(_size_shorthand),
]


#: What a flow group sends: TCP (the default), a UDP stream, or ping probes (see the core's
#: ``datagram`` module for what each models).
FlowKind = Literal["tcp", "udp", "ping"]
FLOW_KINDS: tuple[FlowKind, ...] = typing.get_args(FlowKind)
#: The fields only TCP flows take: a udp or ping group naming one is refused.
TCP_FIELDS = ("cc", "params", "size", "arrivals", "rwnd", "pacing", "max_pacing_rate", "initial_cwnd", "delayed_ack",
              "read_interval", "ecn")
#: The fields only datagram flows take, and the kinds that take each.
DATAGRAM_FIELDS = {"rate": ("udp",), "on": ("udp",), "off": ("udp",), "periods": ("udp",),
                   "interval": ("ping",), "packet_size": ("udp", "ping")}
#: Which way a flow group's data goes: ``forward`` (left to right, through ``link``) or
#: ``reverse`` (right to left, through ``link.reverse``; its ACKs queue in the forward one).
FlowDirection = Literal["forward", "reverse"]
#: A ping probe's default size: the IP packet of ``ping``'s default 56 bytes of data.
PING_PACKET_SIZE = 84
PING_INTERVAL_NS = 10_000_000
#: IPv4 and UDP headers: a datagram's payload is its packet size less these.
UDP_HEADERS: int = CORE_DEFAULTS["udp_headers"]


class FlowGroup(_Model):
    """``count`` flows alike; the k-th starts at ``start + k * stagger``."""

    cc: Optional[str] = None
    count: PositiveU32 = 1
    start: NonNegativeTime = 0
    stagger: NonNegativeTime = 0
    params: dict[str, Annotated[float, BeforeValidator(units.parse_param)]] = Field(default_factory=dict)
    extra_delay: NonNegativeTime = 0
    #: Bytes to send: one size for every flow, or a distribution each flow draws from.
    size: Optional[FlowSize] = None
    #: A workload: flows start at the arrivals' times (``count`` and ``stagger`` do not apply).
    arrivals: Annotated[Optional[Arrivals], BeforeValidator(_arrivals_shorthand)] = None
    rwnd: Optional[PositiveSize] = None
    pacing: Optional[StrictBool] = None
    initial_cwnd: PositiveU32 = CORE_DEFAULTS["initial_cwnd"]
    delayed_ack: Annotated[DelayedAck, BeforeValidator(_delack_shorthand)] = Field(default_factory=DelayedAck)
    #: The receiving application reads every this long (on the trial's clock); 0 reads as soon
    #: as data arrives. Linux ACKs unread data only while the window can stay as offered, else
    #: after the read: a reader that takes several segments a read gets one ACK per read.
    read_interval: NonNegativeTime = 0
    group: Optional[str] = None
    #: Negotiate ECN (RFC 3168): data leaves ECN-capable (ECT(0)) and CE marks are echoed;
    #: ``"l4s"`` also negotiates it but sends ECT(1), the L4S identifier (RFC 9331).
    ecn: Optional[Union[StrictBool, Literal["l4s"]]] = None
    #: What the group sends: ``tcp`` (None is tcp), ``udp`` or ``ping``.
    kind: Optional[FlowKind] = None
    #: ``SO_MAX_PACING_RATE``: caps the pacing rate, and paces an algorithm that does not.
    max_pacing_rate: Optional[PositiveRate] = None
    #: udp: the sending rate (IP packets, as the link capacity counts them).
    rate: Optional[PositiveRate] = None
    #: udp and ping: IP packet size (udp: the mtu; ping: 84 B, ``ping``'s default probe).
    packet_size: Optional[PositiveSize] = None
    #: udp on/off: mean on and off period lengths (both, or neither for constant bit rate).
    on: Optional[PositiveTime] = None
    off: Optional[PositiveTime] = None
    #: udp on/off: ``fixed`` periods, or ``exponential`` draws of those means.
    periods: Optional[Literal["fixed", "exponential"]] = None
    #: ping: time between probes (10 ms).
    interval: Optional[PositiveTime] = None
    #: ``forward`` (None is forward) or ``reverse``.
    direction: Optional[FlowDirection] = None

    @property
    def flow_direction(self) -> FlowDirection:
        return self.direction or "forward"

    @property
    def flow_kind(self) -> FlowKind:
        return self.kind or "tcp"

    @model_validator(mode="after")
    def _fields_fit_kind(self) -> "FlowGroup":
        kind = self.flow_kind
        # A field counts as given when it holds other than its default (a normalised trial
        # written back in full holds every default).
        fields = type(self).model_fields
        given = {n for n in self.model_fields_set
                 if getattr(self, n) != fields[n].get_default(call_default_factory=True)}
        shown = self.model_dump(mode="json")  # values in the trial file's units
        problems: list[tuple[str, Any, str]] = []
        if kind == "tcp":
            if self.cc is None:
                problems.append(("cc", None, f"missing: a tcp flow group names its congestion control; "
                                             f"valid are {', '.join(sorted(algorithms()))}"))
        else:
            for name in TCP_FIELDS:
                if name in given:
                    problems.append((name, shown[name], f"a {kind} flow group takes no {name} (TCP only)"))
        for name, kinds in DATAGRAM_FIELDS.items():
            if name in given and kind not in kinds:
                problems.append((name, shown[name], f"a {kind} flow group takes no {name} "
                                                            f"({' and '.join(kinds)} only)"))
        if self.max_pacing_rate is not None and self.pacing is False:
            problems.append(("pacing", False, "a max_pacing_rate turns pacing on (Linux SK_PACING_NEEDED); "
                                              "drop pacing = false or the cap"))
        if self.arrivals is not None:
            for name in ("count", "stagger"):
                if name in given:
                    problems.append((name, shown[name], "a workload's arrivals decide how many flows start and when; "
                                                        f"drop {name}"))
            if self.size is None and kind == "tcp":
                problems.append(("size", None, "missing: a workload's flows need a size (one size, a distribution, "
                                               f"or {' or '.join(workload.SHIPPED_CDFS)})"))
            if self.arrivals.model == "fixed" and "start" in given:
                problems.append(("start", shown["start"], "fixed arrivals list absolute times; drop start"))
        if kind == "udp":
            if self.rate is None:
                problems.append(("rate", None, "missing: a udp flow group needs its sending rate, e.g. rate = \"10Mbit\""))
            if (self.on is None) != (self.off is None):
                problems.append(("on" if self.on is None else "off", None,
                                 "missing: an on/off stream gives both on and off (neither for constant bit rate)"))
            if self.periods is not None and self.on is None:
                problems.append(("periods", shown["periods"], "applies to on/off streams only: give on and off"))
        if problems:
            raise _field_errors(problems)
        return self

    @field_validator("cc")
    @classmethod
    def _known_cc(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return v
        if v.startswith(BPF_PREFIX):
            if not v[len(BPF_PREFIX):].strip():
                raise ValueError("bpf: needs an object, e.g. bpf:path/to/cc.bpf.o, or bpf:bbr / bpf:reno (the project's own)")
            return v
        algos = algorithms()
        if v not in algos:
            raise ValueError(
                f"unknown algorithm; valid are {', '.join(sorted(algos))}, "
                f"or {BPF_PREFIX}PATH (a BPF congestion-control object)"
            )
        return v

    @field_validator("params")
    @classmethod
    def _known_params(cls, v: dict[str, float], info: ValidationInfo) -> dict[str, float]:
        cc = info.data.get("cc")
        if cc is None:  # the algorithm itself is wrong; reported on its own
            return v
        if cc.startswith(BPF_PREFIX):  # the object's read-only globals; the kernel backend checks them
            bad = [k for k, x in v.items() if not math.isfinite(x)]
            if bad:
                raise _field_error(bad[0], v[bad[0]], "must be a finite number")
            return v
        valid = algorithms()[cc]
        unknown = sorted(k for k in v if k not in valid)
        if unknown:
            raise _field_error(
                unknown[0],
                v[unknown[0]],
                f"unknown parameter{'s ' + ', '.join(unknown) if len(unknown) > 1 else ''} for {cc}; "
                f"valid are {', '.join(sorted(valid)) or 'none'}",
            )
        bad = [k for k, x in v.items() if not math.isfinite(x)]
        if bad:
            raise _field_error(bad[0], v[bad[0]], "must be a finite number")
        return v

    @property
    def label(self) -> str:
        return self.group or self.algorithm

    @property
    def algorithm(self) -> str:
        """The ``cc`` column's value: the algorithm of a tcp group, the kind of a datagram group."""
        return self.cc if self.cc is not None else self.flow_kind

    def datagram_size(self, mtu: int) -> int:
        """A udp or ping group's IP packet size."""
        if self.packet_size is not None:
            return self.packet_size
        return mtu if self.flow_kind == "udp" else PING_PACKET_SIZE

    def traffic_core(self, mtu: int) -> Optional[dict[str, Any]]:
        """The core's ``traffic`` of a datagram group (None for tcp)."""
        if self.flow_kind == "udp":
            assert self.rate is not None
            return {"kind": "udp", "rate_bps": self.rate, "size_bytes": self.datagram_size(mtu),
                    "on_ns": self.on, "off_ns": self.off, "exponential": self.periods == "exponential"}
        if self.flow_kind == "ping":
            return {"kind": "ping", "interval_ns": self.interval or PING_INTERVAL_NS, "size_bytes": self.datagram_size(mtu)}
        return None


#: Where a trial's packets may be captured.
CapturePoint = Literal["senders", "receivers", "ingress", "egress"]
CAPTURE_POINTS: tuple[CapturePoint, ...] = typing.get_args(CapturePoint)
DEFAULT_CAPTURE_POINTS: tuple[CapturePoint, ...] = ("senders", "receivers")


_SNAPLEN = CORE_DEFAULTS["capture"]


class Capture(_Model):
    """Packet captures: which points record and how much of each frame (``capture = true``
    is every sender and receiver host with the default snap length)."""

    #: ``senders`` and ``receivers``: one file per host; ``ingress`` and ``egress``: the
    #: bottleneck router's, before and after its queue (simulator only).
    points: list[CapturePoint] = Field(default_factory=lambda: list(DEFAULT_CAPTURE_POINTS), min_length=1)
    #: Bytes kept of each frame (tcpdump's ``-s``); every header the simulator writes fits in 94.
    snaplen: Annotated[int, Strict(), AfterValidator(_int_range(_SNAPLEN["snaplen_min"], _SNAPLEN["snaplen_max"]))] = (
        _SNAPLEN["snaplen"]
    )
    #: ``pcap`` (nanosecond timestamps) or ``pcapng``.
    format: Literal["pcap", "pcapng"] = _SNAPLEN["format"]

    @field_validator("points")
    @classmethod
    def _once(cls, v: list[str]) -> list[str]:
        twice = sorted({p for p in v if v.count(p) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} given twice; name each point once")
        return v


def _capture_shorthand(v: Any) -> Any:
    # ``capture = true``: the defaults; ``false``: none
    if v is True:
        return Capture()
    return None if v is False else v


@dataclasses.dataclass(frozen=True)
class FlowSpec:
    """One flow of a trial: its group's index, start time and size (None: bulk)."""

    group: int
    start_ns: int
    size: Optional[int]


#: Expanded flow lists by the settings that decide them (a Trial is not hashable); a few
#: trials' worth, as a trial's list is read by the runner, the schema and the backends.
_FLOW_LISTS: dict[str, tuple[FlowSpec, ...]] = {}
_FLOW_LISTS_KEPT = 8


def _expand(trial: "Trial") -> tuple[FlowSpec, ...]:
    out: list[FlowSpec] = []
    for gi, g in enumerate(trial.flows):
        a = g.arrivals
        if a is None:
            starts = [g.start + k * g.stagger for k in range(g.count)]
        elif a.model == "fixed":
            starts = list(a.times or ())
        else:
            rng = workload.stream(trial.seed, gi, workload.ARRIVALS)
            starts = workload.poisson_arrivals(rng, trial.workload_rate(gi), g.start, a.until or trial.duration)
        if isinstance(g.size, SizeDist):
            rng = workload.stream(trial.seed, gi, workload.SIZES)
            sizes: list[Optional[int]] = list(workload.draw_sizes(rng, g.size.distribution(), len(starts)))
        else:
            sizes = [g.size] * len(starts)
        out += [FlowSpec(gi, t, sz) for t, sz in zip(starts, sizes)]
    return tuple(out)


class Trial(_Model):
    """One trial: a dumbbell with one bottleneck and groups of bulk (or sized) flows."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$", max_length=200)] = "trial"
    duration: PositiveTime
    steady: Optional[tuple[NonNegativeTime, NonNegativeTime]] = None
    seed: Annotated[int, Strict(), AfterValidator(_int_range(0, U64_MAX))] = 1
    sample_interval: PositiveTime = CORE_DEFAULTS["sample_interval_ns"]
    mtu: Annotated[int, Strict(), AfterValidator(_int_range(68, 65535))] = CORE_DEFAULTS["mtu"]
    mss: Annotated[int, Strict(), AfterValidator(_int_range(1, 65535))] = CORE_DEFAULTS["mss"]
    link: Link
    flows: list[FlowGroup] = Field(min_length=1)
    #: Where the trial runs: the simulator (default) or real Linux TCP (cctestbed.kernel).
    backend: Optional[Literal["sim", "kernel"]] = None
    #: Packet captures (pcap): ``true`` for every sender and receiver host, or a table
    #: choosing the points and the snap length; ``false`` or absent for none.
    capture: Annotated[Optional[Capture], BeforeValidator(_capture_shorthand)] = None

    @property
    def capture_config(self) -> Optional[Capture]:
        """The captures to write, or None."""
        return self.capture

    @field_validator("steady")
    @classmethod
    def _steady_inside(cls, v: Optional[tuple[int, int]], info: ValidationInfo) -> Optional[tuple[int, int]]:
        if v is None:
            return v
        start, end = v
        duration = info.data.get("duration")
        if start >= end:
            raise ValueError("the window must start before it ends")
        if duration is not None and end > duration:
            raise ValueError(f"must lie within the duration (0 to {units.format_time(duration)})")
        return v

    @model_validator(mode="after")
    def _fits_together(self) -> "Trial":
        # Checks that need fields of more than one model; every problem is reported.
        problems: list[tuple[str, Any, str]] = []
        if self.mss + 20 > self.mtu:  # checked here so that the default mss meets a small mtu too
            problems.append(("mss", self.mss, f"must be at most mtu - 20 ({self.mtu - 20}) with mtu {self.mtu}"))
        problems += self._sampling_problems()
        limit_bytes, _ = self.link.queue_limits()
        if limit_bytes is not None and limit_bytes > MAX_SIZE_BYTES:
            problems.append(
                (
                    "link.queue",
                    str(self.link.queue),
                    f"is {limit_bytes} B; out of range; valid are up to {units.format_size(MAX_SIZE_BYTES)}",
                )
            )
        elif limit_bytes is not None and limit_bytes < self.mtu:
            problems.append(
                ("link.queue", str(self.link.queue), f"holds {limit_bytes} B; must hold at least one packet ({self.mtu} B)")
            )
        problems += self._reverse_problems()
        for name in ("shaper", "policer"):
            tb: Optional[TokenBucket] = getattr(self.link, name)
            if tb is not None and tb.burst < self.mtu:
                problems.append(
                    (f"link.{name}.burst", units.format_size(tb.burst), f"must be at least one packet ({self.mtu} B)")
                )
        for i, change in enumerate(self.link.schedule):
            if change.at >= self.duration:
                problems.append(
                    (
                        f"link.schedule[{i}].at",
                        units.format_time(change.at),
                        f"must be within the duration ({units.format_time(self.duration)})",
                    )
                )
        timed: tuple[tuple[str, list[Union[CapacityChange, DelayChange]]], ...] = (
            ("schedule", list(self.link.schedule)), ("delay_schedule", list(self.link.delay_schedule)))
        for name, changes in timed:
            seen: dict[int, int] = {}
            for i, c in enumerate(changes):
                if c.at in seen:
                    problems.append(
                        (
                            f"link.{name}[{i}].at",
                            units.format_time(c.at),
                            f"the same time as link.{name}[{seen[c.at]}]; give each time once",
                        )
                    )
                seen.setdefault(c.at, i)
        n_flows = math.ceil(sum(self.expected_flows_of(i) for i in range(len(self.flows))))
        if n_flows > U32_MAX:
            problems.append(("flows", None, f"{n_flows} flows in all; at most {U32_MAX}"))
        for i, dchange in enumerate(self.link.delay_schedule):
            if dchange.at >= self.duration:
                problems.append(
                    (
                        f"link.delay_schedule[{i}].at",
                        units.format_time(dchange.at),
                        f"must be within the duration ({units.format_time(self.duration)})",
                    )
                )
        for i, g in enumerate(self.flows):
            problems += self._arrival_problems(i, g)
            last = g.start + (g.count - 1) * g.stagger
            if g.arrivals is None and last >= self.duration:
                problems.append(
                    (
                        f"flows[{i}].start",
                        units.format_time(g.start),
                        f"the group's last flow starts at {units.format_time(last)}; "
                        f"every flow must start before the end ({units.format_time(self.duration)})",
                    )
                )
            if g.flow_kind != "tcp":
                size = g.datagram_size(self.mtu)
                if not UDP_HEADERS < size <= self.mtu:
                    problems.append((f"flows[{i}].packet_size", units.format_size(size),
                                     f"must be from {UDP_HEADERS + 1} B to the mtu ({self.mtu} B): "
                                     f"an IP packet with its IPv4 and UDP headers"))
                if self.capture is not None:
                    problems.append(("capture", True, f"packet captures record TCP only; flows[{i}] is {g.flow_kind}: "
                                                      "remove capture or the group"))
            if g.rwnd is not None and g.rwnd < self.mss:
                problems.append(
                    (f"flows[{i}].rwnd", units.format_size(g.rwnd), f"must be at least one MSS ({self.mss} B)")
                )
        if problems:
            raise _field_errors(problems, absolute=True)
        return self

    def _reverse_problems(self) -> list[tuple[str, Any, str]]:
        """``link.reverse`` holds a packet and fits the core; reverse tcp flows have a bottleneck
        to find; captures record the forward path only."""
        problems: list[tuple[str, Any, str]] = []
        rev = self.link.reverse
        if rev is not None:
            limit_bytes, _ = self.link.reverse_queue_limits()
            if limit_bytes is not None and limit_bytes > MAX_SIZE_BYTES:
                problems.append(("link.reverse.queue", str(rev.queue),
                                 f"is {limit_bytes} B; out of range; valid are up to {units.format_size(MAX_SIZE_BYTES)}"))
            elif limit_bytes is not None and limit_bytes < self.mtu:
                problems.append(("link.reverse.queue", str(rev.queue),
                                 f"holds {limit_bytes} B; must hold at least one packet ({self.mtu} B)"))
        for i, g in enumerate(self.flows):
            if g.flow_direction != "reverse":
                continue
            if rev is None and g.flow_kind == "tcp":
                problems.append((f"flows[{i}].direction", "reverse",
                                 "a reverse tcp flow needs link.reverse (the reverse path's capacity and queue): "
                                 "without it that path is unconstrained and the flow would find no bottleneck"))
            if self.capture is not None:
                problems.append(("capture", True, f"packet captures record the forward path only; flows[{i}] is "
                                                  "reverse: remove capture or the group"))
        if rev is not None and self.capture is not None:
            problems.append(("capture", True, "packet captures record the forward path only; "
                                              "a trial with link.reverse takes none"))
        return problems

    def _arrival_problems(self, i: int, g: FlowGroup) -> list[tuple[str, Any, str]]:
        """A workload's arrivals must fall within the duration."""
        a, end = g.arrivals, units.format_time(self.duration)
        if a is None:
            return []
        if a.model == "fixed":
            return [(f"flows[{i}].arrivals.times[{k}]", units.format_time(t), f"must be before the end ({end})")
                    for k, t in enumerate(a.times or ()) if t >= self.duration]
        out = []
        if a.load is not None and isinstance(g.size, SizeDist) and not math.isfinite(g.size.distribution().expected()):
            out.append((f"flows[{i}].arrivals.load", units.format_percent(a.load),
                        "sets the rate from the mean size, and a Pareto of shape <= 1 has none: give the sizes a max, "
                        "a shape > 1, or the arrivals a rate"))
        until = a.until if a.until is not None else self.duration
        if a.until is not None and a.until > self.duration:
            out.append((f"flows[{i}].arrivals.until", units.format_time(a.until), f"must be within the duration ({end})"))
        if g.start >= until:
            out.append((f"flows[{i}].start", units.format_time(g.start),
                        f"arrivals run from start to until ({units.format_time(until)}); start must come first"))
        return out

    def _sampling_problems(self) -> list[tuple[str, Any, str]]:
        """Telemetry must have samples: the interval fits in the duration and the steady window."""
        iv = self.sample_interval
        shown = units.format_time(iv)
        if iv > self.duration:
            return [
                (
                    "sample_interval",
                    shown,
                    f"must not exceed the duration ({units.format_time(self.duration)}): no sample would be taken; "
                    "give a shorter sample_interval or a longer duration",
                )
            ]
        start, end = self.steady_ns
        if end // iv <= start // iv:  # no sample time k * interval in (start, end]
            return [
                (
                    "sample_interval",
                    shown,
                    f"no sample falls in the steady window ({units.format_time(start)} to {units.format_time(end)}); "
                    "give a shorter sample_interval or a longer window",
                )
            ]
        return []

    # --- derived values -----------------------------------------------------------------------

    @property
    def steady_ns(self) -> tuple[int, int]:
        """The steady-state window; the whole run when not given."""
        return self.steady if self.steady is not None else (0, self.duration)

    def input_files(self) -> list[Path]:
        """The files this trial reads besides its own: the link trace and each group's size CDF
        (a shipped CDF's name included). A command never replaces a directory holding one."""
        files = [Path(self.link.trace)] if self.link.trace is not None else []
        for g in self.flows:
            if isinstance(g.size, SizeDist) and g.size.dist == "cdf" and g.size.file:
                files.append(workload.cdf_path(g.size.file))
        return files

    def expanded(self) -> list[tuple[int, FlowGroup, int]]:
        """One (group index, group, start_ns) per flow, in flow-id order."""
        return [(f.group, g, f.start_ns) for f, g in zip(self.flow_list(), self._groups_per_flow())]

    def _groups_per_flow(self) -> list[FlowGroup]:
        return [self.flows[f.group] for f in self.flow_list()]

    def flow_list(self) -> tuple["FlowSpec", ...]:
        """Every flow in flow-id order, its start and size decided: groups in file order; a
        workload's flows in arrival order, its arrival times and sizes drawn from the trial
        seed (:mod:`cctestbed.workload`). The same trial gives the same list on every backend."""
        doc = self.model_dump(mode="json")
        key = json.dumps([doc["seed"], doc["duration"], doc["link"], doc["mss"], doc["mtu"], doc["flows"]], sort_keys=True)
        hit = _FLOW_LISTS.get(key)
        if hit is None:
            if len(_FLOW_LISTS) >= _FLOW_LISTS_KEPT:
                _FLOW_LISTS.pop(next(iter(_FLOW_LISTS)))
            hit = _FLOW_LISTS[key] = _expand(self)
        return hit

    def workload_rate(self, gi: int) -> float:
        """A Poisson workload group's arrival rate in flows per second (``rate``, or ``load``
        of the payload capacity over the group's mean size)."""
        g = self.flows[gi]
        assert g.arrivals is not None and g.arrivals.model == "poisson"
        if g.arrivals.rate is not None:
            return g.arrivals.rate
        mean = g.size.distribution().expected() if isinstance(g.size, SizeDist) else float(g.size or 0)
        payload_bps = self.link.capacity * self.mss / self.mtu
        return (g.arrivals.load or 0.0) * payload_bps / (8 * mean) if mean > 0 else 0.0

    def expected_flows_of(self, gi: int) -> float:
        """How many flows group ``gi`` starts (a Poisson workload's mean count)."""
        g = self.flows[gi]
        a = g.arrivals
        if a is None:
            return float(g.count)
        if a.model == "fixed":
            return float(len(a.times or ()))
        return self.workload_rate(gi) * max(0, (a.until or self.duration) - g.start) / 1e9

    def capacity_schedule(self) -> list[tuple[float, int]]:
        """Piecewise-constant capacity as (from second, bps), starting at 0; a trace link's in
        steps of the sample interval (:func:`cctestbed.traces.capacity_steps`)."""
        ms = self.link.trace_opportunities()
        if ms is not None:
            return traces.capacity_steps(ms, self.sample_interval, self.duration)
        steps = [(0.0, self.link.capacity)]
        for c in sorted(self.link.schedule, key=lambda c: c.at):
            steps.append((c.at / 1e9, c.capacity))
        return steps

    def to_core(self) -> dict[str, Any]:
        """The core's JSON config: SI integers, one entry per flow."""
        link = self.link
        fwd, rev = link.delays_ns
        limit_bytes, limit_pkts = link.queue_limits()

        def bucket(tb: Optional[TokenBucket]) -> Optional[dict[str, int]]:
            return None if tb is None else {"rate_bps": tb.rate, "burst_bytes": tb.burst}

        flows: list[dict[str, Any]] = []
        bpf_objects: dict[int, str] = {}
        for spec in self.flow_list():
            g, start = self.flows[spec.group], spec.start_ns
            traffic = g.traffic_core(self.mtu)
            direction = {"direction": "reverse"} if g.flow_direction == "reverse" else {}
            if traffic is not None:
                flows.append({"traffic": traffic, "start_ns": start, "extra_delay_ns": g.extra_delay, "group": g.label,
                              **direction})
                continue
            bpf = g.cc is not None and g.cc.startswith(BPF_PREFIX)
            if g.cc is not None and bpf and spec.group not in bpf_objects:
                bpf_objects[spec.group] = _bpf_object_hex(g.cc, g.params, spec.group)
            flows.append(
                {
                    "cc": "bpf" if bpf else g.cc,
                    "params": {} if bpf else dict(sorted(g.params.items())),
                    **({"bpf_object": bpf_objects[spec.group]} if bpf else {}),
                    "start_ns": start,
                    "extra_delay_ns": g.extra_delay,
                    "size_bytes": spec.size,
                    "rwnd_bytes": g.rwnd,
                    "pacing": g.pacing,
                    "initial_cwnd": g.initial_cwnd,
                    "delayed_ack": {
                        "enabled": g.delayed_ack.enabled,
                        "timeout_ns": g.delayed_ack.timeout,
                        "segments_per_ack": g.delayed_ack.segments_per_ack,
                        "quickacks": g.delayed_ack.quickacks,
                    },
                    "group": g.label,
                    **({"ecn": True} if g.ecn else {}),
                    **({"ect1": True} if g.ecn == "l4s" else {}),
                    **({"max_pacing_rate_bps": g.max_pacing_rate} if g.max_pacing_rate is not None else {}),
                    **({"read_interval_ns": g.read_interval} if g.read_interval else {}),
                    **direction,
                    **({"workload": True} if g.arrivals is not None else {}),
                }
            )
        return {
            "duration_ns": self.duration,
            "seed": self.seed,
            "sample_interval_ns": self.sample_interval,
            "mtu": self.mtu,
            "mss": self.mss,
            "link": {
                "capacity_bps": link.capacity,
                "delay_fwd_ns": fwd,
                "delay_rev_ns": rev,
                "queue": {"limit_bytes": limit_bytes, "limit_packets": limit_pkts},
                "loss": link.loss.to_core(),
                "shaper": bucket(link.shaper),
                "policer": bucket(link.policer),
                "schedule": [
                    {"at_ns": c.at, "capacity_bps": c.capacity} for c in sorted(link.schedule, key=lambda c: c.at)
                ],
                "delay_schedule": [
                    {"at_ns": c.at, "delay_fwd_ns": c.delays_ns[0], "delay_rev_ns": c.delays_ns[1]}
                    for c in sorted(link.delay_schedule, key=lambda c: c.at)
                ],
                "access_rate_bps": link.access_rate,
                "jitter_ns": link.jitter,
                **({"aqm": link.aqm.to_core()} if link.aqm is not None else {}),
                **({"trace": {"opportunities_ms": list(link.trace_opportunities() or ())}} if link.trace else {}),
                **({"ack_aggregation": link.ack_aggregation.to_core()} if link.ack_aggregation else {}),
                **({"reverse": self._reverse_core()} if link.reverse is not None else {}),
                "receiver_nic": link.receiver_nic.to_core(),
            },
            "flows": flows,
            **({"capture": self._capture_core()} if self.capture_config is not None else {}),
        }

    def _reverse_core(self) -> dict[str, Any]:
        rev = self.link.reverse
        assert rev is not None
        limit_bytes, limit_pkts = self.link.reverse_queue_limits()
        return {
            "capacity_bps": rev.capacity,
            "queue": {"limit_bytes": limit_bytes, "limit_packets": limit_pkts},
            "loss": rev.loss.to_core(),
            **({"aqm": rev.aqm.to_core()} if rev.aqm is not None else {}),
        }

    def _capture_core(self) -> dict[str, Any]:
        c = self.capture_config
        assert c is not None
        return {**{p: p in c.points for p in CAPTURE_POINTS}, "snaplen": c.snaplen, "format": c.format}

    def with_seed(self, seed: int) -> "Trial":
        """The same trial with another seed (validated like any trial)."""
        return parse_trial({**self.model_dump(mode="json"), "seed": seed}, allow_large=True)

    def with_backend(self, backend: str) -> "Trial":
        """The same trial on another backend ("sim" or "kernel"), validated like any trial."""
        return parse_trial({**self.model_dump(mode="json", exclude_none=True), "backend": backend}, allow_large=True)

    def to_core_json(self) -> str:
        return json.dumps(self.to_core(), sort_keys=True)

    def describe(self) -> str:
        """One line for plot titles: '2 cubic + 2 reno, 80 Mbit/s, RTprop 25 ms, queue 2bdp (625 KB)'."""
        groups: dict[str, int] = {}
        for g in self.flows:
            groups[g.label] = groups.get(g.label, 0) + (g.count if g.arrivals is None else 0)
        workloads = {g.label: g for g in self.flows if g.arrivals is not None}
        flows = " + ".join(f"{n} {label}" if label not in workloads else f"{label} ({self._workload_words(workloads[label])})"
                           for label, n in groups.items())
        limit_bytes, limit_pkts = self.link.queue_limits()
        q = str(self.link.queue)
        if limit_bytes is not None and self.link.queue.kind != "bytes":
            q += f" ({units.human_size(limit_bytes)})"
        rate = units.human_rate(self.link.capacity)
        if self.link.trace is not None:
            rate = f"trace {Path(self.link.trace).stem} (mean {rate})"
        parts = [
            flows,
            rate,
            f"RTprop {units.human_time(self.link.rtprop_ns)}",
            f"queue {q}",
        ]
        if self.link.aqm is not None:
            parts.append(self.link.aqm.describe())
        if self.link.loss.model != "none":
            parts.append(self.link.loss.describe())
        if self.link.schedule:
            parts.append("capacity schedule")
        if self.link.delay_schedule:
            parts.append("delay schedule")
        if self.link.jitter:
            parts.append(f"ACK jitter {units.human_time(self.link.jitter)}")
        agg = self.link.ack_aggregation
        if agg is not None:
            parts.append(f"ACKs aggregated ({agg.model}, {units.human_time(agg.interval)})")
        paced = {g.label: g.read_interval for g in self.flows if g.read_interval}
        if paced:
            parts.append(", ".join(f"{label} read every {units.human_time(t)}" for label, t in paced.items()))
        if self.link.reverse is not None:
            parts.append(self.link.reverse.describe())
        return ", ".join(parts)

    def _workload_words(self, g: FlowGroup) -> str:
        """'Poisson 60 % load, websearch sizes' for a plot title."""
        a = g.arrivals
        assert a is not None
        if a.model == "fixed":
            when = f"{len(a.times or ())} listed starts"
        elif a.load is not None:
            when = f"Poisson {units.format_percent(a.load)} load"
        else:
            when = f"Poisson {a.rate:g}/s"
        if isinstance(g.size, SizeDist):
            size = f"{Path(g.size.file).stem} sizes" if g.size.dist == "cdf" and g.size.file else f"{g.size.dist} sizes"
        else:
            size = units.human_size(g.size or 0)
        return f"{g.algorithm}, {when}, {size}"

    def to_toml(self) -> str:
        """The normalised trial file: canonical units, defaults filled in, resolved values as comments."""
        limit_bytes, limit_pkts = self.link.queue_limits()
        header = [
            f"# normalised trial '{self.name}'",
            f"# rtprop = {units.format_time(self.link.rtprop_ns)}, "
            f"bdp = {self.link.bdp_bytes():.0f} B, queue limit = "
            + (f"{limit_bytes} B" if limit_bytes is not None else f"{limit_pkts} packets"),
            f"# flows = {len(self.expanded())}",
        ]
        return "\n".join(header) + "\n\n" + _toml_dumps(_drop_empty(self.model_dump(mode="json", exclude_none=True)))


# --- loading and error reporting --------------------------------------------------------------


def _field_error(field: str, value: Any, msg: str) -> PydanticCustomError:
    """An error on ``field`` of the model being validated (the formatter appends it to the loc)."""
    return _field_errors([(field, value, msg)])


def _field_errors(problems: list[tuple[str, Any, str]], absolute: bool = False) -> PydanticCustomError:
    """Several errors raised as one; ``absolute`` fields are paths from the top of the trial."""
    return PydanticCustomError(
        "cctestbed",
        "{msg}",
        {"msg": "; ".join(m for _, _, m in problems), "problems": problems, "absolute": absolute},
    )


def _fmt_key(part: Any) -> str:
    """A key as TOML writes it in a dotted path: bare when it can be, else a basic string with
    every space and control character escaped, so a path never holds whitespace."""
    text = str(part)
    if re.fullmatch(r"[A-Za-z0-9_-]+", text):
        return text
    quoted = json.dumps(text)
    return re.sub(r"\s", lambda m: f"\\u{ord(m.group()):04x}", quoted)


def _fmt_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if part in SIZE_TAGS:
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + _fmt_key(part)
    return out or "(trial)"


def _model_in(annotation: Any) -> Optional[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _model_at(loc: tuple[Any, ...]) -> Optional[type[BaseModel]]:
    cls: Optional[type[BaseModel]] = Trial
    for part in loc:
        if isinstance(part, int) or part in SIZE_TAGS:
            continue
        if cls is None or part not in cls.model_fields:
            return None
        cls = _model_in(cls.model_fields[part].annotation)
    return cls


def _show(value: Any) -> str:
    """A value as the message shows it; very long ones shortened (a 400-digit number, a long string)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and abs(value) >= 10**30:
        digits = str(abs(value)) if abs(value) < 10**4000 else None
        if digits is None:
            return "a number of more than 4000 digits"
        return f"{'-' if value < 0 else ''}{digits[:6]}...{digits[-3:]} ({len(digits)} digits)"
    if isinstance(value, (str, int, float)):
        text = repr(value)
        return text if len(text) <= 80 else f"{text[:60]}... ({len(value) if isinstance(value, str) else len(text)} characters)"
    return ""


#: The last part of an error's location when pydantic tried one member of a union (``bool``,
#: ``literal['l4s']``): the errors of all members are one problem, said in words.
_UNION_MEMBER = re.compile(r"^(bool|int|float|str|literal\[.*\])$")


def _union_problems(errors: list[Any]) -> dict[tuple[Any, ...], str]:
    """For each field whose value matched no member of a union of ``true``/``false`` and fixed
    words (``ecn = true | "l4s"``): one message naming every valid value."""
    members: dict[tuple[Any, ...], list[Any]] = {}
    for err in errors:
        loc = tuple(err["loc"])
        if (len(loc) > 1 and isinstance(loc[-1], str) and _UNION_MEMBER.match(loc[-1])
                and err["type"] in ("bool_type", "bool_parsing", "literal_error")):
            members.setdefault(loc[:-1], []).append(err)
    out = {}
    for loc, errs in members.items():
        if len(errs) < 2:
            continue
        words = []
        if any(e["type"] != "literal_error" for e in errs):
            words.append("true or false (without quotes)")
        for e in errs:
            if e["type"] == "literal_error":
                words += [json.dumps(w) for w in re.findall(r"'([^']*)'", str(e.get("ctx", {}).get("expected", "")))]
        shown = _show(errs[0].get("input"))
        text = f"must be {', or '.join(words)}"
        out[loc] = f"{_fmt_loc(loc)}: {shown}: {text}" if shown else f"{_fmt_loc(loc)}: {text}"
    return out


def format_errors(exc: ValidationError) -> list[str]:
    """Each pydantic error as ``field: value: what is valid``."""
    problems = []
    errors = exc.errors(include_url=False)
    unions = _union_problems(errors)
    for err in errors:
        loc = tuple(err["loc"])
        if loc[:-1] in unions:
            if unions[loc[:-1]] not in problems:
                problems.append(unions[loc[:-1]])
            continue
        value = err.get("input")
        msg = err["msg"]
        kind = err["type"]
        if kind == "cctestbed":
            ctx = err.get("ctx", {})
            for field, fvalue, fmsg in ctx.get("problems", []):
                if re.search(r"[^\w.\[\]-]", field):  # a key of the user's, not a path of ours
                    field = _fmt_key(field)
                path = field if ctx.get("absolute") else ".".join(p for p in (_fmt_loc(loc) if loc else "", field) if p)
                shown = _show(fvalue)
                problems.append(f"{path}: {shown}: {fmsg}" if shown else f"{path}: {fmsg}")
            continue
        path = _fmt_loc(loc)
        if kind == "extra_forbidden":
            parent = _model_at(loc[:-1])
            valid = ", ".join(parent.model_fields) if parent is not None else "none"
            problems.append(f"{path}: unknown key; valid are {valid}")
            continue
        if kind == "missing":
            problems.append(f"{path}: missing: required")
            continue
        msg = re.sub(r"^(Value error|Assertion failed), ", "", msg)
        if kind in ("int_parsing", "int_type") and isinstance(value, str):
            msg = "must be a whole number, written without quotes or unit"
        elif kind in ("int_type", "int_from_float"):
            msg = "must be a whole number"
        elif kind == "bool_type":
            msg = "must be true or false" + (", written without quotes" if isinstance(value, str) else "")
        shown = _show(value)
        problems.append(f"{path}: {shown}: {msg}" if shown else f"{path}: {msg}")
    return problems


# --- resources ----------------------------------------------------------------------------------

#: Above these limits a trial is refused unless large trials are allowed (``--allow-large``,
#: ``allow_large=True``): they would take more memory or time than a workstation has to give.
MAX_FLOWS = 10_000
#: A workload's flows have telemetry rows only while open, so they are limited by the memory
#: each flow takes otherwise (the simulator's state, kept to the end, and the flow list):
#: about 18 KB (measured: a 60 s trial of 24,000 flows peaks at 0.5 GB), so 100,000 is about 2 GB.
MAX_WORKLOAD_FLOWS = 100_000
#: Telemetry rows (flows x samples, plus the router's); about 450 bytes each in memory while a
#: trial runs and is written, so 5 million rows is about 2 GB.
MAX_ROWS = 5_000_000
ROW_BYTES = 450
#: Packets through the bottleneck (the core processes a few million a second).
MAX_PACKETS = 10**9
#: Bytes of packet captures (held in memory until the results directory is written).
MAX_CAPTURE_BYTES = 4 * 10**9


@dataclasses.dataclass(frozen=True)
class DatagramCost:
    """What one udp or ping group makes the simulator carry: its packets (a probe and its echo
    are two), and an on/off stream's periods (each a step of the simulator, sending or not)."""

    group: int
    packets: int
    periods: int = 0


@dataclasses.dataclass(frozen=True)
class Resources:
    """What a trial will cost: flows, telemetry samples and rows, and the packets the simulator
    carries (one model for every kind of flow, see :func:`resources`)."""

    flows: int
    samples: int
    rows: int
    #: Packets through the bottleneck at its highest capacity (each way that carries TCP
    #: data), and sent at once as initial windows.
    bottleneck_packets: int
    burst_packets: int

    @property
    def packets(self) -> int:
        """Every packet (and on/off period) the simulator will bear, whatever the link's rate."""
        return self.bottleneck_packets + self.burst_packets + sum(d.packets + d.periods for d in self.datagrams)

    @property
    def memory_bytes(self) -> int:
        return self.rows * ROW_BYTES

    #: Bytes of the packet captures the trial asks for (0 without ``capture``).
    capture_bytes: int = 0
    #: Of ``flows``, those of workloads (the mean count of a Poisson workload, rounded up).
    workload_flows: int = 0
    #: The udp and ping groups' packets: they send at their own rates, whatever the link takes.
    datagrams: tuple[DatagramCost, ...] = ()


def _active_ns(trial: "Trial", g: "FlowGroup") -> int:
    """Nanoseconds the flows of group ``g`` are running, summed (flow k starts at start + k x stagger)."""
    n = g.count
    return max(0, n * (trial.duration - g.start) - g.stagger * n * (n - 1) // 2)


def datagram_cost(trial: "Trial", gi: int) -> DatagramCost:
    """The packets of the udp or ping group ``gi``: a udp stream sends its rate of packets of
    its size while on (on / (on + off) of the time), ping a probe and its echo every interval."""
    g = trial.flows[gi]
    active = _active_ns(trial, g)
    if g.flow_kind == "ping":
        return DatagramCost(gi, 2 * active // (g.interval or PING_INTERVAL_NS))
    assert g.rate is not None
    bits = 8 * 10**9 * g.datagram_size(trial.mtu)
    if g.on is None or g.off is None:
        return DatagramCost(gi, -(-g.rate * active // bits))
    cycle = g.on + g.off
    return DatagramCost(gi, -(-g.rate * active * g.on // (bits * cycle)), active // cycle + g.count)


def resources(trial: "Trial") -> Resources:
    """The cost of ``trial``, computed from its settings (nothing is expanded or allocated)."""
    samples = trial.duration // trial.sample_interval
    top_rate = max([trial.link.capacity, *(c.capacity for c in trial.link.schedule)])
    bottleneck = trial.duration * top_rate // (8 * 10**9 * trial.mtu)
    reverse = trial.link.reverse
    if reverse is not None and any(g.flow_kind == "tcp" and g.flow_direction == "reverse" for g in trial.flows):
        bottleneck += trial.duration * reverse.capacity // (8 * 10**9 * trial.mtu)
    flows = burst = rows = workload_flows = 0
    fwd, rev = trial.link.delays_ns
    datagrams = tuple(datagram_cost(trial, gi) for gi, g in enumerate(trial.flows) if g.flow_kind != "tcp")
    for gi, g in enumerate(trial.flows):
        n = g.count if g.arrivals is None else math.ceil(trial.expected_flows_of(gi))
        flows += n
        workload_flows += 0 if g.arrivals is None else n
        one = g.size if isinstance(g.size, int) else None
        # the initial windows go out at once, whatever the link's rate
        burst += n * min(g.initial_cwnd, -(-one // trial.mss) if one is not None else g.initial_cwnd)
        if g.arrivals is None:
            rows += samples * n
        else:
            # a workload's flow has rows while it is open: estimated from its mean size alone
            # on the path, plus the interval it starts in and the one it ends in
            mean = g.size.distribution().expected() if isinstance(g.size, SizeDist) else float(g.size or 1)
            open_ns = workload.ideal_fct_ns(int(min(mean, 1e18)), trial.link.capacity, fwd, rev, trial.mss, trial.mtu)
            rows += math.ceil(n * (2 + open_ns / trial.sample_interval))
    capture = 0
    c = trial.capture
    if c is not None:
        # each data packet once per point; an ACK (about one per two segments) at each host point
        frame = 16 + min(c.snaplen, trial.mtu + 14)
        ack = 16 + min(c.snaplen, 94)
        packets = bottleneck + burst
        capture = packets * len(c.points) * frame + packets // 2 * len(set(c.points) & {"senders", "receivers"}) * ack
    return Resources(flows, samples, rows + samples, bottleneck, burst, capture, workload_flows, datagrams)


def _n(x: int) -> str:
    return f"{x:,}" if x < 10**15 else f"{x:.3g}"


def resource_problems(trial: "Trial") -> list[str]:
    """Why ``trial`` is too large to run without ``--allow-large`` (empty when it is not)."""
    r = resources(trial)
    hint = "; or pass --allow-large to run it anyway"
    out = []
    if r.flows - r.workload_flows > MAX_FLOWS:
        out.append(f"flows: {_n(r.flows - r.workload_flows)} flows in all; more than {_n(MAX_FLOWS)} is refused as "
                   f"too large{hint}")
    if r.workload_flows > MAX_WORKLOAD_FLOWS:
        out.append(f"flows.arrivals: about {_n(r.workload_flows)} workload flows in all; more than "
                   f"{_n(MAX_WORKLOAD_FLOWS)} (about 18 KB of memory each) is refused as too large: "
                   f"give a lower rate or load, or a shorter duration{hint}")
    if r.rows > MAX_ROWS:
        how = (f"x ({_n(r.flows)} flow(s) + the router) =" if not any(g.arrivals for g in trial.flows) else
               f"of {_n(r.flows)} flow(s) (a workload's flows while open) = about")
        out.append(
            f"sample_interval: {units.format_time(trial.sample_interval)}: {_n(r.samples)} samples {how} "
            f"{_n(r.rows)} telemetry rows, about "
            f"{units.human_size(r.memory_bytes)} of memory; "
            f"the limit is {_n(MAX_ROWS)} rows (about {units.human_size(MAX_ROWS * ROW_BYTES)}): give a longer "
            f"sample_interval, a shorter duration or fewer flows{hint}"
        )
    if r.capture_bytes > MAX_CAPTURE_BYTES:
        out.append(
            f"capture: about {units.human_size(r.capture_bytes)} of packet captures ({_n(r.packets)} packets at "
            f"{len(trial.capture.points) if trial.capture else 0} point(s)); the limit is "
            f"{units.human_size(MAX_CAPTURE_BYTES)}: capture fewer points, a smaller snaplen or a shorter "
            f"duration{hint}"
        )
    if r.packets > MAX_PACKETS:
        out += _packet_problems(trial, r, hint)
    return out


def _round(x: int, up: bool) -> int:
    """``x`` rounded to three significant digits, up or down (a bound told to the user)."""
    step = 10 ** max(0, len(str(x)) - 3)
    return -(-x // step) * step if up else x // step * step


def _packet_problems(trial: "Trial", r: Resources, hint: str) -> list[str]:
    """The packet limit's refusal, naming the largest contributor's field with the value that
    would fit beside the rest (the bottleneck, the initial windows, a udp stream's rate or
    periods, a ping group's interval)."""
    limit = f"the limit is {_n(MAX_PACKETS)} packets a trial (minutes of CPU)"
    parts: list[tuple[int, Any]] = [(r.bottleneck_packets, "duration"), (r.burst_packets, "burst")]
    parts += [(d.packets, d) for d in r.datagrams] + [(d.periods, ("periods", d)) for d in r.datagrams]
    top, what = max(parts, key=lambda p: p[0])
    room = MAX_PACKETS - (r.packets - top)  # what the largest part may take beside the rest
    if isinstance(what, (DatagramCost, tuple)):
        d = what if isinstance(what, DatagramCost) else what[1]
        g = trial.flows[d.group]
        at, n = f"flows[{d.group}]", f"{g.count} flow(s)"
        active = _active_ns(trial, g)
        if isinstance(what, tuple):
            assert g.on is not None and g.off is not None
            fit = (f"give on + off of at least {units.format_time(_round(-(-active // room), True))}" if room > 0
                   else "give longer periods")
            return [f"{at}.on: {units.format_time(g.on)}: about {_n(top)} on/off periods of {n} (each a step of the "
                    f"simulator, sending or not) and {_n(r.packets)} packets and periods in all; {limit}: {fit}, "
                    f"or a shorter duration{hint}"]
        if g.flow_kind == "ping":
            interval = g.interval or PING_INTERVAL_NS
            fit = (f"give an interval of at least {units.format_time(_round(-(-2 * active // room), True))}" if room > 0
                   else "give a longer interval")
            return [f"{at}.interval: {units.format_time(interval)}: about {_n(top)} probes and echoes of {n} "
                    f"and {_n(r.packets)} packets in all; {limit}: {fit}, or a shorter duration{hint}"]
        assert g.rate is not None
        on, cycle = (g.on, g.on + g.off) if g.on is not None and g.off is not None else (1, 1)
        most = _round(room * 8 * 10**9 * g.datagram_size(trial.mtu) * cycle // (active * on), False) if room > 0 else 0
        fit = f"give a rate of at most {units.format_rate(most)}" if most > 0 else "give a lower rate"
        return [f"{at}.rate: {units.format_rate(g.rate)}: about {_n(top)} packets of {n} (rate x the time it "
                f"sends / {g.datagram_size(trial.mtu)} B, whatever the link takes) and {_n(r.packets)} in all; "
                f"{limit}: {fit}, or a shorter duration{hint}"]
    out = []
    if what == "burst":
        out.append(
            f"flows.initial_cwnd: initial windows of {_n(r.burst_packets)} packets in all, sent at once; the limit "
            f"is {_n(MAX_PACKETS)} packets a trial (minutes of CPU): give a smaller initial_cwnd{hint}"
        )
    else:
        out.append(
            f"duration: {units.format_time(trial.duration)}: about {_n(r.packets)} packets through the bottleneck "
            f"(capacity x duration); the limit is {_n(MAX_PACKETS)} "
            f"(minutes of CPU): give a shorter duration or a lower capacity{hint}"
        )
    return out


def count_problems(data: dict[str, Any]) -> list[str]:
    """The flow groups and listed arrival times of a raw trial, counted before any is validated
    or built: past the flow limits the trial is refused without the work (and memory) of
    validating each (empty when within them)."""
    hint = "; or pass --allow-large to run it anyway"
    flows = data.get("flows")
    if not isinstance(flows, list):
        return []
    if len(flows) > MAX_FLOWS:
        return [f"flows: {_n(len(flows))} flow groups, each of at least one flow; more than {_n(MAX_FLOWS)} flows "
                f"is refused as too large: give fewer groups (a group's count starts several alike){hint}"]
    out, total = [], 0
    for gi, g in enumerate(flows):
        a = g.get("arrivals") if isinstance(g, dict) else None
        times = a if isinstance(a, list) else a.get("times") if isinstance(a, dict) else None
        if not isinstance(times, list):
            continue
        total += len(times)
        if len(times) > MAX_WORKLOAD_FLOWS:
            out.append(f"flows[{gi}].arrivals: {_n(len(times))} arrival times; more than {_n(MAX_WORKLOAD_FLOWS)} "
                       f"workload flows (about 18 KB of memory each) is refused as too large: list fewer, or give "
                       f"a poisson rate{hint}")
    if not out and total > MAX_WORKLOAD_FLOWS:
        out.append(f"flows.arrivals: {_n(total)} arrival times in all; more than {_n(MAX_WORKLOAD_FLOWS)} workload "
                   f"flows (about 18 KB of memory each) is refused as too large: list fewer{hint}")
    return out


def parse_trial(data: dict[str, Any], source: str | None = None, allow_large: bool = False) -> Trial:
    """Validate a trial given as a dict; raises :class:`ConfigError` listing every problem.

    A trial past the resource limits (:func:`resource_problems`) is refused unless
    ``allow_large``; either way it is refused before anything is expanded or allocated."""
    if not isinstance(data, dict):
        raise ConfigError(["(trial): expected a table of settings"], source)
    if not allow_large:  # counted before anything is built, so that validation's own work is bounded
        problems = count_problems(data)
        if problems:
            raise ConfigError(problems, source)
    try:
        trial = Trial.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_errors(e), source) from None
    except RecursionError:
        raise ConfigError(["(trial): nested too deeply (arrays or tables within each other)"], source) from None
    if not allow_large:
        problems = resource_problems(trial)
        if problems:
            raise ConfigError(problems, source)
    problems = core_problems(trial)
    if problems:
        raise ConfigError(problems, source)
    return trial


def core_problems(trial: Trial) -> list[str]:
    """Problems the core finds that the schema does not, each at its path (a flow's index mapped
    to its group's)."""
    groups = [gi for gi, _, _ in trial.expanded()]
    out: list[str] = []
    core = trial.to_core()
    for f in core["flows"]:  # a BPF object is the kernel's to check; the rest of its group is the core's
        if str(f.get("cc", "")).startswith(BPF_PREFIX):
            f["cc"], f["params"] = "reno", {}
    try:
        found = _core.validate(json.dumps(core, sort_keys=True))
    except ValueError as e:  # the core could not read what the schema let through: a bug, told plainly
        return [f"(trial): the simulator core cannot represent this trial: {e}"]
    for path, message in found:
        if path[:1] == ["flows"] and len(path) > 1 and isinstance(path[1], int) and path[1] < len(groups):
            path = ["flows", groups[path[1]], *path[2:]]  # a flow's index is its group's in the file
        p = f"{_fmt_loc(tuple(path))}: {message}"
        if p not in out:
            out.append(p)
    return out


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """JSON object hook: a key given twice is an error (TOML refuses it by itself)."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def read_trial_file(path: Union[str, Path], what: str = "trial file") -> dict[str, Any]:
    """The raw table in a TOML or JSON trial file (JSON if it ends in .json).

    The file is read through the guarded reader (:mod:`cctestbed.inputs`: a regular file of at
    most the size of its kind, ``what``, UTF-8 with an optional byte-order mark). Anything that is not a
    readable UTF-8 TOML/JSON document (a FIFO or device, a binary or Latin-1 file, a key given
    twice, nesting too deep to read) is a :class:`ConfigError` naming the file."""
    from .inputs import InputError, read_text

    path = Path(path)
    try:
        text = read_text(path, what)
    except InputError as e:
        raise ConfigError([str(e)]) from None
    if "\x00" in text:
        raise ConfigError([f"{path}: holds NUL bytes: a binary file, not a TOML or JSON trial file"])
    kind = "JSON" if path.suffix.lower() == ".json" else "TOML"
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates) if kind == "JSON" else tomllib.loads(text)
        return _files_relative_to(doc, path.parent)
    except _DuplicateKey as e:
        raise ConfigError([f"{path}: key '{e}' is given twice in one table; give each key once"]) from None
    except json.JSONDecodeError as e:
        raise ConfigError([f"{path}: line {e.lineno}: not valid JSON: {e.msg}"]) from None
    except tomllib.TOMLDecodeError as e:
        hint = "; a key or table is given twice: give each once" if "overwrite" in str(e).lower() else ""
        raise ConfigError([f"{path}: not valid TOML: {e}{hint}"]) from None
    except RecursionError:
        raise ConfigError([f"{path}: nested too deeply to read (arrays or tables within each other)"]) from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        raise ConfigError([f"{path}: not valid {kind}: {e}"]) from None


def _files_relative_to(doc: Any, base: Path) -> Any:
    """Trace, CDF and BPF object files named relative to the file that names them, made
    absolute: ``trace`` in any ``link`` table (a trial, a sweep's base, a suite's scenarios), a
    sweep axis over ``link.trace``, a flow group's ``size.file`` (but a shipped CDF's name) and
    its ``cc = "bpf:PATH"`` (but a project object's name, ``bpf:bbr``; a ``#NAME`` suffix kept)."""
    from .kernel import bpfcc

    def bpf_file(cc: Any) -> Any:
        return bpfcc.with_object_path(cc, lambda path: traces.resolve(path, base))

    def walk(v: Any, key: Optional[str]) -> None:
        if isinstance(v, dict):
            if "cc" in v:
                v["cc"] = bpf_file(v["cc"])
            if key == "axes":  # a sweep axis over a group's cc: "flows.0.cc" = ["cubic", "bpf:mine.o"]
                for k, axis in v.items():
                    if k.rsplit(".", 1)[-1] == "cc" and isinstance(axis, list):
                        v[k] = [bpf_file(x) for x in axis]
            if key == "link" and isinstance(v.get("trace"), str):
                v["trace"] = traces.resolve(v["trace"], base)
            if key == "size" and isinstance(v.get("file"), str) and v["file"] not in workload.SHIPPED_CDFS:
                v["file"] = str(workload.cdf_path(v["file"], base))
            axis = v.get("link.trace") if key == "axes" else None
            if isinstance(axis, list):
                v["link.trace"] = [traces.resolve(x, base) if isinstance(x, str) else x for x in axis]
            for k, x in v.items():
                walk(x, k)
        elif isinstance(v, list):
            for x in v:
                walk(x, key)

    walk(doc, None)
    return doc


def load_trial(source: Union[str, Path, dict[str, Any], Trial], allow_large: bool = False) -> Trial:
    """A validated trial from a file path, a dict, or a :class:`Trial` (returned as is).

    ``allow_large``: accept trials past the resource limits (see :func:`parse_trial`)."""
    if isinstance(source, Trial):
        return source
    if isinstance(source, dict):
        return parse_trial(source, allow_large=allow_large)
    path = Path(source)
    data = read_trial_file(path)
    if isinstance(data, dict) and "name" not in data:
        data = {"name": re.sub(r"[^A-Za-z0-9._+-]", "_", path.stem) or "trial", **data}
    return parse_trial(data, str(path), allow_large=allow_large)


# --- a small TOML writer for the normalised trial ----------------------------------------------


def _drop_empty(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _drop_empty(x) for k, x in v.items() if x != {} and x != []}
    if isinstance(v, list):
        return [_drop_empty(x) for x in v]
    return v


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isinf(v) or math.isnan(v):
            raise ValueError("TOML cannot hold inf or nan here")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def _toml_key(k: str) -> str:
    return k if re.match(r"^[A-Za-z0-9_-]+$", k) else json.dumps(k)


def _is_table(v: Any) -> bool:
    return isinstance(v, dict)


def _is_table_array(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def _toml_dumps(data: dict[str, Any], prefix: str = "") -> str:
    """Scalars and inline values first, then sub-tables, then arrays of tables."""
    lines = []
    for k, v in data.items():
        if not _is_table(v) and not _is_table_array(v):
            lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
    out = "\n".join(lines) + ("\n" if lines else "")
    for k, v in data.items():
        name = f"{prefix}{_toml_key(k)}"
        if _is_table(v):
            out += f"\n[{name}]\n" + _toml_dumps(v, name + ".")
        elif _is_table_array(v):
            for item in v:
                out += f"\n[[{name}]]\n" + _toml_dumps(item, name + ".")
    return out

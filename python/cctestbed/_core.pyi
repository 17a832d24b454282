"""The compiled simulator core (Rust, crates/cctestbed-py)."""

from typing import Any, Optional, TypedDict, Union, final, type_check_only

from typing_extensions import NotRequired

import numpy.typing as npt

__version__: str
__all__ = ["StopFlag", "DatagramClock", "TrialFailed", "simulate", "validate", "algorithms", "disciplines", "defaults", "tcp_rmem_max",
           "columns", "analyze", "tseq", "__version__"]

@type_check_only
class FlowFinal(TypedDict):
    sent_pkts: int
    delivered_pkts: int
    dropped_pkts: int
    marked_pkts: int
    queued_pkts: int
    in_transit_pkts: int
    delivered_bytes: int
    retrans_segs: int
    sent_segs: int
    lost_segs: int
    rto_count: int
    #: tail loss probes sent (Linux: TcpExt TCPLossProbes)
    tlp_count: int
    #: congestion-window reductions undone as spurious
    undo_count: int

@type_check_only
class Final(TypedDict):
    flows: list[FlowFinal]
    #: counters, with one ``drops_<cause>`` and ``marks_<cause>`` per cause the core declares
    router: dict[str, int]
    #: the same for the reverse bottleneck, present only with ``link.reverse``
    reverse_router: NotRequired[dict[str, int]]
    events: int

@type_check_only
class SimOutput(TypedDict):
    flows: dict[str, npt.NDArray[Any]]
    router: dict[str, npt.NDArray[Any]]
    state_labels: list[str]
    final: Final
    captures: list[tuple[str, bytes]]
    #: one row per tcp flow with a size: its completion time (NaN if unfinished)
    completions: dict[str, npt.NDArray[Any]]

@final
class StopFlag:
    """Stops a running :func:`simulate` given it, from another thread, when set."""

    def __init__(self) -> None: ...
    def set(self) -> None: ...
    def is_set(self) -> bool: ...

@final
class DatagramClock:
    """One datagram flow's send times as the simulator sends them (the kernel backend's udp and
    ping senders follow it)."""

    def __new__(cls, traffic_json: str, seed: int, flow: int, start_ns: int, duration_ns: int) -> "DatagramClock": ...
    def pop(self) -> Optional[int]: ...
    def is_on(self, t_ns: int) -> bool: ...

class TrialFailed(RuntimeError):
    """A trial that could not run to its end for a reason of its own: a BPF congestion
    control's run-time error, naming the program, the op and the instruction."""

def simulate(config_json: str, stop: Optional[StopFlag] = None) -> SimOutput:
    """Run one trial given the core's JSON config; releases the GIL.

    Raises ValueError listing the problems for an invalid config, and KeyboardInterrupt when
    Ctrl-C is pressed (without ``stop``) or ``stop`` is set.
    """

def algorithms() -> dict[str, dict[str, float]]:
    """Algorithm name -> {parameter name: default value}."""

@type_check_only
class Param(TypedDict):
    #: the name in trial files (``tc``'s) and the key in the core's JSON
    name: str
    key: str
    #: time, size, rate, count, whole, real, fraction or flag
    kind: str
    min: Optional[float]
    min_open: bool
    max: Optional[float]
    #: a number (ns, bytes, bit/s), on/off, or how it is worked out
    default: Union[float, bool, str]
    unit: str
    doc: str

@type_check_only
class Discipline(TypedDict):
    doc: str
    params: list[Param]
    #: ("below", a, b): a below b, by their keys
    rules: list[tuple[str, str, str]]

def disciplines() -> dict[str, Discipline]:
    """The queue disciplines besides drop-tail as the core declares them, in its order."""

def tcp_rmem_max(bdp_bytes: int, queue_bytes: int) -> int:
    """``tcp_rmem[2]`` for a path of ``bdp_bytes`` and a queue of ``queue_bytes``: what the kernel
    backend sets on its hosts and the simulator's receivers assume."""

def defaults() -> dict[str, Any]:
    """The core's defaults of the settings a trial writes out in full (sample_interval_ns, mtu,
    mss, initial_cwnd, delayed_ack, capture, udp_headers)."""

@type_check_only
class Columns(TypedDict):
    #: (name, dtype, unit, doc): dtype one of f64, u64, u32, u16; unit "label" for codes into
    #: ``state_labels``
    flows: list[tuple[str, str, str, str]]
    router: list[tuple[str, str, str, str]]
    completions: list[tuple[str, str, str, str]]

def columns(config_json: Optional[str] = None) -> Columns:
    """The output columns in order, as the core declares them (telemetry.rs); given a trial's
    JSON config, its algorithms' ``cc.<key>`` columns too."""

def validate(config_json: str) -> list[tuple[list[Union[str, int]], str]]:
    """Problems the core finds in a JSON config (empty when it is valid), each as (path, message):
    the path as keys and indices, the message giving the value and what is valid."""

@type_check_only
class Analysis(TypedDict):
    files: list[dict[str, Any]]
    connections: list[dict[str, Any]]
    idle_connections: int
    time_zero_ns: int
    flows: dict[str, npt.NDArray[Any]]
    router: Optional[dict[str, Any]]

def analyze(inputs: list[tuple[str, str]], interval_ns: int, time_zero_ns: Optional[int] = None,
            discipline: Optional[str] = None) -> Analysis:
    """Read packet captures ((path, "host" | "ingress" | "egress") pairs) into per-flow and router
    series on a grid of ``interval_ns``, each named as the result schema's column it gives (the
    router's also ``unmatched``, egress packets without an ingress one); releases the GIL.
    ``discipline`` (the router's, ``fifo`` for drop-tail) lets a single FIFO's drops be found by
    arrival order.

    Raises ValueError naming the file and the reason (missing, not a capture, no TCP in it).
    """

def tseq(inputs: list[tuple[str, str]], flow: int, time_zero_ns: Optional[int] = None) -> dict[str, Any]:
    """One flow's packets at its sender for a time-sequence plot (numpy arrays: data_*, ack_*,
    sack_*, drop_*; ``drops_known``); releases the GIL. Raises ValueError as :func:`analyze`."""

"""The kernel sink's reads and the note they give (no kernel needed: the sink's records are
built here). Linux ACKs once per read once data waits unread, so segments per read set the ACKs
a segment; the CLI notes a default-paced group whose sink batched its reads."""

from __future__ import annotations

import numpy as np

from cctestbed.config import parse_trial
from cctestbed.kernel.columns import BATCHED_READ_SEGMENTS, KEPT_READS, application_reads, batched_reads, missed_reads

TRIAL = parse_trial({"name": "r", "duration": "2s", "link": {"capacity": "500Mbit", "rtt": "10ms", "queue": "1bdp"},
                     "flows": [{"cc": "cubic"}, {"cc": "cubic", "read_interval": "500us"}]})


def sink(flow: int, read_bytes: list[int], reads: int) -> dict[str, np.ndarray]:
    """A sink's samples: its application's bytes read per tick, and its reads of one flow."""
    n = len(read_bytes)
    return {"tick": np.arange(1, n + 1), "flow": np.full(n, flow), "app_bytes": np.asarray(read_bytes),
            "read_flow": np.asarray([flow]), "reads": np.asarray([reads])}


def test_segments_per_read_from_the_sinks_records():
    mss = TRIAL.mss
    got = application_reads(TRIAL, [sink(0, [0, 100 * mss, 400 * mss], 100), sink(1, [0, 2100 * mss], 100)])
    assert got == {"0": {"reads": 100, "bytes": 400 * mss, "segments_per_read": 4.0},
                   "1": {"reads": 100, "bytes": 2100 * mss, "segments_per_read": 21.0}}
    # a sink from before reads were recorded gives nothing, rather than a guess
    assert application_reads(TRIAL, [{k: v for k, v in sink(0, [mss], 1).items() if k not in ("read_flow", "reads")}]) == {}


def test_only_a_default_reader_that_batched_gets_the_note():
    mss = TRIAL.mss
    note = batched_reads(TRIAL, application_reads(TRIAL, [sink(0, [400 * mss], 100), sink(1, [2100 * mss], 100)]))
    assert note is not None and note.startswith("the sink read 4.0 segments a read (flow 0;") and "read_interval" in note
    # the paced group batches by design; a default reader at one segment a read matches the simulator
    spr = BATCHED_READ_SEGMENTS - 0.2
    assert batched_reads(TRIAL, application_reads(TRIAL, [sink(0, [round(spr * 100 * mss)], 100),
                                                          sink(1, [2100 * mss], 100)])) is None
    assert batched_reads(TRIAL, None) is None


def test_a_paced_sink_that_missed_its_read_times_is_named():
    # flow 1 reads every 500 us for 2 s: 4000 read times
    mss = TRIAL.mss
    kept = application_reads(TRIAL, [sink(0, [400 * mss], 100), sink(1, [2100 * mss], round(KEPT_READS * 4000) + 10)])
    assert missed_reads(TRIAL, kept) is None
    late = application_reads(TRIAL, [sink(0, [400 * mss], 100), sink(1, [2100 * mss], 2000)])
    note = missed_reads(TRIAL, late)
    assert note is not None and note.startswith("the sink read flow 1 at 50 % of its read times (every 500 us)")


# /proc/net/snmp and /proc/net/netstat as Linux 6.18 lays them out (a name line, then a value
# line, per table; other tables between them), shortened
SNMP = """Ip: Forwarding DefaultTTL InReceives
Ip: 1 64 1733
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs
Tcp: 1 200 120000 -1 8 0 0 0 8 1248 1729 319
Udp: InDatagrams NoPorts
Udp: 0 0
"""
NETSTAT = """TcpExt: SyncookiesSent DelayedACKs TCPTimeouts TCPLossProbes TCPDSACKRecv
TcpExt: 0 7 25 18 22
IpExt: InNoRoutes InTruncatedPkts
IpExt: 0 0
"""


def test_the_kernels_tcp_counters_are_read_by_name_and_differenced():
    from cctestbed.kernel.topology import counter_deltas, parse_mib

    mib = parse_mib(SNMP + NETSTAT, ("Tcp", "TcpExt"))
    assert mib["Tcp.RetransSegs"] == 319 and mib["Tcp.OutSegs"] == 1729 and mib["Tcp.MaxConn"] == -1
    assert mib["TcpExt.TCPTimeouts"] == 25 and mib["TcpExt.TCPDSACKRecv"] == 22
    assert not any(k.startswith(("Ip.", "Udp.", "IpExt.")) for k in mib)
    later = dict(mib, **{"Tcp.RetransSegs": 330, "Tcp.CurrEstab": 0, "TcpExt.TCPTimeouts": 27})
    # what grew, by how much; unchanged counters and gauges (CurrEstab fell to 0) are left out
    assert counter_deltas({"snd0": mib}, {"snd0": later}) == {"snd0": {"Tcp.RetransSegs": 11, "TcpExt.TCPTimeouts": 2}}
    # a host whose read failed at either end has no figures, rather than figures from zero
    assert counter_deltas({"snd0": None}, {"snd0": later}) == {"snd0": None}
    assert counter_deltas({"snd0": mib}, {"snd0": None}) == {"snd0": None}

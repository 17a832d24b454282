"""A burst that reaches an idle bottleneck: the first packet is sent, the limit counts the rest.

Linux's qdisc dequeues after every enqueue (`__dev_xmit_skb` then `__qdisc_run`), so of packets
reaching an idle link back to back the first is on the wire before the second is queued, and
`pfifo`/`bfifo`'s limit counts only packets still waiting. The link emulator feeds the
simulator's bottleneck the same way, a frame at a time. The simulator's own event loop once
queued a whole burst of one instant before starting the link, so the packet that should have
been sending took a place in the queue.
"""

import polars as pl

from cctestbed.runner import run_trial


def test_burst_into_idle_link_keeps_the_head_out_of_the_queue_limit():
    # The handshake's last ACK and the initial window of 10 segments leave the sender at one
    # instant and reach an idle 20 Mbit/s link whose queue holds 8 packets.
    trial = {"name": "burst", "duration": "0.12s",
             "link": {"capacity": "20Mbit", "rtt": "50ms", "queue": "8pkts"}, "flows": [{"cc": "reno"}]}
    router = run_trial(trial).router.filter(pl.col("time_s") <= 0.1)
    drops = router["drops_overflow"][-1]
    departed = router["departures_pkts"][-1]
    print(f"measured: {drops} drops, {departed} departures (SYN, ACK and data) by 100 ms")
    # The ACK is sent, 8 segments wait behind it, 2 of the 10 are dropped.
    assert drops == 2
    assert departed == 1 + 1 + 8

mod common;
use common::*;

#[test]
fn scratch() {
    for cc in ["reno", "cubic"] {
        let mut c = with_flows(dumbbell(80_000_000, 25 * MS, 2.0), vec![flow(cc)]);
        c.duration_ns = 20 * S;
        let out = run(c);
        let g = total_goodput(&out, 5.0, 20.0);
        println!("{cc}: util {:.3} loss {:.3}% q {:.0} events {} ff {:?}", g / payload_capacity(80_000_000), loss_pct(&out, 5.0, 20.0), mean_queue(&out, 5.0, 20.0), out.events, out.flow_final[0]);
    }
}

#[test]
fn dbg_small() {
    let mut c = with_flows(dumbbell(80_000_000, 25 * MS, 2.0), vec![flow("reno")]);
    c.duration_ns = 200 * MS;
    let mut sim = ccsim::Simulation::new(c).unwrap();
    sim.run_until(26 * MS);
    let s = &sim.senders[0];
    println!("una {} nxt {} cwnd {} inflight {} sacked {} lost {} retr {} started? rcv_nxt {}", s.snd_una, s.snd_nxt, s.w.cwnd, s.packets_in_flight(), s.sacked_out, s.lost_out, s.retrans_out, sim.receivers[0].rcv_nxt);
}
